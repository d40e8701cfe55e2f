// trainee.h: what a run trains, chosen once at set-up as a Backend is
// chosen for a device: the full model (with [qat], through the int4
// rounding), a LoRA adapter over a frozen base, or a DFlash draft over the
// frozen int4 target. The trainer's step, evaluation, checkpoints, resume
// and data-parallel code call these and nothing else of it; which kind it
// is, trainee_open (choose.h) alone asks.
//
// A step, on every rank (trainer.c):
//     count = sum over micro-batches a of prepare(a, batch a)      (summed over the ranks)
//     loss  = sum over a of micro(a, batch a, 1/count, grads)     (each micro-batch's gradient added in order)
//     dp_reduce_grads; after_reduce(step, grads); norm; AdamW on t->params; after_update(step)
// A new way to train: a TraineeOps table in its own file, its open
// function, and a row in trainee_open (choose.c).
#pragma once
#include <stdio.h>
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../dist/comm.h"
#include "../model/bundle.h"
#include "../model/model.h"
#include "data_parallel.h"
#include "objective.h"
#include "recipe.h"

typedef struct Trainee Trainee;

// What set-up gives every kind.
typedef struct {
    const Recipe *r;
    Device *dev;
    Comm *comm;
    Objective *obj;            // the run's loss (a draft trains on its own block loss)
    const char *resume_path;   // the run's newest checkpoint, or NULL for a new run
    FILE *log;                 // the lead's stdout, NULL on other ranks
} TraineeSetup;

typedef struct {
    const char *name;
    // The sharded optimizer is made (its table: t->tt; t->dp is set): what
    // the trainee keeps of it (QAT: its share of the scales). May be NULL.
    void (*use_optimizer)(Trainee *t, DataParallel *dp);
    // Once the data are open: what the trainee takes from the training set
    // (a draft's vocabulary); resumed: a run resumed from its checkpoint. May be NULL.
    int (*use_data)(Trainee *t, const Dataset *train, int resumed, PtError *e);
    // Plans passes of B x T (accum micro-batches a step); the memory plan to log.
    int (*plan)(Trainee *t, int B, int T, int accum, FILE *log, PtError *e);
    // Before the passes of a step or an evaluation at `step`: the weights
    // they run on (QAT's fake-quantized masters).
    int (*use_step_weights)(Trainee *t, long step, PtError *e);
    // Micro-batch a of the step, drawn by the loader; seed_index is its
    // index in the loader's one stream (the seed of its random draws: LoRA
    // dropout, a draft's blocks). Returns the count its loss averages over
    // (tokens, groups, pairs, a draft's block weights).
    double (*prepare)(Trainee *t, int a, const Batch *b, uint64_t seed_index);
    // Its forward and backward: scale x d(loss sum)/d(trained params) into
    // grads (device, laid out by t->tt; NULL: t->grads), which it zeroes
    // first. Returns the loss sum.
    double (*micro)(Trainee *t, int a, const Batch *b, uint64_t seed_index, float scale, float *grads);
    // After the ranks' gradients are summed into grads, before their norm
    // (QAT: the scales' gradients and the masters' straight-through ones). May be NULL.
    void (*after_reduce)(Trainee *t, long step, float *grads);
    // After AdamW updated t->params (QAT: the scales' Adam, frozen codes). May be NULL.
    void (*after_update)(Trainee *t, long step);
    // The validation pass of this rank of `world`: its loss sum and count.
    int (*evaluate)(Trainee *t, const Dataset *val, long max_batches, int rank, int world, double *sum,
                    double *count, PtError *e);
    // A run checkpoint (st: with the AdamW moments of dp and the training
    // state) or best.h5 (st NULL: what trains, without moments). Every rank
    // calls it; rank 0 writes.
    int (*save)(Trainee *t, const char *path, const TrainState *st, PtError *e);
    // FLOPs of a step per context token, for the MFU figure.
    double (*flops_per_token)(const Trainee *t, int T);
    // Releases what impl holds (trainee_free frees impl itself). May be NULL.
    void (*free)(Trainee *t);
} TraineeOps;

struct Trainee {
    const TraineeOps *ops;
    const char *what;          // in messages: ops->name ("model", "adapter", "draft")
    const Recipe *r;
    Device *dev;
    Comm *comm;
    Objective *obj;
    DataParallel *dp;          // the sharded optimizer (use_optimizer)
    ModelBundle b;             // host: the start (or resumed) model, or an adapter's or draft's frozen base
    float *base;               // b.params on the device (dev_mirror)
    Model m;                   // the decoder the passes run (a draft's target)
    const TensorTable *tt;     // what trains: the table of its parameters, gradients and AdamW state
    float *params, *grads;     // ... on the device
    size_t qat_entries;        // the QAT state's (row, group) entries the optimizer shards; 0 without QAT
    int samples;               // the model changes: generating from it shows the run's progress
    void *impl;                // the kind's own state
};

// trainee_open (choose.h) opens the trainee a recipe asks for.
void trainee_free(Trainee *t);
// The newest checkpoint of the run (resume_path, a full model's) or the
// recipe's starting point into b; an adapter or a draft (frozen) starts from
// model.init, which must then be a checkpoint.
int trainee_load_start(ModelBundle *b, const Recipe *r, const char *resume_path, int frozen, PtError *e);

// The kinds (their files). Each is given t with r, dev, comm, obj set and
// b loaded by trainee_open.
int model_trainee_open(Trainee *t, const TraineeSetup *s, PtError *e);     // model_train.c
int adapter_trainee_open(Trainee *t, const TraineeSetup *s, PtError *e);   // lora_train.c
int draft_trainee_open(Trainee *t, const TraineeSetup *s, PtError *e);     // draft_train.c
// Shared by the kinds' open functions: sets the kind's ops (its name is
// t->what) and a zeroed state of impl_bytes (t->impl, returned), and puts
// b's weights on the device with the model over them (the recipe's numerics).
void *trainee_begin(Trainee *t, const TraineeOps *ops, size_t impl_bytes);
// The full model's and an adapter's ops: training plans of the decoder,
// micro-batches counted by the loader (b->n_loss), passes with the
// objective's training head, evaluation with its evaluation head.
int decoder_plan(Trainee *t, int B, int T, int accum, FILE *log, PtError *e);
double decoder_prepare(Trainee *t, int a, const Batch *b, uint64_t seed_index);
double decoder_micro(Trainee *t, int a, const Batch *b, uint64_t seed_index, float scale, float *grads);
int decoder_evaluate(Trainee *t, const Dataset *val, long max_batches, int rank, int world, double *sum,
                     double *count, PtError *e);
