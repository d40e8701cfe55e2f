// int4_grid.c: the int4 grid on the host (int4_grid.h: the rule and the layouts).
#include "int4_grid.h"
#include <math.h>
#include <omp.h>
#include <string.h>

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
        *scale = quant_round_f16(mx / 7.0f);
        *zero = 0.0f;
    } else if (mx == mn) {
        *scale = 0.0f;
        *zero = quant_round_f16(mn);
    } else {
        float s = (mx - mn) / 15.0f;
        *scale = quant_round_f16(s);
        *zero = quant_round_f16(mn + 8.0f * s);
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

// The OpenMP threads of a loop given `threads` (0: OpenMP's count).
static int team(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

void quant_dequant(const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols, const float *scale,
                   const float *zero, float *w, int threads) {
    const int G = q->group;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) num_threads(team(threads)) if (rows * cols >= QUANT_PARALLEL_MIN)
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
                const float *zero, float *out, int threads) {
    const int G = q->group, lo = quant_code_min(q);
    const int sym = q->symmetric || !zero;
    const int64_t ng = cols / G;
#pragma omp parallel for schedule(static) num_threads(team(threads)) if (rows * cols >= QUANT_PARALLEL_MIN)
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

static const char *A16_NAMES[] = {"off", "bf16", "fp16"};

int a16_mode_from_name(const char *name) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, A16_NAMES[i])) return i;
    return -1;
}

