// distill_head.c: the distillation loss head (distill_head.h).
#include "distill_head.h"

static double distill_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale,
                           int *count) {
    DistillHead *d = h->ctx;
    *count = 0;
    if (!in->targets) return 0.0;
    return OP(m->dev, classifier_distill, dh, dh ? m->g.lm_head : NULL, m->a.lnf, m->w.lm_head, m->targets,
              in->mask ? m->mask : NULL, in->B * in->T, m->cfg.d_model, m->cfg.vocab_size, grad_scale, d->target,
              &d->sums, count, m->opt.matmul);
}

LossHead distill_loss_head(DistillHead *dh) { return (LossHead){distill_pass, dh}; }
