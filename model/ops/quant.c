// quant.c: the int4 grid (see quant.h for the rule and the layouts).
#include "quant.h"
#include <math.h>
#include <string.h>

static float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

int quant_check(const QuantSpec *q, int64_t rows, int64_t cols, const char *what, PtError *e) {
    if (q->group < 2 || q->group % 2)
        return pt_fail(e, "%s: quantization group %d must be an even number >= 2 (32, 64 or 128)", what, q->group);
    if (rows <= 0 || cols <= 0)
        return pt_fail(e, "%s: cannot quantize a tensor of shape [%lld, %lld]", what, (long long)rows,
                       (long long)cols);
    if (cols % q->group)
        return pt_fail(e, "%s: %lld input columns are not a multiple of the quantization group %d", what,
                       (long long)cols, q->group);
    return 0;
}

size_t quant_n_groups(const QuantSpec *q, int64_t rows, int64_t cols) {
    return (size_t)rows * (size_t)(cols / q->group);
}

// Grid parameters for values spanning [mn, mx] (asymmetric) or [-amax, amax]
// (symmetric, mx = amax), rounded to fp16. Returns 0 when both are finite.
static int grid_from_range(int symmetric, float mn, float mx, float *scale, float *zero) {
    if (symmetric) {
        *scale = round_f16(mx / 7.0f);
        *zero = 0.0f;
    } else if (mx == mn) {
        *scale = 0.0f;
        *zero = round_f16(mn);
    } else {
        float s = (mx - mn) / 15.0f;
        *scale = round_f16(s);
        *zero = round_f16(mn + 8.0f * s);
    }
    return isfinite(*scale) && isfinite(*zero) ? 0 : -1;
}

// Min and max (asymmetric) or 0 and max|x| (symmetric) of n values; -1 on a
// non-finite value.
static int group_range(int symmetric, const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0], amax = 0.0f;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) return -1;
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        amax = fmaxf(amax, fabsf(x[i]));
    }
    *mn = symmetric ? 0.0f : lo;
    *mx = symmetric ? amax : hi;
    return 0;
}

// Squared error of fake-quantizing n values with one (scale, zero).
static double group_sse(const float *x, int n, float scale, float zero, int lo, int symmetric) {
    double sse = 0.0;
    for (int i = 0; i < n; i++) {
        int u = quant_code_of(x[i], scale, zero, lo);
        float w = ((float)u - (float)QUANT_CODE_MID) * scale;
        if (!symmetric) w += zero;
        double d = (double)w - x[i];
        sse += d * d;
    }
    return sse;
}

// Shared body of the two inits; mse_steps = 1 is plain RTN.
static int init_groups(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, float *scale, float *zero,
                       int mse_steps, double *sse_rtn, double *sse_mse, const char *what, PtError *e) {
    if (quant_check(q, rows, cols, what, e)) return -1;
    const int G = q->group, lo = quant_code_min(q);
    const int64_t ng = cols / G;
    int64_t bad_row = -1, bad_group = 0;
    int bad_kind = 0;   // 1 non-finite weight, 2 fp16 overflow
    double rtn_total = 0.0, mse_total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : rtn_total, mse_total) if (rows * cols >= QUANT_PARALLEL_MIN / 8)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < ng; g++) {
            const float *x = w + r * cols + g * G;
            size_t k = (size_t)(r * ng + g);
            float mn, mx, s, z;
            int kind = 0;
            if (group_range(q->symmetric, x, G, &mn, &mx)) kind = 1;
            else if (grid_from_range(q->symmetric, mn, mx, &s, &z)) kind = 2;
            if (kind) {
#pragma omp critical(quant_init_error)
                if (bad_row < 0 || r < bad_row || (r == bad_row && g < bad_group)) {
                    bad_row = r;
                    bad_group = g;
                    bad_kind = kind;
                }
                s = z = 0.0f;
            } else if (mse_steps > 1 || sse_rtn) {
                double best = group_sse(x, G, s, z, lo, q->symmetric);
                rtn_total += best;
                for (int k2 = 1; k2 < mse_steps; k2++) {
                    float p = 1.0f - QUANT_MSE_SHRINK * (float)k2, s2, z2;
                    if (grid_from_range(q->symmetric, p * mn, p * mx, &s2, &z2)) continue;
                    double err = group_sse(x, G, s2, z2, lo, q->symmetric);
                    if (err < best) {
                        best = err;
                        s = s2;
                        z = z2;
                    }
                }
                mse_total += best;
            }
            scale[k] = s;
            if (zero) zero[k] = z;
        }
    }
    if (bad_row >= 0)
        return pt_fail(e, "%s: row %lld, group %lld (columns %lld..%lld): %s", what, (long long)bad_row,
                       (long long)bad_group, (long long)(bad_group * G), (long long)(bad_group * G + G - 1),
                       bad_kind == 1 ? "non-finite weight" : "scale or zero beyond the fp16 range (|v| > 65504)");
    if (sse_rtn) *sse_rtn = rtn_total;
    if (sse_mse) *sse_mse = mse_total;
    return 0;
}

int quant_init_rtn(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, float *scale, float *zero,
                   const char *what, PtError *e) {
    return init_groups(q, w, rows, cols, scale, zero, 1, NULL, NULL, what, e);
}

int quant_init_mse(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, float *scale, float *zero,
                   double *sse_rtn, double *sse_mse, const char *what, PtError *e) {
    double rtn = 0.0, mse = 0.0;
    int rc = init_groups(q, w, rows, cols, scale, zero, QUANT_MSE_STEPS, &rtn, &mse, what, e);
    if (rc == 0 && sse_rtn) *sse_rtn = rtn;
    if (rc == 0 && sse_mse) *sse_mse = mse;
    return rc;
}

void quant_codes(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                 const float *zero, uint8_t *codes) {
    const int G = q->group, lo = quant_code_min(q);
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) if (rows * cols >= QUANT_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < ng; g++) {
            size_t k = (size_t)(r * ng + g), base = (size_t)(r * cols + g * G);
            float s = scale[k], z = (q->symmetric || !zero) ? 0.0f : zero[k];
            for (int i = 0; i < G; i++) codes[base + i] = (uint8_t)quant_code_of(w[base + i], s, z, lo);
        }
    }
}

void quant_dequant(const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols, const float *scale,
                   const float *zero, float *w) {
    const int G = q->group;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) if (rows * cols >= QUANT_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < ng; g++) {
            size_t k = (size_t)(r * ng + g), base = (size_t)(r * cols + g * G);
            float s = scale[k];
            if (q->symmetric || !zero) {
                for (int i = 0; i < G; i++) w[base + i] = ((float)codes[base + i] - (float)QUANT_CODE_MID) * s;
            } else {
                float z = zero[k];
                for (int i = 0; i < G; i++) {
                    float prod = ((float)codes[base + i] - (float)QUANT_CODE_MID) * s;
                    w[base + i] = prod + z;
                }
            }
        }
    }
}

void quant_fake(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                const float *zero, float *out) {
    const int G = q->group, lo = quant_code_min(q);
    const int sym = q->symmetric || !zero;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) if (rows * cols >= QUANT_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < ng; g++) {
            size_t k = (size_t)(r * ng + g), base = (size_t)(r * cols + g * G);
            const float s = scale[k], z = sym ? 0.0f : zero[k], *x = w + base;
            float *o = out + base;
            if (s == 0.0f) {   // every weight decodes to the zero point
                for (int i = 0; i < G; i++) o[i] = z;
                continue;
            }
            #pragma omp simd
            for (int i = 0; i < G; i++) {
                const float prod = (quant_clamp(quant_rounded(x[i], s, z), lo) - (float)QUANT_CODE_MID) * s;
                o[i] = sym ? prod : prod + z;
            }
        }
    }
}

// The straight-through mask with fixed scales: g[i] = 0 where weight i is
// clipped (quant_inside false; scale 0: w != zero), g unchanged elsewhere.
static void ste_mask(const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols, const float *scale,
                     const float *zero) {
    const int G = q->group, lo = quant_code_min(q);
    const int sym = q->symmetric || !zero;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) if (rows * cols >= QUANT_PARALLEL_MIN)
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

void quant_backward(const QuantSpec *spec, const float *x, float *g, int64_t rows, int64_t cols, const float *scale,
                    const float *zero, float *gs, float *gz) {
    const int G = spec->group, lo = quant_code_min(spec), sym = spec->symmetric;
    const int64_t ng = cols / G;
    if (!gs && !gz) {   // fixed scales: only the STE mask
        ste_mask(spec, x, g, rows, cols, scale, zero);
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

// Frozen codes: w = (u - 8) * s + z, so dL/ds = sum g (u - 8), dL/dz = sum g
// per group, exactly; the master weights get no gradient.
void quant_backward_frozen(const QuantSpec *spec, const uint8_t *codes, float *g, int64_t rows, int64_t cols,
                           float *gs, float *gz) {
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

void quant_adam(float *p, const float *g, float *m, float *v, size_t n, float beta1, float beta2, float eps, float lr,
                long step, float lo, float hi) {
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
#pragma omp parallel for schedule(static) if (n >= QUANT_PARALLEL_MIN / 8)
    for (size_t k = 0; k < n; k++) {
        m[k] = beta1 * m[k] + (1.0f - beta1) * g[k];
        v[k] = beta2 * v[k] + (1.0f - beta2) * g[k] * g[k];
        float upd = p[k] - step_size * m[k] / (sqrtf(v[k]) / bc2_sqrt + eps);
        p[k] = round_f16(fminf(fmaxf(upd, lo), hi));
    }
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

size_t quant_pack4(const uint8_t *codes, size_t n, uint8_t *packed) {
    size_t bytes = (n + 1) / 2;
    for (size_t j = 0; j < n / 2; j++)
        packed[j] = (uint8_t)(((codes[2 * j] & 15u) << 4) | (codes[2 * j + 1] & 15u));
    if (n % 2) packed[n / 2] = (uint8_t)((codes[n - 1] & 15u) << 4);
    return bytes;
}

void quant_unpack4(const uint8_t *packed, size_t n, uint8_t *codes) {
    for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)(i % 2 ? packed[i / 2] & 15u : packed[i / 2] >> 4);
}
