// attention.cuh: what the attention kernels share (attention.cu: forward and
// the KV-cache step; attention_backward.cu). Layout as the CPU's (ops.h):
// q[N, nq*hd], k/v[N, nkv*hd], row n = b*T + t, lse[B, nq, T]; query head h
// reads KV head h / (nq/nkv), indexed inside the kernels (K and V are never
// repeated per query head); key u is visible to query t iff u <= t and, with
// segment ids, seg[b*T+u] == seg[b*T+t].
//
// Tiles: a block works on TB = 64 queries x 64 keys at a time with 256
// threads in a 16 x 16 grid. Thread (ty, tx) holds the 4 x 4 scores of query
// rows ty*4 + i and key columns tx + 16*j, and the 4 rows x D/16 columns
// (tx + 16*j) of a 64 x D accumulator. The head dimension is padded to D, a
// multiple of 16 fixed at compile time (16, 32, 64 or 128), with zeros, so
// the loops unroll and the accumulators stay in registers. Shared tiles have
// rows of D + 1 floats: the 16 threads of a half-warp then read 16 different
// rows of one column from 16 different banks.
#pragma once
#include "cuda_impl.cuh"

namespace attn {

enum { TB = 64, THREADS = 256, SP = TB + 1 };   // SP: row stride of a 64 x 64 score tile

template <int D>
struct Dims {
    static constexpr int SD = D + 1;   // row stride of a 64 x D tile
    static constexpr int J = D / 16;   // accumulator columns per thread
};

// Rows of the tile starting at row0 (rows past T are zero), hd values each
// from src (row stride `stride`), padded with zeros to D.
template <int D>
__device__ __forceinline__ void load_tile(float *dst, const float *src, size_t stride, int rows, int hd) {
    constexpr int SD = Dims<D>::SD;
    for (int idx = threadIdx.x; idx < TB * D; idx += THREADS) {
        const int r = idx / D, c = idx % D;
        dst[r * SD + c] = r < rows && c < hd ? src[(size_t)r * stride + c] : 0.0f;
    }
}

// s[i][j] = sum_d A[ty*4+i][d] * Bt[tx+16j][d]: rows of A against rows of Bt.
template <int D>
__device__ __forceinline__ void tile_dots(float s[4][4], const float *A, const float *Bt) {
    constexpr int SD = Dims<D>::SD;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; d++) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = A[(ty * 4 + i) * SD + d];
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = Bt[(tx + 16 * j) * SD + d];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = fmaf(a[i], b[j], s[i][j]);
    }
}

// acc[i][j] += sum_c P[ty*4+i][c] * M[c][tx+16j]: a 64 x 64 tile (row stride
// SP) times a 64 x D tile.
template <int D>
__device__ __forceinline__ void tile_times(float acc[4][Dims<D>::J], const float *P, const float *M) {
    constexpr int SD = Dims<D>::SD, J = Dims<D>::J;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 4
    for (int c = 0; c < TB; c++) {
        float p[4];
#pragma unroll
        for (int i = 0; i < 4; i++) p[i] = P[(ty * 4 + i) * SP + c];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const float m = M[c * SD + tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i][j] = fmaf(p[i], m, acc[i][j]);
        }
    }
}

// acc[i][j] += sum_r P[r][ty*4+i] * M[r][tx+16j]: the transposed 64 x 64 tile
// times a 64 x D tile (dk and dv: key rows from the columns of P and dS).
template <int D>
__device__ __forceinline__ void tile_t_times(float acc[4][Dims<D>::J], const float *P, const float *M) {
    constexpr int SD = Dims<D>::SD, J = Dims<D>::J;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 4
    for (int r = 0; r < TB; r++) {
        float p[4];
#pragma unroll
        for (int i = 0; i < 4; i++) p[i] = P[r * SP + ty * 4 + i];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const float m = M[r * SD + tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i][j] = fmaf(p[i], m, acc[i][j]);
        }
    }
}

// Max and sum over the 16 threads of a row (lanes differing in bits 0..3):
// a fixed tree, every one of them gets the result.
__device__ __forceinline__ float row_max16(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float row_sum16(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Whether key u may be seen by query t (both inside the sequence; seg_b the
// row's segment ids or NULL, seg_t the query's).
__device__ __forceinline__ bool visible(int t, int u, int T, const int *seg_b, int seg_t) {
    return t < T && u <= t && (!seg_b || seg_b[u] == seg_t);
}

// Whether any pair of query tile [t0, t0+64) and key block [u0, u0+64) is
// visible; the answer is the same for every thread of the block (a barrier).
__device__ __forceinline__ bool block_visible(int t0, int u0, int T, const int *seg_b) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int any = 0;
    for (int i = 0; i < 4 && !any; i++) {
        const int t = t0 + ty * 4 + i;
        const int seg_t = seg_b && t < T ? seg_b[t] : 0;
        for (int j = 0; j < 4; j++)
            if (visible(t, u0 + tx + 16 * j, T, seg_b, seg_t)) any = 1;
    }
    return __syncthreads_or(any) != 0;
}

// The padded head size the kernels are compiled for: 16, 32, 64 or 128.
static inline int padded_head_dim(int hd, const char *who) {
    if (hd <= 0 || hd > 128) die("%s: head_dim %d is outside what the CUDA attention supports (1..128)", who, hd);
    return hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : 128;
}

static inline void check_shape(int B, int T, int nq, int nkv, int hd, const char *who) {
    if (B <= 0 || T <= 0 || hd <= 0 || nq <= 0 || nkv <= 0 || nq % nkv != 0)
        die("%s: bad shape B=%d T=%d hd=%d, or %d query heads not a multiple of %d KV heads", who, B, T, hd, nq, nkv);
    if (nq > 65535 || B > 65535) die("%s: %d heads x %d rows exceed the launch grid", who, nq, B);
}

}   // namespace attn
