// run_data.h: the data of a training run as the recipe's [data] gives it.
//
// [data] train is one token dataset (PATH: the plain loader, data/loader.h)
// or a weighted mixture (PATH:WEIGHT, ...: one stream drawn from several sets,
// data/mixture.h). [data] val is one validation set (PATH, named "val") or
// several named ones (NAME:PATH, ...), each evaluated on its own; [train]
// best_by says which figure best.h5 is chosen on: a set's loss or a weighted
// sum of theirs.
//
// recipe_load checks the values (data_spec.h) before anything runs; the
// trainer then opens the sets (run_data_open), draws its micro-batches from
// the stream and keeps the stream's cursor in its checkpoints (TrainState).
#pragma once
#include <jansson.h>
#include <stdio.h>
#include "../data/mixture.h"
#include "data_spec.h"
#include "../formats/checkpoint.h"
#include "recipe.h"

typedef struct {
    DataSpec spec;
    Dataset train[MIX_MAX_SETS];
    Dataset val[VAL_MAX_SETS];
    int n_train, n_val;               // opened
    Loader one;                       // a single training set
    MixLoader mix;                    // a mixture (spec.n_train > 1)
    int loader_open;
} RunData;

// Opens every set, checks each against the model's tokenizer hash and the
// kind train.mode reads (and a mixture's sets against each other), and the
// training stream of this rank of world. Errors name the key and the file.
int run_data_open(RunData *d, const Recipe *r, const char *tokenizer_hash, int rank, int world, PtError *e);
void run_data_close(RunData *d);
int run_data_mixed(const RunData *d);
// This rank's next micro-batch of the training stream.
void run_data_next(RunData *d, Batch *b);
// The stream's position, into and out of a checkpoint's training state.
void run_data_get_cursor(const RunData *d, TrainState *st);
int run_data_set_cursor(RunData *d, const TrainState *st, PtError *e);

// What each set of a mixture gave so far (tokens, share, epochs): on out as
// one line, into j (either may be NULL) as "train_sets": [{path, weight,
// tokens, share, epochs}, ...]. Nothing for a single set, or before the first step.
void run_data_report(const RunData *d, FILE *out, json_t *j);

// Validation set k's metrics prefix: "val_" (a plain PATH) or "val_<name>_".
void run_data_val_prefix(const RunData *d, int k, char *out, size_t cap);
// The figure best.h5 is chosen on, from each set's loss.
double run_data_best_figure(const RunData *d, const double *loss);
