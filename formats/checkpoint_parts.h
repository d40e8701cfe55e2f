// checkpoint_parts.h: the parts of a checkpoint (checkpoint.c) that other
// HDF5 files of this folder reuse (the adapter checkpoint: lora_checkpoint.c),
// so a tensor group and the training state are written and read one way.
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
