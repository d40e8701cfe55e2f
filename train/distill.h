// distill.h: the teacher of a run with [distill] (recipe.h). Its weights on
// the run's device with a forward-only model over them (source = forward), or
// the top-k logits stored in the training dataset (source = topk, written by
// `pocket teacher-topk`: data/topk.h); per micro-batch, the DistillTarget the
// student's loss takes (model.h: ModelInput.distill).
//
// The teacher must share the student's tokenizer (the same tokenizer.json
// bytes), vocabulary and hidden size (the loss multiplies its final hidden
// states by its own lm_head chunk by chunk beside the student's); its depth
// and the rest may differ. The default teacher is model.init, read from its
// file, so a resumed run has the teacher the run started with.
#pragma once
#include <stdio.h>
#include "../data/loader.h"
#include "../data/topk.h"
#include "../model/bundle.h"
#include "../model/distill_head.h"
#include "../model/model.h"
#include "frozen_model.h"
#include "recipe.h"

typedef struct {
    DistillTarget t;          // this micro-batch's target (weights from the recipe)
    int source;               // DISTILL_*
    FrozenModel teacher;      // source = forward: planned for the run's micro-batch
    // source = topk
    TopkData topk;            // the training dataset's /topk
    int *ids;                 // this micro-batch's rows of it, host [B*T*k]
    float *logits, *lse;      // [B*T*k], [B*T]
    int *dev_ids;             // and on the device
    float *dev_logits, *dev_lse;
    Device *dev;
    int on;
} DistillRun;

// [distill] as a run's objective (objective.h): its training passes take
// the distillation head with each micro-batch's teacher (metrics ce and kl,
// per counted token); evaluations the plain next-token cross-entropy.
// Declared in objective.h: int distill_objective_open(Objective *o, PtError *e);

// Sets up the teacher (whether or not [distill] is enabled: on-policy
// distillation takes it too) for a run over the student `student` (its config, and
// the tokenizer's SHA-256 student_tok_hash) whose micro-batches are B x T,
// with the training dataset `train_path` (the top-k source). Errors name the
// files and both sides of what does not match.
int distill_init(DistillRun *dr, const Recipe *r, Device *dev, const ModelConfig *student,
                 const char *student_tok_hash, int B, int T, FILE *log, PtError *e);
// The target of one micro-batch: the teacher's forward over `in` (forward),
// or the rows of the top-k logits the batch's tokens came from (topk).
const DistillTarget *distill_target(DistillRun *dr, const Batch *b, const ModelInput *in);
void distill_free(DistillRun *dr);
