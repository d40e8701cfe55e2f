// lora_checkpoint.h: adapter checkpoints (HDF5, like formats/checkpoint.h):
// only the adapter, never the base.
//
//     /lora        attributes: rank (int), alpha, dropout (float), targets
//                  ("q,k,v,o,gate,up,down", the trained subset in that order),
//                  base ("fp32" or "int4"), base_sha256 (64 hex digits)
//     /params/<PEFT name>          float32, PEFT's shapes: lora_A [r, in], lora_B [out, r]
//     /optim/m, /optim/v, /state   training checkpoints only (as checkpoint.h)
//
// The base hash identifies the weights the adapter was trained against, as
// the model ran them: SHA-256 over every tensor of the base's table in table
// order, each as its name, one NUL byte, then its float32 values
// (little-endian, the table's shape, row-major). For a float base these are
// the checkpoint's parameters; for QLoRA (base int4) the dequantized int4
// weights `--int4` runs on, so the int4 state (scales, zeros, frozen codes,
// which tensors are quantized) is part of it. An adapter is refused on a
// base with another hash.
#pragma once
#include "../model/lora.h"
#include "checkpoint.h"

void lora_base_hash(const TensorTable *tt, const float *weights, char hex[65]);

// Writes the adapter (and with st non-NULL its AdamW moments from the source
// and the training state), atomically.
int lora_checkpoint_save(const char *path, const LoraAdapter *a, const MomentSource *moments, const TrainState *st,
                         PtError *e);
// Reads an adapter for a base of config mc. base_hash non-NULL: the adapter
// must have been trained on that base (else one line naming both hashes and
// base_name). On failure a is left empty.
int lora_checkpoint_load(const char *path, const ModelConfig *mc, const char *base_hash, const char *base_name,
                         LoraAdapter *a, PtError *e);
// The base check of lora_checkpoint_load for an adapter read without one: its
// hash (LoraAdapter.base_sha256, base_int4) against base_hash, the weights of base_name.
int lora_check_base(const char *path, int base_int4, const char *hash, const char *base_hash, const char *base_name,
                    PtError *e);
// 1 when the adapter at path was trained on an int4 base, 0 on a float one, -1 on error.
int lora_checkpoint_base_int4(const char *path, PtError *e);
// Prints an adapter checkpoint: its configuration, base, tensors and shapes.
int lora_checkpoint_inspect(const char *path, FILE *out, PtError *e);
// 1 when path is an HDF5 file holding /lora.
int lora_checkpoint_is(const char *path);
