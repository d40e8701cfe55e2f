#include "model.h"
#include <string.h>
#include "../qat/qat.h"

void model_from_bundle(Model *m, ModelBundle *b) {
    memset(m, 0, sizeof *m);
    m->w = *b;
    memset(b, 0, sizeof *b);
    param_views(&m->p, &m->w.tt, m->w.params);
    rope_table_init(&m->rope, m->w.cfg.max_seq, m->w.cfg.head_dim, m->w.cfg.rope_theta);
}

void model_free(Model *m) {
    free(m->arena);
    free(m->grads);
    rope_table_free(&m->rope);
    bundle_free(&m->w);
    memset(m, 0, sizeof *m);
}

void model_use_weights(Model *m, float *base) { param_views(&m->p, &m->w.tt, base ? base : m->w.params); }

void model_zero_grads(Model *m) {
    if (m->grads) memset(m->grads, 0, m->w.tt.total * sizeof(float));
}

// Carves named buffers out of one arena; every buffer starts 64-byte aligned.
typedef struct { float *base; size_t used; } Carver;
static float *carve(Carver *c, size_t n) {
    float *p = c->base ? c->base + c->used : NULL;
    c->used += (n + 15) / 16 * 16;
    return p;
}

// The activation slot layer l uses: training keeps every layer's, unless it
// recomputes them in the backward; inference needs one.
static int slot(const Model *m, int l) { return m->training && !m->recompute ? l : 0; }

static void plan_buffers(Model *m, Carver *c) {
    const ModelConfig *cfg = &m->w.cfg;
    size_t N = (size_t)m->B * m->T, L = cfg->n_layer, H = cfg->d_model, F = cfg->d_ff;
    size_t Q = (size_t)cfg->n_head * cfg->head_dim, KV = (size_t)cfg->n_kv_head * cfg->head_dim;
    size_t Ls = (size_t)slot(m, (int)L - 1) + 1;
    Activations *a = &m->a;
    a->x = carve(c, (m->training ? L + 1 : 2) * N * H);
    a->ln1 = carve(c, Ls * N * H);
    a->ln1_rstd = carve(c, Ls * N);
    a->q = carve(c, Ls * N * Q);
    a->k = carve(c, Ls * N * KV);
    a->v = carve(c, Ls * N * KV);
    a->q_raw = cfg->qk_norm ? carve(c, Ls * N * Q) : a->q;
    a->k_raw = cfg->qk_norm ? carve(c, Ls * N * KV) : a->k;
    a->q_rstd = carve(c, Ls * N * cfg->n_head);
    a->k_rstd = carve(c, Ls * N * cfg->n_kv_head);
    a->att = carve(c, Ls * N * Q);
    a->lse = carve(c, Ls * N * cfg->n_head);
    a->x_mid = carve(c, Ls * N * H);
    a->ln2 = carve(c, Ls * N * H);
    a->ln2_rstd = carve(c, Ls * N);
    a->gate = carve(c, Ls * N * F);
    a->up = carve(c, Ls * N * F);
    a->act = carve(c, Ls * N * F);
    a->lnf = carve(c, N * H);
    a->lnf_rstd = carve(c, N);
    Scratch *s = &m->s;
    s->tmp = carve(c, N * H);
    s->classifier = carve(c, (size_t)m->classifier_chunk * cfg->vocab_size);
    s->attention_floats = attention_scratch_floats(m->B, m->T, cfg->n_head, cfg->n_kv_head, cfg->head_dim);
    s->attention = carve(c, s->attention_floats);
    if (!m->training) return;
    s->dx = carve(c, N * H);
    s->dln = carve(c, N * H);
    s->dq = carve(c, N * Q);
    s->dk = carve(c, N * KV);
    s->dv = carve(c, N * KV);
    s->dq_raw = cfg->qk_norm ? carve(c, N * Q) : s->dq;
    s->dk_raw = cfg->qk_norm ? carve(c, N * KV) : s->dk;
    s->datt = carve(c, N * Q);
    s->dgate = carve(c, N * F);
    s->dup = carve(c, N * F);
    s->dact = carve(c, N * F);
}

int model_plan(Model *m, int B, int T, int training, FILE *log, PtError *e) {
    if (T > m->w.cfg.max_seq)
        return pt_fail(e, "sequence length %d exceeds the model's max_position_embeddings %d", T, m->w.cfg.max_seq);
    if (B < 1 || T < 1) return pt_fail(e, "batch %d x %d is empty", B, T);
    free(m->arena);
    m->B = B;
    m->T = T;
    m->training = training;
    // The classifier holds `chunk` rows of V logits at a time, never N*V.
    // Each chunk streams the whole lm_head (and, for bf16, converts it twice),
    // so fewer, larger chunks are faster: 256 rows of 65536 are 64 MiB.
    m->classifier_chunk = B * T < 256 ? B * T : 256;
    // The same plan with recompute flipped, for the saving the log reports.
    m->recompute = !m->recompute;
    Carver other = {NULL, 0};
    plan_buffers(m, &other);
    m->recompute = !m->recompute;
    Carver c = {NULL, 0};
    plan_buffers(m, &c);
    m->arena_floats = c.used;
    m->arena = xaligned(c.used * sizeof(float), "activations");
    c.base = m->arena;
    c.used = 0;
    plan_buffers(m, &c);
    if (training && !m->grads) {
        m->grads = xaligned(m->w.tt.total * sizeof(float), "gradients");
        param_views(&m->g, &m->w.tt, m->grads);
    }
    if (log) {
        double mb = 1.0 / (1 << 20), pbytes = m->w.tt.total * 4.0;
        fprintf(log, "memory plan (B=%d, T=%d, %s): params %.1f MiB, grads %.1f MiB, activations+scratch %.1f MiB "
                     "(classifier chunk %d x %d), matmuls %s\n",
                B, T, training ? "training" : "inference", pbytes * mb, training ? pbytes * mb : 0.0,
                m->arena_floats * 4.0 * mb, m->classifier_chunk, m->w.cfg.vocab_size,
                m->matmul_bf16 ? "bf16 (fp32 accumulation)" : "fp32");
        if (training) {
            double diff = ((double)other.used - (double)c.used) * 4.0 * mb;
            if (m->recompute)
                fprintf(log, "  recompute on: activations kept for one layer (plus x per layer), %.1f MiB less than "
                             "off, one more forward per layer in the backward\n", diff);
            else
                fprintf(log, "  recompute off: recompute = true would save %.1f MiB of activations\n", -diff);
        }
    }
    return 0;
}

// Positions 0..T-1 for every row when the batch brings none.
static const int *positions(Model *m, const ModelInput *in, int **owned) {
    *owned = NULL;
    if (in->pos) return in->pos;
    int *p = xmalloc((size_t)in->B * in->T * sizeof(int), "positions");
    for (int b = 0; b < in->B; b++)
        for (int t = 0; t < in->T; t++) p[b * in->T + t] = t;
    (void)m;
    *owned = p;
    return p;
}

static MatmulPrecision precision(const Model *m) { return m->matmul_bf16 ? MATMUL_BF16 : MATMUL_FP32; }

// One decoder block, forward. Layer l reads x[l] and writes x[l+1]; `s` selects
// the saved-activation slot (see slot()). x_out == NULL: the recompute before a
// backward, which needs the activations only, so the down projection is skipped.
static void block_forward(Model *m, int l, int s, const int *pos, const int *seg, float *x_in, float *x_out) {
    const ModelConfig *c = &m->w.cfg;
    const LayerViews *w = &m->p.layer[l];
    Activations *a = &m->a;
    int B = m->B, T = m->T, N = B * T, H = c->d_model, F = c->d_ff, hd = c->head_dim;
    int nq = c->n_head, nkv = c->n_kv_head, Q = nq * hd, KV = nkv * hd;
    const MatmulPrecision p = precision(m);
    size_t oH = (size_t)s * N * H, oQ = (size_t)s * N * Q, oKV = (size_t)s * N * KV, oF = (size_t)s * N * F;
    float *ln1 = a->ln1 + oH, *q = a->q + oQ, *k = a->k + oKV, *v = a->v + oKV;
    float *q_raw = a->q_raw + oQ, *k_raw = a->k_raw + oKV, *att = a->att + oQ;
    float *x_mid = a->x_mid + oH, *ln2 = a->ln2 + oH;
    float *gate = a->gate + oF, *up = a->up + oF, *act = a->act + oF;

    // attention: norm -> q/k/v -> per-head QK-norm -> RoPE -> causal GQA -> o_proj -> residual
    rmsnorm_forward(ln1, a->ln1_rstd + (size_t)s * N, x_in, w->ln1, N, H, c->norm_eps);
    a16_round(ln1, (size_t)N * H, m->a16);   // A16: the device's matmuls see 16-bit inputs and outputs
    matmul_forward_p(q_raw, ln1, w->wq, N, H, Q, p);
    matmul_forward_p(k_raw, ln1, w->wk, N, H, KV, p);
    matmul_forward_p(v, ln1, w->wv, N, H, KV, p);
    a16_round(q_raw, (size_t)N * Q, m->a16);
    a16_round(k_raw, (size_t)N * KV, m->a16);
    a16_round(v, (size_t)N * KV, m->a16);
    if (c->qk_norm) {
        rmsnorm_forward(q, a->q_rstd + (size_t)s * N * nq, q_raw, w->qnorm, N * nq, hd, c->norm_eps);
        rmsnorm_forward(k, a->k_rstd + (size_t)s * N * nkv, k_raw, w->knorm, N * nkv, hd, c->norm_eps);
    }
    rope_forward(q, &m->rope, pos, N, nq, hd);
    rope_forward(k, &m->rope, pos, N, nkv, hd);
    attention_forward(att, a->lse + (size_t)s * N * nq, q, k, v, seg, B, T, nq, nkv, hd, m->s.attention,
                      m->s.attention_floats);
    a16_round(att, (size_t)N * Q, m->a16);
    matmul_forward_p(m->s.tmp, att, w->wo, N, Q, H, p);
    a16_round(m->s.tmp, (size_t)N * H, m->a16);
    residual_forward(x_mid, x_in, m->s.tmp, (size_t)N * H);

    // MLP: norm -> gate/up -> SwiGLU -> down -> residual
    rmsnorm_forward(ln2, a->ln2_rstd + (size_t)s * N, x_mid, w->ln2, N, H, c->norm_eps);
    a16_round(ln2, (size_t)N * H, m->a16);
    matmul_forward_p(gate, ln2, w->wgate, N, H, F, p);
    matmul_forward_p(up, ln2, w->wup, N, H, F, p);
    a16_round(gate, (size_t)N * F, m->a16);
    a16_round(up, (size_t)N * F, m->a16);
    swiglu_forward(act, gate, up, (size_t)N * F);
    a16_round(act, (size_t)N * F, m->a16);
    if (!x_out) return;
    matmul_forward_p(m->s.tmp, act, w->wdown, N, F, H, p);
    a16_round(m->s.tmp, (size_t)N * H, m->a16);
    residual_forward(x_out, x_mid, m->s.tmp, (size_t)N * H);
}

// One decoder block, backward, from the activations in slot `sl`. On entry
// s.dx holds dL/dx[l+1]; on exit dL/dx[l].
static void block_backward(Model *m, int l, int sl, const int *pos, const int *seg) {
    const ModelConfig *c = &m->w.cfg;
    const LayerViews *w = &m->p.layer[l], *gw = &m->g.layer[l];
    Activations *a = &m->a;
    Scratch *s = &m->s;
    int B = m->B, T = m->T, N = B * T, H = c->d_model, F = c->d_ff, hd = c->head_dim;
    int nq = c->n_head, nkv = c->n_kv_head, Q = nq * hd, KV = nkv * hd;
    const MatmulPrecision p = precision(m);
    size_t oH = (size_t)sl * N * H, oQ = (size_t)sl * N * Q, oKV = (size_t)sl * N * KV, oF = (size_t)sl * N * F;
    size_t nNH = (size_t)N * H;

    // MLP (the residual passes dx through unchanged; the branch adds to it)
    memset(s->dact, 0, (size_t)N * F * sizeof(float));
    matmul_backward_p(s->dact, gw->wdown, s->dx, a->act + oF, w->wdown, N, F, H, p);
    memset(s->dgate, 0, (size_t)N * F * sizeof(float));
    memset(s->dup, 0, (size_t)N * F * sizeof(float));
    swiglu_backward(s->dgate, s->dup, s->dact, a->gate + oF, a->up + oF, (size_t)N * F);
    memset(s->dln, 0, nNH * sizeof(float));
    matmul_backward_p(s->dln, gw->wgate, s->dgate, a->ln2 + oH, w->wgate, N, H, F, p);
    matmul_backward_p(s->dln, gw->wup, s->dup, a->ln2 + oH, w->wup, N, H, F, p);
    rmsnorm_backward(s->dx, gw->ln2, s->dln, a->x_mid + oH, w->ln2, a->ln2_rstd + (size_t)sl * N, N, H);

    // attention
    memset(s->datt, 0, (size_t)N * Q * sizeof(float));
    matmul_backward_p(s->datt, gw->wo, s->dx, a->att + oQ, w->wo, N, Q, H, p);
    memset(s->dq, 0, (size_t)N * Q * sizeof(float));
    memset(s->dk, 0, (size_t)N * KV * sizeof(float));
    memset(s->dv, 0, (size_t)N * KV * sizeof(float));
    attention_backward(s->dq, s->dk, s->dv, s->datt, a->att + oQ, a->lse + (size_t)sl * N * nq, a->q + oQ,
                       a->k + oKV, a->v + oKV, seg, B, T, nq, nkv, hd, s->attention, s->attention_floats);
    rope_backward(s->dq, &m->rope, pos, N, nq, hd);
    rope_backward(s->dk, &m->rope, pos, N, nkv, hd);
    if (c->qk_norm) {
        memset(s->dq_raw, 0, (size_t)N * Q * sizeof(float));
        memset(s->dk_raw, 0, (size_t)N * KV * sizeof(float));
        rmsnorm_backward(s->dq_raw, gw->qnorm, s->dq, a->q_raw + oQ, w->qnorm, a->q_rstd + (size_t)sl * N * nq,
                         N * nq, hd);
        rmsnorm_backward(s->dk_raw, gw->knorm, s->dk, a->k_raw + oKV, w->knorm, a->k_rstd + (size_t)sl * N * nkv,
                         N * nkv, hd);
    }
    memset(s->dln, 0, nNH * sizeof(float));
    matmul_backward_p(s->dln, gw->wq, s->dq_raw, a->ln1 + oH, w->wq, N, H, Q, p);
    matmul_backward_p(s->dln, gw->wk, s->dk_raw, a->ln1 + oH, w->wk, N, H, KV, p);
    matmul_backward_p(s->dln, gw->wv, s->dv, a->ln1 + oH, w->wv, N, H, KV, p);
    rmsnorm_backward(s->dx, gw->ln1, s->dln, a->x + (size_t)l * nNH, w->ln1, a->ln1_rstd + (size_t)sl * N, N, H);
}

static double run(Model *m, const ModelInput *in, int backward, float grad_scale, float *logits_out, int *count) {
    if (in->B != m->B || in->T != m->T) die("model_forward: batch %dx%d does not match the plan %dx%d", in->B, in->T, m->B, m->T);
    if (backward && !m->training) die("model_forward_backward: the model was planned for inference");
    const ModelConfig *c = &m->w.cfg;
    int N = m->B * m->T, H = c->d_model, L = c->n_layer;
    size_t nNH = (size_t)N * H;
    int *owned_pos;
    const int *pos = positions(m, in, &owned_pos);
    Activations *a = &m->a;

    embedding_forward(a->x, in->tokens, m->p.embed, N, H);
    for (int l = 0; l < L; l++) {
        // training keeps every layer's input; inference ping-pongs two buffers
        float *x_in = m->training ? a->x + (size_t)l * nNH : a->x + (size_t)(l & 1) * nNH;
        float *x_out = m->training ? a->x + (size_t)(l + 1) * nNH : a->x + (size_t)((l + 1) & 1) * nNH;
        block_forward(m, l, slot(m, l), pos, in->seg, x_in, x_out);
    }
    float *x_last = m->training ? a->x + (size_t)L * nNH : a->x + (size_t)(L & 1) * nNH;
    rmsnorm_forward(a->lnf, a->lnf_rstd, x_last, m->p.lnf, N, H, c->norm_eps);

    double loss = 0;
    int counted = 0;
    if (in->targets || logits_out) {
        int *no_targets = NULL;
        const int *targets = in->targets;
        if (!targets) {   // logits only: every position uncounted
            no_targets = xmalloc((size_t)N * sizeof(int), "targets");
            for (int i = 0; i < N; i++) no_targets[i] = -1;
            targets = no_targets;
        }
        float *dh = backward ? m->s.dx : NULL;
        if (backward) memset(dh, 0, nNH * sizeof(float));
        loss = classifier_forward_backward_p(dh, backward ? m->g.lm_head : NULL, logits_out, m->s.classifier,
                                             m->classifier_chunk, a->lnf, m->p.lm_head, targets, in->mask, N, H,
                                             c->vocab_size, grad_scale, &counted, precision(m));
        free(no_targets);
    }
    if (backward) {
        // final norm: dx currently holds dL/d(lnf); turn it into dL/dx[L]
        memcpy(m->s.dln, m->s.dx, nNH * sizeof(float));
        memset(m->s.dx, 0, nNH * sizeof(float));
        rmsnorm_backward(m->s.dx, m->g.lnf, m->s.dln, x_last, m->p.lnf, a->lnf_rstd, N, H);
        for (int l = L - 1; l >= 0; l--) {
            // The slot still holds the last layer from the forward; every
            // other layer is rebuilt from its saved input.
            if (m->recompute && l < L - 1) block_forward(m, l, 0, pos, in->seg, a->x + (size_t)l * nNH, NULL);
            block_backward(m, l, slot(m, l), pos, in->seg);
        }
        embedding_backward(m->g.embed, m->s.dx, in->tokens, N, H, c->pad_id);
    }
    free(owned_pos);
    if (count) *count = counted;
    return loss;
}

double model_forward(Model *m, const ModelInput *in, float *logits_out, int *count) {
    return run(m, in, 0, 0.0f, logits_out, count);
}

double model_forward_backward(Model *m, const ModelInput *in, float grad_scale, float *logits_out, int *count) {
    return run(m, in, 1, grad_scale, logits_out, count);
}
