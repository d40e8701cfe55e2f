// grpo.c: GRPO's clipped policy-ratio loss and its head (grpo.h). Every
// token has a weight of its own (its ratio, its clip, its KL), which the
// classifier op (one scale a call) cannot apply: the head runs the lm_head
// matmuls itself over a completion's rows, up to HEAD_ROWS at a time, takes
// each row's log-probability from its logits on the host, and sends each
// row's own gradient back through one matmul_backward (a row at a time, the
// lm_head's 49,152 x 576 weights were read four times a token).
#include "grpo.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

// Rows of logits a pass holds at a time (64 rows of a 65,536 vocabulary: 16 MiB).
enum { HEAD_ROWS = 64 };

// Rows [i0, i0 + n) of completion k through the lm_head at once: each counted
// row's log-probability (from its logits, on the host), its token loss
// (weight w), added to *loss; with dh, each row's own scale x (softmax -
// onehot) through one matmul_backward. logits: device [n, V]; z: the host's
// view of it.
static double chunk_pass(GrpoHead *h, Model *m, const ModelInput *in, int k, int i0, int n, double w, float *dh,
                         float grad_scale, float *logits, float *z, double *logp) {
    Device *d = m->dev;
    const int H = m->cfg.d_model, V = m->cfg.vocab_size;
    const float *x = m->a.lnf + (size_t)i0 * H;
    OP(d, matmul_forward, logits, x, m->w.lm_head, n, H, V, m->opt.matmul);
    OP(d, download, z, logits, (size_t)n * V * sizeof(float));
    double *row_max = logp + n, *row_sum = logp + 2 * n;
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int r = 0; r < n; r++) {
        const float *zr = z + (size_t)r * V;
        float top = zr[0];
        for (int j = 1; j < V; j++) top = zr[j] > top ? zr[j] : top;
        double sum = 0;
        for (int j = 0; j < V; j++) sum += expf(zr[j] - top);
        row_max[r] = top, row_sum[r] = sum;
        const int t = in->targets[i0 + r];
        logp[r] = t >= 0 ? (double)zr[t] - (double)top - log(sum) : 0;
    }
    double loss = 0;
    for (int r = 0; r < n; r++) {   // in row order: the sums do not depend on the threads
        const int i = i0 + r;
        double dd = 0;
        if (in->mask[i] && in->targets[i] >= 0) {
            h->logp[i] = (float)logp[r];
            loss += w * grpo_token_loss(&h->loss, logp[r], h->old_logp ? h->old_logp[i] : logp[r],
                                        h->ref_logp ? h->ref_logp[i] : 0, h->advantage[k], &dd, h->metrics);
        }
        logp[r] = dd;   // now dL/dlogp (0 where nothing counts)
    }
    if (!dh) return loss;
    // The loss moves with logp = z_t - logsumexp(z): dlogits = -(grad_scale w dL/dlogp) (softmax - onehot).
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int r = 0; r < n; r++) {
        float *zr = z + (size_t)r * V;
        const float s = (float)(-grad_scale * w * logp[r]), top = (float)row_max[r];
        if (s == 0.0f) {
            memset(zr, 0, (size_t)V * sizeof(float));
            continue;
        }
        const float ps = (float)(s / row_sum[r]);
        for (int j = 0; j < V; j++) zr[j] = ps * expf(zr[j] - top);
        zr[in->targets[i0 + r]] -= s;
    }
    OP(d, upload, logits, z, (size_t)n * V * sizeof(float));
    OP(d, matmul_backward, dh + (size_t)i0 * H, m->g.lm_head, logits, x, m->w.lm_head, n, H, V, m->opt.matmul);
    return loss;
}

static double grpo_pass(const LossHead *head, Model *m, const ModelInput *in, float *dh, float grad_scale,
                        int *count) {
    GrpoHead *h = head->ctx;
    if (!in->targets || !in->mask) die("GRPO head: the input has no targets or mask");
    if (h->loss.beta != 0 && !h->ref_logp) die("GRPO head: a KL penalty without reference log-probabilities");
    Device *d = m->dev;
    const size_t V = (size_t)m->cfg.vocab_size;
    float *logits = d->be->alloc(d, HEAD_ROWS * V * sizeof(float), "GRPO head logits");
    float *z = d->be->host_memory ? logits : xmalloc(HEAD_ROWS * V * sizeof(float), "GRPO head logits");
    double logp[3 * HEAD_ROWS];
    double loss = 0;
    int tokens = 0;
    for (int k = 0; k < h->n; k++) {
        int n = 0, first = -1, end = 0;
        for (int i = h->row0[k]; i <= h->last[k]; i++)
            if (in->mask[i]) n++, first = first < 0 ? i : first, end = i + 1;
        if (n == 0) continue;
        // The sequence norm weighs a completion's tokens by 1/n; the token norm counts them all alike.
        const double w = h->loss.norm == GRPO_NORM_SEQUENCE ? 1.0 / n : 1.0;
        for (int i0 = first; i0 < end; i0 += HEAD_ROWS) {
            const int rows = end - i0 < HEAD_ROWS ? end - i0 : HEAD_ROWS;
            loss += chunk_pass(h, m, in, k, i0, rows, w, dh, grad_scale, logits, z, logp);
        }
        tokens += n;
    }
    if (z != logits) free(z);
    d->be->release(d, logits);
    *count = h->loss.norm == GRPO_NORM_SEQUENCE ? h->n : tokens;
    return loss;
}

LossHead grpo_loss_head(GrpoHead *h) { return (LossHead){grpo_pass, h}; }
