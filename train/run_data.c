// run_data.c: a run's training stream and validation sets (run_data.h).
#include "run_data.h"
#include <string.h>
#include "objective.h"

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
    if (data_spec_parse(&d->spec, r->data.train, r->data.val, r->train.best_by, "recipe", e)) return -1;
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
