// swiglu.c: out = silu(gate) * up elementwise, silu(x) = x * sigmoid(x).
// The activation applies to the gate branch only, as in transformers' Qwen3MLP.
#include <math.h>
#include "fast_exp.h"
#include "ops.h"

// e = exp(-g) for a block of at most EXP_CHUNK values, on fast_exp.h's
// vectorised exp (expf per element kept these loops scalar). It is clamped at
// e^88 for g < -88, where silu and its derivative are 0 to float either way.
static void neg_exp_block(float *e, const float *g, int m) {
    #pragma omp simd
    for (int i = 0; i < m; i++) e[i] = -g[i];
    exp_block(e, e, m);
}

void swiglu_forward(Device *d, float *out, const float *gate, const float *up, size_t n) {
    const size_t blocks = (n + EXP_CHUNK - 1) / EXP_CHUNK;
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (size_t b = 0; b < blocks; b++) {
        const size_t i0 = b * EXP_CHUNK;
        const int m = n - i0 < EXP_CHUNK ? (int)(n - i0) : EXP_CHUNK;
        float e[EXP_CHUNK];
        neg_exp_block(e, gate + i0, m);
        #pragma omp simd
        for (int i = 0; i < m; i++) out[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
    }
}

// d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))).
void swiglu_backward(Device *d, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                     size_t n) {
    const size_t blocks = (n + EXP_CHUNK - 1) / EXP_CHUNK;
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (size_t b = 0; b < blocks; b++) {
        const size_t i0 = b * EXP_CHUNK;
        const int m = n - i0 < EXP_CHUNK ? (int)(n - i0) : EXP_CHUNK;
        const float *g = gate + i0, *u = up + i0, *dy = dout + i0;
        float sig[EXP_CHUNK];
        neg_exp_block(sig, g, m);
        #pragma omp simd
        for (int i = 0; i < m; i++) sig[i] = 1.0f / (1.0f + sig[i]);
        if (dgate) {
            float *dg = dgate + i0;
            #pragma omp simd
            for (int i = 0; i < m; i++) dg[i] += dy[i] * u[i] * sig[i] * (1.0f + g[i] * (1.0f - sig[i]));
        }
        if (dup) {
            float *du = dup + i0;
            #pragma omp simd
            for (int i = 0; i < m; i++) du[i] += dy[i] * g[i] * sig[i];
        }
    }
}

void swiglu_forward_ref(double *out, const double *gate, const double *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

void swiglu_backward_ref(double *dgate, double *dup, const double *dout, const double *gate,
                         const double *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double sig = 1.0 / (1.0 + exp(-gate[i]));
        if (dgate) dgate[i] += dout[i] * up[i] * sig * (1.0 + gate[i] * (1.0 - sig));
        if (dup) dup[i] += dout[i] * gate[i] * sig;
    }
}
