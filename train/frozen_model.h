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
// After load: the weights replaced by those of the int4 model a QAT run on
// the grid `spec` starts from: path's QAT state when it holds one on that
// grid, else scales made by `init` (QAT_INIT_*) from the float weights, as
// the run makes them. *from_qat says which.
int frozen_model_int4(FrozenModel *f, const char *path, const QuantSpec *spec, int quant_embedding, int init,
                      int threads, int *from_qat, PtError *e);
// On dev with the numerics opt (recompute is off), planned for B x T.
int frozen_model_start(FrozenModel *f, Device *dev, const ModelOptions *opt, int B, int T, PtError *e);
void frozen_model_free(FrozenModel *f);   // after load alone too
