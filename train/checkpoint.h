// checkpoint.h: HDF5 checkpoints (zlib-deflated), as DESIGN.md describes:
// /config (attributes), /params/<hf name>, /tokenizer/{tokenizer.json,
// tokenizer_config.json} (bytes), later /optim and /state. Written to a
// temporary name and renamed, so a crash never leaves a broken checkpoint.
#pragma once
#include "../model/bundle.h"

int checkpoint_save(const char *path, const ModelBundle *b, PtError *e);
int checkpoint_load(const char *path, ModelBundle *b, PtError *e);
int checkpoint_is_hdf5(const char *path);
// Prints config and tensor list (name, shape, dtype, bytes) of a checkpoint.
int checkpoint_inspect(const char *path, FILE *out, PtError *e);
