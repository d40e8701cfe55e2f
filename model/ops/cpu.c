// cpu.c: the CPU backend: device memory is host memory, and the ops are the
// kernels of this folder (the int4 grid's through thin adapters, since
// quant.h's functions also serve the host-side exporters without a device;
// they run on OpenMP's thread count, which cpu_device_init sets).
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "matmul_kernels.h"
#include "ops.h"

static void *cpu_alloc(Device *d, size_t bytes, const char *what) {
    (void)d;
    return xaligned(bytes ? bytes : 1, what);
}
static void cpu_release(Device *d, void *p) {
    (void)d;
    free(p);
}
static void cpu_zero(Device *d, void *p, size_t bytes) {
    (void)d;
    memset(p, 0, bytes);
}
static void cpu_copy(Device *d, void *dst, const void *src, size_t bytes) {
    (void)d;
    if (dst != src) memcpy(dst, src, bytes);
}

// The largest scratch any op of the decoder, the optimizer or QAT takes at
// B x T (they release it before the next op starts).
static size_t cpu_workspace_bytes(const Device *d, const ModelConfig *c, int B, int T, size_t n_params) {
    const int N = B * T;
    // RMSNorm runs on N rows of d_model and, as the q/k norms, on N * heads rows of head_dim.
    size_t need[6] = {matmul_workspace_bytes(d),
                      attention_workspace_bytes(d, B, T, c->n_head, c->n_kv_head, c->head_dim),
                      classifier_workspace_bytes(d, N, c->vocab_size),
                      rmsnorm_workspace_bytes(N, c->d_model),
                      rmsnorm_workspace_bytes(N * c->n_head, c->head_dim),
                      grad_norm_workspace_bytes(n_params)};
    size_t most = 0;
    for (int i = 0; i < 6; i++) most = need[i] > most ? need[i] : most;
    return most;
}

static void cpu_quant_fake(Device *d, const QuantSpec *q, const float *w, int64_t rows, int64_t cols,
                           const float *scale, const float *zero, float *out) {
    (void)d;
    quant_fake(q, w, rows, cols, scale, zero, out);
}
static void cpu_quant_dequant(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                              const float *scale, const float *zero, float *w) {
    (void)d;
    quant_dequant(q, codes, rows, cols, scale, zero, w);
}
static void cpu_quant_backward(Device *d, const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols,
                               const float *scale, const float *zero, float *grad_scale, float *grad_zero) {
    (void)d;
    quant_backward(q, w, g, rows, cols, scale, zero, grad_scale, grad_zero);
}
static void cpu_quant_backward_frozen(Device *d, const QuantSpec *q, const uint8_t *codes, float *g, int64_t rows,
                                      int64_t cols, float *grad_scale, float *grad_zero) {
    (void)d;
    quant_backward_frozen(q, codes, g, rows, cols, grad_scale, grad_zero);
}
static void cpu_quant_adam(Device *d, float *p, const float *g, float *m, float *v, size_t n, const AdamWConfig *c,
                           float lr, long step, float lo, float hi) {
    (void)d;
    quant_adam(p, g, m, v, n, c->beta1, c->beta2, c->eps, lr, step, lo, hi);
}
static void cpu_a16_round(Device *d, float *x, size_t n, int mode) {
    (void)d;
    a16_round(x, n, mode);
}

static const Backend CPU = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .zero = cpu_zero,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .workspace_bytes = cpu_workspace_bytes,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_cached = attention_cached,
    .draft_attention_forward = draft_attention_forward,
    .draft_attention_backward = draft_attention_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .residual_forward = residual_forward,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .classifier = classifier,
    .classifier_distill = classifier_distill,
    .a16_round = cpu_a16_round,
    .adamw_step = adamw_step,
    .grad_sumsq = grad_sumsq,
    .grad_scale = grad_scale,
    .quant_fake = cpu_quant_fake,
    .quant_dequant = cpu_quant_dequant,
    .quant_backward = cpu_quant_backward,
    .quant_backward_frozen = cpu_quant_backward_frozen,
    .quant_adam = cpu_quant_adam,
};

const Backend *backend_cpu(void) { return &CPU; }

void cpu_device_init(Device *d, int threads, const CpuKernels *kernels) {
    *d = (Device){0};
    d->be = &CPU;
    if (threads > 0) omp_set_num_threads(threads);
    d->threads = omp_get_max_threads();
    CpuKernels *k = xmalloc(sizeof *k, "cpu kernels");
    PtError e;
    if (kernels) *k = *kernels;
    else if (cpu_kernels_named(k, getenv(CPU_KERNELS_ENV), &e)) die("%s", e.msg);
    if (!k->f32) k->f32 = matmul_kernel_best();
    if (!k->bf16) k->bf16 = matmul_bf16_kernel_best();
    if (k->classifier_rows < 1) k->classifier_rows = 256;
    d->impl = k;
}

const CpuKernels *cpu_kernels(const Device *d) { return d->impl; }
