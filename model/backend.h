// backend.h: the op interface. The decoder, the optimizer and QAT call every
// op through a Backend table with a Device (the context: workspace, threads,
// and later a stream and library handles), so one model runs on any backend.
// The CPU backend is model/ops/ (cpu.c holds its table); a backend is checked
// against the double-precision references of ops.h by the same tests.
//
// The contract (docs/ARCHITECTURE.md, "The backend contract"):
// - Pointers given to ops are device memory, from the table's alloc (the CPU
//   backend's device memory is host memory). Sizes and shapes are host values.
// - Forward ops overwrite their outputs; backward ops ACCUMULATE (+=) into
//   every gradient they are given, and a NULL gradient is not computed.
// - No op allocates: scratch comes from the device workspace (dev_scratch),
//   sized once by dev_reserve(workspace_bytes(...)) when a model is planned.
// - Results do not depend on the thread count.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "int4_grid.h"
#include "tensors.h"

// Matmul products: fp32, or MATMUL_BF16: both operands rounded to bf16 (round
// to nearest even, subnormals to zero), exact products accumulated in fp32;
// inputs, outputs and gradients stay fp32 arrays (fp32 master weights).
typedef enum { MATMUL_FP32 = 0, MATMUL_BF16 = 1 } MatmulPrecision;

// RoPE angles, computed in float exactly as transformers does (rope.c).
typedef struct {
    float *cos, *sin;   // [max_pos, hd/2], device memory
    int max_pos, half;
} RopeTable;

typedef struct {
    float lr;             // base (peak) learning rate; the schedule scales it
    float beta1, beta2;   // moment decay rates, in [0, 1)
    float eps;            // added to sqrt(v_hat)
    float weight_decay;   // decoupled, only on TF_DECAY tensors
    float grad_clip;      // max global L2 norm; <= 0 disables clipping
} AdamWConfig;

// What classifier_scaled (ops/ops.h) asks of its caller: the scales of rows
// [n0, n0 + rows) from their losses (-log p of the target; 0: not counted).
typedef void (*RowScaleFn)(void *ctx, int n0, int rows, const double *row_loss, float *row_scale);

// The teacher side of a distillation loss (classifier_distill, documented in
// ops/ops.h): the mix of cross-entropy and KL, the temperature, and the
// teacher's distribution at each token row: its final-normed hidden states
// h[N, C] with its lm_head W[V, C] (the op makes its logits chunk by chunk),
// or, with k > 0, its top-k logits [N, k] at the ids [N, k] and the
// log-sum-exp of all its logits / T [N] (so the top-k are exact
// probabilities, and the rest of the mass is known). Device memory. reverse
// (dense teacher only) turns the KL around, KL(student_T || teacher_T): the
// on-policy direction, the student's own mass held to the teacher's.
#define DISTILL_MAX_TOPK 256
typedef struct {
    float ce_weight, kd_weight;   // loss = ce_weight * CE + kd_weight * T^2 * KL(teacher_T || student_T)
    float temperature;            // T > 0
    const float *h, *W;           // k == 0: the teacher's final hidden states and lm_head
    const int *topk_ids;          // k > 0: the teacher's top-k token ids per row ...
    const float *topk_logits;     // ... and its logits there
    const float *topk_lse;        // ... and log sum_v exp(logit_v / T) over the whole vocabulary
    int k;
    int reverse;                  // k == 0: the KL is KL(student_T || teacher_T)
} DistillTarget;
// The two parts of a distillation loss, summed over counted rows (unweighted).
typedef struct {
    double ce, kl;
} DistillSums;

typedef struct Device Device;

// A weight matrix packed once in a backend's own layout for forward passes of
// at most PACKED_MAX_ROWS rows (decoding, a sampler's rows): W[rows, cols] as
// the int4 grid's codes and parameters (the CPU's layout: model/ops/matmul_kernels.h).
typedef struct PackedWeight PackedWeight;
#define PACKED_MAX_ROWS 8

// Every op as (Device *, the op's arguments). Shapes and conventions of each
// are documented once, at the CPU kernel of the same name in ops/ops.h.
typedef struct {
    const char *name;
    int host_memory;   // device memory is host memory: host buffers serve the ops as they are
    // ---- memory: alloc is zeroed and 64-byte aligned, and fatal on failure
    void *(*alloc)(Device *d, size_t bytes, const char *what);
    void (*release)(Device *d, void *p);
    void (*zero)(Device *d, void *p, size_t bytes);
    void (*upload)(Device *d, void *dst, const void *host_src, size_t bytes);
    void (*download)(Device *d, void *host_dst, const void *src, size_t bytes);
    void (*copy)(Device *d, void *dst, const void *src, size_t bytes);
    // Workspace the ops of a decoder with this config need at B x T over a
    // parameter buffer of n_params floats (give it to dev_reserve).
    size_t (*workspace_bytes)(const Device *d, const ModelConfig *c, int B, int T, size_t n_params);
    // ---- decoder ops
    void (*embedding_forward)(Device *d, float *out, const int *tokens, const float *E, int N, int C);
    void (*embedding_backward)(Device *d, float *dE, const float *dout, const int *tokens, int N, int C, int skip_id);
    void (*rmsnorm_forward)(Device *d, float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
    void (*rmsnorm_backward)(Device *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                             const float *rstd, int N, int C);
    void (*matmul_forward)(Device *d, float *out, const float *inp, const float *W, int N, int C, int OC,
                           MatmulPrecision p);
    void (*matmul_backward)(Device *d, float *dinp, float *dW, const float *dout, const float *inp, const float *W,
                            int N, int C, int OC, MatmulPrecision p);
    void (*rope_forward)(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
    void (*rope_backward)(Device *d, float *dx, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
    void (*attention_forward)(Device *d, float *out, float *lse, const float *q, const float *k, const float *v,
                              const int *seg, int B, int T, int nq, int nkv, int hd);
    void (*attention_backward)(Device *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, const int *seg, int B,
                               int T, int nq, int nkv, int hd);
    void (*attention_cached)(Device *d, float *out, const float *q, const float *K, const float *V, int p0, int n,
                             int nq, int nkv, int hd, size_t kv_stride);
    // The DFlash draft's attention (model/draft.h); NULL where the backend has none yet (CUDA).
    void (*draft_attention_forward)(Device *d, float *out, float *lse, const float *q, const float *kc,
                                    const float *vc, const float *kb, const float *vb, const int *anchor,
                                    const int *ctx_lo, int B, int T, int A, int blk, int nq, int nkv, int hd);
    void (*draft_attention_backward)(Device *d, float *dq, float *dkc, float *dvc, float *dkb, float *dvb,
                                     const float *dout, const float *out, const float *lse, const float *q,
                                     const float *kc, const float *vc, const float *kb, const float *vb,
                                     const int *anchor, const int *ctx_lo, int B, int T, int A, int blk, int nq,
                                     int nkv, int hd);
    void (*swiglu_forward)(Device *d, float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_backward)(Device *d, float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, size_t n);
    void (*residual_forward)(Device *d, float *out, const float *a, const float *b, size_t n);
    void (*dropout_forward)(Device *d, float *out, const float *x, size_t n, float p, uint64_t seed);
    void (*dropout_backward)(Device *d, float *dx, const float *dout, size_t n, float p, uint64_t seed);
    double (*classifier)(Device *d, float *dh, float *dW, float *logits_out, const float *h, const float *W,
                         const int *targets, const uint8_t *mask, int N, int C, int V, float scale, int *count,
                         MatmulPrecision p);
    void (*classifier_scaled)(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                              const uint8_t *mask, int N, int C, int V, RowScaleFn scale_of, void *ctx,
                              MatmulPrecision p);
    double (*classifier_distill)(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                                 const uint8_t *mask, int N, int C, int V, float scale, const DistillTarget *t,
                                 DistillSums *sums, int *count, MatmulPrecision p);
    void (*a16_round)(Device *d, float *x, size_t n, int mode);
    // ---- packed weights (NULL where the backend has none: the model reads
    // the float weights). pack_int4 takes host codes [rows*cols] (one a
    // byte) and the grid's scale and zero [rows*cols/group] (int4_grid.h);
    // the product gives out[N, rows] = inp[N, cols] W^T, N <= PACKED_MAX_ROWS
    // and 4N <= rows, with the bits matmul_forward (MATMUL_FP32) gives on the
    // dequantized W (the CPU: its fp32 driver's k blocks and order).
    PackedWeight *(*pack_int4)(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                               const float *scale, const float *zero);
    void (*packed_release)(Device *d, PackedWeight *w);
    void (*matmul_forward_packed)(Device *d, float *out, const float *inp, const PackedWeight *w, int N);
    // ---- optimizer
    void (*adamw_step)(Device *d, float *params, const float *grads, float *m, float *v, const TensorTable *tt,
                       const AdamWConfig *c, float lr, long step);
    void (*grad_sumsq)(Device *d, const float *grads, size_t n, double *partials);
    void (*grad_scale)(Device *d, float *grads, size_t n, float s);
    // ---- QAT: the int4 grid of int4_grid.h over one tensor (the CPU kernels: ops/quant.h)
    void (*quant_fake)(Device *d, const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                       const float *zero, float *out);
    void (*quant_dequant)(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                          const float *scale, const float *zero, float *w);
    void (*quant_backward)(Device *d, const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols,
                           const float *scale, const float *zero, float *grad_scale, float *grad_zero);
    void (*quant_backward_frozen)(Device *d, const QuantSpec *q, const uint8_t *codes, float *g, int64_t rows,
                                  int64_t cols, float *grad_scale, float *grad_zero);
    void (*quant_adam)(Device *d, float *p, const float *g, float *m, float *v, size_t n, const AdamWConfig *c,
                       float lr, long step, float lo, float hi);
    // ---- teardown: releases what the backend holds besides d->impl's memory
    // (a stream, library handles); dev_free calls it, then frees d->impl.
    // NULL when there is nothing to release (the CPU).
    void (*destroy)(Device *d);
} Backend;

struct Device {
    const Backend *be;
    int threads;              // OpenMP threads the CPU ops use
    void *impl;               // the backend's own state (CPU: the chosen kernels)
    unsigned char *ws;        // workspace, device memory
    size_t ws_bytes, ws_used;
};

// Floats per partial sum of grad_sumsq: the global gradient norm is the root
// of these partials added in chunk order, however ranks split the chunks.
#define GRAD_NORM_CHUNK ((size_t)1 << 15)

// Calls op `op` of the device's backend: OP(d, matmul_forward, out, ...).
#define OP(d, op, ...) ((d)->be->op((d), __VA_ARGS__))

// Grows the workspace to at least `bytes` (never while an op holds scratch).
void dev_reserve(Device *d, size_t bytes);
// Scratch for the op running now, 64-byte aligned, not zeroed; fatal when the
// workspace was not reserved large enough (a planning bug, not bad input).
// An op takes what it needs and gives it back with dev_scratch_release(mark).
void *dev_scratch(Device *d, size_t bytes, const char *what);
static inline size_t dev_scratch_mark(const Device *d) { return d->ws_used; }
static inline void dev_scratch_release(Device *d, size_t mark) { d->ws_used = mark; }
// Device memory holding the host buffer's bytes: the buffer itself when the
// device works in host memory, else a copy (give it back with dev_unmirror;
// OP(d, download, ...) brings changes back, a no-op on the host's own buffer).
void *dev_mirror(Device *d, void *host, size_t bytes, const char *what);
void dev_unmirror(Device *d, void *mirror, const void *host);
// The L2 norm of grads[0, n): grad_sumsq's partials added in chunk order (NaN
// or Inf when a gradient is not finite).
double dev_grad_norm(Device *d, const float *grads, size_t n);
// Frees the workspace and the backend's state.
void dev_free(Device *d);

// The RoPE table on the device: angles computed on the host, then uploaded.
void rope_table_init(RopeTable *rt, Device *d, int max_pos, int head_dim, float theta);
void rope_table_free(RopeTable *rt, Device *d);
