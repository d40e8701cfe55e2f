// distill_head.h: distillation as a loss head (model.h): on the counted
// next-token rows the mix of cross-entropy and KL from a teacher's
// distribution that classifier_distill computes (ops/ops.h states the loss
// and its gradient; backend.h's DistillTarget the teacher's side).
#pragma once
#include "model.h"

typedef struct {
    const DistillTarget *target;   // the teacher of this pass (device memory), the caller's
    DistillSums sums;              // the last pass's cross-entropy and KL sums over counted rows
} DistillHead;

// The head over dh (its target set by the caller before each pass); the
// input's targets and mask say which rows count.
LossHead distill_loss_head(DistillHead *dh);
