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
// Under LoRA the head row is part of the frozen base: the adapter learns to
// move the hidden state along it. Refuses a base whose head is missing (the
// row would be new: another base, and no learning) or all zeros (every score
// 0 whatever the hidden state: no gradient reaches the adapter).
int choice_head_frozen_check(const ModelBundle *b, int requested, const char *src, PtError *e);
// Refuses data in which the head's token is an input (its row is then not
// free to be the head).
int choice_check_data(const Dataset *d, int choice_id, PtError *e);
// The groups of a loader batch (its arrays, for choice_loss_head).
ChoiceGroups batch_choice_groups(const Batch *b);

// Accuracy and expected calibration error of a model's picks. The confidence
// of a group is the softmax probability of its top-scored candidate (the
// first on a tie), the pick is that candidate; ECE = sum over bins of
// (groups in the bin / groups) * |accuracy in the bin - mean confidence in
// the bin|, with CHOICE_ECE_BINS equal-width bins of confidence, bin b holding
// (b/BINS, (b+1)/BINS] (bin 0 also holds 0).
enum { CHOICE_ECE_BINS = 10 };
typedef struct {
    long groups, correct;
    double loss;          // summed cross-entropy
    double accuracy, ece;
} ChoiceMetrics;
// Adds one group's scores (K of them, label y) to the running sums.
void choice_metrics_add(ChoiceMetrics *mt, double bins[CHOICE_ECE_BINS][3], const float *scores, int K, int y);
// Accuracy and ECE from the sums.
void choice_metrics_finish(ChoiceMetrics *mt, double bins[CHOICE_ECE_BINS][3]);

// One pass over a choice dataset with the model's plan (its B x T): the
// metrics, and each group's scores and label as a JSON line to dump (NULL:
// none): {"group": g, "label": y, "scores": [...]}.
int choice_evaluate(Model *m, const Dataset *d, ChoiceMetrics *mt, FILE *dump, PtError *e);
