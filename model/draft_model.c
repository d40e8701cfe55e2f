// draft_model.c: the DFlash draft's pass (draft.h), top to bottom: the
// context (fc, hidden_norm, each layer's K and V of it), the block rows
// through the layers, the final norm and the target's lm_head with the
// position-weighted loss; then the backward in reverse. Every op goes
// through the device's backend, as model.c's do.
#include "draft.h"
#include <string.h>
#include "arena.h"

void draft_model_init(DraftModel *dm, Device *dev, const ModelConfig *tc, const DraftConfig *dc,
                      const TensorTable *tt, float *weights, const float *embed, const float *lm_head,
                      MatmulPrecision p) {
    memset(dm, 0, sizeof *dm);
    dm->dev = dev;
    dm->tc = *tc;
    dm->dc = *dc;
    dm->tt = tt;
    dm->weights = weights;
    draft_views(&dm->w, tt, weights);
    dm->embed = embed;
    dm->lm_head = lm_head;
    dm->n_out = tc->vocab_size;
    dm->target_head = lm_head;
    dm->matmul = p;
    // Block rows reach DRAFT_MAX_BLOCK positions past the last context row.
    rope_table_init(&dm->rope, dev, tc->max_seq + DRAFT_MAX_BLOCK, tc->head_dim, tc->rope_theta);
}

// draft_forward_greedy's logits of a block position: made at its first call,
// for the plan and vocabulary then in force.
static void release_greedy_logits(DraftModel *dm) {
    if (dm->host_logits != dm->pos_logits) free(dm->host_logits);
    if (dm->pos_logits) dm->dev->be->release(dm->dev, dm->pos_logits);
    dm->pos_logits = dm->host_logits = NULL;
}

void draft_model_use_vocab(DraftModel *dm, const int *ids, int n) {
    Device *d = dm->dev;
    release_greedy_logits(dm);
    const int H = dm->tc.d_model;
    if (dm->vocab_head) d->be->release(d, dm->vocab_head);
    dm->vocab_head = n ? d->be->alloc(d, (size_t)n * H * sizeof(float), "the draft vocabulary's lm_head rows") : NULL;
    for (int k = 0; k < n; k++)
        OP(d, copy, dm->vocab_head + (size_t)k * H, dm->target_head + (size_t)ids[k] * H, (size_t)H * sizeof(float));
    dm->lm_head = n ? dm->vocab_head : dm->target_head;
    dm->n_out = n ? n : dm->tc.vocab_size;
}

void draft_model_free(DraftModel *dm) {
    Device *d = dm->dev;
    if (!d) return;
    if (dm->arena) d->be->release(d, dm->arena);
    if (dm->own_grads) d->be->release(d, dm->own_grads);
    if (dm->vocab_head) d->be->release(d, dm->vocab_head);
    release_greedy_logits(dm);
    rope_table_free(&dm->rope, d);
    free(dm->host_pos);
    memset(dm, 0, sizeof *dm);
}

void draft_model_use_grads(DraftModel *dm, float *grads) {
    dm->grads = grads ? grads : dm->own_grads;
    draft_views(&dm->g, dm->tt, dm->grads);
}

void draft_zero_grads(DraftModel *dm) { OP(dm->dev, zero, dm->grads, dm->tt->total * sizeof(float)); }

static void plan_buffers(DraftModel *dm, Carver *c) {
    const ModelConfig *tc = &dm->tc;
    const size_t NC = (size_t)dm->B * dm->T, R = (size_t)dm->dc.block * dm->B * dm->A, H = tc->d_model;
    const size_t Q = (size_t)tc->n_head * tc->head_dim, KV = (size_t)tc->n_kv_head * tc->head_dim, F = dm->dc.d_ff;
    const size_t nq = tc->n_head, nkv = tc->n_kv_head, L = dm->dc.n_layer;
    dm->ctx_pre = carve_floats(c, NC * H);
    dm->ctx = carve_floats(c, NC * H);
    dm->ctx_rstd = carve_floats(c, NC);
    dm->x = carve_floats(c, (L + 1) * R * H);
    for (size_t l = 0; l < L; l++) {
        DraftLayerActs *a = &dm->layer[l];
        a->kc_raw = carve_floats(c, NC * KV);
        a->kc = carve_floats(c, NC * KV);
        a->kc_rstd = carve_floats(c, NC * nkv);
        a->vc = carve_floats(c, NC * KV);
        a->ln1 = carve_floats(c, R * H);
        a->ln1_rstd = carve_floats(c, R);
        a->q_raw = carve_floats(c, R * Q);
        a->q = carve_floats(c, R * Q);
        a->q_rstd = carve_floats(c, R * nq);
        a->kb_raw = carve_floats(c, R * KV);
        a->kb = carve_floats(c, R * KV);
        a->kb_rstd = carve_floats(c, R * nkv);
        a->vb = carve_floats(c, R * KV);
        a->att = carve_floats(c, R * Q);
        a->lse = carve_floats(c, R * nq);
        a->x_mid = carve_floats(c, R * H);
        a->ln2 = carve_floats(c, R * H);
        a->ln2_rstd = carve_floats(c, R);
        a->gate = carve_floats(c, R * F);
        a->up = carve_floats(c, R * F);
        a->act = carve_floats(c, R * F);
    }
    dm->proj = carve_floats(c, R * H);
    dm->lnf = carve_floats(c, R * H);
    dm->lnf_rstd = carve_floats(c, R);
    dm->tokens = (int *)carve_floats(c, R);
    dm->targets = (int *)carve_floats(c, R);
    dm->pos_blk = (int *)carve_floats(c, R);
    dm->anchors = (int *)carve_floats(c, (size_t)dm->B * dm->A);
    dm->ctx_lo = (int *)carve_floats(c, (size_t)dm->B * dm->A);
    dm->pos_ctx = (int *)carve_floats(c, NC);
    if (!dm->training) return;
    dm->dx = carve_floats(c, R * H);
    dm->dln = carve_floats(c, R * H);
    dm->dq = carve_floats(c, R * Q);
    dm->dq_raw = carve_floats(c, R * Q);
    dm->dkb = carve_floats(c, R * KV);
    dm->dkb_raw = carve_floats(c, R * KV);
    dm->dvb = carve_floats(c, R * KV);
    dm->datt = carve_floats(c, R * Q);
    dm->dgate = carve_floats(c, R * F);
    dm->dup = carve_floats(c, R * F);
    dm->dact = carve_floats(c, R * F);
    dm->dctx = carve_floats(c, NC * H);
    dm->dctx_pre = carve_floats(c, NC * H);
    dm->dkc = carve_floats(c, NC * KV);
    dm->dkc_raw = carve_floats(c, NC * KV);
    dm->dvc = carve_floats(c, NC * KV);
}

int draft_model_plan(DraftModel *dm, int B, int T, int A, int training, PtError *e) {
    Device *d = dm->dev;
    if (!d->be->draft_attention_forward)
        return pt_fail(e, "the %s backend has no kernel for the draft's attention yet: run the draft on the CPU",
                       d->be->name);
    if (B < 1 || T < 1 || A < 1 || T > dm->tc.max_seq)
        return pt_fail(e, "draft plan: %d sequences of %d context rows with %d blocks each (the target's context is "
                       "%d)", B, T, A, dm->tc.max_seq);
    if (dm->arena) d->be->release(d, dm->arena);
    free(dm->host_pos);
    release_greedy_logits(dm);
    dm->B = B;
    dm->T = T;
    dm->A = A;
    dm->training = training;
    Carver c = {NULL, 0};
    plan_buffers(dm, &c);
    dm->arena = d->be->alloc(d, c.used, "draft activations");
    c.base = dm->arena;
    c.used = 0;
    plan_buffers(dm, &c);
    const int R = dm->dc.block * B * A, NC = B * T, most = R > NC ? R : NC;
    dm->host_pos = xmalloc((size_t)most * sizeof(int), "draft positions");
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) dm->host_pos[b * T + t] = t;
    OP(d, upload, dm->pos_ctx, dm->host_pos, (size_t)NC * sizeof(int));
    if (training && !dm->own_grads) {
        dm->own_grads = d->be->alloc(d, dm->tt->total * sizeof(float), "draft gradients");
        draft_model_use_grads(dm, NULL);
    }
    // The ops' workspace: the draft's widest input is fc's (n_target * H).
    ModelConfig wc = dm->tc;
    wc.n_layer = dm->dc.n_layer;
    wc.d_ff = dm->dc.d_ff > dm->dc.n_target * wc.d_model ? dm->dc.d_ff : dm->dc.n_target * wc.d_model;
    dev_reserve(d, d->be->workspace_bytes(d, &wc, 1, most, dm->tt->total));
    return 0;
}

// The context rows [r0, r0 + n): fc, hidden_norm, and every layer's K and V of them.
static void context_forward(DraftModel *dm, const float *captures, int r0, int n) {
    Device *d = dm->dev;
    const ModelConfig *tc = &dm->tc;
    const int H = tc->d_model, W = dm->dc.n_target * H, hd = tc->head_dim, nkv = tc->n_kv_head, KV = nkv * hd;
    const MatmulPrecision p = dm->matmul;
    float *ctx = dm->ctx + (size_t)r0 * H;
    OP(d, matmul_forward, dm->ctx_pre + (size_t)r0 * H, captures + (size_t)r0 * W, dm->w.fc, n, W, H, p);
    OP(d, rmsnorm_forward, ctx, dm->ctx_rstd + r0, dm->ctx_pre + (size_t)r0 * H, dm->w.hidden_norm, n, H,
       tc->norm_eps);
    for (int l = 0; l < dm->dc.n_layer; l++) {
        const LayerViews *w = &dm->w.layer[l];
        DraftLayerActs *a = &dm->layer[l];
        const size_t o = (size_t)r0 * KV;
        OP(d, matmul_forward, a->kc_raw + o, ctx, w->wk, n, H, KV, p);
        OP(d, matmul_forward, a->vc + o, ctx, w->wv, n, H, KV, p);
        OP(d, rmsnorm_forward, a->kc + o, a->kc_rstd + (size_t)r0 * nkv, a->kc_raw + o, w->knorm, n * nkv, hd,
           tc->norm_eps);
        OP(d, rope_forward, a->kc + o, &dm->rope, dm->pos_ctx + r0, n, nkv, hd);
    }
}

// One draft layer over the block rows: x_in -> x_out.
static void layer_forward(DraftModel *dm, int l, const float *x_in, float *x_out) {
    Device *d = dm->dev;
    const ModelConfig *tc = &dm->tc;
    const LayerViews *w = &dm->w.layer[l];
    DraftLayerActs *a = &dm->layer[l];
    const int R = dm->dc.block * dm->B * dm->A, H = tc->d_model, F = dm->dc.d_ff, hd = tc->head_dim;
    const int nq = tc->n_head, nkv = tc->n_kv_head, Q = nq * hd, KV = nkv * hd;
    const MatmulPrecision p = dm->matmul;
    // attention: the block rows ask (q), the context and the block rows answer (k, v)
    OP(d, rmsnorm_forward, a->ln1, a->ln1_rstd, x_in, w->ln1, R, H, tc->norm_eps);
    OP(d, matmul_forward, a->q_raw, a->ln1, w->wq, R, H, Q, p);
    OP(d, matmul_forward, a->kb_raw, a->ln1, w->wk, R, H, KV, p);
    OP(d, matmul_forward, a->vb, a->ln1, w->wv, R, H, KV, p);
    OP(d, rmsnorm_forward, a->q, a->q_rstd, a->q_raw, w->qnorm, R * nq, hd, tc->norm_eps);
    OP(d, rmsnorm_forward, a->kb, a->kb_rstd, a->kb_raw, w->knorm, R * nkv, hd, tc->norm_eps);
    OP(d, rope_forward, a->q, &dm->rope, dm->pos_blk, R, nq, hd);
    OP(d, rope_forward, a->kb, &dm->rope, dm->pos_blk, R, nkv, hd);
    OP(d, draft_attention_forward, a->att, a->lse, a->q, a->kc, a->vc, a->kb, a->vb, dm->anchors, dm->ctx_lo, dm->B,
       dm->T, dm->A, dm->dc.block, nq, nkv, hd);
    OP(d, matmul_forward, dm->proj, a->att, w->wo, R, Q, H, p);
    OP(d, residual_forward, a->x_mid, x_in, dm->proj, (size_t)R * H);
    // MLP
    OP(d, rmsnorm_forward, a->ln2, a->ln2_rstd, a->x_mid, w->ln2, R, H, tc->norm_eps);
    OP(d, matmul_forward, a->gate, a->ln2, w->wgate, R, H, F, p);
    OP(d, matmul_forward, a->up, a->ln2, w->wup, R, H, F, p);
    OP(d, swiglu_forward, a->act, a->gate, a->up, (size_t)R * F);
    OP(d, matmul_forward, dm->proj, a->act, w->wdown, R, F, H, p);
    OP(d, residual_forward, x_out, a->x_mid, dm->proj, (size_t)R * H);
}

// One draft layer, backward: on entry dm->dx holds dL/d(x_out); on exit
// dL/d(x_in); the context's gradient is added to dm->dctx.
static void layer_backward(DraftModel *dm, int l, const float *x_in) {
    Device *d = dm->dev;
    const ModelConfig *tc = &dm->tc;
    const LayerViews *w = &dm->w.layer[l], *gw = &dm->g.layer[l];
    DraftLayerActs *a = &dm->layer[l];
    const int R = dm->dc.block * dm->B * dm->A, NC = dm->B * dm->T, H = tc->d_model, F = dm->dc.d_ff;
    const int hd = tc->head_dim, nq = tc->n_head, nkv = tc->n_kv_head, Q = nq * hd, KV = nkv * hd;
    const MatmulPrecision p = dm->matmul;
    const size_t fl = sizeof(float);
    // MLP (the residual passes dx through; the branch adds to it)
    OP(d, zero, dm->dact, (size_t)R * F * fl);
    OP(d, matmul_backward, dm->dact, gw->wdown, dm->dx, a->act, w->wdown, R, F, H, p);
    OP(d, zero, dm->dgate, (size_t)R * F * fl);
    OP(d, zero, dm->dup, (size_t)R * F * fl);
    OP(d, swiglu_backward, dm->dgate, dm->dup, dm->dact, a->gate, a->up, (size_t)R * F);
    OP(d, zero, dm->dln, (size_t)R * H * fl);
    OP(d, matmul_backward, dm->dln, gw->wgate, dm->dgate, a->ln2, w->wgate, R, H, F, p);
    OP(d, matmul_backward, dm->dln, gw->wup, dm->dup, a->ln2, w->wup, R, H, F, p);
    OP(d, rmsnorm_backward, dm->dx, gw->ln2, dm->dln, a->x_mid, w->ln2, a->ln2_rstd, R, H);
    // attention
    OP(d, zero, dm->datt, (size_t)R * Q * fl);
    OP(d, matmul_backward, dm->datt, gw->wo, dm->dx, a->att, w->wo, R, Q, H, p);
    OP(d, zero, dm->dq, (size_t)R * Q * fl);
    OP(d, zero, dm->dkb, (size_t)R * KV * fl);
    OP(d, zero, dm->dvb, (size_t)R * KV * fl);
    OP(d, zero, dm->dkc, (size_t)NC * KV * fl);
    OP(d, zero, dm->dvc, (size_t)NC * KV * fl);
    OP(d, draft_attention_backward, dm->dq, dm->dkc, dm->dvc, dm->dkb, dm->dvb, dm->datt, a->att, a->lse, a->q, a->kc,
       a->vc, a->kb, a->vb, dm->anchors, dm->ctx_lo, dm->B, dm->T, dm->A, dm->dc.block, nq, nkv, hd);
    OP(d, rope_backward, dm->dq, &dm->rope, dm->pos_blk, R, nq, hd);
    OP(d, rope_backward, dm->dkb, &dm->rope, dm->pos_blk, R, nkv, hd);
    OP(d, rope_backward, dm->dkc, &dm->rope, dm->pos_ctx, NC, nkv, hd);
    OP(d, zero, dm->dq_raw, (size_t)R * Q * fl);
    OP(d, zero, dm->dkb_raw, (size_t)R * KV * fl);
    OP(d, zero, dm->dkc_raw, (size_t)NC * KV * fl);
    OP(d, rmsnorm_backward, dm->dq_raw, gw->qnorm, dm->dq, a->q_raw, w->qnorm, a->q_rstd, R * nq, hd);
    OP(d, rmsnorm_backward, dm->dkb_raw, gw->knorm, dm->dkb, a->kb_raw, w->knorm, a->kb_rstd, R * nkv, hd);
    OP(d, rmsnorm_backward, dm->dkc_raw, gw->knorm, dm->dkc, a->kc_raw, w->knorm, a->kc_rstd, NC * nkv, hd);
    OP(d, zero, dm->dln, (size_t)R * H * fl);
    OP(d, matmul_backward, dm->dln, gw->wq, dm->dq_raw, a->ln1, w->wq, R, H, Q, p);
    OP(d, matmul_backward, dm->dln, gw->wk, dm->dkb_raw, a->ln1, w->wk, R, H, KV, p);
    OP(d, matmul_backward, dm->dln, gw->wv, dm->dvb, a->ln1, w->wv, R, H, KV, p);
    OP(d, matmul_backward, dm->dctx, gw->wk, dm->dkc_raw, dm->ctx, w->wk, NC, H, KV, p);
    OP(d, matmul_backward, dm->dctx, gw->wv, dm->dvc, dm->ctx, w->wv, NC, H, KV, p);
    OP(d, rmsnorm_backward, dm->dx, gw->ln1, dm->dln, x_in, w->ln1, a->ln1_rstd, R, H);
}

// Uploads the pass's block tokens, anchors, positions and targets.
static void upload_input(DraftModel *dm, const DraftInput *in) {
    Device *d = dm->dev;
    const int S = dm->B * dm->A, R = dm->dc.block * S;
    for (int i = 0; i < dm->dc.block; i++)
        for (int s = 0; s < S; s++) dm->host_pos[i * S + s] = in->anchors[s] + i;
    OP(d, upload, dm->pos_blk, dm->host_pos, (size_t)R * sizeof(int));
    OP(d, upload, dm->tokens, in->block_tokens, (size_t)R * sizeof(int));
    OP(d, upload, dm->anchors, in->anchors, (size_t)S * sizeof(int));
    if (in->ctx_lo) OP(d, upload, dm->ctx_lo, in->ctx_lo, (size_t)S * sizeof(int));
    else OP(d, zero, dm->ctx_lo, (size_t)S * sizeof(int));
    if (in->targets) OP(d, upload, dm->targets, in->targets, (size_t)R * sizeof(int));
    for (int s = 0; s < S; s++)
        if (in->anchors[s] < 0 || in->anchors[s] + dm->dc.block > dm->rope.max_pos)
            die("draft_forward: block %d at position %d is outside the positions %d", s, in->anchors[s],
                dm->rope.max_pos);
}

// The greedy column of each of the n rows of z [n, V] (the lower on ties, as decoding picks).
static void argmax_rows(const float *z, int n, int V, int *out) {
    for (int r = 0; r < n; r++, z += V) {
        int best = 0;
        for (int k = 1; k < V; k++)
            if (z[k] > z[best]) best = k;
        out[r] = best;
    }
}

static double run(DraftModel *dm, const float *captures, const DraftInput *in, int backward, float grad_scale,
                  float *logits_out, int *greedy, double *weight) {
    Device *d = dm->dev;
    const ModelConfig *tc = &dm->tc;
    const int B = dm->B, T = dm->T, S = B * dm->A, blk = dm->dc.block, R = blk * S, H = tc->d_model;
    const int V = dm->n_out, L = dm->dc.n_layer;
    if (backward && !dm->training) die("draft_forward_backward: the draft was planned for inference");
    if (backward && greedy) die("draft_forward: greedy tokens are for evaluation, without a backward");
    const int c1 = in->ctx_rows ? in->ctx_rows : T, c0 = in->ctx_from;
    if (c0 < 0 || c0 > c1 || c1 > T || (B > 1 && (c0 || c1 != T)) || (backward && (c0 || c1 != T)))
        die("draft_forward: context rows %d..%d of %d (partial contexts: one sequence, no backward)", c0, c1, T);
    upload_input(dm, in);
    if (c1 > c0) context_forward(dm, captures, B > 1 ? 0 : c0, B > 1 ? B * T : c1 - c0);
    OP(d, embedding_forward, dm->x, dm->tokens, dm->embed, R, H);
    for (int l = 0; l < L; l++) layer_forward(dm, l, dm->x + (size_t)l * R * H, dm->x + (size_t)(l + 1) * R * H);
    const float *x_last = dm->x + (size_t)L * R * H;
    OP(d, rmsnorm_forward, dm->lnf, dm->lnf_rstd, x_last, dm->w.norm, R, H, tc->norm_eps);

    // The loss, one block position at a time (its rows are contiguous),
    // weighted: the cross-entropy (classifier), or with a mix's KL term the
    // distillation op, whose teacher is the target's hidden states at those
    // rows through the same lm_head.
    const DraftLossMix *mix = in->targets ? in->mix : NULL;
    const float ce_w = mix ? mix->ce_weight : 1.0f;
    const int with_kl = mix && mix->kl_weight > 0;
    double loss = 0, wsum = 0;
    dm->ce_sum = dm->kl_sum = 0;
    if (backward) OP(d, zero, dm->dln, (size_t)R * H * sizeof(float));
    if (greedy && !dm->pos_logits) {   // one block position's logits at a time, not the whole block's
        dm->pos_logits = d->be->alloc(d, (size_t)S * V * sizeof(float), "draft logits of a block position");
        dm->host_logits = d->be->host_memory ? dm->pos_logits : xmalloc((size_t)S * V * sizeof(float), "draft logits");
    }
    for (int s = 0; greedy && s < S; s++) greedy[s] = -1;   // position 0 is given
    for (int i = 0; i < blk; i++) {
        const size_t r0 = (size_t)i * S;
        const float *h = dm->lnf + r0 * H;
        // where this position's logits go: the caller's, or the greedy tokens' (evaluation has no backward)
        float *z = logits_out ? logits_out + r0 * V : greedy && i > 0 ? dm->pos_logits : NULL;
        const int has_loss = in->targets && i > 0 && in->pos_weight[i] > 0;
        int count = 0;
        const float wi = has_loss ? in->pos_weight[i] : 0.0f;
        float *dh = backward && has_loss ? dm->dln + r0 * H : NULL;
        if (has_loss && with_kl) {
            const DistillTarget t = {.ce_weight = ce_w, .kd_weight = mix->kl_weight, .temperature = 1.0f,
                                     .h = mix->target_h + r0 * H, .W = dm->lm_head};
            DistillSums parts;
            loss += wi * OP(d, classifier_distill, dh, NULL, h, dm->lm_head, dm->targets + r0, NULL, S, H, V,
                            grad_scale * wi, &t, &parts, &count, dm->matmul);
            dm->ce_sum += wi * parts.ce;
            dm->kl_sum += wi * parts.kl;
            // the distillation op gives no logits: the lm_head once more
            if (z) OP(d, classifier, NULL, NULL, z, h, dm->lm_head, NULL, NULL, S, H, V, 0.0f, NULL, dm->matmul);
        } else if (has_loss || z) {
            const double ce = OP(d, classifier, dh, NULL, z, h, dm->lm_head, has_loss ? dm->targets + r0 : NULL, NULL,
                                 S, H, V, grad_scale * wi * ce_w, &count, dm->matmul);
            loss += wi * ce_w * ce;
            dm->ce_sum += wi * ce;
        }
        wsum += has_loss ? (double)wi * count : 0;
        if (greedy && i > 0) {
            if (z != dm->host_logits) OP(d, download, dm->host_logits, z, (size_t)S * V * sizeof(float));
            argmax_rows(dm->host_logits, S, V, greedy + r0);
        }
    }
    if (weight) *weight = wsum;
    if (!backward) return loss;

    // final norm, the layers in reverse, the context's norm and fc (the target and its embedding are frozen)
    OP(d, zero, dm->dx, (size_t)R * H * sizeof(float));
    OP(d, rmsnorm_backward, dm->dx, dm->g.norm, dm->dln, x_last, dm->w.norm, dm->lnf_rstd, R, H);
    OP(d, zero, dm->dctx, (size_t)B * T * H * sizeof(float));
    for (int l = L - 1; l >= 0; l--) layer_backward(dm, l, dm->x + (size_t)l * R * H);
    OP(d, zero, dm->dctx_pre, (size_t)B * T * H * sizeof(float));
    OP(d, rmsnorm_backward, dm->dctx_pre, dm->g.hidden_norm, dm->dctx, dm->ctx_pre, dm->w.hidden_norm, dm->ctx_rstd,
       B * T, H);
    OP(d, matmul_backward, NULL, dm->g.fc, dm->dctx_pre, captures, dm->w.fc, B * T, dm->dc.n_target * H, H,
       dm->matmul);
    return loss;
}

double draft_forward(DraftModel *dm, const float *captures, const DraftInput *in, float *logits_out,
                     double *weight) {
    return run(dm, captures, in, 0, 0.0f, logits_out, NULL, weight);
}

double draft_forward_greedy(DraftModel *dm, const float *captures, const DraftInput *in, int *greedy,
                            double *weight) {
    return run(dm, captures, in, 0, 0.0f, NULL, greedy, weight);
}

double draft_forward_backward(DraftModel *dm, const float *captures, const DraftInput *in, float grad_scale,
                              double *weight) {
    return run(dm, captures, in, 1, grad_scale, NULL, NULL, weight);
}

void draft_acceptance(const int *greedy, const int *targets, int blk, int S, double *reached, double *blocks) {
    for (int s = 0; s < S; s++) {
        if (targets[S + s] < 0) continue;
        *blocks += 1;
        for (int i = 1; i < blk; i++) {
            const size_t r = (size_t)i * S + s;
            if (targets[r] < 0 || greedy[r] != targets[r]) break;
            reached[i] += 1;
        }
    }
}
