// objective.h: what a run's loss is, chosen once at set-up from the recipe
// ([train] mode and [distill]): the next-token cross-entropy (cpt, sft), the
// decision head (choice), distillation from a teacher, preference losses
// (dpo), GRPO on the model's own samples (grpo), a teacher's KL on them
// (onpolicy_distill). An objective hands the decoder a loss head (model/model.h) for each
// pass over a batch; the trainee (trainee.h) runs the passes. Besides its
// loss it may sum named metrics over a step's or an evaluation's passes
// (distillation's parts, the preference rewards); each is reported as its
// sum over the count the loss is averaged over (tokens, groups, pairs), or
// over a count of its own (counts[k] > 0 after a step: a rollout's rewards
// per completion, its tokens per second of sampling). What an evaluation
// alone measures (a draft's acceptance) is marked eval_only.
//
// A new objective: an ObjectiveOps table in its own file, a row in
// objective_open (choose.c), and its dataset kind in objective_dataset_kind.
#pragma once
#include <stdio.h>
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../dist/comm.h"
#include "../model/bundle.h"
#include "recipe.h"

// (a draft's: its loss parts, its acceptance at each of up to 63 block positions and their length)
enum { OBJECTIVE_MAX_METRICS = 72 };
_Static_assert((int)OBJECTIVE_MAX_METRICS <= (int)COMM_SUM_MAX, "the trainer sums the metrics over the ranks in one call");

typedef struct Objective Objective;

// What the data gives an objective once it is open.
typedef struct {
    const Dataset *const *train;     // the training sets: one, or a mixture's
    int n_train;
    const Dataset *const *val;       // the validation sets, each evaluated on its own (n_val 0: none)
    int n_val;
    const char *tokenizer_hash;      // the model's tokenizer
    const Tokenizer *tok;            // ... itself (a rollout's texts)
    const ModelConfig *cfg;          // the model the objective's heads run on
    Device *dev;
    int B, T;                        // the run's micro-batch
    FILE *log;                       // the lead's stdout, NULL on other ranks
} ObjectiveData;

typedef struct {
    const char *name;
    // Before the model is made: the bundle a run starts from, made fit for
    // the objective (the decision head's row); frozen: an adapter's base,
    // which must not change. src names the bundle in messages. May be NULL.
    int (*prepare_bundle)(Objective *o, ModelBundle *b, int frozen, const char *src, FILE *log, PtError *e);
    // Once the data are open: checks them and loads what the loss needs (a
    // teacher). May be NULL.
    int (*open)(Objective *o, const ObjectiveData *d, PtError *e);
    // Before the first step, with m planned and running the run's start
    // weights (a resumed run: its current ones): what the loss needs of the
    // model it starts from, on every rank (the reference log-probabilities
    // of preference losses). May be NULL.
    // resumed_at: the step a resumed run goes on from, 0 for a new run.
    int (*start)(Objective *o, Model *m, Comm *comm, const char *run_dir, long resumed_at, PtError *e);
    // Makes training micro-batch b itself in place of the data stream's
    // (GRPO: completions m samples, as it runs this step, of the training
    // set's prompts); index is the micro-batch's place in the one stream
    // (trainee.h's seed_index), from which alone its prompts and seeds
    // follow, so a resumed run makes the same. May be NULL: the stream's.
    int (*make_batch)(Objective *o, Model *m, uint64_t index, Batch *b, PtError *e);
    // On every rank, once the run's checkpoint of `step` is written: what a
    // run resumed from it needs besides it, kept in run_dir (GRPO's rollouts
    // of a cycle of updates_per_rollout steps in progress; start reads it
    // back). May be NULL.
    int (*save)(Objective *o, const char *run_dir, long step, PtError *e);
    // The loss head of one pass over b (in: the model input made from it);
    // training: a step's pass, else an evaluation's. NULL head: next-token
    // cross-entropy. The head lives until the next call.
    const LossHead *(*head)(Objective *o, const Batch *b, const ModelInput *in, int training);
    void (*free)(Objective *o);
} ObjectiveOps;

struct Objective {
    const ObjectiveOps *ops;
    const Recipe *r;
    int n_metrics;
    const char *metric[OBJECTIVE_MAX_METRICS];   // names as metrics.jsonl writes them
    double sums[OBJECTIVE_MAX_METRICS];          // summed by the heads' passes since objective_reset
    double counts[OBJECTIVE_MAX_METRICS];        // a metric's own count, summed likewise (0: the loss's)
    int eval_metrics;                            // evaluations report them too (prefixed val_)
    int eval_only[OBJECTIVE_MAX_METRICS];        // summed by evaluations alone: not on a step's line or curve
    int plotted[OBJECTIVE_MAX_METRICS];          // a panel of loss.svg each
    int progress_metric;                         // 1 + the metric the progress line shows; 0: none
    double flops_per_token;                      // what the loss adds to a step's FLOPs (a teacher's forward)
    LossHead head;                               // the head handed out last (an implementation's)
    void *impl;
};

// objective_open (choose.h) opens the objective a recipe asks for.
void objective_free(Objective *o);
static inline void objective_reset(Objective *o) {
    for (int k = 0; k < o->n_metrics; k++) o->sums[k] = o->counts[k] = 0;
}
// The dataset kind a train.mode reads.
DatasetKind objective_dataset_kind(int mode);

// One pass over the dataset as eval_loss_sums makes it (evaluate.h), each
// batch's loss from o's evaluation head: the rank's loss sum and count.
int objective_eval(Objective *o, Model *m, const Dataset *d, long max_batches, int rank, int world, double *sum,
                   long *count, PtError *e);

// The implementations (their files).
extern const ObjectiveOps objective_token, objective_choice;   // objective.c
int distill_objective_open(Objective *o, PtError *e);        // distill.c
int preference_objective_open(Objective *o, PtError *e);     // preference_train.c
int grpo_objective_open(Objective *o, PtError *e);           // grpo_train.c
int onpolicy_objective_open(Objective *o, PtError *e);       // onpolicy_distill.c
