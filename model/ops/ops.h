// ops.h: every op of the model as a forward/backward pair with the same
// argument order, plus a naive double-precision reference used by the tests
// (finite-difference checks run on the reference; the fast float op is
// compared with it). One file per op in model/ops/.
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

// ---- embedding: out[N,C] = E[tokens[n], :]
void embedding_forward(float *out, const int *tokens, const float *E, int N, int C);
// skip_id: row that gets no lookup gradient (HF padding_idx); -1 for none.
void embedding_backward(float *dE, const float *dout, const int *tokens, int N, int C, int skip_id);
void embedding_forward_ref(double *out, const int *tokens, const double *E, int N, int C);
void embedding_backward_ref(double *dE, const double *dout, const int *tokens, int N, int C, int skip_id);

// ---- RMSNorm over rows of length C (hidden norm: N rows of H; per-head
// QK-norm: N*heads rows of head_dim): out = w * x / sqrt(mean(x^2) + eps).
// rstd[N] is saved for the backward. out may not alias x.
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C);
void rmsnorm_forward_ref(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps);
void rmsnorm_backward_ref(double *dx, double *dw, const double *dout, const double *x, const double *w,
                          const double *rstd, int N, int C);

// ---- matmul: out[N,OC] = inp[N,C] W[OC,C]^T   (no bias)
// backward: dinp[N,C] += dout W;  dW[OC,C] += dout^T inp.
// Blocked, vectorised, OpenMP-parallel; sizes need not be multiples of anything.
void matmul_forward(float *out, const float *inp, const float *W, int N, int C, int OC);
void matmul_backward(float *dinp, float *dW, const float *dout, const float *inp, const float *W,
                     int N, int C, int OC);
// Precision of the products: MATMUL_BF16 rounds both operands to bf16 (round
// to nearest even; bf16 subnormals count as zero) and accumulates their exact
// products in fp32; inputs, outputs and gradients stay fp32 arrays (fp32
// master weights). It runs on AVX512_BF16 (vdpbf16ps) where the CPU has it and
// on a portable kernel with the same numerics elsewhere. The plain names above
// are the MATMUL_FP32 calls.
typedef enum { MATMUL_FP32 = 0, MATMUL_BF16 = 1 } MatmulPrecision;
void matmul_forward_p(float *out, const float *inp, const float *W, int N, int C, int OC, MatmulPrecision p);
void matmul_backward_p(float *dinp, float *dW, const float *dout, const float *inp, const float *W,
                       int N, int C, int OC, MatmulPrecision p);
void matmul_forward_ref(double *out, const double *inp, const double *W, int N, int C, int OC);
void matmul_backward_ref(double *dinp, double *dW, const double *dout, const double *inp, const double *W,
                         int N, int C, int OC);

// ---- RoPE (rotate-half / NeoX pairing (i, i+hd/2)), in place on x[N, n_heads*hd].
// Angles are computed in float exactly as transformers does: inv_freq[i] =
// 1/theta^(2i/hd) in float, angle = (float)pos * inv_freq[i], float cos/sin.
typedef struct {
    float *cos, *sin;   // [max_pos, hd/2]
    int max_pos, half;
} RopeTable;
void rope_table_init(RopeTable *rt, int max_pos, int head_dim, float theta);
void rope_table_free(RopeTable *rt);
void rope_forward(float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
// Applies the transpose rotation to a gradient, in place.
void rope_backward(float *dx, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim);
void rope_forward_ref(double *x, const int *pos, int N, int n_heads, int head_dim, double theta);
void rope_backward_ref(double *dx, const int *pos, int N, int n_heads, int head_dim, double theta);

// ---- causal grouped-query attention.
// q[N, nq*hd], k/v[N, nkv*hd]; out[N, nq*hd]; lse[B, nq, T] (log-sum-exp of
// the scaled scores, saved instead of any T x T matrix; the backward recomputes
// probabilities from it). Query head h reads KV head h / (nq/nkv): K and V
// are packed once per KV head, never repeated per query head. scale = 1/sqrt(hd).
// seg: optional [N] segment ids for packed sequences: key u is visible to
// query t iff u <= t and seg[b*T+u] == seg[b*T+t]. NULL = plain causal.
// scratch: attention_scratch_floats(...) floats the call may overwrite (no
// need to zero them), or NULL to allocate them for the call. A training step
// passes its own, so it allocates nothing. The result does not depend on the
// thread count.
size_t attention_scratch_floats(int B, int T, int nq, int nkv, int hd);
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, const int *seg,
                       int B, int T, int nq, int nkv, int hd, float *scratch, size_t scratch_floats);
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, const int *seg, int B, int T, int nq, int nkv,
                        int hd, float *scratch, size_t scratch_floats);
void attention_forward_ref(double *out, const double *q, const double *k, const double *v,
                           const int *seg, int B, int T, int nq, int nkv, int hd);
void attention_backward_ref(double *dq, double *dk, double *dv, const double *dout, const double *q,
                            const double *k, const double *v, const int *seg, int B, int T, int nq,
                            int nkv, int hd);

// ---- SwiGLU: out = silu(gate) * up, elementwise over n values.
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
void swiglu_forward_ref(double *out, const double *gate, const double *up, size_t n);
void swiglu_backward_ref(double *dgate, double *dup, const double *dout, const double *gate,
                         const double *up, size_t n);

// ---- residual: out = a + b; backward: da += dout, db += dout.
void residual_forward(float *out, const float *a, const float *b, size_t n);
void residual_backward(float *da, float *db, const float *dout, size_t n);
void residual_forward_ref(double *out, const double *a, const double *b, size_t n);
void residual_backward_ref(double *da, double *db, const double *dout, size_t n);

// ---- classifier: logits = h[N,C] W[V,C]^T, cross-entropy against targets.
// Position n counts iff targets[n] >= 0 and (mask == NULL || mask[n] != 0).
// Works in chunks of `chunk` token rows through scratch[chunk*V]; never holds
// N*V probabilities. Returns the SUM of -log p(target) over counted positions
// (as double) and, if count != NULL, the number counted.
// With dh/dW non-NULL it also accumulates the gradient of (scale * sum loss):
// dlogits = scale * (softmax - onehot) on counted rows, then dh += dlogits W,
// dW += dlogits^T h. logits_out (optional, [N,V]) receives the logits (for the
// probe and tests only).
double classifier_forward_backward(float *dh, float *dW, float *logits_out, float *scratch, int chunk,
                                   const float *h, const float *W, const int *targets,
                                   const uint8_t *mask, int N, int C, int V, float scale, int *count);
// The same with the two matmuls (logits, and dh / dW) in precision p; the
// softmax and the loss stay fp32 / double.
double classifier_forward_backward_p(float *dh, float *dW, float *logits_out, float *scratch, int chunk,
                                     const float *h, const float *W, const int *targets, const uint8_t *mask,
                                     int N, int C, int V, float scale, int *count, MatmulPrecision p);
// Reference: full logits in double; returns sum loss; grads (if non-NULL) accumulate scale * d(sum).
double classifier_ref(double *dh, double *dW, const double *h, const double *W, const int *targets,
                      const uint8_t *mask, int N, int C, int V, double scale);
