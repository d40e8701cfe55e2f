// generate.c: generation over the decoder's KV-cache plan (model_feed), and
// sampling.
#include "generate.h"
#include <float.h>
#include <math.h>
#include <string.h>

// ---------------------------------------------------------------- parameters

void gen_params_default(GenParams *p) {
    memset(p, 0, sizeof *p);
    p->max_new = 128;
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
}

int gen_is_stop(const GenParams *p, int id) {
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] == id) return 1;
    return 0;
}

void gen_add_stop(GenParams *p, int id, int vocab) {
    if (id < 0 || id >= vocab || gen_is_stop(p, id) || p->n_stop == GEN_MAX_STOPS) return;
    p->stop_ids[p->n_stop++] = id;
}

// ---------------------------------------------------------------- context

int gen_init(GenContext *g, const Model *src, int max_len, PtError *e) {
    memset(g, 0, sizeof *g);
    model_init_like(&g->m, src);
    if (model_plan_cache(&g->m, max_len, e)) {
        model_free(&g->m);
        return -1;
    }
    const int V = src->cfg.vocab_size;
    g->logits = xmalloc((size_t)V * sizeof(float), "logits");
    g->probs = xmalloc((size_t)V * sizeof(float), "sampling probabilities");
    g->order = xmalloc((size_t)V * sizeof(int), "sampling order");
    return 0;
}

void gen_free(GenContext *g) {
    model_free(&g->m);
    free(g->logits);
    free(g->probs);
    free(g->order);
    memset(g, 0, sizeof *g);
}

void gen_reset(GenContext *g) { g->m.n_past = 0; }

int gen_feed(GenContext *g, const int *tokens, int n, float *all_logits, PtError *e) {
    Model *m = &g->m;
    const int V = m->cfg.vocab_size;
    if (n < 1) return pt_fail(e, "nothing to feed (0 tokens)");
    if (m->n_past + n > m->cache_len)
        return pt_fail(e, "%d cached + %d new tokens exceed the context of %d positions", m->n_past, n, m->cache_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return pt_fail(e, "token %d of the input is %d, outside the vocabulary [0, %d)", i + 1, tokens[i], V);
    for (int done = 0; done < n; done += m->T) {
        int rows = n - done < m->T ? n - done : m->T;
        model_feed(m, tokens + done, rows, all_logits ? all_logits + (size_t)done * V : NULL);
    }
    OP(m->dev, download, g->logits, m->last_logits, (size_t)V * sizeof(float));
    return 0;
}

float *gen_prefill_logits(GenContext *g, const int *prompt, int n, PtError *e) {
    gen_reset(g);
    return gen_feed(g, prompt, n, NULL, e) ? NULL : g->logits;
}

// ---------------------------------------------------------------- sampling

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// Candidate ids are ordered by logit, the lower id first on ties (as argmax
// prefers it), so every key is distinct. Ordering by logit rather than by
// probability keeps distinct logits apart even where their exponentials
// round to the same float.
static int ranks_above(const float *logits, int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

static void swap_ids(int *x, int i, int j) {
    int t = x[i];
    x[i] = x[j];
    x[j] = t;
}

// Partitions ids[lo..hi) around a median-of-three pivot: on return the ids
// ranked above the pivot are ids[lo..g), the pivot is ids[g], the rest follow.
static int partition(int *ids, int lo, int hi, const float *logits) {
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    if (ranks_above(logits, ids[mid], ids[lo])) swap_ids(ids, mid, lo);
    if (ranks_above(logits, ids[last], ids[lo])) swap_ids(ids, last, lo);
    if (ranks_above(logits, ids[last], ids[mid])) swap_ids(ids, last, mid);
    swap_ids(ids, mid, last);   // the median of the three goes to the end
    int pivot = ids[last], g = lo;
    for (int j = lo; j < last; j++)
        if (ranks_above(logits, ids[j], pivot)) swap_ids(ids, g++, j);
    swap_ids(ids, g, last);
    return g;
}

// Moves the k best-ranked of ids[0..n) to ids[0..k) (in no particular order).
static void select_top_k(int *ids, int n, int k, const float *logits) {
    int lo = 0, hi = n;
    while (hi - lo > 1) {
        int g = partition(ids, lo, hi, logits);
        if (g >= k) hi = g;              // all k lie above the pivot
        else if (g + 1 >= k) return;     // ... the pivot completes them
        else lo = g + 1;                 // all above and the pivot are in; look below
    }
}

// The nucleus: moves to ids[0..m) the m best-ranked of ids[0..n), m the
// smallest count whose probability mass reaches `need` (> 0), and returns m.
// A quickselect weighted by prob: each pass keeps the side that holds the cut.
static int select_nucleus(int *ids, int n, double need, const float *prob, const float *logits) {
    int lo = 0, hi = n;
    while (hi - lo > 1) {
        int g = partition(ids, lo, hi, logits);
        double above = 0;
        for (int i = lo; i < g; i++) above += prob[ids[i]];
        if (above >= need) {
            hi = g;
        } else {
            need -= above;
            if (prob[ids[g]] >= need) return g + 1;
            need -= prob[ids[g]];
            lo = g + 1;
        }
    }
    return hi;
}

int gen_sample(GenContext *g, const float *logits, const GenParams *p, Rng *rng) {
    return sample_token(logits, g->m.cfg.vocab_size, p, rng, g->probs, g->order);
}

int sample_token(const float *logits, int V, const GenParams *p, Rng *rng, float *probs, int *order) {
    if (p->temperature <= 0.0f) return argmax(logits, V);
    // Softmax of logits / T, unnormalised (the largest term is 1).
    float max = logits[argmax(logits, V)], inv_t = 1.0f / p->temperature;
    float *prob = probs;
    for (int i = 0; i < V; i++) prob[i] = expf((logits[i] - max) * inv_t);
    // Candidates: the top k, then the nucleus of those (renormalised), both
    // found by selection in O(V) rather than by sorting the vocabulary.
    int *ids = order, n = V;
    for (int i = 0; i < V; i++) ids[i] = i;
    if (p->top_k > 0 && p->top_k < V) {
        select_top_k(ids, V, p->top_k, logits);
        n = p->top_k;
    }
    double mass = 0;
    for (int i = 0; i < n; i++) mass += prob[ids[i]];
    if (p->top_p < 1.0f) {
        // (a top_p of 0 or below keeps the best token alone)
        n = select_nucleus(ids, n, fmax((double)p->top_p * mass, DBL_MIN), prob, logits);
        mass = 0;
        for (int i = 0; i < n; i++) mass += prob[ids[i]];
    }
    double u = rng_uniform(rng) * mass, cum = 0;
    int last = ids[0];
    for (int i = 0; i < n; i++) {
        if (prob[ids[i]] > 0.0f) last = ids[i];
        cum += prob[ids[i]];
        if (u < cum) return ids[i];
    }
    return last;   // u rounded up to the total
}

// ---------------------------------------------------------------- generate

int generate(GenContext *g, const int *prompt, int n_prompt, const GenParams *p, int *out, int max_out,
             PtError *e) {
    const ModelConfig *c = &g->m.cfg;
    if (n_prompt < 1) return pt_fail(e, "the prompt is empty");
    if (p->max_new < 0) return pt_fail(e, "max_new %d is negative", p->max_new);
    if (max_out < p->max_new)
        return pt_fail(e, "output room for %d tokens is less than max_new %d", max_out, p->max_new);
    if ((long)n_prompt + p->max_new > c->max_seq)
        return pt_fail(e, "prompt of %d tokens + %d new tokens = %ld exceeds the model's context of %d "
                          "positions (max_position_embeddings)",
                       n_prompt, p->max_new, (long)n_prompt + p->max_new, c->max_seq);
    if ((long)n_prompt + p->max_new > g->m.cache_len)
        return pt_fail(e, "prompt of %d tokens + %d new tokens exceeds the cache of %d positions",
                       n_prompt, p->max_new, g->m.cache_len);
    if (p->max_new == 0) return 0;
    gen_reset(g);
    if (gen_feed(g, prompt, n_prompt, NULL, e)) return -1;
    Rng rng;
    rng_seed(&rng, p->seed);
    for (int t = 0; t < p->max_new; t++) {
        int id = gen_sample(g, g->logits, p, &rng);
        out[t] = id;
        if (p->on_token) p->on_token(p->on_token_ctx, id);
        if (gen_is_stop(p, id)) return t + 1;
        // The last new token is never fed: nothing reads its logits.
        if (t + 1 < p->max_new && gen_feed(g, &id, 1, NULL, e)) return -1;
    }
    return p->max_new;
}

// ---------------------------------------------------------------- lockstep rows

void generate_rows(Model *m, const int *first, int len, int greedy, const GenParams *p, Rng *rngs, int *out,
                   void (*progress)(void *ctx, int done, int len), void *ctx) {
    const int R = m->cache_rows, V = m->cfg.vocab_size;
    Device *d = m->dev;
    float *dev_logits = d->be->alloc(d, (size_t)R * V * sizeof(float), "lockstep logits");
    float *logits = xmalloc((size_t)R * V * sizeof(float), "lockstep logits on the host");
    float *probs = xmalloc((size_t)V * sizeof(float), "sampling scratch");
    int *order = xmalloc((size_t)V * sizeof(int), "sampling scratch"), *next = xmalloc((size_t)R * sizeof(int), "next tokens");
    GenParams argmax_only = *p;
    argmax_only.temperature = 0.0f;
    for (int r = 0; r < R; r++) {
        model_set_row_pos(m, r, 0);
        next[r] = out[(size_t)r * len] = first[r];
    }
    for (int t = 1; t < len; t++) {
        model_feed_rows(m, next, R, dev_logits);
        OP(d, download, logits, dev_logits, (size_t)R * V * sizeof(float));
        for (int r = 0; r < R; r++) {
            next[r] = sample_token(logits + (size_t)r * V, V, t <= greedy ? &argmax_only : p, &rngs[r], probs, order);
            out[(size_t)r * len + t] = next[r];
        }
        if (progress) progress(ctx, t + 1, len);
    }
    d->be->release(d, dev_logits);
    free(logits);
    free(probs);
    free(order);
    free(next);
}
