// test_ops_util.h: helpers shared by the tests/test_ops_*.c files: random
// arrays, float/double copies, error norms and a central-difference checker.
#pragma once
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../util/util.h"
#include "../model/ops/ops.h"

static inline double *rand_d(Rng *r, size_t n, double sd) {
    double *x = xmalloc(n * sizeof(double), "test array");
    for (size_t i = 0; i < n; i++) x[i] = sd * rng_normal(r);
    return x;
}

static inline double *zeros_d(size_t n) { return xcalloc(n ? n : 1, sizeof(double), "test zeros"); }
static inline float *zeros_f(size_t n) { return xcalloc(n ? n : 1, sizeof(float), "test zeros"); }

// Rounds x to float in place and returns a float copy, so the double reference
// and the float op see exactly the same input values.
static inline float *to_float_exact(double *x, size_t n) {
    float *f = xmalloc(n * sizeof(float), "test float copy");
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)x[i];
        x[i] = f[i];
    }
    return f;
}

static inline double *copy_d(const double *x, size_t n) {
    double *y = xmalloc(n * sizeof(double), "test copy");
    memcpy(y, x, n * sizeof(double));
    return y;
}

// Normwise relative error: max |got - want| / max |want|.
static inline double rel_err_f(const float *got, const double *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > diff || isnan(d)) diff = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > mag) mag = fabs(want[i]);
    }
    return mag > 0.0 ? diff / mag : diff;
}

// The same for a gradient that was accumulated onto a non-zero start: the
// increment got - start is compared with the reference gradient want.
static inline double rel_err_delta_f(const float *got, const float *start, const double *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(((double)got[i] - (double)start[i]) - want[i]);
        if (d > diff || isnan(d)) diff = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > mag) mag = fabs(want[i]);
    }
    return mag > 0.0 ? diff / mag : diff;
}

// A float array of random values (the non-zero start of a gradient) and a copy.
static inline float *rand_f(Rng *r, size_t n, double sd) {
    float *x = xmalloc(n * sizeof(float), "test float array");
    for (size_t i = 0; i < n; i++) x[i] = (float)(sd * rng_normal(r));
    return x;
}

static inline float *copy_f(const float *x, size_t n) {
    float *y = xmalloc(n * sizeof(float), "test float copy");
    memcpy(y, x, n * sizeof(float));
    return y;
}

static inline double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// Central differences of the loss L = sum(out * R) with respect to every
// element of x[n]; compares with the analytic gradient and returns the worst
// relative error |num - ana| / max(|num|, |ana|, FD_FLOOR). The difference
// out(x+eps) - out(x-eps) is formed element by element before weighting by R,
// so the sum over many unchanged outputs adds no rounding noise; the floor keeps
// gradients that are ~0 from reading as large relative errors.
#define FD_EPS 1e-5
#define FD_FLOOR 1e-3
typedef void (*ForwardFn)(void *ctx, double *out);
static inline double fd_check(ForwardFn forward, void *ctx, size_t n_out, const double *R, double *x,
                              const double *grad, size_t n) {
    double *out_plus = xmalloc(n_out * sizeof(double), "fd out+"), *out_minus = xmalloc(n_out * sizeof(double), "fd out-");
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + FD_EPS;
        forward(ctx, out_plus);
        x[i] = saved - FD_EPS;
        forward(ctx, out_minus);
        x[i] = saved;
        double num = 0.0;
        for (size_t j = 0; j < n_out; j++) num += (out_plus[j] - out_minus[j]) * R[j];
        num /= 2.0 * FD_EPS;
        double den = fmax(fmax(fabs(num), fabs(grad[i])), FD_FLOOR);
        double rel = fabs(num - grad[i]) / den;
        if (rel > worst || isnan(rel)) worst = isnan(rel) ? INFINITY : rel;
    }
    free(out_plus);
    free(out_minus);
    return worst;
}
