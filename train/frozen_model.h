// frozen_model.h: a second model a run holds forward-only beside the one it
// trains: a distillation teacher (distill.h), GRPO's KL reference
// (grpo_train.c). Loaded from a checkpoint, then, once the caller has checked
// it against the student, put on the run's device and planned for its
// micro-batch.
#pragma once
#include "../model/bundle.h"
#include "../model/model.h"

typedef struct {
    ModelBundle b;     // the weights, host memory
    float *params;     // and on the device
    Model m;           // forward only, planned for B x T
    Device *dev;
} FrozenModel;

int frozen_model_load(FrozenModel *f, const char *path, PtError *e);
// On dev with the numerics opt (recompute is off), planned for B x T.
int frozen_model_start(FrozenModel *f, Device *dev, const ModelOptions *opt, int B, int T, PtError *e);
void frozen_model_free(FrozenModel *f);   // after load alone too
