// mixture.c: weighted mixtures of token datasets (semantics in mixture.h).
#include "mixture.h"
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

// ---------------------------------------------------------------- the recipe value

void mix_entries_free(MixEntry *entries, int n) {
    for (int i = 0; entries && i < n; i++) free(entries[i].path);
    free(entries);
}

// s[0..n) without the spaces around it, as a new string.
static char *trimmed(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    char *out = xmalloc(n + 1, "mixture entry");
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

// One entry "PATH" or "PATH:WEIGHT"; *weighted says which.
static int parse_entry(const char *text, size_t len, const char *key, int index, MixEntry *out, int *weighted,
                       PtError *e) {
    char *entry = trimmed(text, len), *colon = strrchr(entry, ':');
    int rc = 0;
    *weighted = colon != NULL;
    out->weight = 1;
    if (!*entry) rc = pt_fail(e, "%s: entry %d is empty (a stray comma?)", key, index);
    else if (colon) {
        out->path = trimmed(entry, (size_t)(colon - entry));
        char *w = trimmed(colon + 1, strlen(colon + 1)), *end = NULL;
        out->weight = strtod(w, &end);
        if (!*out->path) rc = pt_fail(e, "%s: entry %d ('%s') has no path before its ':'", key, index, entry);
        else if (!*w || *end || !isfinite(out->weight))
            rc = pt_fail(e, "%s: the weight '%s' of %s is not a number", key, w, out->path);
        else if (out->weight < 0)
            rc = pt_fail(e, "%s: the weight %s of %s is negative (a share of the tokens is 0 or more)", key, w,
                         out->path);
        free(w);
    } else {
        out->path = xstrdup(entry);
    }
    free(entry);
    return rc;
}

int mix_parse(const char *value, const char *key, MixEntry **out, int *n, PtError *e) {
    *out = NULL;
    *n = 0;
    if (!value || !value[strspn(value, " \t")]) return pt_fail(e, "%s: no dataset given", key);
    MixEntry *entries = xcalloc(MIX_MAX_SETS, sizeof *entries, "mixture");
    int count = 0, with_weight = 0, rc = 0;
    double sum = 0;
    for (const char *at = value; !rc; at++) {
        const char *comma = strchr(at, ',');
        size_t len = comma ? (size_t)(comma - at) : strlen(at);
        int weighted;
        if (count == MIX_MAX_SETS) {
            rc = pt_fail(e, "%s: more than %d datasets in one mixture", key, MIX_MAX_SETS);
            break;
        }
        rc = parse_entry(at, len, key, count + 1, &entries[count], &weighted, e);
        count++;
        if (rc) break;
        with_weight += weighted;
        sum += entries[count - 1].weight;
        for (int i = 0; i < count - 1 && !rc; i++)
            if (!strcmp(entries[i].path, entries[count - 1].path))
                rc = pt_fail(e, "%s: %s is named twice", key, entries[i].path);
        if (!comma) break;
        at = comma;
    }
    if (!rc && with_weight && with_weight < count)
        rc = pt_fail(e, "%s: %d of the %d datasets have a weight: give each its PATH:WEIGHT, or none for equal "
                        "weights", key, with_weight, count);
    if (!rc && sum <= 0) rc = pt_fail(e, "%s: every weight is zero (at least one set must be drawn from)", key);
    if (rc) {
        mix_entries_free(entries, count);
        return -1;
    }
    *out = entries;
    *n = count;
    return 0;
}

// ---------------------------------------------------------------- the sets

int mix_check_sets(const Dataset *const *sets, int n, PtError *e) {
    for (int k = 1; k < n; k++) {
        if (sets[k]->kind != sets[0]->kind)
            return pt_fail(e, "%s is %s data and %s is %s: the sets of a mixture are of one kind", sets[k]->path,
                           dataset_kind_name(sets[k]->kind), sets[0]->path, dataset_kind_name(sets[0]->kind));
        if (strcmp(sets[k]->tokenizer_hash, sets[0]->tokenizer_hash))
            return pt_fail(e, "%s and %s were tokenized with different tokenizers (%s, %s)", sets[k]->path,
                           sets[0]->path, sets[k]->tokenizer_hash, sets[0]->tokenizer_hash);
    }
    return 0;
}

// Set k's shuffle seed: the run's for set 0, a splitmix64 mix of (seed, k)
// for the others, so no two sets shuffle alike.
static uint64_t set_seed(uint64_t seed, int k) {
    if (k == 0) return seed;
    uint64_t z = seed + (uint64_t)k * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int mix_open(MixLoader *m, const Dataset *const *sets, const double *weights, int n, int B, int T, uint64_t seed, int rank,
             int world, PtError *e) {
    memset(m, 0, sizeof *m);
    if (n < 1 || n > MIX_MAX_SETS) return pt_fail(e, "mixture: %d datasets (want 1 to %d)", n, MIX_MAX_SETS);
    if (world < 1 || rank < 0 || rank >= world) return pt_fail(e, "mixture: rank %d of %d is not valid", rank, world);
    double sum = 0;
    for (int k = 0; k < n; k++) {
        if (!(weights[k] >= 0) || !isfinite(weights[k]))
            return pt_fail(e, "mixture: %s has weight %g (want a number >= 0)", sets[k]->path, weights[k]);
        sum += weights[k];
    }
    if (sum <= 0) return pt_fail(e, "mixture: every weight is zero");
    if (mix_check_sets(sets, n, e)) return -1;
    for (int k = 0; k < n; k++) {
        // Each set is a one-rank stream of its own: the mixture hands out the ranks' rows.
        if (loader_open(&m->set[k], sets[k], B, T, set_seed(seed, k), 0, 1, e)) {
            while (k--) loader_close(&m->set[k]);
            return -1;
        }
        m->weight[k] = weights[k] / sum;
    }
    m->n_sets = n;
    m->B = B;
    m->T = T;
    m->rank = rank;
    m->world = world;
    return 0;
}

void mix_set_doc_mask(MixLoader *m, int on) {
    for (int k = 0; k < m->n_sets; k++) loader_set_doc_mask(&m->set[k], on);
}

void mix_close(MixLoader *m) {
    for (int k = 0; k < m->n_sets; k++) loader_close(&m->set[k]);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------- the stream

// The set furthest behind its share of the tokens drawn so far.
static int pick_set(const MixLoader *m) {
    int best = -1;
    double best_deficit = 0;
    for (int k = 0; k < m->n_sets; k++) {
        if (m->weight[k] <= 0) continue;
        double deficit = m->weight[k] * (double)m->drawn - (double)m->tokens[k];
        if (best < 0 || deficit > best_deficit) best = k, best_deficit = deficit;
    }
    return best;
}

void mix_next(MixLoader *m, Batch *b) {
    loader_batch_begin(b);
    for (int w = 0; w < m->world; w++)
        for (int r = 0; r < m->B; r++) {
            int k = pick_set(m);
            int got = loader_next_row(&m->set[k], b, (size_t)r * m->T, w == m->rank);
            m->tokens[k] += (uint64_t)got;
            m->drawn += (uint64_t)got;
        }
    loader_batch_end(&m->set[0], b);   // every set is of the one kind
}

void mix_share(const MixLoader *m, int k, MixShare *out) {
    const Loader *l = &m->set[k];
    out->tokens = m->tokens[k];
    out->share = m->drawn ? (double)m->tokens[k] / (double)m->drawn : 0;
    out->epochs = (double)l->cur.epoch + (double)l->cur.index / (double)l->n_items;
}

void mix_get_cursor(const MixLoader *m, MixCursor *c) {
    memset(c, 0, sizeof *c);
    c->n_sets = (uint64_t)m->n_sets;
    for (int k = 0; k < m->n_sets; k++) {
        c->tokens[k] = m->tokens[k];
        loader_get_cursor(&m->set[k], &c->set[k]);
    }
}

int mix_set_cursor(MixLoader *m, const MixCursor *c, PtError *e) {
    if (c->n_sets != (uint64_t)m->n_sets)
        return pt_fail(e, "mixture cursor: %" PRIu64 " datasets, but this mixture has %d (another [data] train?)",
                       c->n_sets, m->n_sets);
    MixCursor before;   // put back if a set refuses its cursor
    mix_get_cursor(m, &before);
    PtError le;
    for (int k = 0; k < m->n_sets; k++)
        if (loader_set_cursor(&m->set[k], &c->set[k], &le)) {
            pt_fail(e, "%s: %s", m->set[k].d->path, le.msg);
            while (k--) loader_set_cursor(&m->set[k], &before.set[k], &le);
            return -1;
        }
    m->drawn = 0;
    for (int k = 0; k < m->n_sets; k++) {
        m->tokens[k] = c->tokens[k];
        m->drawn += c->tokens[k];
    }
    return 0;
}
