// generate.c: the decoder run incrementally over a KV cache, and sampling.
//
// A fed chunk of n tokens goes through the same ops as the training forward
// (model.c), row for row: norm, q/k/v projections, per-head QK-norm, RoPE at
// the chunk's absolute positions, attention, o_proj, residual, SwiGLU MLP.
// The differences: K and V land in the cache instead of a per-batch buffer,
// and each query row attends to every cached position up to its own. A
// first chunk (position 0 on) is an ordinary causal batch and runs the
// training attention kernel; later chunks and single decode steps run
// cached_attention over the earlier positions and their own causal part.
#include "generate.h"
#include <float.h>
#include <math.h>
#include <string.h>
#include "../qat/qat.h"

// Rows per pass over a prompt: bounds the activation buffers (about 28 MiB
// for pocket-0.3b) while keeping the matmuls wide.
enum { GEN_CHUNK = 512 };

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

static void add_stop(GenParams *p, int id, int vocab) {
    if (id < 0 || id >= vocab || gen_is_stop(p, id) || p->n_stop == GEN_MAX_STOPS) return;
    p->stop_ids[p->n_stop++] = id;
}

void gen_add_default_stops(GenParams *p, const ModelConfig *c, const Tokenizer *tok) {
    add_stop(p, c->eos_id, c->vocab_size);
    if (!tok) return;
    add_stop(p, tokenizer_token_id(tok, "<|im_end|>"), c->vocab_size);
    add_stop(p, tokenizer_token_id(tok, "<|endoftext|>"), c->vocab_size);
}

// ---------------------------------------------------------------- context

// Carves 64-byte aligned buffers out of one arena (a first pass with base NULL counts).
typedef struct { float *base; size_t used; } Carver;
static float *carve(Carver *c, size_t n) {
    float *p = c->base ? c->base + c->used : NULL;
    c->used += (n + 15) / 16 * 16;
    return p;
}

static void plan(GenContext *g, Carver *c) {
    const ModelConfig *cfg = &g->m->w.cfg;
    size_t C = (size_t)g->chunk, H = cfg->d_model, F = cfg->d_ff, V = cfg->vocab_size;
    size_t Q = (size_t)cfg->n_head * cfg->head_dim, KV = (size_t)cfg->n_kv_head * cfg->head_dim;
    g->x = carve(c, C * H);
    g->x_mid = carve(c, C * H);
    g->ln = carve(c, C * H);
    g->q = carve(c, C * Q);
    g->q_raw = cfg->qk_norm ? carve(c, C * Q) : g->q;
    // K before the QK-norm; without the norm the projection goes straight to the cache.
    g->k_raw = cfg->qk_norm ? carve(c, C * KV) : NULL;
    g->att = carve(c, C * Q);
    g->tmp = carve(c, C * H);
    g->gate = carve(c, C * F);
    g->up = carve(c, C * F);
    g->act = carve(c, C * F);
    g->rstd = carve(c, C * (size_t)cfg->n_head);   // n_head >= n_kv_head rows per token
    g->lse = carve(c, C * (size_t)cfg->n_head);
    g->logits = carve(c, V);
    g->probs = carve(c, V);
}

int gen_init(GenContext *g, const Model *m, int max_len, PtError *e) {
    memset(g, 0, sizeof *g);
    const ModelConfig *cfg = &m->w.cfg;
    if (max_len < 1 || max_len > cfg->max_seq)
        return pt_fail(e, "generation context of %d positions is outside [1, %d] (the model's max_position_embeddings)",
                       max_len, cfg->max_seq);
    g->m = m;
    g->max_len = max_len;
    g->chunk = max_len < GEN_CHUNK ? max_len : GEN_CHUNK;
    Carver c = {NULL, 0};
    plan(g, &c);
    g->arena = xaligned(c.used * sizeof(float), "generation activations");
    c.base = g->arena;
    c.used = 0;
    plan(g, &c);
    g->pos = xmalloc((size_t)g->chunk * sizeof(int), "generation positions");
    g->order = xmalloc((size_t)cfg->vocab_size * sizeof(int), "sampling order");
    size_t cache = (size_t)cfg->n_layer * max_len * cfg->n_kv_head * cfg->head_dim;
    g->k_cache = xaligned(cache * sizeof(float), "K cache");
    g->v_cache = xaligned(cache * sizeof(float), "V cache");
    return 0;
}

void gen_free(GenContext *g) {
    free(g->arena);
    free(g->pos);
    free(g->order);
    free(g->k_cache);
    free(g->v_cache);
    memset(g, 0, sizeof *g);
}

void gen_reset(GenContext *g) { g->n_past = 0; }

// ---------------------------------------------------------------- forward

// n query rows at positions p0 .. p0+n-1 against the cached keys 0 .. p0+i
// of one layer: out[i, h] = sum_u softmax_u(q.k_u / sqrt(hd)) v_u, with query
// head h reading KV head h / (nq/nkv). The softmax runs online (running max
// and sum, accumulating into out), so no score buffer is needed.
static void cached_attention(float *out, const float *q, const float *K, const float *V, int p0, int n, int nq,
                             int nkv, int hd) {
    int rep = nq / nkv;
    size_t Q = (size_t)nq * hd, KVw = (size_t)nkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    // Threads only pay off with enough work (a tiny model's single step has little).
    long work = (long)n * nq * (p0 + n) * hd;
    #pragma omp parallel for collapse(2) schedule(static) if (work > 65536)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nq; h++) {
            const float *qh = q + i * Q + (size_t)h * hd;
            const float *Kh = K + (size_t)(h / rep) * hd, *Vh = V + (size_t)(h / rep) * hd;
            float *acc = out + i * Q + (size_t)h * hd;
            float max = -INFINITY, sum = 0.0f;
            for (int d = 0; d < hd; d++) acc[d] = 0.0f;
            for (int u = 0; u <= p0 + i; u++) {
                const float *ku = Kh + u * KVw, *vu = Vh + u * KVw;
                float s = 0.0f;
                #pragma omp simd reduction(+ : s)
                for (int d = 0; d < hd; d++) s += qh[d] * ku[d];
                s *= scale;
                if (s > max) {   // rescale what was summed under the old maximum
                    float r = expf(max - s);
                    sum *= r;
                    #pragma omp simd
                    for (int d = 0; d < hd; d++) acc[d] *= r;
                    max = s;
                }
                float p = expf(s - max);
                sum += p;
                #pragma omp simd
                for (int d = 0; d < hd; d++) acc[d] += p * vu[d];
            }
            float inv = 1.0f / sum;
            for (int d = 0; d < hd; d++) acc[d] *= inv;
        }
}

// One decoder block over n rows of g->x (in place: x -> x after the block).
// With m->a16 set, matmul inputs and outputs are rounded at the same points
// as model.c does, so int4 / A16 generation matches the model's forward.
static void block(GenContext *g, int l, int n, int p0) {
    const Model *m = g->m;
    const ModelConfig *c = &m->w.cfg;
    const LayerViews *w = &m->p.layer[l];
    int H = c->d_model, F = c->d_ff, hd = c->head_dim, nq = c->n_head, nkv = c->n_kv_head, a16 = m->a16;
    int Q = nq * hd, KV = nkv * hd;
    size_t nH = (size_t)n * H, nQ = (size_t)n * Q, nKV = (size_t)n * KV, nF = (size_t)n * F;
    float *K_layer = g->k_cache + (size_t)l * g->max_len * KV, *V_layer = g->v_cache + (size_t)l * g->max_len * KV;
    float *k_new = K_layer + (size_t)p0 * KV, *v_new = V_layer + (size_t)p0 * KV;
    float *k_proj = c->qk_norm ? g->k_raw : k_new;

    rmsnorm_forward(g->ln, g->rstd, g->x, w->ln1, n, H, c->norm_eps);
    a16_round(g->ln, nH, a16);
    matmul_forward(g->q_raw, g->ln, w->wq, n, H, Q);
    matmul_forward(k_proj, g->ln, w->wk, n, H, KV);
    matmul_forward(v_new, g->ln, w->wv, n, H, KV);
    a16_round(g->q_raw, nQ, a16);
    a16_round(k_proj, nKV, a16);
    a16_round(v_new, nKV, a16);
    if (c->qk_norm) {
        rmsnorm_forward(g->q, g->rstd, g->q_raw, w->qnorm, n * nq, hd, c->norm_eps);
        rmsnorm_forward(k_new, g->rstd, g->k_raw, w->knorm, n * nkv, hd, c->norm_eps);
    }
    rope_forward(g->q, &m->rope, g->pos, n, nq, hd);
    rope_forward(k_new, &m->rope, g->pos, n, nkv, hd);
    if (p0 == 0)   // a first chunk is a plain causal batch: the training forward's kernel fits
        attention_forward(g->att, g->lse, g->q, K_layer, V_layer, NULL, 1, n, nq, nkv, hd, NULL, 0);
    else
        cached_attention(g->att, g->q, K_layer, V_layer, p0, n, nq, nkv, hd);
    a16_round(g->att, nQ, a16);
    matmul_forward(g->tmp, g->att, w->wo, n, Q, H);
    a16_round(g->tmp, nH, a16);
    residual_forward(g->x_mid, g->x, g->tmp, nH);

    rmsnorm_forward(g->ln, g->rstd, g->x_mid, w->ln2, n, H, c->norm_eps);
    a16_round(g->ln, nH, a16);
    matmul_forward(g->gate, g->ln, w->wgate, n, H, F);
    matmul_forward(g->up, g->ln, w->wup, n, H, F);
    a16_round(g->gate, nF, a16);
    a16_round(g->up, nF, a16);
    swiglu_forward(g->act, g->gate, g->up, nF);
    a16_round(g->act, nF, a16);
    matmul_forward(g->tmp, g->act, w->wdown, n, F, H);
    a16_round(g->tmp, nH, a16);
    residual_forward(g->x, g->x_mid, g->tmp, nH);
}

// Feeds n <= chunk tokens at positions n_past..; logits of every row into
// all_logits [n, V] when given, of the last row into g->logits always.
static void feed_chunk(GenContext *g, const int *tokens, int n, float *all_logits) {
    const Model *m = g->m;
    const ModelConfig *c = &m->w.cfg;
    int H = c->d_model, V = c->vocab_size, p0 = g->n_past;
    for (int i = 0; i < n; i++) g->pos[i] = p0 + i;
    embedding_forward(g->x, tokens, m->p.embed, n, H);
    for (int l = 0; l < c->n_layer; l++) block(g, l, n, p0);
    g->n_past += n;
    if (all_logits) {
        rmsnorm_forward(g->ln, g->rstd, g->x, m->p.lnf, n, H, c->norm_eps);
        matmul_forward(all_logits, g->ln, m->p.lm_head, n, H, V);
        memcpy(g->logits, all_logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
    } else {   // only the last position is needed to continue
        const float *last = g->x + (size_t)(n - 1) * H;
        rmsnorm_forward(g->ln, g->rstd, last, m->p.lnf, 1, H, c->norm_eps);
        matmul_forward(g->logits, g->ln, m->p.lm_head, 1, H, V);
    }
}

int gen_feed(GenContext *g, const int *tokens, int n, float *all_logits, PtError *e) {
    const ModelConfig *c = &g->m->w.cfg;
    if (n < 1) return pt_fail(e, "nothing to feed (0 tokens)");
    if (g->n_past + n > g->max_len)
        return pt_fail(e, "%d cached + %d new tokens exceed the context of %d positions", g->n_past, n,
                       g->max_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return pt_fail(e, "token %d of the input is %d, outside the vocabulary [0, %d)", i + 1,
                           tokens[i], c->vocab_size);
    for (int done = 0; done < n; done += g->chunk) {
        int rows = n - done < g->chunk ? n - done : g->chunk;
        feed_chunk(g, tokens + done, rows, all_logits ? all_logits + (size_t)done * c->vocab_size : NULL);
    }
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
    int V = g->m->w.cfg.vocab_size;
    if (p->temperature <= 0.0f) return argmax(logits, V);
    // Softmax of logits / T, unnormalised (the largest term is 1).
    float max = logits[argmax(logits, V)], inv_t = 1.0f / p->temperature;
    float *prob = g->probs;
    for (int i = 0; i < V; i++) prob[i] = expf((logits[i] - max) * inv_t);
    // Candidates: the top k, then the nucleus of those (renormalised), both
    // found by selection in O(V) rather than by sorting the vocabulary.
    int *ids = g->order, n = V;
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
    const ModelConfig *c = &g->m->w.cfg;
    if (n_prompt < 1) return pt_fail(e, "the prompt is empty");
    if (p->max_new < 0) return pt_fail(e, "max_new %d is negative", p->max_new);
    if (max_out < p->max_new)
        return pt_fail(e, "output room for %d tokens is less than max_new %d", max_out, p->max_new);
    if ((long)n_prompt + p->max_new > c->max_seq)
        return pt_fail(e, "prompt of %d tokens + %d new tokens = %ld exceeds the model's context of %d "
                          "positions (max_position_embeddings)",
                       n_prompt, p->max_new, (long)n_prompt + p->max_new, c->max_seq);
    if ((long)n_prompt + p->max_new > g->max_len)
        return pt_fail(e, "prompt of %d tokens + %d new tokens exceeds the cache of %d positions",
                       n_prompt, p->max_new, g->max_len);
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
