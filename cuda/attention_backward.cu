// attention_backward.cu: the gradients of causal GQA attention, recomputing
// the probabilities from the forward's log-sum-exp (attention.c has the math):
//   P = exp(scale * Q K^T - lse),  dP = dout V^T,  D = rowsum(dout * out),
//   dS = P * (dP - D),  dq += scale dS K,  dk += scale dS^T Q,  dv += P^T dout.
//
// Deterministic, without atomics: every output element is summed by one
// thread in a fixed order. Two kernels split the work by what they own:
//   dk/dv: a block owns one key block of one KV head and walks, in order, the
//          query heads of its group and, for each, the query tiles at or after
//          its keys; so dk and dv of a KV head are summed over its query heads
//          in head order, in registers, and added to dk/dv once.
//   dq:    a block owns one query tile of one head and walks the key blocks
//          up to it.
// Both recompute S and dP (the price of needing no atomics and no per-head
// copies of dk/dv); P and dS pass through shared memory for the products.
#include "attention.cuh"

using namespace attn;

// D[b, h, t] = sum_d dout * out of query row t, head h (fmaf in d order, as the CPU).
__global__ void attention_rowdot_kernel(float *Dv, const float *dout, const float *out, int B, int T, int nq, int hd) {
    const size_t rows = (size_t)B * T * nq;
    CU_FOR(idx, rows) {
        const size_t n = idx / nq;
        const int h = (int)(idx % nq);
        const float *a = dout + idx * hd, *o = out + idx * hd;   // row n, head h: (n*nq + h)*hd
        float dot = 0.0f;
        for (int c = 0; c < hd; c++) dot = fmaf(a[c], o[c], dot);
        Dv[((n / T) * nq + h) * T + n % T] = dot;
    }
}

// P and dS of one tile pair, into Ps and dSs (row: query, column: key), zero
// where a key is not visible: Qs, dOs hold the query tile, Ks, Vs the key
// block, lse_s and D_s the query rows' statistics.
template <int D>
__device__ __forceinline__ void tile_probs(float *Ps, float *dSs, const float *Qs, const float *dOs, const float *Ks,
                                           const float *Vs, const float *lse_s, const float *D_s, int t0, int u0,
                                           int T, const int *seg_b, float scale) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float s[4][4], dp[4][4];
    tile_dots<D>(s, Qs, Ks);
    tile_dots<D>(dp, dOs, Vs);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = ty * 4 + i, t = t0 + r;
        const int seg_t = seg_b && t < T ? seg_b[t] : 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = tx + 16 * j;
            const float p = visible(t, u0 + c, T, seg_b, seg_t) ? expf(s[i][j] * scale - lse_s[r]) : 0.0f;
            Ps[r * SP + c] = p;
            dSs[r * SP + c] = p * (dp[i][j] - D_s[r]);
        }
    }
}

// Loads the query tile's statistics (zero past T).
__device__ __forceinline__ void load_stats(float *lse_s, float *D_s, const float *lse, const float *Dv, size_t stat0,
                                           int rows) {
    for (int r = threadIdx.x; r < TB; r += THREADS) {
        lse_s[r] = r < rows ? lse[stat0 + r] : 0.0f;
        D_s[r] = r < rows ? Dv[stat0 + r] : 0.0f;
    }
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_dkdv_kernel(float *dk, float *dv, const float *dout,
                                                                  const float *lse, const float *Dv, const float *q,
                                                                  const float *k, const float *v, const int *seg,
                                                                  int T, int nq, int nkv, int hd, float scale) {
    constexpr int SD = Dims<D>::SD, J = Dims<D>::J;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + TB * SD, *Qs = Vs + TB * SD, *dOs = Qs + TB * SD;
    float *Ps = dOs + TB * SD, *dSs = Ps + TB * SP, *lse_s = dSs + TB * SP, *D_s = lse_s + TB;
    const int kb = blockIdx.x, g = blockIdx.y, b = blockIdx.z, rep = nq / nkv;
    const int u0 = kb * TB, n_tiles = (T + TB - 1) / TB, tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const size_t qs = (size_t)nq * hd, kvs = (size_t)nkv * hd;
    const int *seg_b = seg ? seg + (size_t)b * T : NULL;
    load_tile<D>(Ks, k + ((size_t)b * T + u0) * kvs + (size_t)g * hd, kvs, T - u0, hd);
    load_tile<D>(Vs, v + ((size_t)b * T + u0) * kvs + (size_t)g * hd, kvs, T - u0, hd);
    float dK[4][J], dV[4][J];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < J; j++) dK[i][j] = dV[i][j] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++)
        for (int qt = kb; qt < n_tiles; qt++) {
            const int t0 = qt * TB;
            if (!block_visible(t0, u0, T, seg_b)) continue;   // a barrier: the last pair's reads are done
            const size_t row0 = ((size_t)b * T + t0) * qs + (size_t)h * hd;
            load_tile<D>(Qs, q + row0, qs, T - t0, hd);
            load_tile<D>(dOs, dout + row0, qs, T - t0, hd);
            load_stats(lse_s, D_s, lse, Dv, ((size_t)b * nq + h) * T + t0, T - t0);
            __syncthreads();
            tile_probs<D>(Ps, dSs, Qs, dOs, Ks, Vs, lse_s, D_s, t0, u0, T, seg_b, scale);
            __syncthreads();
            tile_t_times<D>(dV, Ps, dOs);
            tile_t_times<D>(dK, dSs, Qs);
        }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int u = u0 + ty * 4 + i;
        if (u >= T) continue;
        const size_t row = ((size_t)b * T + u) * kvs + (size_t)g * hd;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = tx + 16 * j;
            if (c >= hd) continue;
            if (dk) dk[row + c] += scale * dK[i][j];
            if (dv) dv[row + c] += dV[i][j];
        }
    }
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_dq_kernel(float *dq, const float *dout, const float *lse,
                                                                const float *Dv, const float *q, const float *k,
                                                                const float *v, const int *seg, int T, int nq,
                                                                int nkv, int hd, float scale) {
    constexpr int SD = Dims<D>::SD, J = Dims<D>::J;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + TB * SD, *Ks = dOs + TB * SD, *Vs = Ks + TB * SD;
    float *Ps = Vs + TB * SD, *dSs = Ps + TB * SP, *lse_s = dSs + TB * SP, *D_s = lse_s + TB;
    const int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (nq / nkv);
    const int t0 = tile * TB, tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const size_t qs = (size_t)nq * hd, kvs = (size_t)nkv * hd, row0 = ((size_t)b * T + t0) * qs + (size_t)h * hd;
    const int *seg_b = seg ? seg + (size_t)b * T : NULL;
    load_tile<D>(Qs, q + row0, qs, T - t0, hd);
    load_tile<D>(dOs, dout + row0, qs, T - t0, hd);
    load_stats(lse_s, D_s, lse, Dv, ((size_t)b * nq + h) * T + t0, T - t0);
    float dQ[4][J];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < J; j++) dQ[i][j] = 0.0f;
    for (int kb = 0; kb <= tile; kb++) {
        const int u0 = kb * TB;
        if (!block_visible(t0, u0, T, seg_b)) continue;
        load_tile<D>(Ks, k + ((size_t)b * T + u0) * kvs + (size_t)g * hd, kvs, T - u0, hd);
        load_tile<D>(Vs, v + ((size_t)b * T + u0) * kvs + (size_t)g * hd, kvs, T - u0, hd);
        __syncthreads();
        tile_probs<D>(Ps, dSs, Qs, dOs, Ks, Vs, lse_s, D_s, t0, u0, T, seg_b, scale);
        __syncthreads();
        tile_times<D>(dQ, dSs, Ks);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = t0 + ty * 4 + i;
        if (t >= T) continue;
        float *o = dq + ((size_t)b * T + t) * qs + (size_t)h * hd;
#pragma unroll
        for (int j = 0; j < J; j++)
            if (tx + 16 * j < hd) o[tx + 16 * j] += scale * dQ[i][j];
    }
}

size_t cu_attention_workspace_bytes(int B, int T, int nq) { return (size_t)B * nq * T * sizeof(float) + 64; }

template <int D>
static void launch_backward(Device *d, float *dq, float *dk, float *dv, const float *dout, const float *lse,
                            const float *Dv, const float *q, const float *k, const float *v, const int *seg, int B,
                            int T, int nq, int nkv, int hd) {
    constexpr int SD = Dims<D>::SD;
    const size_t smem = (size_t)(4 * TB * SD + 2 * TB * SP + 2 * TB) * sizeof(float);
    const float scale = 1.0f / sqrtf((float)hd);
    const unsigned tiles = (unsigned)((T + TB - 1) / TB);
    cudaStream_t stream = cu_stream(d);
    if (dk || dv) {
        CU_CHECK(cudaFuncSetAttribute(attention_dkdv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attention_dkdv_kernel<D><<<dim3(tiles, (unsigned)nkv, (unsigned)B), THREADS, smem, stream>>>(
            dk, dv, dout, lse, Dv, q, k, v, seg, T, nq, nkv, hd, scale);
        CU_LAUNCHED();
    }
    if (dq) {
        CU_CHECK(cudaFuncSetAttribute(attention_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attention_dq_kernel<D><<<dim3(tiles, (unsigned)nq, (unsigned)B), THREADS, smem, stream>>>(
            dq, dout, lse, Dv, q, k, v, seg, T, nq, nkv, hd, scale);
        CU_LAUNCHED();
    }
}

void cu_attention_backward(Device *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, const int *seg, int B,
                           int T, int nq, int nkv, int hd) {
    check_shape(B, T, nq, nkv, hd, "attention_backward");
    if (!dq && !dk && !dv) return;
    const size_t mark = dev_scratch_mark(d), rows = (size_t)B * T * nq;
    float *Dv = (float *)dev_scratch(d, rows * sizeof(float), "attention row dots");
    attention_rowdot_kernel<<<cu_blocks(rows, 256), 256, 0, cu_stream(d)>>>(Dv, dout, out, B, T, nq, hd);
    CU_LAUNCHED();
    switch (padded_head_dim(hd, "attention_backward")) {
        case 16: launch_backward<16>(d, dq, dk, dv, dout, lse, Dv, q, k, v, seg, B, T, nq, nkv, hd); break;
        case 32: launch_backward<32>(d, dq, dk, dv, dout, lse, Dv, q, k, v, seg, B, T, nq, nkv, hd); break;
        case 64: launch_backward<64>(d, dq, dk, dv, dout, lse, Dv, q, k, v, seg, B, T, nq, nkv, hd); break;
        default: launch_backward<128>(d, dq, dk, dv, dout, lse, Dv, q, k, v, seg, B, T, nq, nkv, hd); break;
    }
    dev_scratch_release(d, mark);
}
