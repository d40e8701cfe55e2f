// preference_train.h: train.mode = dpo. The objective (objective.h) hands
// each pass over a batch of pairs (tokenize --pairs) the preference head of
// model/preference.h with the recipe's [preference] loss; its metrics are
// TRL's (rewards/chosen, ..., logps/rejected), per pair. The reference model
// is the run's start: before the first step every document's response
// log-probability under the start weights (with [lora] the base and the
// fresh adapter, which PEFT's init makes the base itself; with [qat] the
// fake-quantized start) is computed once, in a pass over the training and
// validation sets, and kept in the run directory as reference.h5, so a
// resumed run reads it back and no second model is ever held:
//     /train, /val      float64 [documents]: each document's summed log-probability
//     attributes        train_sha256, val_sha256 (the datasets' tokens, offsets and masks),
//                       tokenizer_sha256, weights_sha256 (the start weights as they ran), model
// A reference made from other data or another start model is refused.
#pragma once
#include "../data/dataset.h"
#include "../model/model.h"
#include "../dist/comm.h"

// Every document's summed response log-probability under m (planned B x T,
// its weights set) over a pairs dataset, in one pass split among the ranks
// as evaluations are; out [d->n_docs] is the sum over the ranks (each
// document computed by one). log: a progress line every 10 s (NULL: none).
int pref_measure_logps(Model *m, const Dataset *d, Comm *comm, double *out, FILE *log, PtError *e);

// SHA-256 of a dataset's contents (tokens, offsets, mask) as the reference file records them.
void pref_dataset_hash(const Dataset *d, char hex[65]);
