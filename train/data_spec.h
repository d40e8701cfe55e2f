// data_spec.h: the values of [data] train, [data] val and [train] best_by.
//
// [data] train is one token dataset (PATH) or a weighted mixture (PATH:WEIGHT,
// ...); [data] val is one validation set (PATH, named "val") or several named
// ones (NAME:PATH, ...); [train] best_by is "" (the first set), sum, NAME or
// NAME:WEIGHT, .... Parsed from the strings alone, so recipe_load can check
// them before anything runs and run_data (run_data.h) can open what they name.
#pragma once
#include "../data/mixture.h"
#include "../util/util.h"

enum { VAL_MAX_SETS = 8, VAL_NAME_MAX = 32 };

typedef struct {
    char name[VAL_NAME_MAX];   // [A-Za-z0-9_-], "val" for a plain PATH
    char *path;
} ValEntry;

// The parsed values of [data] train, [data] val and [train] best_by.
typedef struct {
    MixEntry *train;                  // n_train entries; one: the plain loader
    int n_train;
    ValEntry val[VAL_MAX_SETS];
    int n_val;
    int val_named;                    // written NAME:PATH: metrics keys val_<name>_... (else val_...)
    double best_weight[VAL_MAX_SETS]; // best.h5's figure: the sum over sets k of best_weight[k] x loss k
} DataSpec;

// Parses and checks the three values on their own (what they cannot be
// combined with in the rest of a recipe is recipe_load's check). Errors: one
// line "src: [section] key: ...".
int data_spec_parse(DataSpec *s, const char *train, const char *val, const char *best_by, const char *src,
                    PtError *e);
void data_spec_free(DataSpec *s);

