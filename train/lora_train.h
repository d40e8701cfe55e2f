// lora_train.h: the LoRA part of a training run (recipe [lora]): the frozen
// base on the device (the checkpoint's float weights, or with base = int4
// the int4 model it deploys as: QLoRA), the adapter the optimizer trains
// (fresh with PEFT's init, or from the run's adapter checkpoint) and its
// checkpoints (formats/lora_checkpoint.h). The trainer's data-parallel step
// and AdamW run on the adapter's table and buffer (only they have
// gradients and moments).
#pragma once
#include "../formats/lora_checkpoint.h"
#include "data_parallel.h"
#include "recipe.h"

typedef struct {
    LoraAdapter ad;           // host: the adapter, as checkpoints write it
    float *params;            // the adapter on the device (dev_mirror of ad.params)
    Device *dev;
} LoraTrain;

// The base (b, already on the device as base_params) and the adapter:
// resume_path's when resuming (its base hash must be the base's), else a
// fresh one from the recipe with seed. With [lora] base = int4 the int4
// model's weights replace b's float ones (and base_params'). log: one line
// saying what the base is.
int lora_train_init(LoraTrain *lt, const Recipe *r, Device *d, ModelBundle *b, float *base_params,
                    const char *resume_path, FILE *log, PtError *e);
void lora_train_free(LoraTrain *lt);
// The adapter checkpoint at path: with st, the AdamW moments of dp and the
// training state too. Every rank calls it (dp gathers the moments).
int lora_train_save(LoraTrain *lt, DataParallel *dp, const char *path, const TrainState *st, PtError *e);
