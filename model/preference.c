// preference.c: the preference losses of a pair and their head (preference.h).
// A response's log-probability is the classifier's loss over its segment's
// rows, negated: one call per response, whose rows are contiguous, so the
// lm_head runs only where responses are. The backward calls the classifier
// again on the same rows with the response's own scale (its loss's
// derivative), as the draft's position-weighted loss does per position.
#include "preference.h"
#include <math.h>

const char *const pref_metric_names[PREF_METRICS] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies",
                                                     "rewards/margins", "logps/chosen", "logps/rejected"};

const char *pref_loss_name(int kind) {
    static const char *names[PREF_LOSS_COUNT] = {"sigmoid", "robust", "ipo", "simpo"};
    return kind >= 0 && kind < PREF_LOSS_COUNT ? names[kind] : "?";
}

int pref_loss_uses_reference(int kind) { return kind != PREF_SIMPO; }

// log sigmoid(x), without overflow either way.
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

// -(1 - e) log sigmoid(b x) - e log sigmoid(-b x) and its derivative in x.
static double smoothed_logistic(double x, double b, double e, double *d) {
    *d = -(1 - e) * b * sigmoid(-b * x) + e * b * sigmoid(b * x);
    return -(1 - e) * log_sigmoid(b * x) - e * log_sigmoid(-b * x);
}

double pref_pair_loss(const PrefLoss *l, double logp_c, double logp_r, double ref_c, double ref_r, int n_c, int n_r,
                      double *d_c, double *d_r, double metrics[PREF_METRICS]) {
    const double b = l->beta, e = l->label_smoothing;
    const double nc = n_c > 1 ? n_c : 1, nr = n_r > 1 ? n_r : 1;   // as TRL: a count of at least 1
    const double z = (logp_c - ref_c) - (logp_r - ref_r);
    double loss, d;
    switch (l->kind) {
    case PREF_SIGMOID:
        loss = smoothed_logistic(z, b, e, &d);
        *d_c = d, *d_r = -d;
        break;
    case PREF_ROBUST:
        loss = (-(1 - e) * log_sigmoid(b * z) + e * log_sigmoid(-b * z)) / (1 - 2 * e);
        d = (-(1 - e) * b * sigmoid(-b * z) - e * b * sigmoid(b * z)) / (1 - 2 * e);
        *d_c = d, *d_r = -d;
        break;
    case PREF_IPO: {
        const double delta = (logp_c - ref_c) / nc - (logp_r - ref_r) / nr, u = delta - 1 / (2 * b);
        loss = u * u;
        *d_c = 2 * u / nc, *d_r = -2 * u / nr;
        break;
    }
    default: {   // SimPO: per-token log-probabilities, no reference
        const double a = logp_c / nc - logp_r / nr - l->simpo_gamma / b;
        loss = smoothed_logistic(a, b, e, &d);
        *d_c = d / nc, *d_r = -d / nr;
    }
    }
    if (metrics) {
        const int simpo = l->kind == PREF_SIMPO;
        const double lc = simpo ? logp_c / nc : logp_c, lr = simpo ? logp_r / nr : logp_r;
        const double rc = simpo ? b * lc : b * (logp_c - ref_c), rr = simpo ? b * lr : b * (logp_r - ref_r);
        metrics[PREF_REWARD_CHOSEN] += rc;
        metrics[PREF_REWARD_REJECTED] += rr;
        metrics[PREF_ACCURACY] += rc > rr;
        metrics[PREF_MARGIN] += rc - rr;
        metrics[PREF_LOGP_CHOSEN] += lc;
        metrics[PREF_LOGP_REJECTED] += lr;
    }
    return loss;
}

double pref_sft_loss(double w, const double *logps, const int *n_tokens, int n_pairs, double *d_c) {
    double sum = 0;
    long count = 0;
    for (int g = 0; g < n_pairs; g++) sum += logps[2 * g], count += n_tokens[2 * g];
    *d_c = w > 0 && count > 0 ? -w / (double)count : 0;
    return w > 0 && count > 0 ? -w * sum / (double)count : 0;
}

// Candidate k's rows through the classifier: their summed loss (the
// negated log-probability) and count; with dh, scale x its gradient.
static double response_pass(Model *m, const PrefHead *ph, int k, float *dh, float scale, int *count) {
    const int H = m->cfg.d_model, r0 = ph->row0[k], n = ph->last[k] - r0 + 1;
    return OP(m->dev, classifier, dh ? dh + (size_t)r0 * H : NULL, dh ? m->g.lm_head : NULL, NULL,
              m->a.lnf + (size_t)r0 * H, m->w.lm_head, m->targets + r0, m->mask + r0, n, H, m->cfg.vocab_size, scale,
              count, m->opt.matmul);
}

static double pref_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale, int *count) {
    PrefHead *ph = h->ctx;
    if (!in->targets || !in->mask) die("preference head: the input has no targets or mask");
    const int n_cand = 2 * ph->n_pairs;
    for (int k = 0; k < n_cand; k++) ph->logps[k] = -response_pass(m, ph, k, NULL, 0.0f, &ph->n_tokens[k]);
    *count = ph->n_pairs;
    if (ph->measure_only) return 0.0;
    const int uses_ref = pref_loss_uses_reference(ph->loss.kind);
    if (uses_ref && !ph->ref) die("preference head: a %s loss without reference log-probabilities",
                                  pref_loss_name(ph->loss.kind));
    // The sft term is a mean over the pass: as a sum over its pairs, n_pairs times it.
    double d_sft;
    double loss = ph->n_pairs * pref_sft_loss(ph->loss.sft_weight, ph->logps, ph->n_tokens, ph->n_pairs, &d_sft);
    for (int g = 0; g < ph->n_pairs; g++) {
        const int c = 2 * g, r = c + 1;
        double d_c, d_r;
        loss += pref_pair_loss(&ph->loss, ph->logps[c], ph->logps[r], uses_ref ? ph->ref[c] : 0,
                               uses_ref ? ph->ref[r] : 0, ph->n_tokens[c], ph->n_tokens[r], &d_c, &d_r, ph->metrics);
        d_c += ph->n_pairs * d_sft;
        if (!dh) continue;
        // A response's classifier loss is minus its log-probability: its scale is -dL/dlogp.
        response_pass(m, ph, c, dh, (float)(-grad_scale * d_c), NULL);
        response_pass(m, ph, r, dh, (float)(-grad_scale * d_r), NULL);
    }
    return loss;
}

LossHead pref_loss_head(PrefHead *ph) { return (LossHead){pref_pass, ph}; }
