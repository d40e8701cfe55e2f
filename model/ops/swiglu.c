// swiglu.c: out = silu(gate) * up elementwise, silu(x) = x * sigmoid(x).
// The activation applies to the gate branch only, as in transformers' Qwen3MLP.
#include <math.h>
#include "ops.h"

void swiglu_forward(Device *d, float *out, const float *gate, const float *up, size_t n) {
    #pragma omp parallel for simd schedule(static) num_threads(d->threads)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))).
void swiglu_backward(Device *d, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                     size_t n) {
    #pragma omp parallel for simd schedule(static) num_threads(d->threads)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        if (dup) dup[i] += dout[i] * g * sig;
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
