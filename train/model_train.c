// model_train.c: the full model as a run's trainee (trainee.h): AdamW on
// every master weight, checkpoints of the whole model. With [qat] the
// passes run on the fake-quantized masters and gradients reach the masters
// through the straight-through estimator (qat/qat.h); the int4 state
// trains beside them and is saved in the checkpoints' /qat.
#include <string.h>
#include "../formats/checkpoint.h"
#include "trainee.h"

typedef struct {
    QatRun qat;
    int qat_on;
} ModelTrain;

static ModelTrain *model_of(const Trainee *t) { return t->impl; }

static const QatState *qat_state(const ModelTrain *mt) { return mt->qat_on && mt->qat.ready ? &mt->qat.q : NULL; }

// [qat]: the int4 scales from the checkpoint being resumed (or a QAT
// checkpoint the run starts from), else made when QAT starts.
static int qat_setup(Trainee *t, ModelTrain *mt, const char *resume_path, FILE *log, PtError *e) {
    const Recipe *r = t->r;
    QatRunConfig qc;
    AdamWConfig adam;
    recipe_qat(r, &qc);
    recipe_adamw(r, &adam);
    if (qat_run_init(&mt->qat, t->dev, &t->b.tt, &qc, &adam, log, r->model.init, e)) return -1;
    mt->qat_on = 1;
    const char *from = resume_path ? resume_path : checkpoint_is_hdf5(r->model.init) ? r->model.init : NULL;
    if (from && !resume_path) {
        // A start whose int4 state is on another grid (a GGUF import's group 32, say): its weights are
        // the float model, and QAT starts on the recipe's grid from them.
        QuantSpec spec;
        int qemb, rc = checkpoint_read_qat_spec(from, &spec, &qemb, e);
        if (rc < 0) return -1;
        if (rc == 0 && (spec.group != qc.spec.group || spec.symmetric != qc.spec.symmetric ||
                        qemb != qc.quant_embedding)) {
            if (log)
                fprintf(log, "%s holds an int4 state on another grid (group %d %s%s): QAT starts from its weights on "
                        "this run's grid (group %d %s%s)\n", from, spec.group, spec.symmetric ? "symmetric" : "asymmetric",
                        qemb ? ", embedding quantized" : "", qc.spec.group, qc.spec.symmetric ? "symmetric" : "asymmetric",
                        qc.quant_embedding ? ", embedding quantized" : "");
            from = NULL;
        }
    }
    if (from) {
        int rc = checkpoint_load_qat(from, &mt->qat.q, &t->b.tt, e);
        if (rc < 0) return -1;
        mt->qat.ready = rc == 0;
        // A new run from a frozen checkpoint freezes by its own recipe.
        if (!resume_path && mt->qat.q.codes) {
            free(mt->qat.q.codes);
            mt->qat.q.codes = NULL;
        }
        qat_run_upload(&mt->qat);
    }
    t->qat_entries = mt->qat.q.total;
    return 0;
}

static void use_optimizer(Trainee *t, DataParallel *dp) {
    ModelTrain *mt = model_of(t);
    if (!mt->qat_on) return;
    mt->qat.lo = dp->glo[dp->comm->rank];
    mt->qat.hi = dp->ghi[dp->comm->rank];
}

static int use_step_weights(Trainee *t, long step, PtError *e) {
    ModelTrain *mt = model_of(t);
    float *w = mt->qat_on ? qat_run_weights(&mt->qat, step, t->base, e) : t->base;
    if (!w) return -1;
    model_use_weights(&t->m, w);
    return 0;
}

static void after_reduce(Trainee *t, long step, float *grads) {
    ModelTrain *mt = model_of(t);
    if (!mt->qat_on || !qat_run_active(&mt->qat, step)) return;
    dp_gather_grads(t->dp, grads);   // the scales' gradients need the whole summed gradient
    qat_run_backward(&mt->qat, step, t->base, grads);
}

static void after_update(Trainee *t, long step) {
    ModelTrain *mt = model_of(t);
    if (!mt->qat_on) return;
    if (qat_run_update(&mt->qat, step)) dp_share_qat_scales(t->dp, &mt->qat.dq);
    qat_run_sync(&mt->qat, step, t->base);
}

static int save(Trainee *t, const char *path, const TrainState *st, PtError *e) {
    ModelTrain *mt = model_of(t);
    if (st) {
        OP(t->dev, download, t->b.params, t->base, t->b.tt.total * sizeof(float));
        if (mt->qat_on) qat_run_download(&mt->qat);
        return dp_save(t->dp, path, &t->b, st, mt->qat_on && mt->qat.ready ? &mt->qat.q : NULL, e);
    }
    if (qat_state(mt)) {   // rank 0 gathers the scales' Adam state from every rank
        qat_run_download(&mt->qat);
        dp_gather_qat_moments(t->dp, &mt->qat.q);
    }
    if (t->comm->rank != 0) return 0;
    OP(t->dev, download, t->b.params, t->base, t->b.tt.total * sizeof(float));
    return checkpoint_save_qat(path, &t->b, qat_state(mt), e);
}

static double flops_per_token(const Trainee *t, int T) { return config_train_flops_per_token(&t->b.cfg, T); }

static void model_train_free(Trainee *t) {
    ModelTrain *mt = model_of(t);
    if (mt->qat_on) qat_run_free(&mt->qat);
}

static const TraineeOps model_trainee = {
    .name = "model", .use_optimizer = use_optimizer, .plan = decoder_plan, .use_step_weights = use_step_weights,
    .prepare = decoder_prepare, .micro = decoder_micro, .after_reduce = after_reduce, .after_update = after_update,
    .evaluate = decoder_evaluate, .save = save, .flops_per_token = flops_per_token, .free = model_train_free};

int model_trainee_open(Trainee *t, const TraineeSetup *s, PtError *e) {
    ModelTrain *mt = trainee_begin(t, &model_trainee, sizeof *mt);
    t->tt = &t->b.tt;
    t->params = t->base;
    t->samples = 1;
    return s->r->qat.enabled ? qat_setup(t, mt, s->resume_path, s->log, e) : 0;
}
