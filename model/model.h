// model.h: the Qwen3 decoder wired from the backend's ops (backend.h). One
// block forward serves training, evaluation, the forward probe and KV-cache
// generation (only the attention step differs: the batch's own keys, or the
// cache), so every numeric option holds on every path. Every buffer is
// planned once, before the first step, in one device allocation.
#pragma once
#include <stdio.h>
#include "backend.h"
#include "lora.h"

// One batch of B rows of T tokens, in host memory: T the plan's, B at most
// the plan's (a pass over fewer rows runs over those alone). targets[n] < 0 means "no
// loss here"; pos (per-token position ids) and seg (packed-example ids) may
// be NULL for plain sequences (positions 0..T-1, causal attention over the
// whole row).
typedef struct {
    int B, T;
    const int *tokens;      // [B*T]
    const int *targets;     // [B*T]; NULL = no loss
    const uint8_t *mask;    // [B*T]; NULL = every target >= 0 counts
    const int *pos;         // [B*T] or NULL
    const int *seg;         // [B*T] or NULL
} ModelInput;

typedef struct Model Model;

// A loss head: what a pass computes after the final norm, where m->a.lnf
// holds the normed hidden states [B*T, H] and the input's targets and mask
// are on the device (m->targets, m->mask, when in gave them). It returns
// the SUM of its losses and their number in *count (tokens, groups, pairs);
// with dh (device [B*T, H], accumulated) it also runs its backward:
// grad_scale * dL/dh into dh, and dL/d(lm_head) into m->g.lm_head when the
// model has that gradient (a frozen base has none). Objectives (the decision
// head, distillation, preference losses) are heads handed to the decoder;
// the decoder itself knows only the next-token cross-entropy, its default.
typedef struct LossHead {
    double (*loss)(const struct LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale, int *count);
    void *ctx;
} LossHead;

// The numerics a model runs with, fixed when it is made (model_init): every
// plan, and a generation context made from it, runs them.
typedef struct {
    int recompute;            // training keeps only x per layer; the backward re-runs each block's forward
                              // (the gradients are the same bits either way)
    MatmulPrecision matmul;   // every matmul, projections and lm_head, in this precision
    int a16;                  // A16_*: matmul inputs and outputs rounded to 16 bits, as the phone's runtime
} ModelOptions;

// The projections' weights packed by the backend (backend.h's pack_int4),
// which passes of at most PACKED_MAX_ROWS rows read in place of the float
// weights (model_use_packed); a NULL entry reads the float weights.
typedef struct {
    PackedWeight *wq, *wk, *wv, *wo, *wgate, *wup, *wdown;
} PackedLayer;
typedef struct {
    PackedLayer layer[MAX_LAYERS];
    PackedWeight *lm_head;
} PackedViews;

// Activations saved by the forward for the backward, each [L][N, width]; with
// recompute on, or without training, [1][N, width] (one layer's slot) except x.
typedef struct {
    float *x;           // residual stream entering each layer, [L+1][N,H] (x[L] feeds the final norm);
                        // without training two rows of it, used in turn
    float *ln1, *ln1_rstd;
    float *q_raw, *k_raw;           // projections before QK-norm (without it q_raw is q; k_raw is k)
    float *q_rstd, *k_rstd;         // [L][N*heads]
    float *q, *k, *v;               // after QK-norm and RoPE (a KV-cache plan writes k and v into the cache)
    float *att, *lse;               // attention output [L][N,Q]; log-sum-exp [L][B*nq*T]
    float *x_mid;                   // residual after attention
    float *ln2, *ln2_rstd;
    float *gate, *up, *act;         // MLP [L][N,F]
    float *proj;                    // [N,H] o_proj / down_proj output before the residual add
    float *lnf, *lnf_rstd;          // final norm [N,H], [N]
} Activations;

// The backward's buffers: one layer's worth, reused for every layer.
typedef struct {
    float *dx;          // gradient of the residual stream [N,H]
    float *dln;         // [N,H]
    float *dq, *dk, *dv, *dq_raw, *dk_raw, *datt;
    float *dgate, *dup, *dact;
    float *dlora_u;     // [N, r]: an adapter's gradient between B and A
} BackwardBuffers;

struct Model {
    Device *dev;
    ModelConfig cfg;
    const TensorTable *tt;      // layout of the weights and gradients; the caller's, it outlives the model
    ModelOptions opt;
    float *weights;             // the weights the model runs on (device memory, the caller's)
    ParamViews w;               // named views of `weights`
    float *grads;               // training: d(loss)/d(weights), laid out by tt; owned
    float *grad_out;            // where the backward writes: grads, or the buffer of model_use_grads
    ParamViews g;               // views of grad_out
    RopeTable rope;
    // A LoRA adapter (model_use_lora), NULL when none. With one, a training
    // plan computes the adapter's gradients only (the base is frozen): grads
    // and grad_out are laid out by lora_tt, and the base's views g are NULL.
    const LoraConfig *lora;
    const TensorTable *lora_tt;
    float *lora_weights;        // the adapter's weights (device memory laid out by lora_tt, the caller's)
    LoraViews la, lg;           // views of lora_weights and of the adapter's gradients
    const PackedViews *packed;  // model_use_packed's, or NULL
    float *lora_u;              // [slots][LORA_N_TARGETS][B*T, r]: (alpha/r) x A^T, kept for dB
    // [B*T, widest projection input or output]: (alpha/r) x A^T B^T before it
    // is added; with dropout, dropout(x) for A (rebuilt in the backward). The
    // two uses never overlap. LoRA dropout (lora->dropout > 0): the mask of
    // dropout_seed's child for (layer, target); only model_forward_backward
    // drops (forward and evaluation never do).
    float *lora_tmp;
    uint64_t dropout_seed;      // this micro-batch's (model_set_dropout_seed)
    // The plan (model_plan / model_plan_cache).
    int B, T, training;
    int cache_len, n_past;      // KV cache: capacity in positions (0 = no cache) and positions held
    int cache_rows;             // sequences in the cache (model_plan_cache_rows), 1 otherwise
    int rows_plan;              // planned by model_plan_cache_rows: one token a sequence a pass
    int *row_pos;               // rows plan: the position each sequence's next token takes (host, [cache_rows])
    float *k_cache, *v_cache;   // [L][cache_len][cache_rows][n_kv*hd], K after QK-norm and RoPE
    Activations a;
    BackwardBuffers bw;
    int *tokens, *targets, *pos, *seg;   // the batch on the device, [B*T]
    uint8_t *mask;
    float *last_logits;         // [V]: a cache plan's logits of the last fed row
    // Captures (model_capture): every pass also copies the output of these
    // layers at each of its rows into capture [rows, n_capture*H] (device,
    // the caller's), layer k of the list at columns k*H..: what a draft reads.
    int n_capture, capture_layers[8];
    float *capture;
    float *head_rows;           // [2N] device floats a loss head may use (the decision head's scores and their gradients)
    int *host_pos;              // positions built on the host, [B*T]
    float *host_head_rows;      // [2N] host floats beside them
    void *arena;                // one device allocation behind all of the plan
    size_t arena_bytes;
};

// A model of this config over `weights` (device memory laid out by tt) on
// dev, with the numerics of opt (NULL: fp32, no A16, no recompute).
void model_init(Model *m, Device *dev, const ModelConfig *cfg, const TensorTable *tt, float *weights,
                const ModelOptions *opt);
// A model over the weights, numerics and adapter src runs with (generation's
// cache plans beside the model they sample from).
void model_init_like(Model *m, const Model *src);
// Plans B x T (training: also gradients and the backward's buffers); prints
// the memory plan to `log` if non-NULL. Fails if T > max_seq. Reserves the
// device workspace the ops need.
int model_plan(Model *m, int B, int T, int training, FILE *log, PtError *e);
// Plans generation: a KV cache of cache_len positions (<= max_seq), fed by
// model_feed in chunks of at most m->T rows.
int model_plan_cache(Model *m, int cache_len, PtError *e);
// Plans `rows` sequences that advance together, one token each per
// model_feed_rows, in one cache of cache_len positions (<= max_seq): the
// same decoder, its matmuls over all the rows at once (batched sampling).
// Each sequence has its own position (row_pos, all 0 after planning), so
// sequences of different lengths share the passes.
int model_plan_cache_rows(Model *m, int rows, int cache_len, PtError *e);
void model_free(Model *m);
// Points the views at other weights laid out by the same table (QAT's
// fake-quantized weights, int4 inference).
void model_use_weights(Model *m, float *weights);
// Lets passes of at most PACKED_MAX_ROWS rows with fp32 matmuls read the
// packed weights of pv (the caller's; it outlives the model, NULL: none)
// where it has them; each must hold the very values of the float weights the
// model runs on (the int4 model's: qat_pack), as the products then give the
// same bits. Models made by model_init_like share them.
void model_use_packed(Model *m, const PackedViews *pv);
// Attaches an adapter (configuration and table: the caller's, they outlive the
// model) over `weights` (device memory laid out by tt). Before model_plan; a
// later call with the same configuration only moves the views.
void model_use_lora(Model *m, const LoraConfig *lc, const TensorTable *tt, float *weights);
void model_zero_grads(Model *m);
// Copies the outputs of `layers` (n <= 8, 0-based, each after its MLP
// residual) at every row of each later pass into buf (device memory, [rows
// of the pass, n*H]); n = 0 stops it.
void model_capture(Model *m, const int *layers, int n, float *buf);
// Points the gradient output at another buffer laid out by the table (the
// adapter's with LoRA: model_grad_table) (device
// memory; NULL: the model's own). A trainer uses it to keep micro-batches'
// gradients apart.
void model_use_grads(Model *m, float *grads);
// The table the gradients are laid out by: the adapter's with LoRA, else the model's.
static inline const TensorTable *model_grad_table(const Model *m) { return m->lora ? m->lora_tt : m->tt; }

// The seed of the next model_forward_backward's LoRA dropout masks (the
// trainer's, from the run seed and the micro-batch's place in the data stream).
static inline void model_set_dropout_seed(Model *m, uint64_t seed) { m->dropout_seed = seed; }

// Forward only, next-token cross-entropy. Returns the SUM of the per-token
// losses over counted targets (0 when targets is NULL) and their number in
// *count. logits_out [N,V] (device memory) optional.
double model_forward(Model *m, const ModelInput *in, float *logits_out, int *count);
// Forward through the final norm, without the lm head: the final hidden
// states [B*T, H] (device memory, the model's own buffer, valid until its
// next pass) -- what a distillation teacher gives (model/distill_head.h).
const float *model_forward_hidden(Model *m, const ModelInput *in);
// Forward + backward: accumulates grad_scale * d(sum loss)/d(params) into
// m->grads (grad_scale = 1/count gives the mean loss, as transformers does).
double model_forward_backward(Model *m, const ModelInput *in, float grad_scale, float *logits_out, int *count);
// The same two passes with a loss head in place of the next-token
// cross-entropy (head NULL: that default, without logits).
double model_forward_head(Model *m, const ModelInput *in, const LossHead *head, int *count);
double model_forward_backward_head(Model *m, const ModelInput *in, const LossHead *head, float grad_scale,
                                   int *count);

// A cache plan: appends n <= T tokens (host memory, ids in the vocabulary) at
// positions n_past .. n_past+n-1, n_past + n <= cache_len. Leaves the logits
// of the last row in last_logits, and of every row in all_logits [n,V]
// (device memory) when given.
void model_feed(Model *m, const int *tokens, int n, float *all_logits);
// A model_plan_cache_rows plan: appends one token to each of the first n
// sequences r (1 <= n <= cache_rows; tokens[n], host memory) at its
// position row_pos[r], which then advances by one; it attends to the
// sequence's own positions below it. logits [n, V] (device memory)
// receives each one's next-token logits. The other sequences stay as they
// are; a sequence's logits do not depend on n.
void model_feed_rows(Model *m, const int *tokens, int n, float *logits);
// Sets sequence r's next position (< cache_len): what it holds below it is
// its context (a sequence that has ended may be parked at any position: what
// it writes there is never read by the others).
void model_set_row_pos(Model *m, int r, int pos);
// Copies the n_past cached positions of a one-sequence cache plan (a prompt
// read by model_feed) into sequence r of a model_plan_cache_rows plan and
// sets its position to one's n_past.
void model_cache_copy_row(Model *m, int r, const Model *one);
// Moves sequence src of a model_plan_cache_rows plan (its cached positions
// below row_pos[src], and that position) into sequence dst, over what dst
// held (a sampler keeps its live sequences first).
void model_cache_move_row(Model *m, int dst, int src);
