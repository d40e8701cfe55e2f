// dropout.c: inverted dropout with a regenerated mask (dropout_mask.h).
#include "ops.h"
#include "../dropout_mask.h"

void dropout_forward(Device *d, float *out, const float *x, size_t n, float p, uint64_t seed) {
    const uint32_t thr = dropout_threshold(p);
    const float s = dropout_scale(p);
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (size_t i = 0; i < n; i++) out[i] = dropout_keep(seed, i, thr) ? x[i] * s : 0.0f;
}

void dropout_backward(Device *d, float *dx, const float *dout, size_t n, float p, uint64_t seed) {
    const uint32_t thr = dropout_threshold(p);
    const float s = dropout_scale(p);
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (size_t i = 0; i < n; i++)
        if (dropout_keep(seed, i, thr)) dx[i] += dout[i] * s;
}

void dropout_forward_ref(double *out, const double *x, size_t n, double p, uint64_t seed) {
    const uint32_t thr = dropout_threshold((float)p);
    for (size_t i = 0; i < n; i++) out[i] = dropout_keep(seed, i, thr) ? x[i] / (1.0 - p) : 0.0;
}

void dropout_backward_ref(double *dx, const double *dout, size_t n, double p, uint64_t seed) {
    const uint32_t thr = dropout_threshold((float)p);
    for (size_t i = 0; i < n; i++)
        if (dropout_keep(seed, i, thr)) dx[i] += dout[i] / (1.0 - p);
}
