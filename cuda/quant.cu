// quant.cu: the int4 grid of model/int4_grid.h on the GPU: fake-quant,
// dequantization of frozen codes, the straight-through / learned-scale
// backward and its frozen-code form, and the fp16 Adam of scales and zeros.
//
// Element i of a [rows, cols] tensor belongs to group i / G (cols is a
// multiple of G, so that is row * cols/G + column / G: the layout of the scale
// and zero arrays). The per-element arithmetic is kernel_math.h's, so
// fake-quant, dequant, the STE mask and the Adam give the CPU's bits. The
// per-group sums of the learned-scale and frozen backward run one warp per
// group: each lane sums its elements in index order, then a fixed tree
// across the warp (float, like the CPU; not its order).
#include "cuda_impl.cuh"

__global__ void quant_fake_kernel(float *out, const float *w, size_t n, int G, const float *scale, const float *zero,
                                  int lo, int sym) {
    CU_FOR(i, n) {
        const size_t k = i / G;
        out[i] = km_quant_fake(w[i], scale[k], sym ? 0.0f : zero[k], lo, sym);
    }
}

void cu_quant_fake(Device *d, const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                   const float *zero, float *out) {
    const size_t n = (size_t)(rows * cols);
    if (!n) return;
    const int sym = q->symmetric || !zero;
    quant_fake_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(out, w, n, q->group, scale, zero,
                                                                   quant_code_min(q), sym);
    CU_LAUNCHED();
}

__global__ void quant_dequant_kernel(float *w, const uint8_t *codes, size_t n, int G, const float *scale,
                                     const float *zero, int sym) {
    CU_FOR(i, n) {
        const size_t k = i / G;
        w[i] = km_quant_dequant(codes[i], scale[k], sym ? 0.0f : zero[k], sym);
    }
}

void cu_quant_dequant(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                      const float *scale, const float *zero, float *w) {
    const size_t n = (size_t)(rows * cols);
    if (!n) return;
    const int sym = q->symmetric || !zero;
    quant_dequant_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(w, codes, n, q->group, scale, zero, sym);
    CU_LAUNCHED();
}

// The STE mask alone (fixed scales): g = 0 where the weight is clipped; with
// scale 0, wherever the weight is off the zero point.
__global__ void quant_ste_kernel(const float *w, float *g, size_t n, int G, const float *scale, const float *zero,
                                 int lo, int sym) {
    CU_FOR(i, n) {
        const size_t k = i / G;
        const float s = scale[k], z = sym ? 0.0f : zero[k];
        const int keep = s == 0.0f ? w[i] == z : km_quant_inside(km_quant_rounded(w[i], s, z), lo);
        if (!keep) g[i] = 0.0f;
    }
}

enum { WARPS_PER_BLOCK = 8 };

// Blocks of WARPS_PER_BLOCK warps, one warp per group (no cap: the kernels do not loop).
static unsigned group_blocks(size_t groups) { return (unsigned)((groups + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK); }

// One warp per group: the STE mask on g and the group's sums of g * dw/dscale
// and g * dw/dzero (model/ops/quant.h states them; scale 0 takes the limit scale -> 0+).
__global__ void quant_lsq_kernel(const float *w, float *g, size_t groups, int G, const float *scale,
                                 const float *zero, float *gs, float *gz, int lo, int sym) {
    const size_t k = (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (k >= groups) return;
    const float s = scale[k], z = sym ? 0.0f : zero[k];
    const float *x = w + k * G;
    float *gg = g + k * G, ds = 0.0f, dz = 0.0f;
    for (int i = lane; i < G; i += 32) {
        const float gi = gg[i];
        if (s == 0.0f) {
            if (x[i] == z) continue;
            ds += gi * (float)((x[i] > z ? 15 : lo) - 8);
            dz += gi;
            gg[i] = 0.0f;
        } else {
            const float u = km_quant_rounded(x[i], s, z), c = km_quant_clamp(u, lo);
            const int inside = km_quant_inside(u, lo);
            ds += gi * (inside ? (c - 8.0f) - (x[i] - z) / s : c - 8.0f);
            dz += inside ? 0.0f : gi;
            gg[i] = inside ? gi : 0.0f;
        }
    }
    ds = cu_warp_sum(ds);
    dz = cu_warp_sum(dz);
    if (lane == 0) {
        if (gs) gs[k] = ds;
        if (gz) gz[k] = sym ? 0.0f : dz;
    }
}

void cu_quant_backward(Device *d, const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols,
                       const float *scale, const float *zero, float *grad_scale, float *grad_zero) {
    const size_t n = (size_t)(rows * cols);
    if (!n) return;
    const int sym = q->symmetric || !zero, lo = quant_code_min(q);
    cudaStream_t stream = cu_stream(d);
    if (!grad_scale && !grad_zero) {
        quant_ste_kernel<<<cu_blocks(n, 256), 256, 0, stream>>>(w, g, n, q->group, scale, zero, lo, sym);
    } else {
        const size_t groups = n / q->group;
        quant_lsq_kernel<<<group_blocks(groups), 32 * WARPS_PER_BLOCK, 0, stream>>>(
            w, g, groups, q->group, scale, zero, grad_scale, grad_zero, lo, sym);
    }
    CU_LAUNCHED();
}

// Frozen codes: grad_scale = sum g (u - 8), grad_zero = sum g per group; g zeroed.
__global__ void quant_frozen_kernel(const uint8_t *codes, float *g, size_t groups, int G, float *gs, float *gz,
                                    int sym) {
    const size_t k = (size_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (k >= groups) return;
    const uint8_t *u = codes + k * G;
    float *gg = g + k * G, ds = 0.0f, dz = 0.0f;
    for (int i = lane; i < G; i += 32) {
        ds += gg[i] * ((float)u[i] - 8.0f);
        dz += gg[i];
        gg[i] = 0.0f;
    }
    ds = cu_warp_sum(ds);
    dz = cu_warp_sum(dz);
    if (lane == 0) {
        gs[k] = ds;
        gz[k] = sym ? 0.0f : dz;
    }
}

void cu_quant_backward_frozen(Device *d, const QuantSpec *q, const uint8_t *codes, float *g, int64_t rows,
                              int64_t cols, float *grad_scale, float *grad_zero) {
    const size_t groups = (size_t)(rows * cols) / q->group;
    if (!groups) return;
    quant_frozen_kernel<<<group_blocks(groups), 32 * WARPS_PER_BLOCK, 0, cu_stream(d)>>>(
        codes, g, groups, q->group, grad_scale, grad_zero, q->symmetric);
    CU_LAUNCHED();
}

__global__ void quant_adam_kernel(float *p, const float *g, float *m, float *v, size_t n, float beta1, float beta2,
                                  float eps, float step_size, float bc2_sqrt, float lo, float hi) {
    CU_FOR(i, n) km_quant_adam(&p[i], g[i], &m[i], &v[i], beta1, beta2, eps, step_size, bc2_sqrt, lo, hi);
}

void cu_quant_adam(Device *d, float *p, const float *g, float *m, float *v, size_t n, const AdamWConfig *c, float lr,
                   long step, float lo, float hi) {
    if (!n) return;
    // The scalars as ops/quant.c forms them: bias corrections in double, then float.
    const double bc1 = 1.0 - pow(c->beta1, (double)step), bc2 = 1.0 - pow(c->beta2, (double)step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    quant_adam_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(p, g, m, v, n, c->beta1, c->beta2, c->eps,
                                                                   step_size, bc2_sqrt, lo, hi);
    CU_LAUNCHED();
}
