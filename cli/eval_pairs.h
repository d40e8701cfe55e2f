// eval_pairs.h: `pocket eval` on preference pairs (tokenize --pairs). One
// pass over the pairs with the loss l (model/preference.h), the reference's
// log-probabilities from the checkpoint ref (opened with the numerics of
// the model evaluated, without its adapter; NULL: only SimPO, which has
// none). Prints a summary line, then `pairs: N`, `loss: V` and TRL's
// metrics as `name: value` lines; dump (NULL: none) receives each pair's
// log-probabilities as JSON lines.
#pragma once
#include "../data/dataset.h"
#include "../model/preference.h"
#include "open_model.h"

int eval_pairs(Model *m, const Dataset *d, const char *ckpt, const char *ref, const OpenOptions *oo,
               const PrefLoss *l, const char *dump, PtError *e);
