// cpu.c: the CPU backend's table: device memory is host memory, and the ops
// are the kernels of this folder (the int4 grid's fake-quant and
// dequantization are model/int4_grid.c's host functions, given the device's
// threads). Which matmul kernels a device runs is cpu_kernels.c's.
#include <omp.h>
#include <stdlib.h>
#include <string.h>
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
    quant_fake(q, w, rows, cols, scale, zero, out, d->threads);
}
static void cpu_quant_dequant(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                              const float *scale, const float *zero, float *w) {
    quant_dequant(q, codes, rows, cols, scale, zero, w, d->threads);
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
    .classifier_scaled = classifier_scaled,
    .classifier_distill = classifier_distill,
    .a16_round = a16_round,
    .pack_int4 = matmul_int4_pack,
    .packed_release = matmul_int4_release,
    .matmul_forward_packed = matmul_int4_forward,
    .adamw_step = adamw_step,
    .grad_sumsq = grad_sumsq,
    .grad_scale = grad_scale,
    .quant_fake = cpu_quant_fake,
    .quant_dequant = cpu_quant_dequant,
    .quant_backward = quant_backward,
    .quant_backward_frozen = quant_backward_frozen,
    .quant_adam = quant_adam,
};

const Backend *backend_cpu(void) { return &CPU; }

void cpu_device_init(Device *d, int threads, const CpuKernels *kernels) {
    *d = (Device){0};
    d->be = &CPU;
    if (threads > 0) omp_set_num_threads(threads);
    d->threads = omp_get_max_threads();
    d->impl = cpu_kernels_choose(kernels);
}

void cpu_kernels_announce(const Device *d, int bf16_matmuls, FILE *f) {
    if (d->be != &CPU) return;
    char line[256];
    cpu_kernels_describe(cpu_kernels(d), line, sizeof line);
    fprintf(f, "cpu kernels: %s\n", line);
    const char *note = bf16_matmuls ? cpu_kernels_bf16_notice(cpu_kernels(d)) : NULL;
    if (note) fprintf(f, "%s\n", note);
}
