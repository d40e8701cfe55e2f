// model.h: the Qwen3 decoder wired from the ops, forward and backward, with
// every training buffer planned once before step 0.
#pragma once
#include "bundle.h"
#include "ops/ops.h"

// One batch of B rows of T tokens. targets[n] < 0 means "no loss here";
// pos (per-token position ids) and seg (packed-example ids) may be NULL for
// plain sequences (positions 0..T-1, causal attention over the whole row).
typedef struct {
    int B, T;
    const int *tokens;      // [B*T]
    const int *targets;     // [B*T]; NULL = no loss
    const uint8_t *mask;    // [B*T]; NULL = every target >= 0 counts
    const int *pos;         // [B*T] or NULL
    const int *seg;         // [B*T] or NULL
} ModelInput;

// Activations saved by the forward for the backward, each [L][N, width]; with
// recompute on, [1][N, width] (one layer's slot) except x.
typedef struct {
    float *x;           // residual stream entering each layer, [L+1][N,H] (x[L] feeds the final norm)
    float *ln1, *ln1_rstd;
    float *q_raw, *k_raw;           // projections before QK-norm (aliases of q/k when it is off)
    float *q_rstd, *k_rstd;         // [L][N*heads]
    float *q, *k, *v;               // after QK-norm and RoPE
    float *att, *lse;               // attention output [L][N,Q]; log-sum-exp [L][B*nq*T]
    float *x_mid;                   // residual after attention
    float *ln2, *ln2_rstd;
    float *gate, *up, *act;         // MLP [L][N,F]
    float *lnf, *lnf_rstd;          // final norm [N,H], [N]
} Activations;

// Backward scratch: one layer's worth, reused for every layer.
typedef struct {
    float *dx;          // gradient of the residual stream [N,H]
    float *dln;         // [N,H]
    float *dq, *dk, *dv, *dq_raw, *dk_raw, *datt;
    float *dgate, *dup, *dact;
    float *tmp;         // [N,H] projection output before the residual add
    float *classifier;  // [chunk*V]
    float *attention;   // attention_scratch_floats (ops.h): packed tiles, forward and backward
    size_t attention_floats;
} Scratch;

typedef struct {
    ModelBundle w;          // config, tensor table, params (owned)
    ParamViews p;           // views into w.params
    float *grads;           // same layout as params; NULL until model_plan(training)
    ParamViews g;
    RopeTable rope;
    int B, T, training;     // the planned batch shape
    int classifier_chunk;
    Activations a;
    Scratch s;
    float *arena;           // one allocation for Activations + Scratch
    size_t arena_floats;
    int a16;                // A16_* (qat/qat.h): round matmul inputs/outputs as the device does
    // Set before model_plan (0 = off):
    int recompute;          // training keeps only x[l] per layer; the backward re-runs each block's forward
    int matmul_bf16;        // every matmul (projections, classifier) on bf16-rounded operands, fp32 accumulation
                            // and fp32 master weights (MATMUL_BF16, ops.h)
} Model;

// Takes ownership of the bundle's contents (b is zeroed).
void model_from_bundle(Model *m, ModelBundle *b);
// Allocates activations for B x T (and grads + scratch when training);
// prints the memory plan to `log` if non-NULL. Fails if T > max_seq.
// m->recompute (set before) trades one extra forward per layer for keeping a
// single layer of activations; the gradients are the same bits either way.
int model_plan(Model *m, int B, int T, int training, FILE *log, PtError *e);
void model_free(Model *m);
// Points the parameter views at another buffer laid out by the same table:
// the fake-quantized weights of QAT or int4 inference. NULL = the model's own.
void model_use_weights(Model *m, float *base);
void model_zero_grads(Model *m);

// Forward only. Returns the SUM of the per-token losses over counted targets
// (0 when targets is NULL) and their number in *count. logits_out [N,V] optional.
double model_forward(Model *m, const ModelInput *in, float *logits_out, int *count);
// Forward + backward: accumulates grad_scale * d(sum loss)/d(params) into
// m->grads (grad_scale = 1/count gives the mean loss, as transformers does).
double model_forward_backward(Model *m, const ModelInput *in, float grad_scale, float *logits_out, int *count);
