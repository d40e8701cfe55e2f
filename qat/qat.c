// qat.c: QAT state over the tensor table, fake-quant forward, STE/LSQ
// backward, the scale/zero Adam step and A16 rounding (see qat.h).
#include "qat.h"
#include <math.h>
#include <string.h>

#define F16_MAX 65504.0f

static float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

static int is_quantized(const TensorInfo *t, int quant_embedding) {
    if (t->ndim != 2) return 0;
    return (t->flags & TF_QUANT) || (quant_embedding && (t->flags & TF_EMBED));
}

int qat_init(QatState *q, const TensorTable *tt, const QuantSpec *spec, int quant_embedding, int learn_scales,
             const char *src, PtError *e) {
    memset(q, 0, sizeof *q);
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

const QatTensor *qat_find(const QatState *q, int tensor) {
    for (int i = 0; i < q->n; i++)
        if (q->t[i].tensor == tensor) return &q->t[i];
    return NULL;
}

void qat_forward_weights(const QatState *q, const TensorTable *tt, const float *master, float *effective) {
    // Unquantized tensors (norms, biases) are copied; the rest are written
    // whole by the fake-quant (copying all 1.2 GB of pocket-0.3b first cost a
    // tenth of the QAT step).
    for (int i = 0; i < tt->n; i++)
        if (!qat_find(q, i))
            memcpy(effective + tt->t[i].offset, master + tt->t[i].offset, tt->t[i].numel * sizeof(float));
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        size_t off = tt->t[qt->tensor].offset;
        if (q->codes)
            quant_dequant(&q->spec, qat_codes_of(q, qt), qt->rows, qt->cols, q->scale + qt->offset,
                          q->zero + qt->offset, effective + off);
        else
            quant_fake(&q->spec, master + off, qt->rows, qt->cols, q->scale + qt->offset, q->zero + qt->offset,
                       effective + off);
    }
}

void qat_freeze(QatState *q, const TensorTable *tt, float *master) {
    qat_alloc_frozen(q);
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        quant_codes(&q->spec, master + tt->t[qt->tensor].offset, qt->rows, qt->cols, q->scale + qt->offset,
                    q->zero + qt->offset, q->codes + qt->offset * (size_t)q->spec.group);
    }
    zero_scale_moments(q);
    qat_frozen_sync(q, tt, master);
}

void qat_frozen_sync(const QatState *q, const TensorTable *tt, float *master) {
    if (!q->codes) return;
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        quant_dequant(&q->spec, qat_codes_of(q, qt), qt->rows, qt->cols, q->scale + qt->offset, q->zero + qt->offset,
                      master + tt->t[qt->tensor].offset);
    }
}

// Frozen codes: w = (u - 8) * s + z, so dL/ds = sum g (u - 8), dL/dz = sum g
// per group, exactly; the master weights get no gradient.
static void frozen_backward_tensor(const QuantSpec *spec, const uint8_t *codes, float *g, int64_t rows,
                                   int64_t cols, float *gs, float *gz) {
    const int G = spec->group, sym = spec->symmetric;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) if (rows * cols >= QUANT_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t gi = 0; gi < ng; gi++) {
            size_t k = (size_t)(r * ng + gi), base = (size_t)(r * cols + gi * G);
            const uint8_t *u = codes + base;
            float *gg = g + base, ds = 0.0f, dz = 0.0f;
            #pragma omp simd reduction(+:ds, dz)
            for (int i = 0; i < G; i++) {
                ds += gg[i] * ((float)u[i] - (float)QUANT_CODE_MID);
                dz += gg[i];
                gg[i] = 0.0f;
            }
            gs[k] = ds;
            gz[k] = sym ? 0.0f : dz;
        }
    }
}

// One quantized tensor: STE mask in place on g (already a copy of the
// effective gradient), and the per-group scale/zero gradient sums.
static void backward_tensor(const QuantSpec *spec, const float *x, float *g, int64_t rows, int64_t cols,
                            const float *scale, const float *zero, float *gs, float *gz) {
    const int G = spec->group, lo = quant_code_min(spec), sym = spec->symmetric;
    const int64_t ng = cols / G;
    if (!gs && !gz) {   // fixed scales: only the STE mask
        quant_ste_mask(spec, x, g, rows, cols, scale, zero);
        return;
    }
#pragma omp parallel for schedule(static) if (rows * cols >= QUANT_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t gi = 0; gi < ng; gi++) {
            size_t k = (size_t)(r * ng + gi), base = (size_t)(r * cols + gi * G);
            const float s = scale[k], z = sym ? 0.0f : zero[k], *xg = x + base;
            float *gg = g + base, ds = 0.0f, dz = 0.0f;
            if (s == 0.0f) {
                // Every weight decodes to z; one off it is clipped at the code
                // its side of z would take as scale -> 0+.
                for (int i = 0; i < G; i++) {
                    if (xg[i] == z) continue;
                    ds += gg[i] * (float)((xg[i] > z ? QUANT_CODE_MAX : lo) - QUANT_CODE_MID);
                    dz += gg[i];
                    gg[i] = 0.0f;
                }
            } else {
                // w = (clamp(u) - 8) s + z with u = round((x - z)/s) + 8 and
                // d round/dt = 1: inside the grid dw/ds = (u - 8) - (x - z)/s,
                // dw/dz = 0, dw/dx = 1; clipped, w does not depend on x:
                // dw/ds = u_clip - 8, dw/dz = 1. Float sums over one group.
                #pragma omp simd reduction(+:ds, dz)
                for (int i = 0; i < G; i++) {
                    const float u = quant_rounded(xg[i], s, z), c = quant_clamp(u, lo), gi_ = gg[i];
                    const int inside = quant_inside(u, lo);
                    ds += gi_ * (inside ? (c - (float)QUANT_CODE_MID) - (xg[i] - z) / s : c - (float)QUANT_CODE_MID);
                    dz += inside ? 0.0f : gi_;
                    gg[i] = inside ? gi_ : 0.0f;
                }
            }
            if (gs) gs[k] = ds;
            if (gz) gz[k] = sym ? 0.0f : dz;
        }
    }
}

void qat_backward(QatState *q, const TensorTable *tt, const float *master, const float *grad_eff,
                  float *grad_master) {
    if (grad_master != grad_eff) memcpy(grad_master, grad_eff, tt->total * sizeof(float));
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        size_t off = tt->t[qt->tensor].offset;
        if (q->codes) {
            frozen_backward_tensor(&q->spec, qat_codes_of(q, qt), grad_master + off, qt->rows, qt->cols,
                                   q->grad_scale + qt->offset, q->grad_zero + qt->offset);
            continue;
        }
        backward_tensor(&q->spec, master + off, grad_master + off, qt->rows, qt->cols, q->scale + qt->offset,
                        q->zero + qt->offset, q->grad_scale ? q->grad_scale + qt->offset : NULL,
                        q->grad_zero ? q->grad_zero + qt->offset : NULL);
    }
}

double qat_grad_sumsq(const QatState *q) {
    if (!q->grad_scale) return 0.0;
    double sum = 0.0;
    for (size_t k = 0; k < q->total; k++)
        sum += (double)q->grad_scale[k] * q->grad_scale[k] + (double)q->grad_zero[k] * q->grad_zero[k];
    return sum;
}

// One Adam update of p[n] followed by the fp16 re-rounding and the clamp.
static void adam_f16(float *p, const float *g, float *m, float *v, size_t n, const QatAdam *c, float lr, long step,
                     float lo, float hi) {
    double bc1 = 1.0 - pow(c->beta1, (double)step), bc2 = 1.0 - pow(c->beta2, (double)step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
#pragma omp parallel for schedule(static) if (n >= QUANT_PARALLEL_MIN / 8)
    for (size_t k = 0; k < n; k++) {
        m[k] = c->beta1 * m[k] + (1.0f - c->beta1) * g[k];
        v[k] = c->beta2 * v[k] + (1.0f - c->beta2) * g[k] * g[k];
        float upd = p[k] - step_size * m[k] / (sqrtf(v[k]) / bc2_sqrt + c->eps);
        p[k] = round_f16(fminf(fmaxf(upd, lo), hi));
    }
}

void qat_step(QatState *q, const QatAdam *c, float lr, long step) {
    if (!q->grad_scale || step < 1) return;
    adam_f16(q->scale, q->grad_scale, q->m_scale, q->v_scale, q->total, c, lr, step, 0.0f, F16_MAX);
    if (!q->spec.symmetric)
        adam_f16(q->zero, q->grad_zero, q->m_zero, q->v_zero, q->total, c, lr, step, -F16_MAX, F16_MAX);
}

void a16_round(float *x, size_t n, int mode) {
    if (mode == A16_BF16) {
#pragma omp parallel for schedule(static) if (n >= QUANT_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    } else if (mode == A16_FP16) {
#pragma omp parallel for schedule(static) if (n >= QUANT_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) x[i] = f16_to_f32(f32_to_f16(x[i]));
    }
}

static const char *A16_NAMES[] = {"off", "bf16", "fp16"};

int a16_mode_from_name(const char *name) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, A16_NAMES[i])) return i;
    return -1;
}

const char *a16_mode_name(int mode) { return mode >= 0 && mode < 3 ? A16_NAMES[mode] : "?"; }
