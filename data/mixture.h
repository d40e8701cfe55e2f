// mixture.h: a weighted mixture of token datasets as one stream of micro-batches.
//
// K datasets of one kind (all CPT, all SFT or all choice) made with one
// tokenizer, each with a weight: the share of the training tokens drawn from
// it. Each set keeps its own Loader (data/loader.h), so its own seeded shuffle
// and its own epochs: a small set repeats, a large one is partly seen. Set k's
// seed is derived from the run's seed and k (set 0's is the run's seed, so a
// mixture of one set is exactly that set's plain loader).
//
// The stream is loader.h's: micro-batches of B rows of T positions, rank r of
// world taking micro-batches r, r + world, ... and passing over the others'
// rows. Each row of the stream, in order, is drawn whole from the set that is
// furthest behind its share: the largest weight_k * drawn - drawn_k, where
// drawn counts the tokens of every row so far and drawn_k those from set k
// (ties to the lower index; a set of weight 0 is never drawn). A row's tokens
// are its real ones: T for a CPT window, the packed examples' or groups' for
// SFT and choice rows, padding not counted. So at any point every set's tokens
// are within about one row of its share, whatever the seed, and since the
// schedule sees the whole stream (the rows passed over too), every rank draws
// the same schedule: the stream does not depend on the number of ranks.
//
// The cursor is every set's LoaderCursor and tokens drawn: a plain struct of
// integers for checkpoints. Restoring it gives the exact continuation.
#pragma once
#include <stdint.h>
#include "loader.h"

enum { MIX_MAX_SETS = 16 };

// One entry of a mixture's recipe value: its dataset and weight.
typedef struct {
    char *path;
    double weight;
} MixEntry;

// Parses "PATH:WEIGHT, PATH:WEIGHT, ..." (spaces around entries ignored; the
// weight follows the path's last ':'), or entries with no weight at all (equal
// weights; a single PATH is the plain one-set case, weight 1). Errors, one line
// starting with key: an empty entry or path, a weight that is not a finite
// number or is negative, weights given to some entries and not others, every
// weight zero, a path named twice, more than MIX_MAX_SETS entries. *out is
// malloc'd (free with mix_entries_free).
int mix_parse(const char *value, const char *key, MixEntry **out, int *n, PtError *e);
void mix_entries_free(MixEntry *entries, int n);

// Every set the kind and tokenizer hash of the first; the message names both files.
int mix_check_sets(const Dataset *const *sets, int n, PtError *e);

// What set k has given so far, on every rank alike: its tokens in the stream,
// their share of all tokens drawn, and epochs as a fraction (items consumed /
// items per epoch, counting the repeats).
typedef struct {
    uint64_t tokens;
    double share;
    double epochs;
} MixShare;

typedef struct {
    uint64_t n_sets;
    uint64_t tokens[MIX_MAX_SETS];     // tokens drawn from each set
    LoaderCursor set[MIX_MAX_SETS];    // each set's loader
} MixCursor;

typedef struct {
    int n_sets, B, T, rank, world;
    Loader set[MIX_MAX_SETS];
    double weight[MIX_MAX_SETS];       // normalised: they sum to 1
    uint64_t tokens[MIX_MAX_SETS];
    uint64_t drawn;                    // the sum of tokens
} MixLoader;

// sets must stay open while the mixture is used; weights as mix_parse gives
// them (not negative, not all zero). Checks the sets (mix_check_sets) and
// opens a loader on each (loader_open's errors). The caller checks the
// tokenizer against the model's (dataset_check_tokenizer).
int mix_open(MixLoader *m, const Dataset *const *sets, const double *weights, int n, int B, int T, uint64_t seed, int rank,
             int world, PtError *e);
void mix_set_doc_mask(MixLoader *m, int on);   // CPT sets: loader_set_doc_mask on each
void mix_next(MixLoader *m, Batch *b);         // this rank's next micro-batch; b from batch_alloc(b, B, T)
void mix_share(const MixLoader *m, int k, MixShare *out);
void mix_get_cursor(const MixLoader *m, MixCursor *c);
// Errors: another number of sets, a set's index beyond its epoch.
int mix_set_cursor(MixLoader *m, const MixCursor *c, PtError *e);
void mix_close(MixLoader *m);
