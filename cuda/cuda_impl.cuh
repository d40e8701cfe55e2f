// cuda_impl.cuh: what the CUDA backend's files share: the device state in
// d->impl (stream, cuBLASLt handle, the matmul plan cache, the error word the
// kernels report bad input through), error checks, launch helpers, and the
// ops each file defines for the table in device.cu. The semantics of every op
// are the CPU kernel's of the same name (model/ops/ops.h, model/ops/quant.h,
// and for fake-quant and dequantization the int4 grid's, model/int4_grid.h).
#pragma once
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <stdint.h>

extern "C" {   // the project's C headers: C linkage (before cuda.h includes them)
#include "../model/backend.h"
#include "../util/util.h"
}
#include "cuda.h"
#include "kernel_math.h"

// One cached cuBLASLt plan: the descriptors and the algorithm the heuristic
// chose for one problem (matmul.cu). A problem is the same when every field
// of the key is.
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, bf16, accumulate, align, lt_bytes_kib;
} GemmKey;

typedef struct {
    GemmKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    int has_algo;   // 0: cuBLASLt offered none; the plain kernel runs it
} GemmPlan;

enum { GEMM_CACHE = 96 };

// Bad input the kernels meet (the CPU ops die on it): the first one found is
// kept in a device word and reported, with die(), at the next point the host
// waits for the device anyway (a download, the classifier).
enum { CU_ERR_NONE = 0, CU_ERR_ROPE_POSITION = 1, CU_ERR_TARGET = 2 };

typedef struct {
    int ordinal;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cudaDeviceProp prop;
    int *err;               // device memory: one CU_ERR_* word, then the row/position it concerns
    GemmPlan plans[GEMM_CACHE];
    int n_plans, next_evict;
    int fallback_noted;     // the plain-kernel notice was printed
} CudaState;

static inline CudaState *cu_state(const Device *d) { return (CudaState *)d->impl; }
static inline cudaStream_t cu_stream(const Device *d) { return cu_state(d)->stream; }

// Fatal on any CUDA error: a GPU fault is a bug or a broken machine, not input.
void cu_fail(cudaError_t err, const char *what, const char *file, int line);
#define CU_CHECK(call)                                                    \
    do {                                                                  \
        cudaError_t cu_err_ = (call);                                     \
        if (cu_err_ != cudaSuccess) cu_fail(cu_err_, #call, __FILE__, __LINE__); \
    } while (0)
// After a launch: a bad configuration shows up here, a fault at the next sync.
#define CU_LAUNCHED() CU_CHECK(cudaGetLastError())

// Reads the error word (synchronizing the stream) and dies with its message.
void cu_check_errors(Device *d, const char *where);

// Blocks of `threads` covering n items, capped for grid-stride loops.
static inline unsigned cu_blocks(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b > (1u << 20)) b = 1u << 20;
    return (unsigned)(b ? b : 1);
}

// Grid-stride loop over [0, n).
#define CU_FOR(i, n) for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// Sum over the 32 lanes of a warp, in a fixed tree (every lane gets it).
__device__ __forceinline__ float cu_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double cu_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A reduction over the block's THREADS threads (a power of two) in a fixed
// tree through shared red[THREADS]: every thread gets the result, and red may
// be reused as soon as it returns (the last barrier orders the reads).
struct CuAdd { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct CuMax { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
template <int THREADS, typename T, typename Op>
__device__ T cu_block_reduce(T v, T *red, Op op) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o >>= 1) {
        if (tid < o) red[tid] = op(red[tid], red[tid + o]);
        __syncthreads();
    }
    const T r = red[0];
    __syncthreads();
    return r;
}

// Records the first bad input (code, where) in the device's error word.
__device__ __forceinline__ void cu_report(int *err, int code, int where) {
    if (atomicCAS(err, CU_ERR_NONE, code) == CU_ERR_NONE) err[1] = where;
}

// ---- the ops (one file per concern), as in the Backend table
// matmul.cu
size_t cu_matmul_workspace_bytes(const Device *d, int N, int C, int OC);
void cu_matmul_forward(Device *d, float *out, const float *inp, const float *W, int N, int C, int OC,
                       MatmulPrecision p);
void cu_matmul_backward(Device *d, float *dinp, float *dW, const float *dout, const float *inp, const float *W, int N,
                        int C, int OC, MatmulPrecision p);
void cu_gemm_plans_free(CudaState *s);
// embedding.cu
size_t cu_embedding_workspace_bytes(const Device *d, int N);
void cu_embedding_forward(Device *d, float *out, const int *tokens, const float *E, int N, int C);
void cu_embedding_backward(Device *d, float *dE, const float *dout, const int *tokens, int N, int C, int skip_id);
// rmsnorm.cu
size_t cu_rmsnorm_workspace_bytes(int N, int C);
void cu_rmsnorm_forward(Device *d, float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
void cu_rmsnorm_backward(Device *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int N, int C);
// elementwise.cu
void cu_rope_forward(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
void cu_rope_backward(Device *d, float *dx, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
void cu_swiglu_forward(Device *d, float *out, const float *gate, const float *up, size_t n);
void cu_swiglu_backward(Device *d, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                        size_t n);
void cu_residual_forward(Device *d, float *out, const float *a, const float *b, size_t n);
void cu_dropout_forward(Device *d, float *out, const float *x, size_t n, float p, uint64_t seed);
void cu_dropout_backward(Device *d, float *dx, const float *dout, size_t n, float p, uint64_t seed);
void cu_a16_round(Device *d, float *x, size_t n, int mode);
// attention.cu, attention_backward.cu
size_t cu_attention_workspace_bytes(int B, int T, int nq);
void cu_attention_forward(Device *d, float *out, float *lse, const float *q, const float *k, const float *v,
                          const int *seg, int B, int T, int nq, int nkv, int hd);
void cu_attention_backward(Device *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, const int *seg, int B,
                           int T, int nq, int nkv, int hd);
void cu_attention_cached(Device *d, float *out, const float *q, const float *K, const float *V, int p0, int n, int nq,
                         int nkv, int hd, size_t kv_stride);
// classifier.cu
size_t cu_classifier_workspace_bytes(const Device *d, int N, int C, int V);
double cu_classifier(Device *d, float *dh, float *dW, float *logits_out, const float *h, const float *W,
                     const int *targets, const uint8_t *mask, int N, int C, int V, float scale, int *count,
                     MatmulPrecision p);
void cu_classifier_scaled(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                          const uint8_t *mask, int N, int C, int V, RowScaleFn scale_of, void *ctx,
                          MatmulPrecision p);
// distill.cu (its scratch fits in the classifier's workspace: see cu_classifier_workspace_bytes)
double cu_classifier_distill(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                             const uint8_t *mask, int N, int C, int V, float scale, const DistillTarget *t,
                             DistillSums *sums, int *count, MatmulPrecision p);
// optim.cu
size_t cu_grad_norm_workspace_bytes(size_t n_params);
void cu_adamw_step(Device *d, float *params, const float *grads, float *m, float *v, const TensorTable *tt,
                   const AdamWConfig *c, float lr, long step);
void cu_grad_sumsq(Device *d, const float *grads, size_t n, double *partials);
void cu_grad_scale(Device *d, float *grads, size_t n, float s);
// quant.cu
void cu_quant_fake(Device *d, const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                   const float *zero, float *out);
void cu_quant_dequant(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                      const float *scale, const float *zero, float *w);
void cu_quant_backward(Device *d, const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols,
                       const float *scale, const float *zero, float *grad_scale, float *grad_zero);
void cu_quant_backward_frozen(Device *d, const QuantSpec *q, const uint8_t *codes, float *g, int64_t rows,
                              int64_t cols, float *grad_scale, float *grad_zero);
void cu_quant_adam(Device *d, float *p, const float *g, float *m, float *v, size_t n, const AdamWConfig *c, float lr,
                   long step, float lo, float hi);
