// rmsnorm.c: RMSNorm over rows of length C, out = w * (x * rstd) with
// rstd = 1/sqrt(mean(x^2) + eps): eps inside the root, the weight applied
// after normalising, no mean subtraction (transformers' Qwen3RMSNorm).
#include <math.h>
#include <omp.h>
#include <string.h>
#include "../../util/util.h"
#include "ops.h"

void rmsnorm_forward(Device *d, float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = out + (size_t)n * C;
        float ss = 0.0f;
        #pragma omp simd reduction(+:ss)
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
        #pragma omp simd
        for (int c = 0; c < C; c++) yr[c] = w[c] * (xr[c] * r);
    }
}

// With xhat = x * rstd and g = dout * w:
//   dx = rstd * (g - xhat * mean(g * xhat)),   dw = sum over rows of dout * xhat.
// dw sums over every row: each block of RMSNORM_DW_ROWS rows accumulates into
// a partial of its own and the partials are added in block order at the end,
// so no races and the same result for any thread count (as the CUDA kernel).
#define RMSNORM_DW_ROWS 64

size_t rmsnorm_workspace_bytes(int N, int C) {
    return (size_t)((N + RMSNORM_DW_ROWS - 1) / RMSNORM_DW_ROWS) * C * sizeof(float) + 64;
}

void rmsnorm_backward(Device *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C) {
    const int blocks = (N + RMSNORM_DW_ROWS - 1) / RMSNORM_DW_ROWS;
    const size_t mark = dev_scratch_mark(d), bytes = (size_t)blocks * C * sizeof(float);
    float *partial = dw && N > 0 ? dev_scratch(d, bytes, "rmsnorm dw partials") : NULL;
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int b = 0; b < blocks; b++) {
        float *my_dw = partial ? partial + (size_t)b * C : NULL;
        if (my_dw) memset(my_dw, 0, (size_t)C * sizeof(float));
        const int n_end = (b + 1) * RMSNORM_DW_ROWS < N ? (b + 1) * RMSNORM_DW_ROWS : N;
        for (int n = b * RMSNORM_DW_ROWS; n < n_end; n++) {
            const float *xr = x + (size_t)n * C, *gr = dout + (size_t)n * C;
            float r = rstd[n];
            if (dx) {
                float dot = 0.0f;
                #pragma omp simd reduction(+:dot)
                for (int c = 0; c < C; c++) dot += gr[c] * w[c] * (xr[c] * r);
                float mean_dot = dot / (float)C;
                float *dxr = dx + (size_t)n * C;
                #pragma omp simd
                for (int c = 0; c < C; c++) dxr[c] += r * (gr[c] * w[c] - (xr[c] * r) * mean_dot);
            }
            if (my_dw) {
                #pragma omp simd
                for (int c = 0; c < C; c++) my_dw[c] += gr[c] * (xr[c] * r);
            }
        }
    }
    if (partial) {
        #pragma omp parallel for schedule(static) num_threads(d->threads)
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int b = 0; b < blocks; b++) s += partial[(size_t)b * C + c];
            dw[c] += s;
        }
    }
    dev_scratch_release(d, mark);
}

void rmsnorm_forward_ref(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        double r = 1.0 / sqrt(ss / C + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = w[c] * (xr[c] * r);
    }
}

void rmsnorm_backward_ref(double *dx, double *dw, const double *dout, const double *x, const double *w,
                          const double *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C, *gr = dout + (size_t)n * C;
        double r = rstd[n];
        double dot = 0.0;
        for (int c = 0; c < C; c++) dot += gr[c] * w[c] * xr[c] * r;
        for (int c = 0; c < C; c++) {
            if (dx) dx[(size_t)n * C + c] += r * (gr[c] * w[c] - xr[c] * r * dot / C);
            if (dw) dw[c] += gr[c] * xr[c] * r;
        }
    }
}
