// draft.h: a DFlash speculative draft for a target decoder. The draft drafts
// a block of `block` tokens in one pass: the last accepted token and
// block-1 mask tokens, embedded with the target's (frozen) embedding, run
// through a few decoder layers whose attention is not causal: every block
// row attends to the whole block and to the context, the target's hidden
// states at chosen layers of every earlier position, squeezed to one row
// of width H by fc and hidden_norm. The target's final norm is not used;
// the draft has its own, then the target's (frozen) lm_head gives logits.
//
//     ctx   = hidden_norm(fc(concat_k target_layer_k_output))    [T, H]
//     h     = embed(block tokens)                                 [blk, H]
//     layer: a = input_layernorm(h)
//            q = rope(q_norm(a Wq))             (block rows only)
//            k = rope(k_norm([ctx; a] Wk)),  v = [ctx; a] Wv
//            h += o_proj(attention(q, k, v))   (no mask inside what is visible)
//            h += mlp(post_attention_layernorm(h))
//     logits = lm_head(norm(h))
//
// Context row t has position t; block row i of a block at anchor p has
// position p + i and sees the context rows t < p. This is the graph MNN
// 3.6.1's DFlash generation runs (export/mnn_draft.c writes it), and the
// draft is a tensor table of its own (DFlash's names), so the optimizer,
// checkpoints and the data-parallel step work on it as on a model's.
#pragma once
#include "model.h"

enum { DRAFT_MAX_TARGETS = 8, DRAFT_MAX_BLOCK = 64, DRAFT_MAX_LAYERS = 16 };

typedef struct {
    int n_layer;                             // draft decoder layers, 1..DRAFT_MAX_LAYERS
    int block;                               // tokens per drafting pass, 2..DRAFT_MAX_BLOCK
    int n_target;                            // target layers feeding the context, 1..DRAFT_MAX_TARGETS
    int target_layers[DRAFT_MAX_TARGETS];    // 0-based target layers (their output, after the MLP residual), increasing
    int mask_token;                          // the id of the block's mask rows, inside the vocabulary
    int d_ff;                                // the draft's MLP width
} DraftConfig;

// Refuses a draft the target of config tc cannot run: layer counts, block
// size, target layers outside the target or not increasing, a mask token
// outside its vocabulary. src names where the config came from.
int draft_config_check(const DraftConfig *dc, const ModelConfig *tc, const char *src, PtError *e);
// "3,14,25" <-> the layer list; parse fails naming the first bad entry.
int draft_layers_parse(const char *list, DraftConfig *dc, const char *src, PtError *e);
void draft_layers_format(const DraftConfig *dc, char *out, size_t cap);
// DFlash's default: n evenly spaced layers from 1 to L-3 (one layer: L/2).
void draft_layers_default(DraftConfig *dc, int n_target, int target_n_layer);

// The draft's table: fc.weight [H, n_target*H], hidden_norm.weight [H],
// layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
// post_attention_layernorm, mlp.{gate,up,down}_proj}.weight (the target's
// head sizes, d_ff), norm.weight [H]. Kinds: the layer kinds of tensors.h,
// T_WQ with layer -1 for fc, T_LNF with layer -1 for hidden_norm and norm.
void draft_table_build(TensorTable *tt, const ModelConfig *tc, const DraftConfig *dc);

typedef struct {
    float *fc, *hidden_norm, *norm;
    LayerViews layer[DRAFT_MAX_LAYERS];
} DraftViews;
void draft_views(DraftViews *v, const TensorTable *tt, float *base);

// A draft in host memory, as checkpoints and exporters pass it around.
typedef struct {
    DraftConfig cfg;
    ModelConfig target;        // the target's config (sizes, rope, eps)
    TensorTable tt;
    float *params;             // tt.total floats, 64-byte aligned
    char base_sha256[65];      // the target weights it drafts for (lora_base_hash of the int4 weights)
    int n_vocab;               // tokens the draft proposes; 0: the whole vocabulary
    int *vocab;                // [n_vocab] increasing ids (draft_pick_vocab), NULL with n_vocab 0
} Draft;

void draft_alloc(Draft *d, const ModelConfig *tc, const DraftConfig *dc);
void draft_free(Draft *d);
// The draft's vocabulary: of the target's V tokens, the n that counts[]
// (V entries: how often the target's replies hold each) ranks highest, ties to
// the lower id, those never seen left out; kept in increasing order. The
// draft proposes only these, so its lm_head needs only their rows (on the
// phone, a fraction of the target's).
void draft_pick_vocab(Draft *d, const uint64_t *counts, int V, int n);
// A vocabulary read from a file: n ids increasing inside [0, V).
int draft_vocab_check(const int *ids, int n, int V, const char *src, PtError *e);
// Fresh weights: matrices N(0, init_std) of the target's config, norms 1;
// deterministic in the seed.
void draft_init(Draft *d, uint64_t seed);

// A row's loss beside the cross-entropy on its target: the KL divergence
// KL(target || draft) from the target's own next-token distribution there,
//     loss = ce_weight * CE + kl_weight * KL(softmax(h_t W) || softmax(z)),
// where z is the row's logits, W the draft's lm_head (the target's, or its
// rows of the draft's vocabulary: the target's distribution over those
// tokens) and h_t the target's final-normed hidden state at the position
// that predicts the same token (anchor + i - 1 for block row i). Both parts
// are weighted by the row's position weight, as the cross-entropy alone is.
typedef struct {
    float ce_weight, kl_weight;   // kl_weight 0: the cross-entropy alone, scaled by ce_weight (1: as without a mix)
    const float *target_h;        // device [blk*S, H], row i*S+s h_t of block row i of block s; with kl_weight > 0
} DraftLossMix;

// ---- the draft as it runs: forward, backward, generation. One pass works on
// S = B*A blocks: sequence b (0..B-1) of T context rows, A blocks on it. Block
// rows are laid out position-major: row i*S + s is position i of block s =
// b*A + j, so the rows of one block position are contiguous (the loss weights
// them per position).
typedef struct {
    const int *block_tokens;   // [blk*S] host: the block's tokens (row i*S + s)
    const int *anchors;        // [S] host: block s's first position p; it sees context rows t < p of its sequence
    const int *ctx_lo;         // [S] host or NULL (0): ... and t >= ctx_lo[s] (packed rows: its example's first row)
    const int *targets;        // [blk*S] host or NULL: the token row i*S+s should predict; < 0: none
    const float *pos_weight;   // [blk] host, with targets: the loss weight of block position i
    // Generation (B = 1) fills the context a few rows at a time: rows before
    // ctx_from keep what the last pass made of them, rows from ctx_rows on
    // are not made (0: all T). Training: 0 and 0.
    int ctx_from, ctx_rows;
    const DraftLossMix *mix;   // with targets: what a row's loss is; NULL: its cross-entropy alone
} DraftInput;

// Per draft layer: the keys and values of the context rows (they depend on
// the context only, so one pass serves every block), and the block rows'
// saved activations.
typedef struct {
    float *kc_raw, *kc, *kc_rstd, *vc;                 // [B*T, KV] ([B*T*nkv] rstd)
    float *ln1, *ln1_rstd, *q_raw, *q, *q_rstd;        // block rows R = blk*S
    float *kb_raw, *kb, *kb_rstd, *vb, *att, *lse;
    float *x_mid, *ln2, *ln2_rstd, *gate, *up, *act;
} DraftLayerActs;

typedef struct {
    Device *dev;
    ModelConfig tc;
    DraftConfig dc;
    const TensorTable *tt;     // the draft's table (the caller's)
    float *weights, *grads;    // device: the weights, and where the backward writes
    float *own_grads;          // a training plan's own gradient buffer
    DraftViews w, g;
    const float *embed, *lm_head;   // the target's, device memory (frozen); lm_head: n_out rows
    const float *target_head;       // the target's lm_head
    float *vocab_head;              // with a vocabulary of its own: its rows of target_head (device, owned)
    int n_out;                      // logits per row: the target's vocabulary, or the draft's (draft_model_use_vocab)
    MatmulPrecision matmul;
    RopeTable rope;
    int B, T, A, training;
    float *ctx_pre, *ctx, *ctx_rstd;   // context: fc output [B*T, H], after hidden_norm, its rstd
    float *x;                          // residual stream of the block rows, [L+1][R, H]
    DraftLayerActs layer[DRAFT_MAX_LAYERS];
    float *proj, *lnf, *lnf_rstd;
    // the backward's buffers
    float *dx, *dln, *dq, *dq_raw, *dkb, *dkb_raw, *dvb, *datt, *dgate, *dup, *dact;
    float *dctx, *dctx_pre, *dkc, *dkc_raw, *dvc;
    int *tokens, *targets, *anchors, *ctx_lo, *pos_blk, *pos_ctx;   // device
    double ce_sum, kl_sum;     // the last pass's position-weighted sums of the two parts of its loss (a mix's)
    float *pos_logits, *host_logits;   // draft_forward_greedy's: one block position's logits [S, n_out], device and host
    int *host_pos;                                          // [max(R, B*T)]
    void *arena;
} DraftModel;

// A draft over `weights` (device, laid out by tt) for a target whose
// embedding and lm_head are embed / lm_head (device).
void draft_model_init(DraftModel *dm, Device *dev, const ModelConfig *tc, const DraftConfig *dc,
                      const TensorTable *tt, float *weights, const float *embed, const float *lm_head,
                      MatmulPrecision p);
// The draft's own vocabulary (Draft.vocab: n ids): its logits are those
// tokens' only, token k of the vocabulary in column k (targets are column
// indices), from a copy of their rows of the target's lm_head that dm keeps.
// n = 0: the target's whole vocabulary again.
void draft_model_use_vocab(DraftModel *dm, const int *ids, int n);
// Plans B sequences of T context rows with A blocks each (training: gradients too).
int draft_model_plan(DraftModel *dm, int B, int T, int A, int training, PtError *e);
void draft_model_free(DraftModel *dm);
// captures: [B*T, n_target*H] device memory, the target's chosen layers at each context row.
// Forward: returns the weighted sum of the per-row losses (0 without targets)
// and the sum of the weights of the rows counted in *weight; logits_out
// [blk*S, n_out] (device) optional.
double draft_forward(DraftModel *dm, const float *captures, const DraftInput *in, float *logits_out,
                     double *weight);
// The same pass, with each row's greedy column (the lower on ties, as
// decoding picks) in greedy [blk*S] (host; -1 at position 0, which is given)
// in place of the logits: one block position's logits at a time.
double draft_forward_greedy(DraftModel *dm, const float *captures, const DraftInput *in, int *greedy,
                            double *weight);
// Forward + backward: accumulates grad_scale * d(weighted loss sum)/d(draft weights) into dm->grads.
double draft_forward_backward(DraftModel *dm, const float *captures, const DraftInput *in, float grad_scale,
                              double *weight);
void draft_zero_grads(DraftModel *dm);
// Points the gradient output at another buffer laid out by the draft's table
// (device; NULL: the plan's own): a trainer keeps micro-batches apart.
void draft_model_use_grads(DraftModel *dm, float *grads);

// How far verification would accept the blocks of a pass: its greedy
// columns (draft_forward_greedy) against its targets (host [blk*S]: the
// target's tokens, or columns of the draft's vocabulary). A block counts
// when position 1 has a target (*blocks += 1); reached[i] (i = 1..blk-1)
// gains it when the greedy column at each of positions 1..i is that
// position's target, a position without one ending the prefix.
// reached[i] / blocks is the share of blocks whose accepted prefix reaches i,
// and 1 + the sum of the shares the tokens a target pass gives on average.
void draft_acceptance(const int *greedy, const int *targets, int blk, int S, double *reached, double *blocks);

// The loss weight of block position i (1..blk-1; position 0 is the given
// token and has none): exp(-(i-1)/decay), DFlash's decay toward later rows.
void draft_pos_weights(float *w, int blk, float decay);
