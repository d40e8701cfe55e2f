// ops.h: the CPU backend. Every op of the model as a forward/backward pair
// with the same argument order, each taking the Device first (backend.h), plus
// a naive double-precision reference used by the tests (finite-difference
// checks run on the reference; every backend's op is compared with it). One
// file per op in model/ops/; cpu.c puts them in the Backend table.
//
// Conventions:
// - Row-major. N = B*T tokens, row n = b*T + t.
// - Matrices are HF nn.Linear weights W[OC, C]: y = x W^T.
// - Forward functions overwrite their outputs.
// - Backward functions ACCUMULATE (+=) into every gradient they are given;
//   the caller zeroes gradients. A NULL gradient pointer means "not needed".
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "../backend.h"
#include "quant.h"

// ---- the CPU device. The kernels it runs (matmul_kernels.h) are chosen at
// run time from the instruction sets the CPU has; tests pick each in turn.
typedef struct MatmulKernel MatmulKernel;
typedef struct MatmulBf16Kernel MatmulBf16Kernel;
typedef struct {
    const MatmulKernel *f32;        // fp32 products: matmuls and the attention tiles
    const MatmulBf16Kernel *bf16;   // MATMUL_BF16 products
    int classifier_rows;            // token rows of logits the classifier holds at a time
} CpuKernels;
const Backend *backend_cpu(void);
// threads <= 0 keeps OpenMP's thread count; kernels NULL: those the
// environment variable CPU_KERNELS_ENV names, else the best this CPU runs,
// 256 classifier rows (a set the CPU cannot run, or an unknown name, is fatal).
// The workspace starts empty (dev_reserve).
void cpu_device_init(Device *d, int threads, const CpuKernels *kernels);
// The kernels a CPU device runs (cpu_kernels.c).
const CpuKernels *cpu_kernels(const Device *d);
// A device's kernels (malloc'd): `given`, else (NULL) those the environment
// variable CPU_KERNELS_ENV names, else the best this CPU runs; members left
// NULL or 0 get the best kernel and 256 classifier rows. An unknown name or a
// set the CPU cannot run is fatal.
CpuKernels *cpu_kernels_choose(const CpuKernels *given);

// Kernel sets by name (cpu_kernels.c): "avx512", "avx2", "neon" or "portable" for the
// fp32 products and attention, then optionally "/" and the bf16 products'
// kernel: "avx512bf16", "neonbf16", "portable", or an fp32 set's name for
// bf16-rounded operands on its fp32 tiles. Without "/": that set's own
// instructions (AVX512_BF16 with avx512, BFDOT with neon, where the CPU has it). NULL, "" or "auto": the
// best this CPU runs. Fails on an unknown name or one this CPU cannot run.
#define CPU_KERNELS_ENV "POCKET_KERNELS"
int cpu_kernels_named(CpuKernels *k, const char *spec, PtError *e);
// One line: the fp32 and bf16 kernels and how the bf16 products run.
void cpu_kernels_describe(const CpuKernels *k, char *buf, size_t n);
// NULL, or one line saying why bf16 products are not faster than fp32 ones
// on these kernels (printed at start-up when bf16 matmuls are asked for).
const char *cpu_kernels_bf16_notice(const CpuKernels *k);
// Floats per vector the fp32 kernels use (16, 8, 4; the portable kernel:
// the widest the build targets): the width whose FMA peak
// (cpu_peak_fp32_gflops_lanes) they reach for.
int cpu_kernels_lanes(const CpuKernels *k);
// On a CPU device, the start-up lines: "cpu kernels: ..." and, when bf16
// matmuls run, the notice above if there is one. Nothing on other devices.
void cpu_kernels_announce(const Device *d, int bf16_matmuls, FILE *f);

// ---- embedding: out[N,C] = E[tokens[n], :]
void embedding_forward(Device *d, float *out, const int *tokens, const float *E, int N, int C);
// skip_id: row that gets no lookup gradient (HF padding_idx); -1 for none.
void embedding_backward(Device *d, float *dE, const float *dout, const int *tokens, int N, int C, int skip_id);
void embedding_forward_ref(double *out, const int *tokens, const double *E, int N, int C);
void embedding_backward_ref(double *dE, const double *dout, const int *tokens, int N, int C, int skip_id);

// ---- RMSNorm over rows of length C (hidden norm: N rows of H; per-head
// QK-norm: N*heads rows of head_dim): out = w * x / sqrt(mean(x^2) + eps).
// rstd[N] is saved for the backward. out may not alias x.
void rmsnorm_forward(Device *d, float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
// Workspace of rmsnorm_backward on N rows of C (its dw partials).
size_t rmsnorm_workspace_bytes(int N, int C);
void rmsnorm_backward(Device *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C);
void rmsnorm_forward_ref(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps);
void rmsnorm_backward_ref(double *dx, double *dw, const double *dout, const double *x, const double *w,
                          const double *rstd, int N, int C);

// ---- matmul: out[N,OC] = inp[N,C] W[OC,C]^T   (no bias), products in precision p
// (MATMUL_BF16 runs on AVX512_BF16's vdpbf16ps where the CPU has it, else on
// a portable kernel with the same numerics).
// backward: dinp[N,C] += dout W;  dW[OC,C] += dout^T inp.
// Blocked, vectorised, OpenMP-parallel; sizes need not be multiples of anything.
void matmul_forward(Device *d, float *out, const float *inp, const float *W, int N, int C, int OC, MatmulPrecision p);
void matmul_backward(Device *d, float *dinp, float *dW, const float *dout, const float *inp, const float *W, int N,
                     int C, int OC, MatmulPrecision p);
// Workspace any one matmul of this device takes, whatever its shape.
size_t matmul_workspace_bytes(const Device *d);
// The packed int4 weights of backend.h (matmul_int4.c): pack, free, product.
PackedWeight *matmul_int4_pack(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                               const float *scale, const float *zero);
void matmul_int4_release(Device *d, PackedWeight *w);
void matmul_int4_forward(Device *d, float *out, const float *inp, const PackedWeight *w, int N);
void matmul_forward_ref(double *out, const double *inp, const double *W, int N, int C, int OC);
void matmul_backward_ref(double *dinp, double *dW, const double *dout, const double *inp, const double *W,
                         int N, int C, int OC);

// ---- RoPE (rotate-half / NeoX pairing (i, i+hd/2)), in place on x[N, n_heads*hd],
// at the positions pos[N] (each inside the table). The table (backend.h) holds
// the angles as transformers computes them, in float.
void rope_forward(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
// Applies the transpose rotation to a gradient, in place.
void rope_backward(Device *d, float *dx, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
void rope_forward_ref(double *x, const int *pos, int N, int n_heads, int head_dim, double theta);
void rope_backward_ref(double *dx, const int *pos, int N, int n_heads, int head_dim, double theta);

// ---- causal grouped-query attention.
// q[N, nq*hd], k/v[N, nkv*hd]; out[N, nq*hd]; lse[B, nq, T] (log-sum-exp of
// the scaled scores, saved instead of any T x T matrix; the backward recomputes
// probabilities from it). Query head h reads KV head h / (nq/nkv): K and V
// are packed once per KV head, never repeated per query head. scale = 1/sqrt(hd).
// seg: optional [N] segment ids for packed sequences: key u is visible to
// query t iff u <= t and seg[b*T+u] == seg[b*T+t]. NULL = plain causal.
void attention_forward(Device *d, float *out, float *lse, const float *q, const float *k, const float *v,
                       const int *seg, int B, int T, int nq, int nkv, int hd);
void attention_backward(Device *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, const int *seg, int B, int T,
                        int nq, int nkv, int hd);
// Generation over a KV cache: n query rows q[n, nq*hd] at positions p0 ..
// p0+n-1 attend to the cached keys and values of one layer (positions 0 ..
// p0+i for query i), the same function as attention_forward. Position u's
// keys are K[u * kv_stride ...], nkv*hd floats (kv_stride = nkv*hd for one
// sequence's cache; a cache of several sequences interleaved by position
// passes their count times that).
void attention_cached(Device *d, float *out, const float *q, const float *K, const float *V, int p0, int n, int nq,
                      int nkv, int hd, size_t kv_stride);
size_t attention_workspace_bytes(const Device *d, int B, int T, int nq, int nkv, int hd);
void attention_forward_ref(double *out, const double *q, const double *k, const double *v,
                           const int *seg, int B, int T, int nq, int nkv, int hd);
void attention_backward_ref(double *dq, double *dk, double *dv, const double *dout, const double *q,
                            const double *k, const double *v, const int *seg, int B, int T, int nq,
                            int nkv, int hd);

// ---- the DFlash draft's attention (model/draft.h). S = B*A blocks, block s
// = b*A + j on sequence b; block rows are position-major: row i*S + s.
// q, out [blk*S, nq*hd]; kb, vb [blk*S, nkv*hd] (the block's own keys);
// kc, vc [B*T, nkv*hd] (each sequence's context rows); lse [nq, blk*S].
// Block s's rows see context rows t < anchor[s] of sequence b and all blk
// rows of block s: no causal mask. ctx_lo [S] (or NULL: 0) raises the first
// context row block s sees (packed examples: its own example's first row).
// scale = 1/sqrt(hd). The backward
// accumulates into dq, dkc, dvc, dkb, dvb.
#define DRAFT_ATTN_MAX_BLOCK 64
void draft_attention_forward(Device *d, float *out, float *lse, const float *q, const float *kc, const float *vc,
                             const float *kb, const float *vb, const int *anchor, const int *ctx_lo, int B, int T,
                             int A, int blk, int nq, int nkv, int hd);
void draft_attention_backward(Device *d, float *dq, float *dkc, float *dvc, float *dkb, float *dvb, const float *dout,
                              const float *out, const float *lse, const float *q, const float *kc, const float *vc,
                              const float *kb, const float *vb, const int *anchor, const int *ctx_lo, int B, int T,
                              int A, int blk, int nq, int nkv, int hd);
void draft_attention_forward_ref(double *out, const double *q, const double *kc, const double *vc, const double *kb,
                                 const double *vb, const int *anchor, const int *ctx_lo, int B, int T, int A, int blk,
                                 int nq, int nkv, int hd);

// ---- SwiGLU: out = silu(gate) * up, elementwise over n values.
void swiglu_forward(Device *d, float *out, const float *gate, const float *up, size_t n);
void swiglu_backward(Device *d, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                     size_t n);
void swiglu_forward_ref(double *out, const double *gate, const double *up, size_t n);
void swiglu_backward_ref(double *dgate, double *dup, const double *dout, const double *gate,
                         const double *up, size_t n);

// ---- residual: out = a + b (its backward passes the gradient through, so
// the model needs no op for it).
void residual_forward(Device *d, float *out, const float *a, const float *b, size_t n);
void residual_forward_ref(double *out, const double *a, const double *b, size_t n);

// ---- dropout (inverted): out[i] = x[i] / (1 - p) where element i is kept,
// else 0, p in [0, 1). The mask is never stored: element i is kept iff the top
// 32 bits of splitmix64's i-th output from `seed` are >= p * 2^32
// (dropout_mask.h), the same bits on every device and thread count, so the
// backward regenerates it: dx[i] += dout[i] / (1 - p) where kept. 1/(1-p) is
// rounded to float once and multiplied in (one rounding, exact across devices).
void dropout_forward(Device *d, float *out, const float *x, size_t n, float p, uint64_t seed);
void dropout_backward(Device *d, float *dx, const float *dout, size_t n, float p, uint64_t seed);
void dropout_forward_ref(double *out, const double *x, size_t n, double p, uint64_t seed);
void dropout_backward_ref(double *dx, const double *dout, size_t n, double p, uint64_t seed);

// ---- classifier: logits = h[N,C] W[V,C]^T, cross-entropy against targets.
// Position n counts iff targets != NULL, targets[n] >= 0 and (mask == NULL ||
// mask[n] != 0). Works on classifier_rows token rows at a time (CpuKernels);
// never holds N*V probabilities. Returns the SUM of -log p(target) over
// counted positions (as double) and, if count != NULL, the number counted.
// With dh/dW non-NULL it also accumulates the gradient of (scale * sum loss):
// dlogits = scale * (softmax - onehot) on counted rows, then dh += dlogits W,
// dW += dlogits^T h. logits_out (optional, [N,V]) receives the logits. The
// two matmuls run in precision p; the softmax and the loss stay fp32 / double.
double classifier(Device *d, float *dh, float *dW, float *logits_out, const float *h, const float *W,
                  const int *targets, const uint8_t *mask, int N, int C, int V, float scale, int *count,
                  MatmulPrecision p);
size_t classifier_workspace_bytes(const Device *d, int N, int V);
// The classifier with a scale of its own for every row (a loss whose weight
// per token depends on the token's probability, as GRPO's ratio and clip):
// chunk by chunk in row order, scale_of gets the chunk's rows [n0, n0 + rows)
// and each row's -log p(target) (0 where the row does not count) and fills
// each counted row's scale (left 0: no gradient); dh += dlogits W and dW +=
// dlogits^T h with dlogits = scale (softmax - onehot), as the classifier's.
// scale_of is called with or without dh/dW (a pass for the losses alone).
// Chunks with no counted row are skipped. The workspace is the classifier's.
void classifier_scaled(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                       const uint8_t *mask, int N, int C, int V, RowScaleFn scale_of, void *ctx, MatmulPrecision p);
// Reference: full logits in double; returns sum loss; grads (if non-NULL) accumulate scale * d(sum).
double classifier_ref(double *dh, double *dW, const double *h, const double *W, const int *targets,
                      const uint8_t *mask, int N, int C, int V, double scale);

// ---- classifier_distill: the classifier with a distillation loss
// (distill.c). On each counted position (as classifier's), with p = softmax
// of the logits h W^T, pT its softmax at temperature T and q the teacher's
// distribution at T (t->h W_t^T for k == 0), the loss is
//     ce_weight * -log p(target) + kd_weight * T^2 * KL(q || pT)
// and its gradient on the logits ce_weight (p - onehot) + kd_weight T (pT - q),
// times scale, goes through the matmul backward as classifier's does. With
// top-k (k > 0) the teacher is known on its k ids (q_i = exp(l_i / T - lse))
// and as the mass q_rest = 1 - sum q_i of the rest: the KL is over the k ids
// and the rest as one outcome (pT_rest = 1 - pT's sum over the ids), whose
// gradient gives each other token q_rest * pT / pT_rest as its target. Returns
// the summed loss; *sums gets the summed CE and KL (unweighted); *count the
// positions. t->reverse (k == 0) puts KL(pT || q) in the loss, whose
// gradient on the logits is kd_weight T pT (log pT - log q - KL). The student's and the teacher's logits take half of the
// classifier's rows each, in its workspace. The teacher's hidden size is C.
double classifier_distill(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                          const uint8_t *mask, int N, int C, int V, float scale, const DistillTarget *t,
                          DistillSums *sums, int *count, MatmulPrecision p);
// Reference in double: teacher_logits [N, V] (k == 0) or top-k ids, logits
// [N, k] and log-sum-exp [N]; reverse (k == 0) as t->reverse; returns the
// summed loss, grads accumulate scale * d(sum).
double classifier_distill_ref(double *dh, double *dW, const double *h, const double *W, const int *targets,
                              const uint8_t *mask, int N, int C, int V, double scale, const double *teacher_logits,
                              const int *topk_ids, const double *topk_logits, const double *topk_lse, int k,
                              double ce_weight, double kd_weight, double T, int reverse, double *ce_sum,
                              double *kl_sum);

// ---- AdamW over the flat buffers laid out by the tensor table: params,
// grads and the moments m and v share the offsets (adamw.c). The padding
// floats between tensors are zero by contract; the gradient helpers walk the
// whole flat buffer (padding included), the update only the tensors' floats.
//
// One update with PyTorch's torch.optim.AdamW semantics (fp32):
//     p -= lr * weight_decay * p          (TF_DECAY tensors only)
//     m  = beta1 * m + (1 - beta1) * g
//     v  = beta2 * v + (1 - beta2) * g * g
//     p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// `lr` is the scheduled rate for this update (c->lr is not read); `step` is
// 1-based: the first update is step 1. The four buffers must not overlap.
void adamw_step(Device *d, float *params, const float *grads, float *m, float *v, const TensorTable *tt,
                const AdamWConfig *c, float lr, long step);
// The sums of squares of grads[0, n) in chunks of GRAD_NORM_CHUNK floats
// (backend.h), each accumulated in double in a fixed order, into partial[k]
// for chunk k; dev_grad_norm adds them in chunk order, so the norm does not
// depend on the thread count, nor on how ranks split the chunks.
void grad_sumsq(Device *d, const float *grads, size_t n, double *partial);
size_t grad_norm_workspace_bytes(size_t n_params);
// grads[0, n) *= s (gradient clipping; also LoRA's alpha/r on the adapter's activations).
void grad_scale(Device *d, float *grads, size_t n, float s);
// The factor torch.nn.utils.clip_grad_norm_ multiplies the gradients by:
// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
float grad_clip_factor(double norm, float max_norm);
