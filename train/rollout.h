// rollout.h: the model's own completions of a training set's prompts, made
// by the batched sampler (model/sampler.h) as a step runs, for the
// objectives that train on them: GRPO (grpo_train.h) and on-policy
// distillation (onpolicy_distill.h). The prompts are an SFT set's: each
// example's text before its final reply; the reply is its reference.
//
// Micro-batch i of the one stream (trainee.h's seed_index) takes prompt
// items i P .. i P + P - 1 of the prompts' seeded per-epoch order, each
// sampled `group` times, and its completion c draws with the seed of
// (train.seed, i, c): the rollouts follow from the step alone, so a resumed
// run samples exactly what the run would have, and the sampler needs no
// state in the checkpoint. Each completion (its prompt, then its new
// tokens, the counted targets) is a segment of the batch: one a row, rows
// past P x group padding; or, with [rl] prompts set, packed several to a row
// (first fit, longest first), the pass running over the rows they fill.
//
// The lead keeps every completion in run_dir/rollouts.jsonl (trimmed on
// resume to the steps the checkpoint holds), with what the objective adds.
#pragma once
#include <jansson.h>
#include "../model/sampler.h"
#include "objective.h"

typedef struct {
    int *tokens, n;            // the prompt
    char *text, *reference;    // decoded; the reference without its end-of-turn token
    int end_stop;              // the reply's end-of-turn token, -1 when none
    uint64_t doc;              // its example in the training set
} RolloutPrompt;

typedef struct {
    int group, P, B, T;        // completions a prompt, prompts a micro-batch, the batch
    int packed;                // several completions a row
    GenParams gen;             // the sampling (each job its own seed and stops)
    uint64_t seed;
    RolloutPrompt *prompts;
    uint64_t n_prompts;
    const char *path;          // the training set
    const Tokenizer *tok;
    uint64_t order_epoch, *order;   // the epoch whose prompt order `order` holds (UINT64_MAX: none yet)
    Sampler sampler;
    int sampler_ready;
    int n;                     // completions a micro-batch: P x group
    int cap;                   // the larger of n and B: the sampler's rows, the seeds' stride
    SampleJob *jobs;           // [cap]
    const RolloutPrompt **of_job;   // [cap]: job c's prompt
    GenParams *params;         // [cap]
    int *outs;                 // [cap * max_new]
    int *at;                   // [cap]: completion c's first position in the batch (flat b*T+t)
    int *row_used;             // [B]: positions a row's completions fill
    int *row_segs;             // [B]: completions placed in a row so far (its next segment id)
    FILE *log;                 // the lead's run_dir/rollouts.jsonl, NULL on other ranks
    int steps_per_index;       // micro-batches a step over all ranks (the log's step numbers)
} Rollouts;

// [rl]'s sampling (group, max_new, temperature, top_k, top_p) over the
// training set of d; who names the mode in messages. Examples without a
// reply, and prompts without max_new positions left in T, are counted (on
// d->log) and dropped; none left is an error, as are packed completions that
// might not fit in B rows.
int rollouts_open(Rollouts *ro, const Recipe *r, const ObjectiveData *d, const char *who, PtError *e);
// The lead opens rollouts.jsonl (a resumed run first drops the lines of the
// steps past resumed_at); steps_per_index as above.
int rollouts_start(Rollouts *ro, Comm *comm, const char *run_dir, long resumed_at, PtError *e);
// Samples micro-batch `index` with m's current weights and puts it in b
// (tokens, positions, segments, targets and mask on the new tokens, b->rows
// the rows they fill); *seconds the sampling took. b->n_loss is the new
// tokens' count; completion c is b's flat positions at[c] ... at[c] +
// n_prompt + n_out - 1.
int rollouts_sample(Rollouts *ro, Model *m, uint64_t index, Batch *b, double *seconds, PtError *e);
// Completion c stopped at a stop token (else max_new cut it).
int rollout_stopped(const Rollouts *ro, int c);
// The last micro-batch's completions into o's metrics: their mean length
// (metric m_length), the share max_new cut (m_clipped), and new tokens per
// second of the `seconds` sampling took (m_tps).
void rollouts_metrics(const Rollouts *ro, double seconds, Objective *o, int m_length, int m_clipped, int m_tps);
// One JSON line per completion of the last micro-batch: step, batch, example,
// prompt, completion, reference, seed and the fields extra(ctx, c) returns
// (a new object, merged; extra may be NULL).
void rollouts_log(Rollouts *ro, uint64_t index, json_t *(*extra)(void *ctx, int c), void *ctx);
void rollouts_free(Rollouts *ro);
// What sampling adds to a training position's FLOPs: a forward (a third of a
// training token's) over each group's prompt once and over each new token,
// at most (max_new + (T - max_new) / group) / T of a forward a position.
double rollout_flops_per_token(const ModelConfig *cfg, int T, int max_new, int group);
