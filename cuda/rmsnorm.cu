// rmsnorm.cu: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), over rows
// of C (the hidden norms: N rows of H; QK-norm: N*heads rows of head_dim),
// and its backward (rmsnorm.c has the formulas):
//   dx += rstd * (g*w - xhat * mean(g*w*xhat)),  dw += sum over rows of g * xhat.
// One warp per row: its lanes take every 32nd column, and the row's sums are
// reduced across the warp in a fixed tree. dw sums over every row, so it is
// reduced in two fixed-order steps instead of with atomics: each block of
// ROWS_PER_PART rows writes one partial row into the workspace, then each
// column adds its partials in block order. The same bits on every run.
#include "cuda_impl.cuh"

enum { ROWS_PER_PART = 256, WARPS = 8 };

__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *x, const float *w, int N, int C,
                                       float eps) {
    const int lane = threadIdx.x % 32, n = blockIdx.x * WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const float *xr = x + (size_t)n * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss = fmaf(xr[c], xr[c], ss);
    ss = cu_warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (lane == 0) rstd[n] = r;
    float *yr = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) yr[c] = km_mul(w[c], km_mul(xr[c], r));
}

void cu_rmsnorm_forward(Device *d, float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    if (N <= 0) return;
    rmsnorm_forward_kernel<<<(N + WARPS - 1) / WARPS, 32 * WARPS, 0, cu_stream(d)>>>(out, rstd, x, w, N, C, eps);
    CU_LAUNCHED();
}

__global__ void rmsnorm_dx_kernel(float *dx, const float *dout, const float *x, const float *w, const float *rstd,
                                  int N, int C) {
    const int lane = threadIdx.x % 32, n = blockIdx.x * WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const float *xr = x + (size_t)n * C, *gr = dout + (size_t)n * C;
    const float r = rstd[n];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += gr[c] * w[c] * (xr[c] * r);
    const float mean_dot = cu_warp_sum(dot) / (float)C;
    float *dxr = dx + (size_t)n * C;
    for (int c = lane; c < C; c += 32) dxr[c] += r * (gr[c] * w[c] - (xr[c] * r) * mean_dot);
}

// partial[part][c] = sum over the part's rows of dout * xhat, rows in order.
__global__ void rmsnorm_dw_part_kernel(float *partial, const float *dout, const float *x, const float *rstd, int N,
                                       int C) {
    const int part = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int n0 = part * ROWS_PER_PART, n1 = n0 + ROWS_PER_PART < N ? n0 + ROWS_PER_PART : N;
    float s = 0.0f;
    for (int n = n0; n < n1; n++) s += dout[(size_t)n * C + c] * (x[(size_t)n * C + c] * rstd[n]);
    partial[(size_t)part * C + c] = s;
}

__global__ void rmsnorm_dw_sum_kernel(float *dw, const float *partial, int parts, int C) {
    CU_FOR(c, (size_t)C) {
        float s = 0.0f;
        for (int p = 0; p < parts; p++) s += partial[(size_t)p * C + c];
        dw[c] += s;
    }
}

size_t cu_rmsnorm_workspace_bytes(int N, int C) {
    return (size_t)((N + ROWS_PER_PART - 1) / ROWS_PER_PART) * C * sizeof(float) + 64;
}

void cu_rmsnorm_backward(Device *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int N, int C) {
    if (N <= 0) return;
    cudaStream_t stream = cu_stream(d);
    if (dx) {
        rmsnorm_dx_kernel<<<(N + WARPS - 1) / WARPS, 32 * WARPS, 0, stream>>>(dx, dout, x, w, rstd, N, C);
        CU_LAUNCHED();
    }
    if (dw) {
        const size_t mark = dev_scratch_mark(d);
        const int parts = (N + ROWS_PER_PART - 1) / ROWS_PER_PART;
        float *partial = (float *)dev_scratch(d, (size_t)parts * C * sizeof(float), "rmsnorm dw partials");
        dim3 grid((unsigned)parts, (unsigned)((C + 127) / 128));
        rmsnorm_dw_part_kernel<<<grid, 128, 0, stream>>>(partial, dout, x, rstd, N, C);
        CU_LAUNCHED();
        rmsnorm_dw_sum_kernel<<<cu_blocks((size_t)C, 128), 128, 0, stream>>>(dw, partial, parts, C);
        CU_LAUNCHED();
        dev_scratch_release(d, mark);
    }
}
