// objective.c: the two objectives that need no set-up of their own
// (next-token cross-entropy, the decision head) and evaluation through an
// objective's head (objective.h). Which objective a run has is chosen in
// choose.c.
#include "objective.h"
#include <string.h>
#include "../formats/checkpoint.h"
#include "../model/choice_head.h"
#include "choice_train.h"
#include "evaluate.h"

void objective_free(Objective *o) {
    if (o->ops && o->ops->free) o->ops->free(o);
    memset(o, 0, sizeof *o);
}

DatasetKind objective_dataset_kind(int mode) {
    static const DatasetKind kinds[TRAIN_MODE_COUNT] = {DATASET_CPT, DATASET_SFT, DATASET_CHOICE, DATASET_PAIRS,
                                                                        DATASET_SFT, DATASET_SFT};
    return kinds[mode];
}

// ---- next-token cross-entropy (cpt, sft): the decoder's own default head

static const LossHead *token_head(Objective *o, const Batch *b, const ModelInput *in, int training) {
    (void)o, (void)b, (void)in, (void)training;
    return NULL;
}

const ObjectiveOps objective_token = {.name = "next-token cross-entropy", .head = token_head};

// ---- the decision head (choice): its row made or checked, the data checked, the groups' loss

static int choice_prepare(Objective *o, ModelBundle *b, int frozen, const char *src, FILE *log, PtError *e) {
    const Recipe *r = o->r;
    if (frozen) return choice_head_frozen_check(b, r->train.choice_token, src, e);
    const int vocab = b->cfg.vocab_size;
    if (choice_head_setup(b, r->train.choice_token, log, e)) return -1;
    if (b->cfg.vocab_size == vocab || !r->qat.enabled) return 0;
    // An appended row has no int4 scales in a QAT checkpoint made without it
    // (checkpoint_read_qat_spec: 0 has /qat, 1 has none, < 0 could not read it).
    QuantSpec spec;
    int qe, has = checkpoint_read_qat_spec(r->model.init, &spec, &qe, e);
    if (has < 0) return -1;
    if (has == 0)
        return pt_fail(e, "%s: a QAT checkpoint whose vocabulary has no row for the decision head: start from its "
                          "float model from before QAT, or give train.choice_token a free row", r->model.init);
    return 0;
}

static int choice_open(Objective *o, const ObjectiveData *d, PtError *e) {
    (void)o;
    const int id = d->cfg->choice_id;
    for (int k = 0; k < d->n_train; k++)
        if (choice_check_data(d->train[k], id, e)) return -1;
    for (int k = 0; k < d->n_val; k++) {
        if (d->val[k]->kind != DATASET_CHOICE)
            return pt_fail(e, "%s: train.mode is choice but this is not a choice dataset", d->val[k]->path);
        if (choice_check_data(d->val[k], id, e)) return -1;
    }
    return 0;
}

static const LossHead *choice_head(Objective *o, const Batch *b, const ModelInput *in, int training) {
    (void)in, (void)training;
    ChoiceGroups *g = o->impl;
    if (!g) g = o->impl = xcalloc(1, sizeof *g, "choice groups");
    *g = batch_choice_groups(b);
    if (!g->n_groups) return NULL;   // nothing to score: no loss, count 0
    o->head = choice_loss_head(g);
    return &o->head;
}

static void choice_free(Objective *o) { free(o->impl); }

const ObjectiveOps objective_choice = {.name = "decision head", .prepare_bundle = choice_prepare,
                                       .open = choice_open, .head = choice_head, .free = choice_free};

// ---- evaluation through the objective's head

static const LossHead *eval_head(void *ctx, const Batch *b, const ModelInput *in) {
    Objective *o = ctx;
    return o->ops->head(o, b, in, 0);
}

int objective_eval(Objective *o, Model *m, const Dataset *d, long max_batches, int rank, int world, double *sum,
                   long *count, PtError *e) {
    HeadSource heads = {eval_head, o};
    return eval_loss_sums(m, d, o->r->train.doc_mask, max_batches, rank, world, &heads, sum, count, e);
}
