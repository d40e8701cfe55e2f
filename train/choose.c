// choose.c: a run's objective and trainee from its recipe (choose.h).
#include "choose.h"
#include <string.h>

int objective_open(Objective *o, const Recipe *r, PtError *e) {
    memset(o, 0, sizeof *o);
    o->r = r;
    if (r->train.mode == TRAIN_MODE_ONPOLICY) return onpolicy_objective_open(o, e);   // its teacher is [distill]'s
    if (r->distill.enabled) return distill_objective_open(o, e);
    switch (r->train.mode) {
    case TRAIN_MODE_CHOICE: o->ops = &objective_choice; return 0;
    case TRAIN_MODE_DPO: return preference_objective_open(o, e);
    case TRAIN_MODE_GRPO: return grpo_objective_open(o, e);
    default: o->ops = &objective_token; return 0;
    }
}

int trainee_open(Trainee *t, const TraineeSetup *s, PtError *e) {
    const Recipe *r = s->r;
    memset(t, 0, sizeof *t);
    t->r = r;
    t->dev = s->dev;
    t->comm = s->comm;
    t->obj = s->obj;
    int (*open)(Trainee *, const TraineeSetup *, PtError *) = r->draft.enabled  ? draft_trainee_open
                                                              : r->lora.enabled ? adapter_trainee_open
                                                                                : model_trainee_open;
    const int frozen = r->draft.enabled || r->lora.enabled;   // the base stays as model.init has it
    if (trainee_load_start(&t->b, r, s->resume_path, frozen, e)) return -1;
    Objective *o = s->obj;
    if (o->ops->prepare_bundle && o->ops->prepare_bundle(o, &t->b, frozen, r->model.init, s->log, e)) return -1;
    return open(t, s, e);
}
