// attention.cu: causal GQA attention forward (flash style: the softmax runs
// online over key blocks, only the log-sum-exp of each query row is kept,
// never a T x T matrix) and the KV-cache step of generation.
//
// These are our own fp32 kernels rather than cuDNN's or a library's flash
// attention: the decoder's contract is fp32 attention checked against the
// double reference at 1e-4, with packed-segment masks and lse[B, nq, T] as the
// CPU lays it out; the fast paths in libraries are bf16/fp16 tensor-core
// kernels with their own layouts. cuda/README.md says what the faster path
// would be. Correct first: fp32 throughout, 64 x 64 tiles in shared memory.
#include "attention.cuh"

using namespace attn;

// One block: query tile `tile` (heavy tiles, near the end of the sequence,
// are launched first) of head h in row b. For each visible key block: scores
// S = scale * Q K^T, masked; the running max m and sum l of every query row
// are updated and the accumulator rescaled by exp(m_old - m_new); P = exp(S -
// m) goes through shared memory into acc += P V. At the end out = acc / l and
// lse = m + log(l). Key t itself is visible to query t, so l >= 1.
template <int D>
__global__ void __launch_bounds__(THREADS) attention_forward_kernel(float *out, float *lse, const float *q,
                                                                     const float *k, const float *v, const int *seg,
                                                                     int T, int nq, int nkv, int hd, float scale) {
    constexpr int SD = Dims<D>::SD, J = Dims<D>::J;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + TB * SD, *Vs = Ks + TB * SD, *Ps = Vs + TB * SD;
    const int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (nq / nkv), t0 = tile * TB, tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const size_t qs = (size_t)nq * hd, kvs = (size_t)nkv * hd;
    const int *seg_b = seg ? seg + (size_t)b * T : NULL;
    load_tile<D>(Qs, q + ((size_t)b * T + t0) * qs + (size_t)h * hd, qs, T - t0, hd);
    int seg_t[4];
    float m[4], l[4], acc[4][J];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = t0 + ty * 4 + i;
        seg_t[i] = seg_b && t < T ? seg_b[t] : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++) acc[i][j] = 0.0f;
    }
    for (int kb = 0; kb <= tile; kb++) {
        const int u0 = kb * TB;
        if (!block_visible(t0, u0, T, seg_b)) continue;   // a barrier: Qs is loaded, the last block's reads done
        load_tile<D>(Ks, k + ((size_t)b * T + u0) * kvs + (size_t)g * hd, kvs, T - u0, hd);
        load_tile<D>(Vs, v + ((size_t)b * T + u0) * kvs + (size_t)g * hd, kvs, T - u0, hd);
        __syncthreads();
        float s[4][4];
        tile_dots<D>(s, Qs, Ks);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int t = t0 + ty * 4 + i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[i][j] = visible(t, u0 + tx + 16 * j, T, seg_b, seg_t[i]) ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            const float m_new = fmaxf(m[i], row_max16(mx));
            // Nothing visible in this row yet: no weight, nothing to rescale.
            const float corr = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float p = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - m_new);
                Ps[(ty * 4 + i) * SP + tx + 16 * j] = p;
                sum += p;
            }
            l[i] = l[i] * corr + sum;   // this thread's share of the row sum
#pragma unroll
            for (int j = 0; j < J; j++) acc[i][j] *= corr;
            m[i] = m_new;
        }
        __syncthreads();
        tile_times<D>(acc, Ps, Vs);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = t0 + ty * 4 + i;
        const float L = row_sum16(l[i]);
        if (t >= T) continue;
        float *o = out + ((size_t)b * T + t) * qs + (size_t)h * hd;
#pragma unroll
        for (int j = 0; j < J; j++)
            if (tx + 16 * j < hd) o[tx + 16 * j] = acc[i][j] / L;
        if (tx == 0) lse[((size_t)b * nq + h) * T + t] = m[i] + logf(L);
    }
}

template <int D>
static void launch_forward(Device *d, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int *seg, int B, int T, int nq, int nkv, int hd) {
    constexpr int SD = Dims<D>::SD;
    const size_t smem = (size_t)(3 * TB * SD + TB * SP) * sizeof(float);
    CU_CHECK(cudaFuncSetAttribute(attention_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((T + TB - 1) / TB), (unsigned)nq, (unsigned)B);
    attention_forward_kernel<D><<<grid, THREADS, smem, cu_stream(d)>>>(out, lse, q, k, v, seg, T, nq, nkv, hd,
                                                                       1.0f / sqrtf((float)hd));
    CU_LAUNCHED();
}

void cu_attention_forward(Device *d, float *out, float *lse, const float *q, const float *k, const float *v,
                          const int *seg, int B, int T, int nq, int nkv, int hd) {
    check_shape(B, T, nq, nkv, hd, "attention_forward");
    switch (padded_head_dim(hd, "attention_forward")) {
        case 16: launch_forward<16>(d, out, lse, q, k, v, seg, B, T, nq, nkv, hd); break;
        case 32: launch_forward<32>(d, out, lse, q, k, v, seg, B, T, nq, nkv, hd); break;
        case 64: launch_forward<64>(d, out, lse, q, k, v, seg, B, T, nq, nkv, hd); break;
        default: launch_forward<128>(d, out, lse, q, k, v, seg, B, T, nq, nkv, hd); break;
    }
}

// ---- the KV-cache step: query row i (position p0 + i) of head h against
// cached keys 0 .. p0+i. One block of CACHED_THREADS per (head, row): keys
// are taken CACHED_THREADS at a time, one per thread (its score, a dot
// product over hd); the block's max and sum come from fixed-order reductions
// in shared memory; then each thread accumulates the output dimensions d =
// tid, tid + CACHED_THREADS (hd <= 256) over the chunk's keys, rescaled
// online like the forward.
enum { CACHED_THREADS = 128 };

__global__ void __launch_bounds__(CACHED_THREADS) attention_cached_kernel(float *out, const float *q, const float *K,
                                                                          const float *V, int p0, int nq, int nkv,
                                                                          int hd, size_t kvs, float scale) {
    __shared__ float qsh[256], psh[CACHED_THREADS], red[CACHED_THREADS];
    const int h = blockIdx.x, i = blockIdx.y, tid = threadIdx.x, g = h / (nq / nkv), last = p0 + i;
    const size_t qs = (size_t)nq * hd;
    for (int c = tid; c < hd; c += CACHED_THREADS) qsh[c] = q[(size_t)i * qs + (size_t)h * hd + c];
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc[2] = {0.0f, 0.0f};
    for (int u0 = 0; u0 <= last; u0 += CACHED_THREADS) {
        const int u = u0 + tid;
        float s = -INFINITY;
        if (u <= last) {
            const float *ku = K + (size_t)u * kvs + (size_t)g * hd;
            float dot = 0.0f;
            for (int c = 0; c < hd; c++) dot = fmaf(qsh[c], ku[c], dot);
            s = dot * scale;
        }
        const float m_new = fmaxf(m, cu_block_reduce<CACHED_THREADS>(s, red, CuMax()));   // key u0 is always visible: finite
        const float corr = expf(m - m_new), p = u <= last ? expf(s - m_new) : 0.0f;
        psh[tid] = p;
        l = l * corr + cu_block_reduce<CACHED_THREADS>(p, red, CuAdd());   // also the barrier before psh is read
        const int n_keys = last - u0 + 1 < CACHED_THREADS ? last - u0 + 1 : CACHED_THREADS;
        for (int r = 0; r < 2; r++) {
            const int c = tid + r * CACHED_THREADS;
            if (c >= hd) break;
            float a = acc[r] * corr;
            for (int j = 0; j < n_keys; j++) a = fmaf(psh[j], V[(size_t)(u0 + j) * kvs + (size_t)g * hd + c], a);
            acc[r] = a;
        }
        m = m_new;
        __syncthreads();   // psh is rewritten next chunk
    }
    for (int r = 0; r < 2; r++) {
        const int c = tid + r * CACHED_THREADS;
        if (c < hd) out[(size_t)i * qs + (size_t)h * hd + c] = acc[r] / l;
    }
}

void cu_attention_cached(Device *d, float *out, const float *q, const float *K, const float *V, int p0, int n, int nq,
                         int nkv, int hd, size_t kv_stride) {
    if (n <= 0) return;
    if (hd <= 0 || hd > 256 || nq <= 0 || nkv <= 0 || nq % nkv != 0 || p0 < 0)
        die("attention_cached: bad shape nq=%d nkv=%d hd=%d p0=%d (the CUDA kernel takes hd <= 256)", nq, nkv, hd, p0);
    if (nq > 65535 || n > 65535) die("attention_cached: %d heads x %d rows exceed the launch grid", nq, n);
    dim3 grid((unsigned)nq, (unsigned)n);
    attention_cached_kernel<<<grid, CACHED_THREADS, 0, cu_stream(d)>>>(out, q, K, V, p0, nq, nkv, hd, kv_stride,
                                                                       1.0f / sqrtf((float)hd));
    CU_LAUNCHED();
}
