// residual.c: out = a + b and its backward (the gradient flows unchanged to
// both branches).
#include "ops.h"

void residual_forward(float *out, const float *a, const float *b, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void residual_backward(float *da, float *db, const float *dout, size_t n) {
    if (da) {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) da[i] += dout[i];
    }
    if (db) {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) db[i] += dout[i];
    }
}

void residual_forward_ref(double *out, const double *a, const double *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void residual_backward_ref(double *da, double *db, const double *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (da) da[i] += dout[i];
        if (db) db[i] += dout[i];
    }
}
