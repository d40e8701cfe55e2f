// distill.c: the teacher of a [distill] run (distill.h).
#include "distill.h"
#include <string.h>
#include "../data/sha256.h"
#include "../formats/checkpoint.h"
#include "objective.h"

// The teacher's file: distill.teacher, else model.init.
static const char *teacher_path(const Recipe *r) { return r->distill.teacher[0] ? r->distill.teacher : r->model.init; }

// What the loss needs of the teacher: the same tokenizer bytes, vocabulary
// and hidden size as the student.
static int check_teacher(const ModelBundle *tb, const char *path, const Recipe *r, const ModelConfig *student,
                         const char *student_tok_hash, PtError *e) {
    if (!tb->tokenizer_json)
        return pt_fail(e, "%s: the teacher stores no tokenizer.json; its vocabulary cannot be checked against the "
                          "student's (%s)", path, r->model.init);
    char hash[65];
    sha256_hex(tb->tokenizer_json, tb->tokenizer_json_len, hash);
    if (strcmp(hash, student_tok_hash))
        return pt_fail(e, "%s: the teacher's tokenizer (sha256 %.12s...) is not the student's (%s, sha256 %.12s...): "
                          "distillation needs one vocabulary", path, hash, r->model.init, student_tok_hash);
    if (tb->cfg.vocab_size != student->vocab_size || tb->cfg.d_model != student->d_model)
        return pt_fail(e, "%s: the teacher has %d vocabulary rows of hidden size %d, the student (%s) %d of %d: "
                          "the loss needs the same vocabulary rows and hidden size", path, tb->cfg.vocab_size,
                       tb->cfg.d_model, r->model.init, student->vocab_size, student->d_model);
    return 0;
}

int distill_init(DistillRun *dr, const Recipe *r, Device *dev, const ModelConfig *student,
                 const char *student_tok_hash, int B, int T, FILE *log, PtError *e) {
    memset(dr, 0, sizeof *dr);
    dr->on = 1;
    dr->dev = dev;
    dr->source = r->distill.source;
    dr->t.kd_weight = r->distill.kd_weight;
    dr->t.ce_weight = 1.0f - r->distill.kd_weight;
    dr->t.temperature = r->distill.temperature;
    if (dr->source == DISTILL_TOPK) {
        int rc = topk_open(&dr->topk, r->data.train, e);
        if (rc > 0)
            return pt_fail(e, "%s: [distill] source = topk, but the dataset holds no teacher top-k (/topk): make "
                              "it with pocket teacher-topk", r->data.train);
        if (rc < 0) return -1;
        if (topk_check_run(&dr->topk, r->data.train, T, r->train.doc_mask, r->train.mode == TRAIN_MODE_SFT,
                           r->distill.temperature, student->vocab_size, e))
            return -1;
        const size_t n = (size_t)B * T * (size_t)dr->topk.k;
        dr->ids = xmalloc(n * sizeof(int), "top-k ids of a micro-batch");
        dr->logits = xmalloc(n * sizeof(float), "top-k logits of a micro-batch");
        dr->lse = xmalloc((size_t)B * T * sizeof(float), "top-k log-sum-exp of a micro-batch");
        dr->dev_ids = dev->be->alloc(dev, n * sizeof(int), "top-k ids on the device");
        dr->dev_logits = dev->be->alloc(dev, n * sizeof(float), "top-k logits on the device");
        dr->dev_lse = dev->be->alloc(dev, (size_t)B * T * sizeof(float), "top-k log-sum-exp on the device");
        dr->t.k = dr->topk.k;
        dr->t.topk_ids = dr->dev_ids;
        dr->t.topk_logits = dr->dev_logits;
        dr->t.topk_lse = dr->dev_lse;
        if (log)
            fprintf(log, "distillation: the teacher's top-%d logits from %s (teacher %s), kd_weight %g, T %g\n",
                    dr->topk.k, r->data.train, dr->topk.teacher, (double)dr->t.kd_weight, (double)dr->t.temperature);
        return 0;
    }
    const char *path = teacher_path(r);
    if (!checkpoint_is_hdf5(path))
        return pt_fail(e, "[distill] teacher: %s is not a checkpoint (.h5)%s", path,
                       r->distill.teacher[0] ? "" : "; model.init is the default teacher: set distill.teacher");
    ModelOptions opt = {0, r->train.matmul == TRAIN_MATMUL_BF16 ? MATMUL_BF16 : MATMUL_FP32, A16_OFF};
    if (frozen_model_load(&dr->teacher, path, e) ||
        check_teacher(&dr->teacher.b, path, r, student, student_tok_hash, e) ||
        frozen_model_start(&dr->teacher, dev, &opt, B, T, e))
        return -1;
    if (log)
        fprintf(log, "distillation: teacher %s (%.1fM parameters, its forward in every step), kd_weight %g, T %g\n",
                path, (double)dr->teacher.b.tt.total / 1e6, (double)dr->t.kd_weight, (double)dr->t.temperature);
    return 0;
}

const DistillTarget *distill_target(DistillRun *dr, const Batch *b, const ModelInput *in) {
    if (!dr->on) return NULL;
    if (dr->source == DISTILL_TOPK) {
        topk_gather(&dr->topk, b->src, (size_t)b->B * b->T, dr->ids, dr->logits, dr->lse);
        const size_t n = (size_t)b->B * b->T * (size_t)dr->topk.k;
        OP(dr->dev, upload, dr->dev_ids, dr->ids, n * sizeof(int));
        OP(dr->dev, upload, dr->dev_logits, dr->logits, n * sizeof(float));
        OP(dr->dev, upload, dr->dev_lse, dr->lse, (size_t)b->B * b->T * sizeof(float));
        return &dr->t;
    }
    dr->t.h = model_forward_hidden(&dr->teacher.m, in);
    dr->t.W = dr->teacher.m.w.lm_head;
    return &dr->t;
}

void distill_free(DistillRun *dr) {
    if (!dr->on) return;
    if (dr->source == DISTILL_TOPK) {
        free(dr->ids);
        free(dr->logits);
        free(dr->lse);
        dr->dev->be->release(dr->dev, dr->dev_ids);
        dr->dev->be->release(dr->dev, dr->dev_logits);
        dr->dev->be->release(dr->dev, dr->dev_lse);
        topk_close(&dr->topk);
    } else {
        frozen_model_free(&dr->teacher);
    }
    memset(dr, 0, sizeof *dr);
}

// ---- the objective: the teacher of each training pass, its loss parts summed as metrics

typedef struct {
    DistillRun run;
    DistillHead head;
    LossHead pass;   // distill_head's, wrapped so the parts reach the objective's sums
} DistillObjective;

static int distill_open(Objective *o, const ObjectiveData *d, PtError *e) {
    DistillObjective *x = o->impl;
    if (distill_init(&x->run, o->r, d->dev, d->cfg, d->tokenizer_hash, d->B, d->T, d->log, e)) return -1;
    if (x->run.source == DISTILL_FORWARD)   // the teacher's forward, a third of a training step
        o->flops_per_token = config_train_flops_per_token(&x->run.teacher.b.cfg, d->T) / 3;
    return 0;
}

static double distill_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale,
                           int *count) {
    Objective *o = h->ctx;
    DistillObjective *x = o->impl;
    const double loss = x->pass.loss(&x->pass, m, in, dh, grad_scale, count);
    o->sums[0] += x->head.sums.ce;
    o->sums[1] += x->head.sums.kl;
    return loss;
}

static const LossHead *distill_head(Objective *o, const Batch *b, const ModelInput *in, int training) {
    if (!training) return NULL;   // evaluations: the plain cross-entropy
    DistillObjective *x = o->impl;
    x->head.target = distill_target(&x->run, b, in);
    o->head = (LossHead){distill_pass, o};
    return &o->head;
}

static void distill_objective_free(Objective *o) {
    DistillObjective *x = o->impl;
    if (!x) return;
    distill_free(&x->run);
    free(x);
}

static const ObjectiveOps objective_distill = {.name = "distillation", .open = distill_open, .head = distill_head,
                                               .free = distill_objective_free};

int distill_objective_open(Objective *o, PtError *e) {
    (void)e;
    DistillObjective *x = xcalloc(1, sizeof *x, "distillation objective");
    x->pass = distill_loss_head(&x->head);
    o->ops = &objective_distill;
    o->impl = x;
    o->n_metrics = 2;
    o->metric[0] = "ce";
    o->metric[1] = "kl";
    return 0;
}
