// trainer.h: the training loop behind `pocket train` (CPT and SFT): resume
// from the run directory, gradient accumulation, AdamW with schedule and
// clipping, skipped non-finite steps, periodic eval, samples, checkpoints,
// metrics.jsonl and the loss plot.
#pragma once
#include <signal.h>
#include "recipe.h"

// Runs (or resumes) the recipe's run. *stop becomes non-zero on SIGINT/SIGTERM:
// the loop finishes its step, saves a checkpoint and returns 0.
// Returns 0 when the run is complete or stopped cleanly, -1 with e filled.
int train_run(const Recipe *r, volatile sig_atomic_t *stop, PtError *e);
