// draft_train.h: the speculative-draft part of a training run (recipe
// [draft]; model/draft.h): the target is the int4 model of model.init,
// frozen (exactly the weights `--int4` runs, as [lora] base = int4 makes
// them), run forward on each micro-batch so that its chosen layers' outputs
// fill the captures; the draft (fresh, or the run's draft checkpoint) reads
// them and trains on blocks drawn at response tokens. The trainer's
// data-parallel step and AdamW run on the draft's table and buffer.
//
// A block at anchor p of a sequence: token p and block-1 mask tokens, each
// mask row i predicting token p+i while p+1..p+i are all response tokens of
// p's example (the loader's loss mask: the target before token q counts iff
// q is a response token); p itself is a response token followed by one.
// Anchors are drawn per sequence from a seed the trainer derives from
// (train.seed, step, micro-batch, rank), so a resumed run draws the same.
// With [draft] kl_weight > 0 each row's loss adds the KL divergence from the
// target's own next-token distribution at the position predicting the same
// token (DraftLossMix): the target's final hidden states of that pass,
// gathered at the block rows only.
#pragma once
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../formats/draft_checkpoint.h"
#include "data_parallel.h"
#include "recipe.h"

typedef struct {
    int *block_tokens, *targets, *anchors, *ctx_lo;   // host: DraftInput's arrays for one micro-batch
    int *target_rows;         // host [blk*S]: the target's row (of B*T) whose next token row i*S+s predicts
    double weight;            // the sum of the loss weights of its rows with a target
} DraftBlocks;

// An evaluation's sums (draft_train_eval), for one rank.
typedef struct {
    double loss, weight;      // the weighted loss and the sum of its weights
    double ce, kl;            // the weighted sums of the loss's parts
    double blocks, reached[DRAFT_MAX_BLOCK];   // draft_acceptance's counts
} DraftEvalSums;

typedef struct {
    Draft d;                  // host: the draft, as checkpoints write it
    float *params;            // the draft on the device (dev_mirror of d.params)
    DraftModel dm;
    float *captures;          // device [B*T, n_target*H]: the target's chosen layers (model_capture)
    float pos_weight[DRAFT_MAX_BLOCK];
    int A;                    // blocks per sequence ([draft] anchors)
    int n_blocks;             // micro-batches of blocks held (grad_accum)
    DraftBlocks *blocks;
    int *cand;                // [T] scratch: a sequence's candidate anchors
    int *column;              // with a vocabulary: [V] token -> its column, -1 outside it
    DraftLossMix mix;         // [draft] ce_weight, kl_weight; target_h: the gathered rows below
    float *target_h;          // device [blk*S, H] with kl_weight > 0: the target's final hidden states at the rows
    int *target_rows;         // device [blk*S]: the rows gathered
    char accept_name[DRAFT_MAX_BLOCK + 1][24];   // the acceptance metrics' names
    int m_ce, m_accept;       // the trainee's metrics: ce and kl (-1: none), accept_1.. and accept_length
    Device *dev;
} DraftTrain;

// The int4 base (replacing b's float weights and base_params, the target's
// weights on the device; target runs on them) and the draft: resume_path's
// when resuming (its base hash and configuration must be this run's), else a
// fresh one from the recipe (seeded by train.seed). log: one line each for
// the base and the draft.
int draft_train_init(DraftTrain *dt, const Recipe *r, Device *d, ModelBundle *b, float *base_params,
                     const Model *target, const char *resume_path, FILE *log, PtError *e);
// The draft's vocabulary ([draft] vocab = n tokens, draft_pick_vocab) from
// the response tokens of the training set train (named train_name): set on a
// fresh run; a resumed one's must be the same (else one line, naming both).
// log: a line naming its size.
int draft_train_vocab(DraftTrain *dt, const Dataset *train, const char *train_name, int n, int resumed, FILE *log,
                      PtError *e);
// After the target's plan (B x T, inference): the draft's (A blocks a
// sequence, training), the captures and room for `accum` micro-batches.
int draft_train_plan(DraftTrain *dt, Model *target, int accum, PtError *e);
void draft_train_free(DraftTrain *dt);

// Micro-batch a's blocks, drawn from b with seed; returns their weight.
double draft_train_prepare(DraftTrain *dt, int a, const Batch *b, uint64_t seed);
// The target's forward over b, then the draft's forward and backward on
// micro-batch a's blocks: scale x d(weighted loss sum)/d(draft) into grads
// (device, laid out by the draft's table; NULL: draft_train_grads), which it
// zeroes first (so micro-batches' gradients are summed as the trainer sums
// them, in order); returns the weighted loss sum.
double draft_train_micro(DraftTrain *dt, Model *target, const Batch *b, int a, float scale, float *grads);
static inline float *draft_train_grads(const DraftTrain *dt) { return dt->dm.own_grads; }
static inline const TensorTable *draft_train_table(const DraftTrain *dt) { return &dt->d.tt; }

// The draft's weighted loss over the dataset as eval_loss_sums passes it
// (fixed loader seed, blocks from a fixed seed and the global batch index):
// the rank's sums of weighted losses, of weights and of the loss's parts, and
// how far verification would accept its blocks (draft_acceptance).
int draft_train_eval(DraftTrain *dt, Model *target, const Dataset *d, long max_batches, int rank, int world,
                     DraftEvalSums *out, PtError *e);
// The draft checkpoint at path: with st, the AdamW moments of dp and the
// training state too. Every rank calls it (dp gathers the moments).
int draft_train_save(DraftTrain *dt, DataParallel *dp, const char *path, const TrainState *st, PtError *e);
// FLOPs of a step per context token (the target's forward and the draft's
// forward and backward), for the MFU figure.
double draft_train_flops_per_token(const DraftTrain *dt, int T);
