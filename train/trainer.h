// trainer.h: the training loop behind `pocket train` (CPT and SFT): resume
// from the run directory, gradient accumulation, AdamW with schedule and
// clipping, skipped non-finite steps, periodic eval, samples, checkpoints,
// metrics.jsonl and the loss plot.
#pragma once
#include <signal.h>
#include "../dist/comm.h"
#include "recipe.h"

// Runs (or resumes) the recipe's run as rank comm->rank of comm->world (all
// ranks start from the same weights and read the same run directory and
// data). *stop becomes non-zero on SIGINT/SIGTERM: every rank finishes its
// step, a checkpoint is saved and it returns 0. Returns 0 when the run is
// complete or stopped cleanly, -1 with e filled.
int train_run(const Recipe *r, Comm *comm, volatile sig_atomic_t *stop, PtError *e);
