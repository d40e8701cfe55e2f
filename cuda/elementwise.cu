// elementwise.cu: the ops that touch each value on its own: RoPE, SwiGLU, the
// residual add, A16 rounding. One thread per value (or RoPE pair), the
// arithmetic from kernel_math.h where it must give the CPU's bits.
#include "cuda_impl.cuh"
#include "../model/dropout_mask.h"

// ---- RoPE (rope.c): rotate-half pairs (i, i + hd/2) of every head, by the
// table's angle at the row's position; the backward rotates by minus the
// angle (the transpose). The products and sums are the CPU's, uncontracted,
// so the result is the CPU's bit for bit. A position outside the table is
// reported through the error word (the CPU dies on it) and the row is left alone.
__global__ void rope_kernel(float *x, const float *cos_t, const float *sin_t, const int *pos, int N, int n_heads,
                            int half, int max_pos, float direction, int *err) {
    const size_t pairs = (size_t)N * n_heads * half;
    CU_FOR(idx, pairs) {
        const int i = (int)(idx % half);
        const size_t nh = idx / half;   // row * n_heads + head
        const int n = (int)(nh / n_heads), p = pos[n];
        if (p < 0 || p >= max_pos) {
            cu_report(err, CU_ERR_ROPE_POSITION, n);
            continue;
        }
        float *x0 = x + nh * 2 * half, *x1 = x0 + half;
        const float c = cos_t[(size_t)p * half + i], s = direction * sin_t[(size_t)p * half + i];
        float y0, y1;
        km_rope_pair(x0[i], x1[i], c, s, &y0, &y1);
        x0[i] = y0;
        x1[i] = y1;
    }
}

static void rope(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim,
                 float direction) {
    if (head_dim != 2 * rt->half)
        die("rope: head_dim %d does not match the table's %d", head_dim, 2 * rt->half);
    const size_t pairs = (size_t)N * n_heads * rt->half;
    if (!pairs) return;
    rope_kernel<<<cu_blocks(pairs, 256), 256, 0, cu_stream(d)>>>(x, rt->cos, rt->sin, pos, N, n_heads, rt->half,
                                                                 rt->max_pos, direction, cu_state(d)->err);
    CU_LAUNCHED();
}

void cu_rope_forward(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim) {
    rope(d, x, rt, pos, N, n_heads, head_dim, 1.0f);
}

void cu_rope_backward(Device *d, float *dx, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim) {
    rope(d, dx, rt, pos, N, n_heads, head_dim, -1.0f);
}

// ---- SwiGLU (swiglu.c): out = silu(gate) * up, silu(g) = g / (1 + exp(-g));
// d silu / dg = sig * (1 + g (1 - sig)). expf is the device's (within 2 ulp),
// so values differ from the CPU's in the last bits.
__global__ void swiglu_forward_kernel(float *out, const float *gate, const float *up, size_t n) {
    CU_FOR(i, n) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout, const float *gate,
                                       const float *up, size_t n) {
    CU_FOR(i, n) {
        const float g = gate[i], sig = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        if (dup) dup[i] += dout[i] * g * sig;
    }
}

void cu_swiglu_forward(Device *d, float *out, const float *gate, const float *up, size_t n) {
    if (!n) return;
    swiglu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(out, gate, up, n);
    CU_LAUNCHED();
}

void cu_swiglu_backward(Device *d, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                        size_t n) {
    if (!n || (!dgate && !dup)) return;
    swiglu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(dgate, dup, dout, gate, up, n);
    CU_LAUNCHED();
}

// ---- residual: out = a + b (exact: one rounding, as on the CPU)
__global__ void residual_kernel(float *out, const float *a, const float *b, size_t n) {
    CU_FOR(i, n) out[i] = a[i] + b[i];
}

void cu_residual_forward(Device *d, float *out, const float *a, const float *b, size_t n) {
    if (!n) return;
    residual_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(out, a, b, n);
    CU_LAUNCHED();
}

// ---- dropout (dropout.c): the mask from (seed, i) by dropout_mask.h's
// integer hash, one multiply by the float 1/(1-p): the CPU's bits.
__global__ void dropout_forward_kernel(float *out, const float *x, size_t n, uint32_t thr, float s, uint64_t seed) {
    CU_FOR(i, n) out[i] = dropout_keep(seed, i, thr) ? __fmul_rn(x[i], s) : 0.0f;
}

__global__ void dropout_backward_kernel(float *dx, const float *dout, size_t n, uint32_t thr, float s,
                                        uint64_t seed) {
    CU_FOR(i, n) if (dropout_keep(seed, i, thr)) dx[i] = __fadd_rn(dx[i], __fmul_rn(dout[i], s));
}

void cu_dropout_forward(Device *d, float *out, const float *x, size_t n, float p, uint64_t seed) {
    if (!n) return;
    dropout_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(out, x, n, dropout_threshold(p),
                                                                        dropout_scale(p), seed);
    CU_LAUNCHED();
}

void cu_dropout_backward(Device *d, float *dx, const float *dout, size_t n, float p, uint64_t seed) {
    if (!n) return;
    dropout_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(dx, dout, n, dropout_threshold(p),
                                                                         dropout_scale(p), seed);
    CU_LAUNCHED();
}

// ---- A16 (quant.c's a16_round): bf16 or fp16 round to nearest even, in
// place, by util's conversions (kernel_math.h), so the CPU's bits.
__global__ void a16_kernel(float *x, size_t n, int mode) {
    CU_FOR(i, n) x[i] = km_a16(x[i], mode);
}

void cu_a16_round(Device *d, float *x, size_t n, int mode) {
    if (!n || (mode != A16_BF16 && mode != A16_FP16)) return;
    a16_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(x, n, mode);
    CU_LAUNCHED();
}
