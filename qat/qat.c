// qat.c: QAT state over the tensor table, its per-step work through the
// device (fake-quant, STE/LSQ backward, the scale Adam) and the QAT run (qat.h).
#include "qat.h"
#include <math.h>
#include <string.h>

#define F16_MAX 65504.0f

static int is_quantized(const TensorInfo *t, int quant_embedding) {
    if (t->ndim != 2) return 0;
    return (t->flags & TF_QUANT) || (quant_embedding && (t->flags & TF_EMBED));
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// A group that leaves a shorter last group in some row: MNN's int4 layout has
// one block size per matrix (the runtime takes it as input columns / blocks,
// and MNN's own exporter halves its block until it divides), so such a
// matrix cannot be shipped. The error lists the groups that fit every matrix.
static int ragged_group(const TensorTable *tt, const QuantSpec *spec, int quant_embedding, const char *src,
                        PtError *e) {
    int64_t g = 0;
    const TensorInfo *bad = NULL;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        if (!is_quantized(ti, quant_embedding) || ti->shape[1] <= 0) continue;
        g = gcd64(g, ti->shape[1]);
        if (!bad && ti->shape[1] % spec->group) bad = ti;
    }
    if (!bad) return 0;
    char fits[256] = "";
    size_t len = 0;
    for (int64_t d = 2; d <= g && len + 16 < sizeof fits; d += 2)
        if (g % d == 0) len += (size_t)snprintf(fits + len, sizeof fits - len, "%s%lld", len ? ", " : "", (long long)d);
    return pt_fail(e, "%s: tensor %s: %lld input columns are not a multiple of the quantization group %d, and the MNN "
                      "int4 layout has one block size per matrix (no shorter last group); groups that divide every "
                      "quantized matrix of this model: %s", src, bad->name, (long long)bad->shape[1], spec->group,
                   len ? fits : "none (an odd column count)");
}

int qat_init(QatState *q, const TensorTable *tt, const QuantSpec *spec, int quant_embedding, int learn_scales,
             const char *src, PtError *e) {
    memset(q, 0, sizeof *q);
    if (spec->group >= 2 && spec->group % 2 == 0 && ragged_group(tt, spec, quant_embedding, src, e)) return -1;
    q->spec = *spec;
    q->quant_embedding = quant_embedding;
    q->t = xcalloc((size_t)tt->n + 1, sizeof(QatTensor), "qat tensors");
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        if (!is_quantized(ti, quant_embedding)) continue;
        char what[256];
        snprintf(what, sizeof what, "%s: tensor %s", src, ti->name);
        if (quant_check(spec, ti->shape[0], ti->shape[1], what, e)) {
            qat_free(q);
            return -1;
        }
        QatTensor *qt = &q->t[q->n++];
        qt->tensor = i;
        qt->rows = ti->shape[0];
        qt->cols = ti->shape[1];
        qt->offset = q->total;
        qt->n_groups = quant_n_groups(spec, qt->rows, qt->cols);
        q->total += qt->n_groups;
    }
    size_t n = q->total ? q->total : 1;
    q->scale = xcalloc(n, sizeof(float), "qat scale");
    q->zero = xcalloc(n, sizeof(float), "qat zero");
    if (learn_scales) qat_alloc_scale_training(q);
    return 0;
}

void qat_alloc_scale_training(QatState *q) {
    if (q->grad_scale) return;
    size_t n = q->total ? q->total : 1;
    q->grad_scale = xcalloc(n, sizeof(float), "qat scale grad");
    q->grad_zero = xcalloc(n, sizeof(float), "qat zero grad");
    q->m_scale = xcalloc(n, sizeof(float), "qat scale m");
    q->v_scale = xcalloc(n, sizeof(float), "qat scale v");
    q->m_zero = xcalloc(n, sizeof(float), "qat zero m");
    q->v_zero = xcalloc(n, sizeof(float), "qat zero v");
}

void qat_alloc_frozen(QatState *q) {
    if (!q->codes) q->codes = xmalloc(q->total ? q->total * (size_t)q->spec.group : 1, "frozen int4 codes");
    qat_alloc_scale_training(q);
}

// The scale/zero Adam starts over (fresh scales, or the freeze).
static void zero_scale_moments(QatState *q) {
    if (!q->m_scale) return;
    float *m[4] = {q->m_scale, q->v_scale, q->m_zero, q->v_zero};
    for (int i = 0; i < 4; i++) memset(m[i], 0, q->total * sizeof(float));
}

void qat_free(QatState *q) {
    free(q->t);
    free(q->scale);
    free(q->zero);
    free(q->grad_scale);
    free(q->grad_zero);
    free(q->m_scale);
    free(q->v_scale);
    free(q->m_zero);
    free(q->v_zero);
    free(q->codes);
    memset(q, 0, sizeof *q);
}

int qat_init_from_weights(QatState *q, const TensorTable *tt, const float *master, int method, double *sse_rtn,
                          double *sse_mse, const char *src, PtError *e) {
    double rtn_total = 0.0, mse_total = 0.0;
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        const TensorInfo *ti = &tt->t[qt->tensor];
        char what[256];
        snprintf(what, sizeof what, "%s: tensor %s", src, ti->name);
        const float *w = master + ti->offset;
        float *s = q->scale + qt->offset, *z = q->zero + qt->offset;
        int rc;
        if (method == QAT_INIT_MSE) {
            double a = 0.0, b = 0.0;
            rc = quant_init_mse(&q->spec, w, qt->rows, qt->cols, s, z, &a, &b, what, e);
            rtn_total += a;
            mse_total += b;
        } else {
            rc = quant_init_rtn(&q->spec, w, qt->rows, qt->cols, s, z, what, e);
        }
        if (rc) return -1;
    }
    zero_scale_moments(q);
    if (sse_rtn) *sse_rtn = rtn_total;
    if (sse_mse) *sse_mse = mse_total;
    return 0;
}

// The (row, group) arrays of a state: scale, zero, and the four moments (NULL when not learned).
static void entry_arrays(const QatState *q, float *arrays[6]) {
    float *a[6] = {q->scale, q->zero, q->m_scale, q->v_scale, q->m_zero, q->v_zero};
    memcpy(arrays, a, sizeof a);
}

int qat_take_vocab_rows(const QatState *in, const TensorTable *in_tt, const TensorTable *out_tt, const int *rows,
                        QatState *out, PtError *e) {
    if (qat_init(out, out_tt, &in->spec, in->quant_embedding, in->m_scale != NULL, "the pruned model", e)) return -1;
    if (in->codes) qat_alloc_frozen(out);
    float *from[6], *to[6];
    entry_arrays(in, from);
    entry_arrays(out, to);
    const size_t group = (size_t)in->spec.group;
    for (int i = 0; i < out->n; i++) {
        const QatTensor *a = &in->t[i], *b = &out->t[i];
        const TensorKind kind = in_tt->t[a->tensor].kind;
        const int vocab_rows = kind == T_EMBED || kind == T_LMHEAD;
        const size_t ng = (size_t)b->cols / group;
        for (int64_t r = 0; r < b->rows; r++) {
            int64_t src = vocab_rows ? rows[r] : r;
            for (int k = 0; k < 6; k++)
                if (to[k]) {
                    float *dst = to[k] + b->offset + (size_t)r * ng;
                    if (src >= 0) memcpy(dst, from[k] + a->offset + (size_t)src * ng, ng * sizeof(float));
                    else memset(dst, 0, ng * sizeof(float));
                }
            if (out->codes) {
                uint8_t *dst = out->codes + b->offset * group + (size_t)r * (size_t)b->cols;
                if (src >= 0) memcpy(dst, in->codes + a->offset * group + (size_t)src * (size_t)b->cols, (size_t)b->cols);
                else memset(dst, QUANT_CODE_MID, (size_t)b->cols);
            }
        }
    }
    return 0;
}

const QatTensor *qat_find(const QatState *q, int tensor) {
    for (int i = 0; i < q->n; i++)
        if (q->t[i].tensor == tensor) return &q->t[i];
    return NULL;
}

// The effective weights on device d, or (d NULL) on the host with the
// grid's own functions on `threads` threads.
static void effective_weights(Device *d, int threads, const QatState *q, const TensorTable *tt, const float *master,
                              float *effective) {
    // Unquantized tensors (norms, biases) are copied; the rest are written
    // whole by the fake-quant (copying all 1.2 GB of pocket-0.3b first cost a
    // tenth of the QAT step).
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        if (qat_find(q, i)) continue;
        if (d) OP(d, copy, effective + ti->offset, master + ti->offset, ti->numel * sizeof(float));
        else memcpy(effective + ti->offset, master + ti->offset, ti->numel * sizeof(float));
    }
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        const float *scale = q->scale + qt->offset, *zero = q->zero + qt->offset, *w = master + tt->t[qt->tensor].offset;
        float *out = effective + tt->t[qt->tensor].offset;
        if (q->codes && d) OP(d, quant_dequant, &q->spec, qat_codes_of(q, qt), qt->rows, qt->cols, scale, zero, out);
        else if (q->codes) quant_dequant(&q->spec, qat_codes_of(q, qt), qt->rows, qt->cols, scale, zero, out, threads);
        else if (d) OP(d, quant_fake, &q->spec, w, qt->rows, qt->cols, scale, zero, out);
        else quant_fake(&q->spec, w, qt->rows, qt->cols, scale, zero, out, threads);
    }
}

void qat_forward_weights(Device *d, const QatState *q, const TensorTable *tt, const float *master, float *effective) {
    effective_weights(d, 0, q, tt, master, effective);
}

void qat_host_weights(const QatState *q, const TensorTable *tt, const float *master, float *out, int threads) {
    effective_weights(NULL, threads, q, tt, master, out);
}

// The host part of the freeze: the codes from the masters, the moments reset.
static void freeze_codes(QatState *q, const TensorTable *tt, const float *master) {
    qat_alloc_frozen(q);
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        quant_codes(&q->spec, master + tt->t[qt->tensor].offset, qt->rows, qt->cols, q->scale + qt->offset,
                    q->zero + qt->offset, q->codes + qt->offset * (size_t)q->spec.group);
    }
    zero_scale_moments(q);
}

void qat_freeze(Device *d, QatState *q, const TensorTable *tt, float *master) {
    freeze_codes(q, tt, master);
    qat_frozen_sync(d, q, tt, master);
}

void qat_frozen_sync(Device *d, const QatState *q, const TensorTable *tt, float *master) {
    if (!q->codes) return;
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        OP(d, quant_dequant, &q->spec, qat_codes_of(q, qt), qt->rows, qt->cols, q->scale + qt->offset,
           q->zero + qt->offset, master + tt->t[qt->tensor].offset);
    }
}

void qat_backward(Device *d, QatState *q, const TensorTable *tt, const float *master, const float *grad_eff,
                  float *grad_master) {
    if (grad_master != grad_eff) OP(d, copy, grad_master, grad_eff, tt->total * sizeof(float));
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        size_t off = tt->t[qt->tensor].offset;
        float *gs = q->grad_scale ? q->grad_scale + qt->offset : NULL, *gz = q->grad_zero ? q->grad_zero + qt->offset : NULL;
        if (q->codes)
            OP(d, quant_backward_frozen, &q->spec, qat_codes_of(q, qt), grad_master + off, qt->rows, qt->cols, gs, gz);
        else
            OP(d, quant_backward, &q->spec, master + off, grad_master + off, qt->rows, qt->cols, q->scale + qt->offset,
               q->zero + qt->offset, gs, gz);
    }
}

void qat_step(Device *d, QatState *q, size_t lo, size_t hi, const AdamWConfig *c, float lr, long step) {
    if (!q->grad_scale || step < 1 || lo >= hi) return;
    OP(d, quant_adam, q->scale + lo, q->grad_scale + lo, q->m_scale + lo, q->v_scale + lo, hi - lo, c, lr, step, 0.0f,
       F16_MAX);
    if (!q->spec.symmetric)
        OP(d, quant_adam, q->zero + lo, q->grad_zero + lo, q->m_zero + lo, q->v_zero + lo, hi - lo, c, lr, step,
           -F16_MAX, F16_MAX);
}

// ---------------------------------------------------------------- the run

// ---------------------------------------------------------------- the run

// The arrays of a QatState the device holds a copy of, and their sizes.
enum { STATE_ARRAYS = 9 };
static void state_arrays(QatState *q, void **arrays[STATE_ARRAYS], size_t bytes[STATE_ARRAYS]) {
    void **p[STATE_ARRAYS] = {(void **)&q->scale,  (void **)&q->zero,    (void **)&q->grad_scale,
                              (void **)&q->grad_zero, (void **)&q->m_scale, (void **)&q->v_scale,
                              (void **)&q->m_zero, (void **)&q->v_zero,  (void **)&q->codes};
    for (int i = 0; i < STATE_ARRAYS; i++) {
        arrays[i] = p[i];
        bytes[i] = i < 8 ? q->total * sizeof(float) : q->total * (size_t)q->spec.group;
    }
}

void qat_run_upload(QatRun *run) {
    void **host[STATE_ARRAYS], **dev[STATE_ARRAYS];
    size_t bytes[STATE_ARRAYS];
    state_arrays(&run->q, host, bytes);
    state_arrays(&run->dq, dev, bytes);
    for (int i = 0; i < STATE_ARRAYS; i++) {
        if (!*host[i] && *dev[i]) {   // gone on the host (a frozen checkpoint's codes dropped)
            if (!run->dev->be->host_memory) run->dev->be->release(run->dev, *dev[i]);
            *dev[i] = NULL;
        } else if (*host[i] && !*dev[i]) {
            *dev[i] = dev_mirror(run->dev, *host[i], bytes[i], "QAT state");
        } else if (*host[i]) {
            OP(run->dev, upload, *dev[i], *host[i], bytes[i]);
        }
    }
}

void qat_run_download(QatRun *run) {
    void **host[STATE_ARRAYS], **dev[STATE_ARRAYS];
    size_t bytes[STATE_ARRAYS];
    state_arrays(&run->q, host, bytes);
    state_arrays(&run->dq, dev, bytes);
    for (int i = 0; i < STATE_ARRAYS; i++)
        if (*host[i] && *dev[i]) OP(run->dev, download, *host[i], *dev[i], bytes[i]);
}

int qat_run_init(QatRun *run, Device *d, const TensorTable *tt, const QatRunConfig *c, const AdamWConfig *adam,
                 FILE *log, const char *src, PtError *e) {
    memset(run, 0, sizeof *run);
    if (qat_init(&run->q, tt, &c->spec, c->quant_embedding, c->learn_scales, src, e)) return -1;
    run->cfg = *c;
    run->adam = *adam;
    run->dev = d;
    run->tt = tt;
    run->log = log;
    run->effective = d->be->alloc(d, tt->total * sizeof(float), "fake-quantized weights");
    run->hi = run->q.total;
    run->dq = run->q;   // the tensor list is shared; the arrays get device copies
    void **dev[STATE_ARRAYS];
    size_t bytes[STATE_ARRAYS];
    state_arrays(&run->dq, dev, bytes);
    for (int i = 0; i < STATE_ARRAYS; i++) *dev[i] = NULL;
    qat_run_upload(run);
    return 0;
}

void qat_run_free(QatRun *run) {
    if (run->effective) run->dev->be->release(run->dev, run->effective);
    void **host[STATE_ARRAYS], **dev[STATE_ARRAYS];
    size_t bytes[STATE_ARRAYS];
    state_arrays(&run->q, host, bytes);
    state_arrays(&run->dq, dev, bytes);
    for (int i = 0; i < STATE_ARRAYS; i++) dev_unmirror(run->dev, *dev[i], *host[i]);
    qat_free(&run->q);
    memset(run, 0, sizeof *run);
}

// The masters on the host, for the host steps (RTN init, freezing): the
// device's own buffer where it works in host memory, else a copy to free.
static float *host_masters(QatRun *run, float *master) {
    if (run->dev->be->host_memory) return master;
    float *copy = xmalloc(run->tt->total * sizeof(float), "masters on the host");
    OP(run->dev, download, copy, master, run->tt->total * sizeof(float));
    return copy;
}

int qat_run_active(const QatRun *run, long step) { return run->ready && step >= run->cfg.start_step; }

float *qat_run_weights(QatRun *run, long step, float *master, PtError *e) {
    const QatRunConfig *c = &run->cfg;
    if (step < c->start_step) return master;
    if (!run->ready) {
        float *host = host_masters(run, master);
        int rc = qat_init_from_weights(&run->q, run->tt, host, c->init, NULL, NULL, "qat", e);
        if (host != master) free(host);
        if (rc) return NULL;
        qat_run_upload(run);
        if (run->log)
            fprintf(run->log, "step %ld: QAT starts, int4 group %d %s, %s init of the scales\n", step, c->spec.group,
                c->spec.symmetric ? "symmetric" : "asymmetric", c->init == QAT_INIT_MSE ? "MSE" : "RTN");
        run->ready = 1;
    }
    if (c->freeze_codes_step >= 0 && step >= c->freeze_codes_step && !run->q.codes) {
        // From here the quantized master weights are the int4 model itself.
        float *host = host_masters(run, master);
        freeze_codes(&run->q, run->tt, host);
        if (host != master) free(host);
        qat_run_upload(run);
        qat_frozen_sync(run->dev, &run->dq, run->tt, master);
        if (run->log)
            fprintf(run->log, "step %ld: int4 codes frozen; training scales/zeros (lr %g) and unquantized tensors\n",
                step, (double)c->scale_lr);
    }
    qat_forward_weights(run->dev, &run->dq, run->tt, master, run->effective);
    return run->effective;
}

void qat_run_backward(QatRun *run, long step, const float *master, float *grads) {
    if (qat_run_active(run, step)) qat_backward(run->dev, &run->dq, run->tt, master, grads, grads);
}

int qat_run_update(QatRun *run, long step) {
    if (!qat_run_active(run, step) || !(run->cfg.learn_scales || run->q.codes)) return 0;
    // The scale Adam restarts at the freeze (qat_freeze zeroes its moments).
    long first = run->q.codes ? run->cfg.freeze_codes_step : run->cfg.start_step;
    qat_step(run->dev, &run->dq, run->lo, run->hi, &run->adam, run->cfg.scale_lr, step + 1 - first);
    return 1;
}

void qat_run_sync(QatRun *run, long step, float *master) {
    // Frozen: the quantized masters follow the scales (AdamW's momentum and
    // decay on their zero gradient are overwritten here).
    if (qat_run_active(run, step)) qat_frozen_sync(run->dev, &run->dq, run->tt, master);
}

// Where a packed tensor goes in the views: the projections by kind, the
// lm_head (the embedding, when tied) as the head.
static PackedWeight **packed_slot(PackedViews *pv, const TensorTable *tt, const TensorInfo *t) {
    PackedLayer *pl = t->layer >= 0 ? &pv->layer[t->layer] : NULL;
    switch (t->kind) {
    case T_WQ: return &pl->wq;
    case T_WK: return &pl->wk;
    case T_WV: return &pl->wv;
    case T_WO: return &pl->wo;
    case T_WGATE: return &pl->wgate;
    case T_WUP: return &pl->wup;
    case T_WDOWN: return &pl->wdown;
    case T_LMHEAD: return &pv->lm_head;
    case T_EMBED: return tt->tied ? &pv->lm_head : NULL;
    default: return NULL;
    }
}

void qat_pack(Device *d, const QatState *q, const TensorTable *tt, const float *master, PackedViews *pv) {
    memset(pv, 0, sizeof *pv);
    if (!d->be->pack_int4) return;
    uint8_t *codes = NULL;
    size_t cap = 0;
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        const TensorInfo *t = &tt->t[qt->tensor];
        PackedWeight **slot = packed_slot(pv, tt, t);
        if (!slot) continue;
        const uint8_t *c = qat_codes_of(q, qt);
        if (!c) {
            if (t->numel > cap) {
                free(codes);
                cap = t->numel;
                codes = xmalloc(cap, "int4 codes to pack");
            }
            quant_codes(&q->spec, master + t->offset, qt->rows, qt->cols, q->scale + qt->offset,
                        q->zero + qt->offset, codes);
            c = codes;
        }
        *slot = OP(d, pack_int4, &q->spec, c, qt->rows, qt->cols, q->scale + qt->offset, q->zero + qt->offset);
    }
    free(codes);
}

void qat_pack_free(Device *d, PackedViews *pv) {
    if (!d->be->packed_release) return;
    for (int l = 0; l < MAX_LAYERS; l++) {
        PackedLayer *pl = &pv->layer[l];
        PackedWeight *w[7] = {pl->wq, pl->wk, pl->wv, pl->wo, pl->wgate, pl->wup, pl->wdown};
        for (int k = 0; k < 7; k++)
            if (w[k]) d->be->packed_release(d, w[k]);
    }
    if (pv->lm_head) d->be->packed_release(d, pv->lm_head);
    memset(pv, 0, sizeof *pv);
}
