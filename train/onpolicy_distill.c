// onpolicy_distill.c: train.mode = onpolicy_distill (onpolicy_distill.h):
// the rollouts of rollout.h, the teacher of distill.h, and the distillation
// head with its KL reversed over the completions.
#include "onpolicy_distill.h"
#include <string.h>
#include "distill.h"
#include "rollout.h"

enum { M_KL, M_LENGTH, M_CLIPPED, M_ROLLOUT_TPS, M_COUNT };
static const char *const metric_names[M_COUNT] = {"kl", "completions/mean_length", "completions/clipped_ratio",
                                                  "rollout_tokens_per_s"};

typedef struct {
    Rollouts ro;
    DistillRun distill;   // the teacher and its target
    DistillHead head;
    LossHead inner;   // the distillation head over `head`
} OnPolicy;

static OnPolicy *onpolicy_of(Objective *o) { return o->impl; }

static int onpolicy_open(Objective *o, const ObjectiveData *d, PtError *e) {
    OnPolicy *x = onpolicy_of(o);
    const Recipe *r = o->r;
    if (rollouts_open(&x->ro, r, d, "on-policy distillation", e)) return -1;
    if (distill_init(&x->distill, r, d->dev, d->cfg, d->tokenizer_hash, d->B, d->T, d->log, e)) return -1;
    x->distill.t.ce_weight = 0.0f;   // a sampled token is no target: the KL alone
    x->distill.t.kd_weight = 1.0f;
    x->distill.t.reverse = 1;
    // the sampling, and the teacher's forward over every position (a third of a training step)
    o->flops_per_token = rollout_flops_per_token(d->cfg, d->T, r->rl.max_new, r->rl.group) +
                         config_train_flops_per_token(&x->distill.teacher.b.cfg, d->T) / 3;
    if (d->log)
        fprintf(d->log, "on-policy distillation: %d prompts x %d completions a micro-batch, up to %d new tokens at "
                "temperature %g; loss T^2 KL(model || teacher) at T %g\n", x->ro.P, x->ro.group, r->rl.max_new,
                (double)r->rl.temperature, (double)r->distill.temperature);
    return 0;
}

static int onpolicy_start(Objective *o, Model *m, Comm *comm, const char *run_dir, long resumed_at, PtError *e) {
    (void)m;
    return rollouts_start(&onpolicy_of(o)->ro, comm, run_dir, resumed_at, e);
}

static int onpolicy_make_batch(Objective *o, Model *m, uint64_t index, Batch *b, PtError *e) {
    OnPolicy *x = onpolicy_of(o);
    double seconds;
    if (rollouts_sample(&x->ro, m, index, b, &seconds, e)) return -1;
    rollouts_metrics(&x->ro, seconds, o, M_LENGTH, M_CLIPPED, M_ROLLOUT_TPS);
    rollouts_log(&x->ro, index, NULL, NULL);
    return 0;
}

// A pass's KL reaches the objective's sums (per counted token).
static double onpolicy_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale,
                            int *count) {
    Objective *o = h->ctx;
    OnPolicy *x = onpolicy_of(o);
    const double loss = x->inner.loss(&x->inner, m, in, dh, grad_scale, count);
    o->sums[M_KL] += x->head.sums.kl;
    return loss;
}

// Training: the teacher's forward over the completions make_batch put in b,
// and the reversed KL to it; an evaluation: the next-token loss of the
// validation set's replies.
static const LossHead *onpolicy_head(Objective *o, const Batch *b, const ModelInput *in, int training) {
    if (!training) return NULL;
    OnPolicy *x = onpolicy_of(o);
    x->head.target = distill_target(&x->distill, b, in);
    o->head = (LossHead){onpolicy_pass, o};
    return &o->head;
}

static void onpolicy_free(Objective *o) {
    OnPolicy *x = onpolicy_of(o);
    if (!x) return;
    rollouts_free(&x->ro);
    distill_free(&x->distill);
    free(x);
}

static const ObjectiveOps objective_onpolicy = {.name = "on-policy distillation", .open = onpolicy_open,
                                                .start = onpolicy_start, .make_batch = onpolicy_make_batch,
                                                .head = onpolicy_head, .free = onpolicy_free};

int onpolicy_objective_open(Objective *o, PtError *e) {
    (void)e;
    OnPolicy *x = xcalloc(1, sizeof *x, "on-policy distillation objective");
    x->inner = distill_loss_head(&x->head);
    o->ops = &objective_onpolicy;
    o->impl = x;
    o->n_metrics = M_COUNT;
    for (int k = 0; k < M_COUNT; k++) o->metric[k] = metric_names[k];
    o->plotted[M_KL] = o->plotted[M_LENGTH] = 1;
    o->progress_metric = 1 + M_KL;
    return 0;
}
