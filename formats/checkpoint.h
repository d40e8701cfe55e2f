// checkpoint.h: HDF5 checkpoints (zlib-deflated; the layout is in
// docs/ARCHITECTURE.md): /config (attributes), /params/<hf name>,
// /tokenizer/{tokenizer.json, tokenizer_config.json} (bytes), and for training
// /optim and /state. Written to a temporary name and renamed, so a crash
// never leaves a broken checkpoint.
#pragma once
#include "../data/loader.h"
#include "../data/mixture.h"
#include "../model/bundle.h"
#include "../qat/qat.h"

// Everything besides weights and Adam moments that a run needs to resume
// exactly where it stopped.
typedef struct {
    int64_t step;             // optimizer steps done
    int64_t tokens;           // training tokens consumed
    int64_t bad_steps;        // non-finite steps in a row
    double best_val_loss;     // lowest validation loss so far (INFINITY if none)
    LoaderCursor cursor;      // the training loader's position (one training set)
    MixCursor mix;            // a mixture's position; n_sets 0: not a mixture (and in older checkpoints)
} TrainState;

int checkpoint_save(const char *path, const ModelBundle *b, PtError *e);
// Weights plus /qat (a QAT model's int4 scales), no optimizer state.
int checkpoint_save_qat(const char *path, const ModelBundle *b, const QatState *qat, PtError *e);
// Where a training checkpoint's AdamW moments come from: tensor i's m
// (which 0) or v (which 1), valid until the next call. The writer asks for
// every tensor's m in table order, then every tensor's v, once each (a run
// whose moments are sharded over ranks gathers each tensor as it is asked).
typedef struct {
    const float *(*tensor)(void *ctx, int i, int which);
    void *ctx;
} MomentSource;
// The source for whole buffers laid out by tt.
typedef struct { const TensorTable *tt; const float *m, *v; } MomentBuffers;
const float *moment_buffers(void *ctx, int tensor, int which);
// Also writes /optim/m, /optim/v (same layout as the params), /state and,
// when qat is non-NULL, /qat (the int4 scales and zero points).
int checkpoint_save_train(const char *path, const ModelBundle *b, const MomentSource *moments, const TrainState *st,
                          const QatState *qat, PtError *e);
// The int4 spec a checkpoint's /qat was trained with: 1 when it has none.
int checkpoint_read_qat_spec(const char *path, QuantSpec *spec, int *quant_embedding, PtError *e);
// Reads /qat into q (made by qat_init for the same spec and table): 1 when absent.
int checkpoint_load_qat(const char *path, QatState *q, const TensorTable *tt, PtError *e);
// Reads /state, and the floats [lo, hi) of /optim's moments laid out by tt
// into adam_m[0, hi - lo) and adam_v (0, total for all of them; a rank of a
// sharded run reads its shard); returns 1 when the file holds weights only
// (a fresh start from it), 0 when read, -1 on error.
int checkpoint_load_train(const char *path, const TensorTable *tt, size_t lo, size_t hi, float *adam_m,
                          float *adam_v, TrainState *st, PtError *e);
int checkpoint_load(const char *path, ModelBundle *b, PtError *e);
// The same without the weights (b->params NULL): the config, the table and
// the tokenizer files, for what can be checked before the weights are read.
int checkpoint_load_meta(const char *path, ModelBundle *b, PtError *e);
int checkpoint_is_hdf5(const char *path);
// Prints config and tensor list (name, shape, dtype, bytes) of a checkpoint.
int checkpoint_inspect(const char *path, FILE *out, PtError *e);
