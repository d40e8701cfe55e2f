// run_data.c: a run's training stream and validation sets (run_data.h).
#include "run_data.h"
#include <ctype.h>
#include <math.h>
#include <string.h>
#include "objective.h"

// ---------------------------------------------------------------- the recipe's values

// Entry `index` (from 0) of a comma-separated list, spaces around it trimmed,
// into out (cap bytes; longer entries are cut, which the callers refuse by
// their own limits); 0 when the list has no such entry.
static int list_entry(const char *list, int index, char *out, size_t cap) {
    const char *at = list;
    for (int i = 0; i < index; i++) {
        at = strchr(at, ',');
        if (!at) return 0;
        at++;
    }
    size_t n = strcspn(at, ",");
    while (n && isspace((unsigned char)*at)) at++, n--;
    while (n && isspace((unsigned char)at[n - 1])) n--;
    snprintf(out, cap, "%.*s", (int)n, at);
    return 1;
}

static int list_count(const char *list) {
    int n = 1;
    for (const char *c = list; *c; c++) n += *c == ',';
    return n;
}

// A set's name: letters, digits, '_' and '-', as metrics keys and labels use it.
static int valid_name(const char *s) {
    if (!*s || strlen(s) >= VAL_NAME_MAX) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
    return 1;
}

// [data] val: PATH, or NAME:PATH, ... (the name before the first ':').
static int parse_val(DataSpec *s, const char *value, const char *key, PtError *e) {
    if (!value[strspn(value, " \t")]) return 0;
    const int n = list_count(value);
    if (n > VAL_MAX_SETS) return pt_fail(e, "%s: %d validation sets, at most %d", key, n, VAL_MAX_SETS);
    char entry[RECIPE_STR];
    for (int k = 0; k < n; k++) {
        list_entry(value, k, entry, sizeof entry);
        ValEntry *v = &s->val[k];
        char *colon = strchr(entry, ':');
        if (!*entry) return pt_fail(e, "%s: entry %d is empty (a stray comma?)", key, k + 1);
        if (!colon && n > 1)
            return pt_fail(e, "%s: entry %d ('%s') has no name: several sets are each NAME:PATH", key, k + 1, entry);
        if (!colon) {
            snprintf(v->name, sizeof v->name, "val");
            v->path = xstrdup(entry);
            s->n_val = 1;
            return 0;
        }
        *colon = 0;
        char *path = colon + 1;
        while (isspace((unsigned char)*path)) path++;
        for (char *end = colon; end > entry && isspace((unsigned char)end[-1]); *--end = 0) {}
        if (!valid_name(entry))
            return pt_fail(e, "%s: '%s' is not a validation set's name (1 to %d letters, digits, '_' or '-')", key,
                           entry, VAL_NAME_MAX - 1);
        if (!*path) return pt_fail(e, "%s: the set '%s' has no path after its ':'", key, entry);
        for (int i = 0; i < k; i++)
            if (!strcmp(s->val[i].name, entry)) return pt_fail(e, "%s: the name '%s' is used twice", key, entry);
        snprintf(v->name, sizeof v->name, "%s", entry);
        v->path = xstrdup(path);
        s->n_val = k + 1;
    }
    s->val_named = 1;
    return 0;
}

static int val_index(const DataSpec *s, const char *name) {
    for (int k = 0; k < s->n_val; k++)
        if (!strcmp(s->val[k].name, name)) return k;
    return -1;
}

// [train] best_by: "" (the first set), sum, NAME, or NAME:WEIGHT, ...
static int parse_best_by(DataSpec *s, const char *value, const char *key, PtError *e) {
    memset(s->best_weight, 0, sizeof s->best_weight);
    if (!value[0]) {
        s->best_weight[0] = 1;
        return 0;
    }
    if (!s->n_val) return pt_fail(e, "%s: '%s' chooses among validation sets, but [data] val names none", key, value);
    if (!strcmp(value, "sum")) {
        for (int k = 0; k < s->n_val; k++) s->best_weight[k] = 1;
        return 0;
    }
    char entry[RECIPE_STR], names[VAL_MAX_SETS * (VAL_NAME_MAX + 2)] = "";
    for (int k = 0; k < s->n_val; k++) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "", s->val[k].name);
    double sum = 0;
    int seen[VAL_MAX_SETS] = {0};
    const int n = list_count(value);
    for (int i = 0; i < n; i++) {
        list_entry(value, i, entry, sizeof entry);
        char *colon = strchr(entry, ':'), *end = NULL;
        double w = 1;
        if (colon) {
            *colon = 0;
            w = strtod(colon + 1, &end);
            if (end == colon + 1 || *end || !isfinite(w))
                return pt_fail(e, "%s: the weight '%s' of %s is not a number", key, colon + 1, entry);
            if (w < 0) return pt_fail(e, "%s: the weight %s of %s is negative", key, colon + 1, entry);
        } else if (n > 1) {
            return pt_fail(e, "%s: %s has no weight: a sum of several sets is NAME:WEIGHT, ...", key, entry);
        }
        const int k = val_index(s, entry);
        if (k < 0) return pt_fail(e, "%s: '%s' is not a [data] val set (the sets: %s)", key, entry, names);
        if (seen[k]++) return pt_fail(e, "%s: %s is named twice", key, entry);
        s->best_weight[k] = w;
        sum += w;
    }
    if (sum <= 0) return pt_fail(e, "%s: every weight is zero", key);
    return 0;
}

// What a mixture or several validation sets cannot be combined with.
static int check_combinations(const DataSpec *s, const Recipe *r, const char *src, PtError *e) {
    if (r->train.mode == TRAIN_MODE_DPO && s->n_train > 1)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with train.mode = dpo (the reference "
                          "log-probabilities are kept per document of one training set)", src);
    if (r->train.mode == TRAIN_MODE_DPO && s->n_val > 1)
        return pt_fail(e, "%s: [data] val: several validation sets are not supported with train.mode = dpo (the "
                          "reference log-probabilities are kept for one validation set)", src);
    if (s->n_train == 1) return 0;
    if (r->draft.enabled)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with [draft] (the draft's vocabulary is "
                          "counted on one training set)", src);
    if (r->distill.enabled && r->distill.source == DISTILL_TOPK)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with [distill] source = topk (the "
                          "teacher's logits are stored in one dataset)", src);
    if (r->train.steps == 0 && r->train.tokens == 0)
        return pt_fail(e, "%s: [data] train: a mixture's length is set by [train] tokens or steps (train.epochs "
                          "counts passes over one set; each set of a mixture has epochs of its own)", src);
    return 0;
}

int data_spec_parse(DataSpec *s, const Recipe *r, const char *src, PtError *e) {
    memset(s, 0, sizeof *s);
    char key[RECIPE_STR + 32];
    snprintf(key, sizeof key, "%s: [data] train", src);
    int rc = mix_parse(r->data.train, key, &s->train, &s->n_train, e);
    snprintf(key, sizeof key, "%s: [data] val", src);
    if (rc == 0) rc = parse_val(s, r->data.val, key, e);
    snprintf(key, sizeof key, "%s: [train] best_by", src);
    if (rc == 0) rc = parse_best_by(s, r->train.best_by, key, e);
    if (rc == 0) rc = check_combinations(s, r, src, e);
    if (rc) data_spec_free(s);
    return rc;
}

void data_spec_free(DataSpec *s) {
    mix_entries_free(s->train, s->n_train);
    for (int k = 0; k < s->n_val; k++) free(s->val[k].path);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------- the sets

// Opens path as one of key's sets, with the model's tokenizer.
static int open_set(Dataset *d, const char *path, const char *key, const char *hash, PtError *e) {
    PtError inner;
    if (dataset_open(d, path, &inner)) return pt_fail(e, "%s: %s", key, inner.msg);
    if (dataset_check_tokenizer(d, hash, &inner)) {
        dataset_close(d);
        return pt_fail(e, "%s: %s", key, inner.msg);
    }
    return 0;
}

int run_data_open(RunData *d, const Recipe *r, const char *tokenizer_hash, int rank, int world, PtError *e) {
    memset(d, 0, sizeof *d);
    if (data_spec_parse(&d->spec, r, "recipe", e)) return -1;
    const DataSpec *s = &d->spec;
    const DatasetKind kind = objective_dataset_kind(r->train.mode);
    for (int k = 0; k < s->n_train; k++) {
        if (open_set(&d->train[k], s->train[k].path, "[data] train", tokenizer_hash, e)) return -1;
        d->n_train++;
        if (d->train[k].kind != kind)
            return pt_fail(e, "[data] train: %s: a %s dataset, but train.mode is %s", s->train[k].path,
                           dataset_kind_name(d->train[k].kind), train_mode_name(r->train.mode));
    }
    for (int k = 0; k < s->n_val; k++) {
        if (open_set(&d->val[k], s->val[k].path, "[data] val", tokenizer_hash, e)) return -1;
        d->n_val++;
    }
    const int B = r->train.micro_batch, T = r->train.seq_len;
    const uint64_t seed = (uint64_t)r->train.seed;
    if (s->n_train == 1) {
        if (loader_open(&d->one, &d->train[0], B, T, seed, rank, world, e)) return -1;
        if (kind == DATASET_CPT) loader_set_doc_mask(&d->one, r->train.doc_mask);
    } else {
        const Dataset *sets[MIX_MAX_SETS];
        double weights[MIX_MAX_SETS];
        for (int k = 0; k < s->n_train; k++) sets[k] = &d->train[k], weights[k] = s->train[k].weight;
        PtError inner;
        if (mix_open(&d->mix, sets, weights, s->n_train, B, T, seed, rank, world, &inner))
            return pt_fail(e, "[data] train: %s", inner.msg);
        if (kind == DATASET_CPT) mix_set_doc_mask(&d->mix, r->train.doc_mask);
    }
    d->loader_open = 1;
    return 0;
}

void run_data_close(RunData *d) {
    if (d->loader_open && run_data_mixed(d)) mix_close(&d->mix);
    else if (d->loader_open) loader_close(&d->one);
    for (int k = 0; k < d->n_train; k++) dataset_close(&d->train[k]);
    for (int k = 0; k < d->n_val; k++) dataset_close(&d->val[k]);
    data_spec_free(&d->spec);
    memset(d, 0, sizeof *d);
}

int run_data_mixed(const RunData *d) { return d->spec.n_train > 1; }

// ---------------------------------------------------------------- the stream

void run_data_next(RunData *d, Batch *b) {
    if (run_data_mixed(d)) mix_next(&d->mix, b);
    else loader_next(&d->one, b);
}

void run_data_get_cursor(const RunData *d, TrainState *st) {
    if (run_data_mixed(d)) mix_get_cursor(&d->mix, &st->mix);
    else loader_get_cursor(&d->one, &st->cursor);
}

int run_data_set_cursor(RunData *d, const TrainState *st, PtError *e) {
    const uint64_t stored = st->mix.n_sets;
    if (!run_data_mixed(d) && stored)
        return pt_fail(e, "[data] train names one dataset, but the run's checkpoint was written from a mixture of "
                          "%llu (give the run's mixture, or start a new run_dir)", (unsigned long long)stored);
    if (run_data_mixed(d) && !stored)
        return pt_fail(e, "[data] train names a mixture of %d datasets, but the run's checkpoint was written from "
                          "one (give the run's dataset, or start a new run_dir)", d->spec.n_train);
    if (!run_data_mixed(d)) return loader_set_cursor(&d->one, &st->cursor, e);
    PtError inner;
    if (mix_set_cursor(&d->mix, &st->mix, &inner)) return pt_fail(e, "[data] train: %s", inner.msg);
    return 0;
}

// ---------------------------------------------------------------- reports and figures

void run_data_report(const RunData *d, FILE *out, json_t *j) {
    if (!run_data_mixed(d) || !d->mix.drawn) return;
    json_t *sets = j ? json_array() : NULL;
    if (out) fprintf(out, "data drawn:");
    for (int k = 0; k < d->spec.n_train; k++) {
        MixShare sh;
        mix_share(&d->mix, k, &sh);
        const MixEntry *m = &d->spec.train[k];
        if (out)
            fprintf(out, "%s %s %llu tokens (%.2f%%, weight %.2f%%), %.3f epochs", k ? ";" : "", m->path,
                    (unsigned long long)sh.tokens, 100 * sh.share, 100 * d->mix.weight[k], sh.epochs);
        if (sets)
            json_array_append_new(sets, json_pack("{s:s, s:f, s:I, s:f, s:f}", "path", m->path, "weight",
                                                  d->mix.weight[k], "tokens", (json_int_t)sh.tokens, "share",
                                                  sh.share, "epochs", sh.epochs));
    }
    if (out) fprintf(out, "\n");
    if (j) json_object_set_new(j, "train_sets", sets);
}

void run_data_val_prefix(const RunData *d, int k, char *out, size_t cap) {
    if (d->spec.val_named) snprintf(out, cap, "val_%s_", d->spec.val[k].name);
    else snprintf(out, cap, "val_");
}

double run_data_best_figure(const RunData *d, const double *loss) {
    double sum = 0;
    for (int k = 0; k < d->n_val; k++)
        if (d->spec.best_weight[k] > 0) sum += d->spec.best_weight[k] * loss[k];
    return sum;
}
