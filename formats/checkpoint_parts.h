// checkpoint_parts.h: the parts of a checkpoint (checkpoint.c) that other
// HDF5 files of this folder reuse (the adapter and draft checkpoints:
// lora_checkpoint.c, draft_checkpoint.c), so a tensor group and the training
// state are written and read one way; and what those two files share
// (checkpoint_parts.c).
#pragma once
#include "../util/h5.h"
#include "checkpoint.h"

// /group/<name> for every tensor of tt: from base (laid out by tt), or with
// base NULL from the moment source (which: 0 m, 1 v).
int checkpoint_write_tensors(hid_t parent, const char *group, const TensorTable *tt, const float *base,
                             const MomentSource *src, int which);
// Every tensor of tt from /group into out (laid out by tt), shapes checked; a
// dataset the table does not know is an error naming it.
int checkpoint_read_tensors(hid_t f, const char *group, const TensorTable *tt, float *out, const char *path,
                            PtError *e);
// /optim/m, /optim/v from the source and /state (checkpoint_load_train reads them).
int checkpoint_write_train_state(hid_t f, const MomentSource *src, const TensorTable *tt, const TrainState *st);

// A file of one trained part of a model (an adapter, a draft): the part's
// attributes (write_attrs(file, ctx)), /params laid out by tt from params,
// and with st its AdamW moments from the source and the training state;
// written atomically. what names the part in the error.
int checkpoint_save_part(const char *path, int (*write_attrs)(hid_t f, const void *ctx), const void *ctx,
                         const TensorTable *tt, const float *params, const MomentSource *moments, const TrainState *st,
                         const char *what, PtError *e);
// The string attribute `name` of the group /group (open as g) into buf of cap
// bytes; fails when it is longer.
int checkpoint_read_str(hid_t g, const char *group, const char *name, char *buf, size_t cap, const char *path,
                        PtError *e);
// 1 when path is an HDF5 file holding the group /group (what kind of file it is).
int checkpoint_has_group(const char *path, const char *group);
// Prints every dataset of /params of f (its name padded to width, its shape),
// then their count, parameters and whether f is a run's checkpoint (/optim).
int checkpoint_print_params(hid_t f, int width, FILE *out, const char *path, PtError *e);
