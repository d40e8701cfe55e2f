// draft_checkpoint.h: speculative draft checkpoints (HDF5, like
// formats/checkpoint.h): only the draft, never the target it drafts for.
//
//     /draft       attributes: layers, block, mask_token, d_ff (int),
//                  target_layers ("3,14,25": 0-based target layers feeding it),
//                  base_sha256 (64 hex digits: the target's int4 weights,
//                  lora_base_hash, as the draft was trained against them),
//                  vocab (int: tokens it proposes, 0 or absent = all)
//     /draft/vocab int32 [vocab], increasing: those tokens (model/draft.h)
//     /params/<DFlash name>        float32 (model/draft.h: the table)
//     /optim/m, /optim/v, /state   training checkpoints only (as checkpoint.h)
//
// A draft is refused on a target with another hash: its context is the
// target's hidden states, which mean nothing for other weights.
#pragma once
#include "../model/draft.h"
#include "checkpoint.h"

// Writes the draft (and with st non-NULL its AdamW moments from the source
// and the training state), atomically.
int draft_checkpoint_save(const char *path, const Draft *d, const MomentSource *moments, const TrainState *st,
                          PtError *e);
// Reads a draft for a target of config tc. base_hash non-NULL: the draft must
// have been trained on those weights (else one line naming both hashes and
// base_name). Its config is checked against tc (draft_config_check). On
// failure d is left empty.
int draft_checkpoint_load(const char *path, const ModelConfig *tc, const char *base_hash, const char *base_name,
                          Draft *d, PtError *e);
// The base check of draft_checkpoint_load for a draft read without one: its
// hash (Draft.base_sha256) against base_hash, the weights of base_name.
int draft_check_base(const char *path, const char *hash, const char *base_hash, const char *base_name, PtError *e);
// Only /draft's attributes: the config and the base hash (hash: 65 bytes).
int draft_checkpoint_read_config(const char *path, DraftConfig *dc, char *hash, PtError *e);
// 1 when path is an HDF5 file holding /draft.
int draft_checkpoint_is(const char *path);
// Prints a draft checkpoint: its configuration, base, tensors and shapes.
int draft_checkpoint_inspect(const char *path, FILE *out, PtError *e);
