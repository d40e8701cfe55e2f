// matmul.cu: out[N,OC] = inp[N,C] W[OC,C]^T and its backward (dinp += dout W,
// dW += dout^T inp) through cuBLASLt, in the two precisions of backend.h:
//   MATMUL_FP32  true fp32: CUBLAS_COMPUTE_32F (never the TF32 fast path),
//                fp32 operands, fp32 accumulation.
//   MATMUL_BF16  both operands rounded to bf16 first (round to nearest even,
//                subnormals to zero: km_bf16_bits_matmul, the CPU's
//                matmul_bf16_round) into the workspace; the tensor cores
//                multiply them (a bf16 x bf16 product is exact in fp32) and
//                accumulate in fp32; the output is fp32.
//
// cuBLASLt is column-major; our matrices are row-major. A row-major X[r, c] is
// the column-major X^T (c x r, leading dimension c), so each product is the
// transposed one, with no copy:
//   forward  out^T (OC x N)  = W^T' inp^T    : op(A) = T on W viewed C x OC,   B = inp viewed C x N
//   dinp     dinp^T (C x N) += W dout^T      : A = W viewed C x OC (N),        B = dout viewed OC x N (N)
//   dW       dW^T (C x OC)  += inp^T dout    : A = inp viewed C x N (N),       op(B) = T on dout viewed OC x N
// The backward accumulates with beta = 1, as every backward op does.
//
// Determinism: cuBLASLt gives the same bits for the same problem, algorithm
// and workspace on the same GPU (its split-K reduction schemes all keep a
// fixed order; none uses floating-point atomics). The algorithm of a problem
// is chosen once by the heuristic and cached (GemmPlan), so every later call
// of that shape runs the same one.
#include <string.h>
#include "cuda_impl.cuh"

#define LT_WORKSPACE_MAX ((size_t)32 << 20)   // cuBLASLt's scratch on Hopper (its recommendation)

static void lt_check(cublasStatus_t st, const char *what) {
    if (st != CUBLAS_STATUS_SUCCESS) die("cuBLASLt: %s: %s", what, cublasLtGetStatusString(st));
}

// The alignment the heuristic may assume of a pointer: 16 bytes (what
// Hopper's fast kernels need) when the address has it, else the largest power
// of two dividing it (a row offset into an odd-width matrix is only
// 4-aligned). Capped at 16 so that the algorithm, and so the bits, of a
// product does not change with where in the activation arena a buffer lies.
static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 16;
    while (al > 1 && (a % (uintptr_t)al)) al >>= 1;
    return al;
}

static int key_equal(const GemmKey *a, const GemmKey *b) { return memcmp(a, b, sizeof *a) == 0; }

static void plan_free(GemmPlan *p) {
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
}

void cu_gemm_plans_free(CudaState *s) {
    for (int i = 0; i < s->n_plans; i++) plan_free(&s->plans[i]);
    s->n_plans = 0;
}

// The plan of a problem: from the cache, or made (descriptors, heuristic) and cached.
static GemmPlan *plan_for(CudaState *s, const GemmKey *key) {
    for (int i = 0; i < s->n_plans; i++)
        if (key_equal(&s->plans[i].key, key)) return &s->plans[i];
    GemmPlan *p;
    if (s->n_plans < GEMM_CACHE) {
        p = &s->plans[s->n_plans++];
    } else {   // full: replace the entries in turn
        p = &s->plans[s->next_evict];
        s->next_evict = (s->next_evict + 1) % GEMM_CACHE;
        plan_free(p);
    }
    memset(p, 0, sizeof *p);
    p->key = *key;
    const cudaDataType_t ab = key->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    lt_check(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t ta = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
    lt_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
    // Each layout describes the matrix as stored (before the transpose).
    lt_check(cublasLtMatrixLayoutCreate(&p->a, ab, key->ta ? key->k : key->m, key->ta ? key->m : key->k, key->lda),
             "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&p->b, ab, key->tb ? key->n : key->k, key->tb ? key->k : key->n, key->ldb),
             "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, key->m, key->n, key->ldc), "layout C");
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = (uint64_t)key->lt_bytes_kib << 10;
    const uint32_t align = (uint32_t)key->align;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "workspace preference");
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        lt_check(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align), "alignment preference");
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = result.algo;
        p->has_algo = 1;
    }
    return p;
}

// The plain kernel for problems cuBLASLt offers no algorithm for (tiny or
// oddly aligned shapes): one thread per element of C, products accumulated
// in fp32 in k order with fmaf. Column-major, as the cuBLASLt call it stands in for.
template <typename TAB>
__global__ void gemm_plain_kernel(int ta, int tb, int m, int n, int k, const TAB *A, int lda, const TAB *B, int ldb,
                                  float *C, int ldc, int accumulate) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    for (int j = blockIdx.y; j < n; j += gridDim.y) {
        float acc = 0.0f;
        for (int p = 0; p < k; p++) {
            const float a = (float)(ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda]);
            const float b = (float)(tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb]);
            acc = fmaf(a, b, acc);
        }
        float *c = C + i + (size_t)j * ldc;
        *c = accumulate ? *c + acc : acc;
    }
}

// bf16 operands of the plain kernel, read through a float view.
struct Bf16Ref {
    uint16_t v;
    __device__ operator float() const { return km_bf16_value(v); }
};

// Column-major C (m x n, ldc) = op(A) op(B) (+ C when accumulate), op(A) m x k,
// op(B) k x n; A and B fp32, or bf16 bits when bf16.
static void gemm(Device *d, int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                 float *C, int ldc, int accumulate, int bf16) {
    if (m <= 0 || n <= 0) return;
    cudaStream_t stream = cu_stream(d);
    if (k <= 0) {   // an empty sum: C stays (accumulate) or becomes 0
        if (!accumulate) CU_CHECK(cudaMemset2DAsync(C, (size_t)ldc * 4, 0, (size_t)m * 4, (size_t)n, stream));
        return;
    }
    CudaState *s = cu_state(d);
    // cuBLASLt's scratch: what the workspace has left, up to 32 MiB, 256-aligned.
    const size_t mark = dev_scratch_mark(d), start = (d->ws_used + 255) / 256 * 256;
    size_t lt_bytes = d->ws_bytes > start + 256 ? d->ws_bytes - start - 256 : 0;
    lt_bytes = (lt_bytes < LT_WORKSPACE_MAX ? lt_bytes : LT_WORKSPACE_MAX) / 1024 * 1024;
    void *lt_ws = NULL;
    if (lt_bytes) {
        uintptr_t raw = (uintptr_t)dev_scratch(d, lt_bytes + 256, "cuBLASLt workspace");
        lt_ws = (void *)((raw + 255) / 256 * 256);
    }
    int align = ptr_align(A);
    if (ptr_align(B) < align) align = ptr_align(B);
    if (ptr_align(C) < align) align = ptr_align(C);
    GemmKey key = {ta, tb, m, n, k, lda, ldb, ldc, bf16, accumulate, align, (int)(lt_bytes >> 10)};
    GemmPlan *p = plan_for(s, &key);
    if (p->has_algo) {
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        const cublasStatus_t st = cublasLtMatmul(s->lt, p->op, &alpha, A, p->a, B, p->b, &beta, C, p->c, C, p->c,
                                                 &p->algo, lt_ws, lt_bytes, stream);
        // An algorithm the heuristic offered but that refuses this problem (it
        // checks before touching C): the plain kernel takes it, now and later.
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) p->has_algo = 0;
        else lt_check(st, "cublasLtMatmul");
    }
    if (!p->has_algo) {
        if (!s->fallback_noted) {
            fprintf(stderr, "cuda: cuBLASLt has no algorithm for a %dx%dx%d %s product (and maybe others); a plain "
                            "kernel computes those\n", m, n, k, bf16 ? "bf16" : "fp32");
            s->fallback_noted = 1;
        }
        dim3 grid((unsigned)((m + 127) / 128), (unsigned)(n < 65535 ? n : 65535));
        if (bf16)
            gemm_plain_kernel<Bf16Ref><<<grid, 128, 0, stream>>>(ta, tb, m, n, k, (const Bf16Ref *)A, lda,
                                                                 (const Bf16Ref *)B, ldb, C, ldc, accumulate);
        else
            gemm_plain_kernel<float><<<grid, 128, 0, stream>>>(ta, tb, m, n, k, (const float *)A, lda,
                                                               (const float *)B, ldb, C, ldc, accumulate);
        CU_LAUNCHED();
    }
    dev_scratch_release(d, mark);
}

// ---- bf16 operands

__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    CU_FOR(i, n) dst[i] = km_bf16_bits_matmul(src[i]);
}

// n floats rounded to bf16 into fresh scratch (the caller releases it).
static const uint16_t *bf16_copy(Device *d, const float *src, size_t n, const char *what) {
    uint16_t *dst = (uint16_t *)dev_scratch(d, n * sizeof(uint16_t), what);
    to_bf16_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(dst, src, n);
    CU_LAUNCHED();
    return dst;
}

static size_t lined(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Scratch of one matmul of this shape: the bf16 copies of its operands (the
// backward's three at most) and cuBLASLt's workspace.
size_t cu_matmul_workspace_bytes(const Device *d, int N, int C, int OC) {
    (void)d;
    const size_t n = (size_t)N, c = (size_t)C, oc = (size_t)OC;
    return lined(n * c * 2) + lined(oc * c * 2) + lined(n * oc * 2) + LT_WORKSPACE_MAX + 512;
}

void cu_matmul_forward(Device *d, float *out, const float *inp, const float *W, int N, int C, int OC,
                       MatmulPrecision p) {
    if (p == MATMUL_BF16) {
        const size_t mark = dev_scratch_mark(d);
        const uint16_t *ib = bf16_copy(d, inp, (size_t)N * C, "bf16 matmul input");
        const uint16_t *wb = bf16_copy(d, W, (size_t)OC * C, "bf16 matmul weight");
        gemm(d, 1, 0, OC, N, C, wb, C, ib, C, out, OC, 0, 1);
        dev_scratch_release(d, mark);
    } else {
        gemm(d, 1, 0, OC, N, C, W, C, inp, C, out, OC, 0, 0);
    }
}

void cu_matmul_backward(Device *d, float *dinp, float *dW, const float *dout, const float *inp, const float *W, int N,
                        int C, int OC, MatmulPrecision p) {
    if (!dinp && !dW) return;
    if (p == MATMUL_BF16) {
        const size_t mark = dev_scratch_mark(d);
        const uint16_t *gb = bf16_copy(d, dout, (size_t)N * OC, "bf16 matmul output gradient");
        if (dinp) {
            const uint16_t *wb = bf16_copy(d, W, (size_t)OC * C, "bf16 matmul weight");
            gemm(d, 0, 0, C, N, OC, wb, C, gb, OC, dinp, C, 1, 1);
        }
        if (dW) {
            const uint16_t *ib = bf16_copy(d, inp, (size_t)N * C, "bf16 matmul input");
            gemm(d, 0, 1, C, OC, N, ib, C, gb, OC, dW, C, 1, 1);
        }
        dev_scratch_release(d, mark);
    } else {
        if (dinp) gemm(d, 0, 0, C, N, OC, W, C, dout, OC, dinp, C, 1, 0);
        if (dW) gemm(d, 0, 1, C, OC, N, inp, C, dout, OC, dW, C, 1, 0);
    }
}
