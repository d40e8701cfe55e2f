// grpo.c: GRPO's clipped policy-ratio loss and its head (grpo.h). Every
// token has a weight of its own (its ratio, its clip, its KL): the head runs
// each completion's rows through the backend's classifier_scaled, which
// hands back each row's log-probability and takes each row's scale.
#include "grpo.h"
#include <math.h>

const char *grpo_norm_name(int norm) {
    static const char *names[GRPO_NORM_COUNT] = {"grpo", "bnpo"};
    return norm >= 0 && norm < GRPO_NORM_COUNT ? names[norm] : "?";
}

// The sample standard deviation of x[0..n) (NAN for n < 2, as TRL's nanstd).
static double sample_std(const double *x, int n) {
    if (n < 2) return NAN;
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return sqrt(ss / (n - 1));
}

int grpo_advantages(const double *rewards, int n, int group, int scale, double *advantages) {
    const double batch_std = sample_std(rewards, n);
    int flat = 0;
    for (int g0 = 0; g0 < n; g0 += group) {
        double mean = 0;
        for (int i = g0; i < g0 + group; i++) mean += rewards[i];
        mean /= group;
        const double std = scale == GRPO_SCALE_BATCH ? batch_std : sample_std(rewards + g0, group);
        int equal = 1;
        for (int i = g0; i < g0 + group; i++) {
            advantages[i] = rewards[i] - mean;
            if (scale != GRPO_SCALE_NONE) advantages[i] /= std + 1e-4;
            equal &= rewards[i] == rewards[g0];
        }
        flat += equal;
    }
    return flat;
}

double grpo_token_loss(const GrpoLoss *l, double logp, double old, double ref, double adv, double *d,
                       double metrics[GRPO_METRICS]) {
    const double r = exp(logp - old), lo = 1 - l->epsilon_low, hi = 1 + l->epsilon_high;
    const double clipped = r < lo ? lo : r > hi ? hi : r;
    // -min(r A, clipped A): where the clipped term is the smaller one and the clip holds, it does not move with logp
    const int held = clipped * adv < r * adv;
    double loss = held ? -clipped * adv : -r * adv;
    *d = held ? 0 : -r * adv;
    double kl = 0;
    if (l->beta != 0) {   // beta r k(x), x = ref - logp: dr/dlogp = r, dk/dlogp = 1 - e^x
        const double x = ref - logp, k = exp(x) - x - 1;
        kl = r * k;
        loss += l->beta * kl;
        *d += l->beta * r * (k + 1 - exp(x));
    }
    if (metrics) {
        metrics[GRPO_KL] += kl;
        metrics[GRPO_CLIP_LOW] += r < lo && adv < 0;
        metrics[GRPO_CLIP_HIGH] += r > hi && adv > 0;
        metrics[GRPO_TOKENS] += 1;
    }
    return loss;
}

// One completion's rows through the classifier_scaled op: the op hands back
// each counted row's -log p (its logits' logsumexp less the target's logit),
// and takes the row's own scale: -grad_scale w dL/dlogp, since dlogp/dz =
// onehot - softmax.
typedef struct {
    GrpoHead *h;
    const ModelInput *in;
    int k, first;   // the completion, its first row
    double w, loss;
    float grad_scale;
} CompletionRows;

static void token_scales(void *ctx, int n0, int rows, const double *row_loss, float *row_scale) {
    CompletionRows *c = ctx;
    GrpoHead *h = c->h;
    for (int r = 0; r < rows; r++) {   // in row order: the sums do not depend on the threads
        const int i = c->first + n0 + r;
        if (!c->in->mask[i] || c->in->targets[i] < 0) continue;
        const double logp = -row_loss[r];
        double d = 0;
        h->logp[i] = (float)logp;
        c->loss += c->w * grpo_token_loss(&h->loss, logp, h->old_logp ? h->old_logp[i] : logp,
                                          h->ref_logp ? h->ref_logp[i] : 0, h->advantage[c->k], &d,
                                          h->metrics);
        row_scale[r] = (float)(-c->grad_scale * c->w * d);
    }
}

static double grpo_pass(const LossHead *head, Model *m, const ModelInput *in, float *dh, float grad_scale,
                        int *count) {
    GrpoHead *h = head->ctx;
    if (!in->targets || !in->mask) die("GRPO head: the input has no targets or mask");
    if (h->loss.beta != 0 && !h->ref_logp) die("GRPO head: a KL penalty without reference log-probabilities");
    const int H = m->cfg.d_model, V = m->cfg.vocab_size;
    double loss = 0;
    int tokens = 0;
    for (int k = 0; k < h->n; k++) {
        int n = 0, first = -1, end = 0;
        for (int i = h->row0[k]; i <= h->last[k]; i++)
            if (in->mask[i]) n++, first = first < 0 ? i : first, end = i + 1;
        if (n == 0) continue;
        // The sequence norm weighs a completion's tokens by 1/n; the token norm counts them all alike.
        CompletionRows c = {h, in, k, first, h->loss.norm == GRPO_NORM_SEQUENCE ? 1.0 / n : 1.0, 0, grad_scale};
        const size_t at = (size_t)first * H;
        OP(m->dev, classifier_scaled, dh ? dh + at : NULL, dh ? m->g.lm_head : NULL, m->a.lnf + at, m->w.lm_head,
           m->targets + first, m->mask + first, end - first, H, V, token_scales, &c, m->opt.matmul);
        loss += c.loss;
        tokens += n;
    }
    *count = h->loss.norm == GRPO_NORM_SEQUENCE ? h->n : tokens;
    return loss;
}

LossHead grpo_loss_head(GrpoHead *h) { return (LossHead){grpo_pass, h}; }
