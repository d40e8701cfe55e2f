// quant.c: the CPU backend's kernels of the int4 grid: the QAT backward, the
// scales' Adam and A16 rounding (quant.h), on the device's threads.
#include "quant.h"
#include <math.h>

// The straight-through mask with fixed scales: g[i] = 0 where weight i is
// clipped (quant_inside false; scale 0: w != zero), g unchanged elsewhere.
static void ste_mask(Device *d, const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols, const float *scale,
                     const float *zero) {
    const int G = q->group, lo = quant_code_min(q);
    const int sym = q->symmetric || !zero;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) num_threads(d->threads) if (rows * cols >= QUANT_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t gi = 0; gi < ng; gi++) {
            size_t k = (size_t)(r * ng + gi), base = (size_t)(r * cols + gi * G);
            const float s = scale[k], z = sym ? 0.0f : zero[k], *x = w + base;
            float *d = g + base;
            if (s == 0.0f) {
                for (int i = 0; i < G; i++)
                    if (x[i] != z) d[i] = 0.0f;
                continue;
            }
            #pragma omp simd
            for (int i = 0; i < G; i++) {
                d[i] = quant_inside(quant_rounded(x[i], s, z), lo) ? d[i] : 0.0f;
            }
        }
}

void quant_backward(Device *d, const QuantSpec *spec, const float *x, float *g, int64_t rows, int64_t cols, const float *scale,
                    const float *zero, float *gs, float *gz) {
    const int G = spec->group, lo = quant_code_min(spec), sym = spec->symmetric;
    const int64_t ng = cols / G;
    if (!gs && !gz) {   // fixed scales: only the STE mask
        ste_mask(d, spec, x, g, rows, cols, scale, zero);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(d->threads) if (rows * cols >= QUANT_PARALLEL_MIN)
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

// Frozen codes: w = (u - 8) * s + z, so dL/ds = sum g (u - 8), dL/dz = sum g
// per group, exactly; the master weights get no gradient.
void quant_backward_frozen(Device *d, const QuantSpec *spec, const uint8_t *codes, float *g, int64_t rows, int64_t cols,
                           float *gs, float *gz) {
    const int G = spec->group, sym = spec->symmetric;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) num_threads(d->threads) if (rows * cols >= QUANT_PARALLEL_MIN)
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

void quant_adam(Device *d, float *p, const float *g, float *m, float *v, size_t n, const AdamWConfig *c, float lr,
                long step, float lo, float hi) {
    const float beta1 = c->beta1, beta2 = c->beta2, eps = c->eps;
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
#pragma omp parallel for schedule(static) num_threads(d->threads) if (n >= QUANT_PARALLEL_MIN / 8)
    for (size_t k = 0; k < n; k++) {
        m[k] = beta1 * m[k] + (1.0f - beta1) * g[k];
        v[k] = beta2 * v[k] + (1.0f - beta2) * g[k] * g[k];
        float upd = p[k] - step_size * m[k] / (sqrtf(v[k]) / bc2_sqrt + eps);
        p[k] = quant_round_f16(fminf(fmaxf(upd, lo), hi));
    }
}

void a16_round(Device *d, float *x, size_t n, int mode) {
    if (mode == A16_BF16) {
#pragma omp parallel for schedule(static) num_threads(d->threads) if (n >= QUANT_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    } else if (mode == A16_FP16) {
#pragma omp parallel for schedule(static) num_threads(d->threads) if (n >= QUANT_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) x[i] = f16_to_f32(f32_to_f16(x[i]));
    }
}
