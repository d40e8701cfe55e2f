// fast_exp.h: private to model/ops/. The vectorised exp of attention's
// probabilities and the classifier's softmax.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

// exp(x) for a whole block, vectorisable (a call to expf per element costs
// more than an attention key's FMAs or a logit's share of the classifier):
// x = k ln2 + r with |r| <= ln2/2, e^r from its Taylor series to r^7
// (truncation < 1e-8 relative), 2^k put into the exponent bits. Within 1 ulp
// of exp on [-87, 0] (tests/test_ops_fast.c); x < -87 (and -inf) gives 0.
// Three loops per chunk, clamp / series / select: gcc 12 does not vectorise
// the selects and the fmaf chain in one loop ("control flow in loop"), and
// ran this scalar, a third of attention's time on AVX2.
#define EXP_CHUNK 64
static inline void exp_block(float *y, const float *x, int n) {
    for (int i0 = 0; i0 < n; i0 += EXP_CHUNK) {
        const int m = n - i0 < EXP_CHUNK ? n - i0 : EXP_CHUNK;
        float xc[EXP_CHUNK], e[EXP_CHUNK];
        // NaN goes through the series as 0 (a float-to-int conversion of NaN
        // is undefined) and is put back by the select.
        #pragma omp simd
        for (int i = 0; i < m; i++) {
            float xi = x[i0 + i] < -87.0f ? -87.0f : x[i0 + i];
            xi = xi > 88.0f ? 88.0f : xi;
            xc[i] = xi == xi ? xi : 0.0f;
        }
        for (int i = 0; i < m; i++) {   // (no omp simd: it makes two_k a per-lane array gcc cannot analyse)
            const float xi = xc[i];
            const float k = (xi * 1.44269504f + 12582912.0f) - 12582912.0f;   // round to nearest integer
            const float r = (xi - k * 0.693359375f) - k * -2.12194440e-4f;     // ln2 split in two parts
            float p = 1.0f / 5040.0f;
            p = fmaf(p, r, 1.0f / 720.0f);
            p = fmaf(p, r, 1.0f / 120.0f);
            p = fmaf(p, r, 1.0f / 24.0f);
            p = fmaf(p, r, 1.0f / 6.0f);
            p = fmaf(p, r, 0.5f);
            p = fmaf(p, r, 1.0f);
            p = fmaf(p, r, 1.0f);
            const int32_t bits = ((int32_t)k + 127) * (1 << 23);   // k + 127 in [1, 254]: no overflow
            float two_k;
            memcpy(&two_k, &bits, sizeof two_k);
            e[i] = p * two_k;
        }
        #pragma omp simd
        for (int i = 0; i < m; i++) {
            const float xi = x[i0 + i], v = xi < -87.0f ? 0.0f : e[i];
            y[i0 + i] = xi == xi ? v : xi;
        }
    }
}
