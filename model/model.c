// model.c: the decoder, top to bottom: embedding, L blocks (attention, MLP),
// final norm, classifier; then the backward in reverse. Every op goes through
// the device's backend (OP).
#include "model.h"
#include "arena.h"
#include "dropout_mask.h"
#include <string.h>

void model_init(Model *m, Device *dev, const ModelConfig *cfg, const TensorTable *tt, float *weights,
                const ModelOptions *opt) {
    memset(m, 0, sizeof *m);
    m->dev = dev;
    m->cfg = *cfg;
    m->tt = tt;
    if (opt) m->opt = *opt;
    model_use_weights(m, weights);
    rope_table_init(&m->rope, dev, cfg->max_seq, cfg->head_dim, cfg->rope_theta);
}

void model_free(Model *m) {
    Device *d = m->dev;
    if (!d) return;
    if (m->arena) d->be->release(d, m->arena);
    if (m->grads) d->be->release(d, m->grads);
    rope_table_free(&m->rope, d);
    free(m->host_pos);
    free(m->host_head_rows);
    free(m->row_pos);
    memset(m, 0, sizeof *m);
}

void model_use_weights(Model *m, float *weights) {
    m->weights = weights;
    param_views(&m->w, m->tt, weights);
}

void model_use_lora(Model *m, const LoraConfig *lc, const TensorTable *tt, float *weights) {
    m->lora = lc;
    m->lora_tt = tt;
    m->lora_weights = weights;
    lora_views(&m->la, tt, weights);
}

void model_capture(Model *m, const int *layers, int n, float *buf) {
    if (n < 0 || n > 8) die("model_capture: %d layers (at most 8)", n);
    m->n_capture = n;
    for (int k = 0; k < n; k++) m->capture_layers[k] = layers[k];
    m->capture = n ? buf : NULL;
}

void model_zero_grads(Model *m) {
    if (m->grad_out) OP(m->dev, zero, m->grad_out, model_grad_table(m)->total * sizeof(float));
}

void model_use_grads(Model *m, float *grads) {
    m->grad_out = grads ? grads : m->grads;
    if (m->lora) {   // the base is frozen: its gradients are skipped (NULL)
        memset(&m->g, 0, sizeof m->g);
        lora_views(&m->lg, m->lora_tt, m->grad_out);
    } else {
        param_views(&m->g, m->tt, m->grad_out);
    }
}

// ---------------------------------------------------------------- the plan

// Activation slots: training keeps every layer's, unless it recomputes them
// in the backward; inference needs one.
static int n_slots(const Model *m) { return m->training && !m->opt.recompute ? m->cfg.n_layer : 1; }
static int slot_of(const Model *m, int l) { return n_slots(m) > 1 ? l : 0; }
// A slot's first row: slots are laid out by the plan's rows, whatever a pass's.
static size_t slot_row0(const Model *m, int slot) { return (size_t)slot * m->B * m->T; }

static void plan_buffers(Model *m, Carver *c) {
    const ModelConfig *cfg = &m->cfg;
    size_t N = (size_t)m->B * m->T, L = cfg->n_layer, H = cfg->d_model, F = cfg->d_ff, S = n_slots(m);
    size_t Q = (size_t)cfg->n_head * cfg->head_dim, KV = (size_t)cfg->n_kv_head * cfg->head_dim;
    Activations *a = &m->a;
    a->x = carve_floats(c, (m->training ? L + 1 : 2) * N * H);
    a->ln1 = carve_floats(c, S * N * H);
    a->ln1_rstd = carve_floats(c, S * N);
    a->q = carve_floats(c, S * N * Q);
    // (a rows plan computes K and V here, then puts each row at its own position in the cache)
    a->k = m->cache_len && !m->rows_plan ? NULL : carve_floats(c, S * N * KV);
    a->v = m->cache_len && !m->rows_plan ? NULL : carve_floats(c, S * N * KV);
    a->q_raw = cfg->qk_norm ? carve_floats(c, S * N * Q) : NULL;
    a->k_raw = cfg->qk_norm ? carve_floats(c, S * N * KV) : NULL;
    a->q_rstd = carve_floats(c, S * N * cfg->n_head);
    a->k_rstd = carve_floats(c, S * N * cfg->n_kv_head);
    a->att = carve_floats(c, S * N * Q);
    a->lse = carve_floats(c, S * N * cfg->n_head);
    a->x_mid = carve_floats(c, S * N * H);
    a->ln2 = carve_floats(c, S * N * H);
    a->ln2_rstd = carve_floats(c, S * N);
    a->gate = carve_floats(c, S * N * F);
    a->up = carve_floats(c, S * N * F);
    a->act = carve_floats(c, S * N * F);
    a->proj = carve_floats(c, N * H);
    a->lnf = carve_floats(c, N * H);
    a->lnf_rstd = carve_floats(c, N);
    m->tokens = carve(c, N * sizeof(int));
    m->targets = carve(c, N * sizeof(int));
    m->pos = carve(c, N * sizeof(int));
    m->seg = carve(c, N * sizeof(int));
    m->mask = carve(c, N);
    m->head_rows = carve_floats(c, 2 * N);
    if (m->lora) {
        // The widest projection input or output: H, Q (o_proj's input) or F (k and v are at most Q).
        size_t widest = Q > F ? Q : F;
        widest = widest > H ? widest : H;
        m->lora_u = carve_floats(c, S * LORA_N_TARGETS * N * m->lora->rank);
        m->lora_tmp = carve_floats(c, N * widest);
    }
    if (m->cache_len) {
        m->k_cache = carve_floats(c, L * m->cache_len * m->cache_rows * KV);
        m->v_cache = carve_floats(c, L * m->cache_len * m->cache_rows * KV);
        m->last_logits = carve_floats(c, cfg->vocab_size);
    }
    if (!m->training) return;
    BackwardBuffers *b = &m->bw;
    b->dx = carve_floats(c, N * H);
    b->dln = carve_floats(c, N * H);
    b->dq = carve_floats(c, N * Q);
    b->dk = carve_floats(c, N * KV);
    b->dv = carve_floats(c, N * KV);
    b->dq_raw = cfg->qk_norm ? carve_floats(c, N * Q) : b->dq;
    b->dk_raw = cfg->qk_norm ? carve_floats(c, N * KV) : b->dk;
    b->datt = carve_floats(c, N * Q);
    b->dgate = carve_floats(c, N * F);
    b->dup = carve_floats(c, N * F);
    b->dact = carve_floats(c, N * F);
    b->dlora_u = m->lora ? carve_floats(c, N * m->lora->rank) : NULL;
}

// Sizes, allocates and carves the plan; returns the arena bytes with
// recompute flipped, for the saving the log reports.
static size_t allocate_plan(Model *m, int B, int T, int training, int cache_len) {
    Device *d = m->dev;
    if (m->arena) d->be->release(d, m->arena);
    free(m->host_pos);
    free(m->host_head_rows);
    free(m->row_pos);
    m->row_pos = NULL;
    m->B = B;
    m->T = T;
    m->training = training;
    m->cache_len = cache_len;
    m->n_past = 0;
    m->opt.recompute = !m->opt.recompute;
    Carver other = {NULL, 0};
    plan_buffers(m, &other);
    m->opt.recompute = !m->opt.recompute;
    Carver c = {NULL, 0};
    plan_buffers(m, &c);
    m->arena_bytes = c.used;
    m->arena = d->be->alloc(d, c.used, "activations");
    c.base = m->arena;
    c.used = 0;
    plan_buffers(m, &c);
    m->host_pos = xmalloc((size_t)B * T * sizeof(int), "positions");
    if (m->rows_plan) m->row_pos = xcalloc((size_t)m->cache_rows, sizeof(int), "sequence positions");
    m->host_head_rows = xmalloc((size_t)2 * B * T * sizeof(float), "loss head rows");
    if (training && !m->grads) {
        m->grads = d->be->alloc(d, model_grad_table(m)->total * sizeof(float),
                                m->lora ? "adapter gradients" : "gradients");
        model_use_grads(m, NULL);
    }
    dev_reserve(d, d->be->workspace_bytes(d, &m->cfg, B, T, m->tt->total));
    return other.used;
}

void model_init_like(Model *m, const Model *src) {
    model_init(m, src->dev, &src->cfg, src->tt, src->weights, &src->opt);
    if (src->lora) model_use_lora(m, src->lora, src->lora_tt, src->lora_weights);
    m->packed = src->packed;
}

void model_use_packed(Model *m, const PackedViews *pv) { m->packed = pv; }

// Whether a pass of N rows against OC outputs reads W's packed form (the
// bits of the float weights): few rows with fp32 products.
static int takes_packed(const Model *m, const PackedWeight *packed, int N, int OC) {
    return packed && N <= PACKED_MAX_ROWS && 4 * N <= OC && m->opt.matmul == MATMUL_FP32;
}

// y[N, OC] = x[N, C] W^T: from W's packed form when takes_packed, else the matmul op.
static void project(Model *m, float *y, const float *x, const float *W, const PackedWeight *packed, int N, int C,
                    int OC) {
    if (takes_packed(m, packed, N, OC)) OP(m->dev, matmul_forward_packed, y, x, packed, N);
    else OP(m->dev, matmul_forward, y, x, W, N, C, OC, m->opt.matmul);
}

int model_plan(Model *m, int B, int T, int training, FILE *log, PtError *e) {
    const ModelOptions *opt = &m->opt;
    if (T > m->cfg.max_seq)
        return pt_fail(e, "sequence length %d exceeds the model's max_position_embeddings %d", T, m->cfg.max_seq);
    if (B < 1 || T < 1) return pt_fail(e, "batch %d x %d is empty", B, T);
    m->cache_rows = 1;
    m->rows_plan = 0;
    size_t other = allocate_plan(m, B, T, training, 0);
    if (log) {
        double mb = 1.0 / (1 << 20), pbytes = m->tt->total * 4.0, gbytes = model_grad_table(m)->total * 4.0;
        fprintf(log, "memory plan (B=%d, T=%d, %s, %s): params %.1f MiB, grads %.1f MiB, activations %.1f MiB, "
                     "workspace %.1f MiB, matmuls %s\n",
                B, T, training ? "training" : "inference", m->dev->be->name, pbytes * mb, training ? gbytes * mb : 0.0,
                m->arena_bytes * mb, m->dev->ws_bytes * mb,
                opt->matmul == MATMUL_BF16 ? "bf16 (fp32 accumulation)" : "fp32");
        if (m->lora) {
            char targets[64];
            lora_targets_format(m->lora->targets, targets, sizeof targets);
            size_t kept = (size_t)n_slots(m) * LORA_N_TARGETS * B * T * m->lora->rank * 4;
            fprintf(log, "  LoRA r=%d alpha=%g dropout %g on %s: adapter %.2f MiB, its activations %.1f MiB of the "
                    "above%s\n", m->lora->rank, m->lora->alpha, m->lora->dropout, targets, m->lora_tt->total * 4.0 * mb, kept * mb,
                    training ? "; the base is frozen (no gradients, no AdamW state for it)" : "");
        }
        double diff = ((double)other - (double)m->arena_bytes) * mb;
        if (training && opt->recompute)
            fprintf(log, "  recompute on: activations kept for one layer (plus x per layer), %.1f MiB less than "
                         "off, one more forward per layer in the backward\n", diff);
        else if (training)
            fprintf(log, "  recompute off: recompute = true would save %.1f MiB of activations\n", -diff);
    }
    return 0;
}

// Rows per pass over a prompt: bounds the activations (about 28 MiB for
// pocket-0.3b) while keeping the matmuls wide.
enum { CACHE_CHUNK = 512 };

int model_plan_cache(Model *m, int cache_len, PtError *e) {
    if (cache_len < 1 || cache_len > m->cfg.max_seq)
        return pt_fail(e, "generation context of %d positions is outside [1, %d] (the model's max_position_embeddings)",
                       cache_len, m->cfg.max_seq);
    m->cache_rows = 1;
    m->rows_plan = 0;
    allocate_plan(m, 1, cache_len < CACHE_CHUNK ? cache_len : CACHE_CHUNK, 0, cache_len);
    return 0;
}

int model_plan_cache_rows(Model *m, int rows, int cache_len, PtError *e) {
    if (cache_len < 1 || cache_len > m->cfg.max_seq)
        return pt_fail(e, "generation context of %d positions is outside [1, %d] (the model's max_position_embeddings)",
                       cache_len, m->cfg.max_seq);
    if (rows < 1) return pt_fail(e, "a cache of %d sequences is empty", rows);
    m->cache_rows = rows;
    m->rows_plan = 1;
    allocate_plan(m, rows, 1, 0, cache_len);
    return 0;
}

// ---------------------------------------------------------------- forward

// One pass of the decoder over N rows: B x T of a batch, or the n rows fed
// into the cache at position p0 (B = 1, T = n).
typedef struct {
    int B, T, N, p0;
    const int *row_p0;   // a rows plan: each row's position (host), instead of p0
    const int *seg;   // device memory or NULL
    int lora_dropout; // a training pass of an adapter with dropout > 0 (forward and evaluation never drop)
} Pass;

// ---- LoRA: y += (alpha/r) (x A^T) B^T on a targeted projection, in two
// halves around the base matmul: lora_in keeps u = (alpha/r) x A^T (the
// backward's dB needs it; a recompute rebuilds it), lora_out adds u B^T. The
// adapter's matmuls run in the model's precision and, with A16, their outputs
// are rounded like the base's (the phone runs them as two more matmuls).
static const LoraLayerViews *lora_layer(const Model *m, int l, int t) {
    return m->lora && m->la.layer[l].a[t] ? &m->la.layer[l] : NULL;
}

static uint64_t lora_dropout_seed(const Model *m, int l, int t) {
    return dropout_child_seed(m->dropout_seed, (uint64_t)l * LORA_N_TARGETS + t);
}

static float *lora_u_of(const Model *m, int slot, int t) {
    return m->lora_u + ((size_t)slot * LORA_N_TARGETS + t) * m->B * m->T * m->lora->rank;
}

// With dropout on, the adapter reads dropout(x) from lora_tmp, the mask of
// (layer, target) from the micro-batch's seed: q, k and v, which share x, get
// masks of their own (PEFT has one dropout module per projection). The
// backward calls it again for the same bits.
static const float *lora_input(Model *m, const Pass *ps, int l, int t, const float *x, size_t n) {
    if (!ps->lora_dropout) return x;
    OP(m->dev, dropout_forward, m->lora_tmp, x, n, m->lora->dropout, lora_dropout_seed(m, l, t));
    return m->lora_tmp;
}

static void lora_in(Model *m, const Pass *ps, int l, int t, int slot, const float *x, int N) {
    const LoraLayerViews *a = lora_layer(m, l, t);
    if (!a) return;
    int in, out, r = m->lora->rank;
    lora_target_dims(&m->cfg, t, &in, &out);
    float *u = lora_u_of(m, slot, t);
    x = lora_input(m, ps, l, t, x, (size_t)N * in);
    OP(m->dev, matmul_forward, u, x, a->a[t], N, in, r, m->opt.matmul);
    OP(m->dev, a16_round, u, (size_t)N * r, m->opt.a16);
    OP(m->dev, grad_scale, u, (size_t)N * r, lora_scale(m->lora));
}

static void lora_out(Model *m, int l, int t, int slot, float *y, int N) {
    const LoraLayerViews *a = lora_layer(m, l, t);
    if (!a) return;
    int in, out, r = m->lora->rank;
    lora_target_dims(&m->cfg, t, &in, &out);
    OP(m->dev, matmul_forward, m->lora_tmp, lora_u_of(m, slot, t), a->b[t], N, r, out, m->opt.matmul);
    OP(m->dev, a16_round, m->lora_tmp, (size_t)N * out, m->opt.a16);
    OP(m->dev, residual_forward, y, y, m->lora_tmp, (size_t)N * out);
}

// The adapter's part of a projection's backward, from dy (dL/dy, [N, out]):
// dB += dy^T u, dA += (alpha/r) (dy B)^T x, dx += (alpha/r) (dy B) A; with
// dropout, x is dropout(x) and dx passes through the same mask.
static void lora_backward(Model *m, const Pass *ps, int l, int t, int slot, const float *x, const float *dy, float *dx,
                          int N) {
    const LoraLayerViews *a = lora_layer(m, l, t);
    if (!a) return;
    int in, out, r = m->lora->rank;
    lora_target_dims(&m->cfg, t, &in, &out);
    Device *d = m->dev;
    float *du = m->bw.dlora_u;
    const MatmulPrecision p = m->opt.matmul;
    OP(d, zero, du, (size_t)N * r * sizeof(float));
    OP(d, matmul_backward, du, m->lg.layer[l].b[t], dy, lora_u_of(m, slot, t), a->b[t], N, r, out, p);
    OP(d, grad_scale, du, (size_t)N * r, lora_scale(m->lora));
    if (!ps->lora_dropout) {
        OP(d, matmul_backward, dx, m->lg.layer[l].a[t], du, x, a->a[t], N, in, r, p);
        return;
    }
    // dA from the regenerated dropout(x); dx through the mask: dx += dropout_backward(du A).
    const size_t n = (size_t)N * in;
    OP(d, matmul_backward, NULL, m->lg.layer[l].a[t], du, lora_input(m, ps, l, t, x, n), a->a[t], N, in, r, p);
    OP(d, zero, m->lora_tmp, n * sizeof(float));
    OP(d, matmul_backward, m->lora_tmp, NULL, du, x, a->a[t], N, in, r, p);
    OP(d, dropout_backward, dx, m->lora_tmp, n, m->lora->dropout, lora_dropout_seed(m, l, t));
}

// One decoder block, forward. Reads x_in, writes x_out; `slot` selects the
// saved-activation slot. x_out == NULL: the recompute before a backward, which
// needs the activations only, so the down projection is skipped. With the A16
// option the matmul inputs and outputs are rounded as the device rounds them.
static void block_forward(Model *m, const Pass *ps, int l, int slot, const float *x_in, float *x_out) {
    const ModelConfig *c = &m->cfg;
    const LayerViews *w = &m->w.layer[l];
    const PackedLayer *pk = m->packed ? &m->packed->layer[l] : NULL;
    Device *d = m->dev;
    Activations *a = &m->a;
    const int N = ps->N, H = c->d_model, F = c->d_ff, hd = c->head_dim, nq = c->n_head, nkv = c->n_kv_head;
    const int Q = nq * hd, KV = nkv * hd, a16 = m->opt.a16;
    const size_t rows = slot_row0(m, slot);
    float *ln1 = a->ln1 + rows * H, *q = a->q + rows * Q, *att = a->att + rows * Q, *x_mid = a->x_mid + rows * H;
    float *ln2 = a->ln2 + rows * H, *gate = a->gate + rows * F, *up = a->up + rows * F, *act = a->act + rows * F;
    // The attention step is the only difference between the plans: K and V
    // go to the batch's own buffers, or into the cache after its n_past
    // positions (R lockstep sequences: position p of all R is one block of R
    // rows, which is what a pass of one token per sequence writes).
    const int R = m->cache_len ? m->cache_rows : 1;
    float *K_layer = m->cache_len ? m->k_cache + (size_t)l * m->cache_len * R * KV : NULL;
    float *V_layer = m->cache_len ? m->v_cache + (size_t)l * m->cache_len * R * KV : NULL;
    const int direct = m->cache_len && !ps->row_p0;   // K and V straight into the cache at p0
    float *k = direct ? K_layer + (size_t)ps->p0 * R * KV : a->k + rows * KV;
    float *v = direct ? V_layer + (size_t)ps->p0 * R * KV : a->v + rows * KV;
    float *q_raw = c->qk_norm ? a->q_raw + rows * Q : q, *k_raw = c->qk_norm ? a->k_raw + rows * KV : k;

    // attention: norm -> q/k/v -> per-head QK-norm -> RoPE -> causal GQA -> o_proj -> residual
    OP(d, rmsnorm_forward, ln1, a->ln1_rstd + rows, x_in, w->ln1, N, H, c->norm_eps);
    OP(d, a16_round, ln1, (size_t)N * H, a16);
    project(m, q_raw, ln1, w->wq, pk ? pk->wq : NULL, N, H, Q);
    project(m, k_raw, ln1, w->wk, pk ? pk->wk : NULL, N, H, KV);
    project(m, v, ln1, w->wv, pk ? pk->wv : NULL, N, H, KV);
    for (int t = LORA_Q; t <= LORA_V; t++) {
        float *y = t == LORA_Q ? q_raw : t == LORA_K ? k_raw : v;
        lora_in(m, ps, l, t, slot, ln1, N);
        lora_out(m, l, t, slot, y, N);
    }
    OP(d, a16_round, q_raw, (size_t)N * Q, a16);
    OP(d, a16_round, k_raw, (size_t)N * KV, a16);
    OP(d, a16_round, v, (size_t)N * KV, a16);
    if (c->qk_norm) {
        OP(d, rmsnorm_forward, q, a->q_rstd + rows * nq, q_raw, w->qnorm, N * nq, hd, c->norm_eps);
        OP(d, rmsnorm_forward, k, a->k_rstd + rows * nkv, k_raw, w->knorm, N * nkv, hd, c->norm_eps);
    }
    OP(d, rope_forward, q, &m->rope, m->pos, N, nq, hd);
    OP(d, rope_forward, k, &m->rope, m->pos, N, nkv, hd);
    if (ps->row_p0)   // a rows plan: each sequence's new K and V at its own position, then its query over them
        for (int b = 0; b < ps->B; b++) {
            const size_t at = ((size_t)ps->row_p0[b] * R + b) * KV;
            OP(d, copy, K_layer + at, k + (size_t)b * KV, (size_t)KV * sizeof(float));
            OP(d, copy, V_layer + at, v + (size_t)b * KV, (size_t)KV * sizeof(float));
            OP(d, attention_cached, att + (size_t)b * Q, q + (size_t)b * Q, K_layer + (size_t)b * KV,
               V_layer + (size_t)b * KV, ps->row_p0[b], 1, nq, nkv, hd, (size_t)R * KV);
        }
    else if (m->cache_len && ps->p0 > 0)   // one sequence's queries over its keys
        OP(d, attention_cached, att, q, K_layer, V_layer, ps->p0, ps->T, nq, nkv, hd, (size_t)KV);
    else   // a batch, or a cache's first rows: plain causal attention over them
        OP(d, attention_forward, att, a->lse + rows * nq, q, k, v, ps->seg, ps->B, ps->T, nq, nkv, hd);
    OP(d, a16_round, att, (size_t)N * Q, a16);
    project(m, a->proj, att, w->wo, pk ? pk->wo : NULL, N, Q, H);
    lora_in(m, ps, l, LORA_O, slot, att, N);
    lora_out(m, l, LORA_O, slot, a->proj, N);
    OP(d, a16_round, a->proj, (size_t)N * H, a16);
    OP(d, residual_forward, x_mid, x_in, a->proj, (size_t)N * H);

    // MLP: norm -> gate/up -> SwiGLU -> down -> residual
    OP(d, rmsnorm_forward, ln2, a->ln2_rstd + rows, x_mid, w->ln2, N, H, c->norm_eps);
    OP(d, a16_round, ln2, (size_t)N * H, a16);
    project(m, gate, ln2, w->wgate, pk ? pk->wgate : NULL, N, H, F);
    project(m, up, ln2, w->wup, pk ? pk->wup : NULL, N, H, F);
    lora_in(m, ps, l, LORA_GATE, slot, ln2, N);
    lora_out(m, l, LORA_GATE, slot, gate, N);
    lora_in(m, ps, l, LORA_UP, slot, ln2, N);
    lora_out(m, l, LORA_UP, slot, up, N);
    OP(d, a16_round, gate, (size_t)N * F, a16);
    OP(d, a16_round, up, (size_t)N * F, a16);
    OP(d, swiglu_forward, act, gate, up, (size_t)N * F);
    OP(d, a16_round, act, (size_t)N * F, a16);
    lora_in(m, ps, l, LORA_DOWN, slot, act, N);   // a recompute needs it too
    if (!x_out) return;
    project(m, a->proj, act, w->wdown, pk ? pk->wdown : NULL, N, F, H);
    lora_out(m, l, LORA_DOWN, slot, a->proj, N);
    OP(d, a16_round, a->proj, (size_t)N * H, a16);
    OP(d, residual_forward, x_out, x_mid, a->proj, (size_t)N * H);
}

// The residual stream entering layer l: training keeps every layer's input;
// otherwise two buffers are used in turn.
static float *layer_input(Model *m, int l) {
    const size_t NH = (size_t)m->B * m->T * m->cfg.d_model;
    return m->a.x + (m->training ? (size_t)l : (size_t)(l & 1)) * NH;
}

// The captured layers' outputs of this pass's rows into their columns of m->capture.
static void capture_layer(Model *m, const Pass *ps, int l, const float *x_out) {
    const int H = m->cfg.d_model, W = m->n_capture * H;
    for (int k = 0; k < m->n_capture; k++) {
        if (m->capture_layers[k] != l) continue;
        for (int r = 0; r < ps->N; r++)
            OP(m->dev, copy, m->capture + (size_t)r * W + (size_t)k * H, x_out + (size_t)r * H, (size_t)H * sizeof(float));
    }
}

// Uploads a batch's inputs (positions 0.. per row, or p0.., when it has none)
// and runs embedding, blocks and the final norm over the pass's rows.
static void forward_trunk(Model *m, const Pass *ps, const int *tokens, const int *pos) {
    Device *d = m->dev;
    const size_t ints = (size_t)ps->N * sizeof(int);
    if (!pos) {
        for (int b = 0; b < ps->B; b++)
            for (int t = 0; t < ps->T; t++) m->host_pos[b * ps->T + t] = ps->p0 + t;
        pos = m->host_pos;
    }
    OP(d, upload, m->pos, pos, ints);
    OP(d, upload, m->tokens, tokens, ints);
    OP(d, embedding_forward, m->a.x, m->tokens, m->w.embed, ps->N, m->cfg.d_model);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        block_forward(m, ps, l, slot_of(m, l), layer_input(m, l), layer_input(m, l + 1));
        if (m->n_capture) capture_layer(m, ps, l, layer_input(m, l + 1));
    }
}

// ---------------------------------------------------------------- backward

// One decoder block, backward, from the activations in `slot`. On entry bw.dx
// holds dL/dx[l+1]; on exit dL/dx[l].
static void block_backward(Model *m, const Pass *ps, int l, int slot) {
    const ModelConfig *c = &m->cfg;
    const LayerViews *w = &m->w.layer[l], *gw = &m->g.layer[l];
    Device *d = m->dev;
    Activations *a = &m->a;
    BackwardBuffers *b = &m->bw;
    const int N = ps->N, H = c->d_model, F = c->d_ff, hd = c->head_dim, nq = c->n_head, nkv = c->n_kv_head;
    const int Q = nq * hd, KV = nkv * hd;
    const MatmulPrecision p = m->opt.matmul;
    const size_t rows = slot_row0(m, slot), fl = sizeof(float);
    const float *q_raw = c->qk_norm ? a->q_raw + rows * Q : NULL, *k_raw = c->qk_norm ? a->k_raw + rows * KV : NULL;

    // MLP (the residual passes dx through unchanged; the branch adds to it)
    OP(d, zero, b->dact, (size_t)N * F * fl);
    OP(d, matmul_backward, b->dact, gw->wdown, b->dx, a->act + rows * F, w->wdown, N, F, H, p);
    lora_backward(m, ps, l, LORA_DOWN, slot, a->act + rows * F, b->dx, b->dact, N);
    OP(d, zero, b->dgate, (size_t)N * F * fl);
    OP(d, zero, b->dup, (size_t)N * F * fl);
    OP(d, swiglu_backward, b->dgate, b->dup, b->dact, a->gate + rows * F, a->up + rows * F, (size_t)N * F);
    OP(d, zero, b->dln, (size_t)N * H * fl);
    OP(d, matmul_backward, b->dln, gw->wgate, b->dgate, a->ln2 + rows * H, w->wgate, N, H, F, p);
    OP(d, matmul_backward, b->dln, gw->wup, b->dup, a->ln2 + rows * H, w->wup, N, H, F, p);
    lora_backward(m, ps, l, LORA_GATE, slot, a->ln2 + rows * H, b->dgate, b->dln, N);
    lora_backward(m, ps, l, LORA_UP, slot, a->ln2 + rows * H, b->dup, b->dln, N);
    OP(d, rmsnorm_backward, b->dx, gw->ln2, b->dln, a->x_mid + rows * H, w->ln2, a->ln2_rstd + rows, N, H);

    // attention
    OP(d, zero, b->datt, (size_t)N * Q * fl);
    OP(d, matmul_backward, b->datt, gw->wo, b->dx, a->att + rows * Q, w->wo, N, Q, H, p);
    lora_backward(m, ps, l, LORA_O, slot, a->att + rows * Q, b->dx, b->datt, N);
    OP(d, zero, b->dq, (size_t)N * Q * fl);
    OP(d, zero, b->dk, (size_t)N * KV * fl);
    OP(d, zero, b->dv, (size_t)N * KV * fl);
    OP(d, attention_backward, b->dq, b->dk, b->dv, b->datt, a->att + rows * Q, a->lse + rows * nq, a->q + rows * Q,
       a->k + rows * KV, a->v + rows * KV, ps->seg, ps->B, ps->T, nq, nkv, hd);
    OP(d, rope_backward, b->dq, &m->rope, m->pos, N, nq, hd);
    OP(d, rope_backward, b->dk, &m->rope, m->pos, N, nkv, hd);
    if (c->qk_norm) {
        OP(d, zero, b->dq_raw, (size_t)N * Q * fl);
        OP(d, zero, b->dk_raw, (size_t)N * KV * fl);
        OP(d, rmsnorm_backward, b->dq_raw, gw->qnorm, b->dq, q_raw, w->qnorm, a->q_rstd + rows * nq, N * nq, hd);
        OP(d, rmsnorm_backward, b->dk_raw, gw->knorm, b->dk, k_raw, w->knorm, a->k_rstd + rows * nkv, N * nkv, hd);
    }
    OP(d, zero, b->dln, (size_t)N * H * fl);
    OP(d, matmul_backward, b->dln, gw->wq, b->dq_raw, a->ln1 + rows * H, w->wq, N, H, Q, p);
    OP(d, matmul_backward, b->dln, gw->wk, b->dk_raw, a->ln1 + rows * H, w->wk, N, H, KV, p);
    OP(d, matmul_backward, b->dln, gw->wv, b->dv, a->ln1 + rows * H, w->wv, N, H, KV, p);
    lora_backward(m, ps, l, LORA_Q, slot, a->ln1 + rows * H, b->dq_raw, b->dln, N);
    lora_backward(m, ps, l, LORA_K, slot, a->ln1 + rows * H, b->dk_raw, b->dln, N);
    lora_backward(m, ps, l, LORA_V, slot, a->ln1 + rows * H, b->dv, b->dln, N);
    OP(d, rmsnorm_backward, b->dx, gw->ln1, b->dln, layer_input(m, l), w->ln1, a->ln1_rstd + rows, N, H);
}

// The batch's inputs uploaded, and embedding, blocks and the final norm run
// (into a.lnf); returns the pass.
static Pass forward_to_norm(Model *m, const ModelInput *in, int backward) {
    if (in->B < 1 || in->B > m->B || in->T != m->T || m->cache_len)
        die("model_forward: batch %dx%d does not match the plan %dx%d%s", in->B, in->T, m->B, m->T,
            m->cache_len ? " (planned for a KV cache)" : "");
    if (backward && !m->training) die("model_forward_backward: the model was planned for inference");
    Device *d = m->dev;
    const int N = in->B * m->T;   // a batch of fewer rows than planned runs over those alone
    const size_t ints = (size_t)N * sizeof(int);
    Pass ps = {.B = in->B, .T = m->T, .N = N, .seg = in->seg ? m->seg : NULL,
               .lora_dropout = backward && m->lora && m->lora->dropout > 0};
    if (in->seg) OP(d, upload, m->seg, in->seg, ints);
    if (in->targets) OP(d, upload, m->targets, in->targets, ints);
    if (in->mask) OP(d, upload, m->mask, in->mask, (size_t)N);
    forward_trunk(m, &ps, in->tokens, in->pos);
    OP(d, rmsnorm_forward, m->a.lnf, m->a.lnf_rstd, layer_input(m, m->cfg.n_layer), m->w.lnf, N, m->cfg.d_model,
       m->cfg.norm_eps);
    return ps;
}

const float *model_forward_hidden(Model *m, const ModelInput *in) {
    forward_to_norm(m, in, 0);
    return m->a.lnf;
}

static double run(Model *m, const ModelInput *in, const LossHead *head, int backward, float grad_scale,
                  float *logits_out, int *count) {
    Device *d = m->dev;
    const ModelConfig *c = &m->cfg;
    Pass ps = forward_to_norm(m, in, backward);
    const int N = ps.N, H = c->d_model, L = c->n_layer;
    float *x_last = layer_input(m, L);

    double loss = 0;
    int counted = 0;
    float *dh = backward ? m->bw.dx : NULL;
    if (backward) OP(d, zero, dh, (size_t)N * H * sizeof(float));
    if (head) {
        loss = head->loss(head, m, in, dh, grad_scale, &counted);
    } else if (in->targets || logits_out) {   // the default head: next-token cross-entropy
        loss = OP(d, classifier, dh, backward ? m->g.lm_head : NULL, logits_out, m->a.lnf, m->w.lm_head,
                  in->targets ? m->targets : NULL, in->mask ? m->mask : NULL, N, H, c->vocab_size, grad_scale,
                  &counted, m->opt.matmul);
    }
    if (backward) {
        // final norm: dx holds dL/d(lnf); turn it into dL/dx[L]
        OP(d, copy, m->bw.dln, m->bw.dx, (size_t)N * H * sizeof(float));
        OP(d, zero, m->bw.dx, (size_t)N * H * sizeof(float));
        OP(d, rmsnorm_backward, m->bw.dx, m->g.lnf, m->bw.dln, x_last, m->w.lnf, m->a.lnf_rstd, N, H);
        for (int l = L - 1; l >= 0; l--) {
            // The slot still holds the last layer from the forward; every
            // other layer is rebuilt from its saved input.
            if (m->opt.recompute && l < L - 1) block_forward(m, &ps, l, 0, layer_input(m, l), NULL);
            block_backward(m, &ps, l, slot_of(m, l));
        }
        if (m->g.embed) OP(d, embedding_backward, m->g.embed, m->bw.dx, m->tokens, N, H, c->pad_id);
    }
    if (count) *count = counted;
    return loss;
}

double model_forward(Model *m, const ModelInput *in, float *logits_out, int *count) {
    return run(m, in, NULL, 0, 0.0f, logits_out, count);
}

double model_forward_backward(Model *m, const ModelInput *in, float grad_scale, float *logits_out, int *count) {
    return run(m, in, NULL, 1, grad_scale, logits_out, count);
}

double model_forward_head(Model *m, const ModelInput *in, const LossHead *head, int *count) {
    return run(m, in, head, 0, 0.0f, NULL, count);
}

double model_forward_backward_head(Model *m, const ModelInput *in, const LossHead *head, float grad_scale,
                                   int *count) {
    return run(m, in, head, 1, grad_scale, NULL, count);
}

// logits [rows, V] of the final-normed rows in m->a.lnf: through the packed
// lm_head when takes_packed, else the classifier without targets.
static void head_logits(Model *m, float *logits, int rows) {
    const int H = m->cfg.d_model, V = m->cfg.vocab_size;
    const PackedWeight *packed = m->packed ? m->packed->lm_head : NULL;
    if (takes_packed(m, packed, rows, V))
        OP(m->dev, matmul_forward_packed, logits, m->a.lnf, packed, rows);
    else
        OP(m->dev, classifier, NULL, NULL, logits, m->a.lnf, m->w.lm_head, NULL, NULL, rows, H, V, 0.0f, NULL,
           m->opt.matmul);
}

void model_feed_rows(Model *m, const int *tokens, int n, float *logits) {
    const int R = m->cache_rows;
    if (!m->rows_plan || m->B != R || n < 1 || n > R)
        die("model_feed_rows: %d of the plan's %d sequences", n, m->rows_plan ? R : 0);
    for (int r = 0; r < n; r++)
        if (m->row_pos[r] < 0 || m->row_pos[r] >= m->cache_len)
            die("model_feed_rows: sequence %d of %d at position %d, outside its cache of %d", r, R, m->row_pos[r],
                m->cache_len);
    const ModelConfig *c = &m->cfg;
    Pass ps = {.B = n, .T = 1, .N = n, .row_p0 = m->row_pos};
    forward_trunk(m, &ps, tokens, m->row_pos);
    for (int r = 0; r < n; r++) m->row_pos[r]++;
    OP(m->dev, rmsnorm_forward, m->a.lnf, m->a.lnf_rstd, layer_input(m, c->n_layer), m->w.lnf, n, c->d_model,
       c->norm_eps);
    head_logits(m, logits, n);
}

void model_set_row_pos(Model *m, int r, int pos) {
    if (!m->rows_plan || r < 0 || r >= m->cache_rows || pos < 0 || pos >= m->cache_len)
        die("model_set_row_pos: sequence %d at position %d does not fit the plan (%d sequences, cache of %d)", r, pos,
            m->rows_plan ? m->cache_rows : 0, m->cache_len);
    m->row_pos[r] = pos;
}

/* Copies n positions of sequence src of a cache of src_rows sequences and src_len positions a layer into sequence
 * dst of m's plan: the one loop behind a copy from a one-sequence cache and a move within the plan. */
static void cache_copy_positions(Model *m, int dst, const float *k_src, const float *v_src, int src_len, int src_rows,
                                 int src, int n) {
    const ModelConfig *c = &m->cfg;
    const int R = m->cache_rows, KV = c->n_kv_head * c->head_dim;
    const size_t row = (size_t)KV * sizeof(float);
    for (int l = 0; l < c->n_layer; l++)
        for (int p = 0; p < n; p++) {
            const size_t to = (((size_t)l * m->cache_len + p) * R + dst) * KV,
                         from = (((size_t)l * src_len + p) * src_rows + src) * KV;
            OP(m->dev, copy, m->k_cache + to, k_src + from, row);
            OP(m->dev, copy, m->v_cache + to, v_src + from, row);
        }
}

void model_cache_copy_row(Model *m, int r, const Model *one) {
    const ModelConfig *c = &m->cfg;
    const int R = m->cache_rows;
    if (!m->rows_plan || r < 0 || r >= R || !one->cache_len || one->rows_plan || one->n_past > m->cache_len ||
        one->cfg.n_layer != c->n_layer || one->cfg.n_kv_head != c->n_kv_head || one->cfg.head_dim != c->head_dim)
        die("model_cache_copy_row: %d positions of a one-sequence cache do not fit sequence %d of %d (cache of %d)",
            one->n_past, r, R, m->cache_len);
    cache_copy_positions(m, r, one->k_cache, one->v_cache, one->cache_len, 1, 0, one->n_past);
    m->row_pos[r] = one->n_past;
}

void model_cache_move_row(Model *m, int dst, int src) {
    const int R = m->cache_rows;
    if (!m->rows_plan || dst < 0 || dst >= R || src < 0 || src >= R)
        die("model_cache_move_row: sequence %d to %d of %d", src, dst, m->rows_plan ? R : 0);
    cache_copy_positions(m, dst, m->k_cache, m->v_cache, m->cache_len, R, src, m->row_pos[src]);
    m->row_pos[dst] = m->row_pos[src];
}

void model_feed(Model *m, const int *tokens, int n, float *all_logits) {
    if (!m->cache_len || m->cache_rows != 1 || n < 1 || n > m->T || m->n_past + n > m->cache_len)
        die("model_feed: %d tokens after %d do not fit the plan (%d rows a pass, cache of %d)", n, m->n_past, m->T,
            m->cache_len);
    Device *d = m->dev;
    const ModelConfig *c = &m->cfg;
    const int H = c->d_model, V = c->vocab_size;
    Pass ps = {.B = 1, .T = n, .N = n, .p0 = m->n_past};
    forward_trunk(m, &ps, tokens, NULL);
    m->n_past += n;
    // Only the last row's logits are needed to continue.
    const int first = all_logits ? 0 : n - 1, rows = n - first;
    const float *x = layer_input(m, c->n_layer) + (size_t)first * H;
    OP(d, rmsnorm_forward, m->a.lnf, m->a.lnf_rstd, x, m->w.lnf, rows, H, c->norm_eps);
    float *logits = all_logits ? all_logits : m->last_logits;
    head_logits(m, logits, rows);
    if (all_logits) OP(d, copy, m->last_logits, all_logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
}
