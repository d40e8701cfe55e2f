// choice_train.h: what `[train] mode = choice` adds to a run: the decision
// head's row (model/choice_head.h) chosen for a new run, and a batch's groups
// handed to the model.
#pragma once
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../model/bundle.h"
#include "../model/choice_head.h"

// Gives the bundle its decision head when it has none: row `requested` (> 0),
// else the first row past the tokenizer's tokens, else a row appended to the
// vocabulary (embedding and lm_head grow by one zero row: every score starts
// at 0). A head the bundle already has is kept (requested must then be 0 or
// the same). Prints the choice to log.
int choice_head_setup(ModelBundle *b, int requested, FILE *log, PtError *e);
// Refuses data in which the head's token is an input (its row is then not
// free to be the head).
int choice_check_data(const Dataset *d, int choice_id, PtError *e);
// The model's input for a loader batch; with choice (a choice loader) no
// token targets, and g receives the groups.
ModelInput choice_batch_input(const Batch *b, int choice, ChoiceGroups *g);
