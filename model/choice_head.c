// choice_head.c: the decision head's scores, loss and gradients (choice_head.h),
// all on the device through the Backend ops; only the K scores of each group
// come to the host for the softmax (a few floats, as the trainer's loss does).
#include "choice_head.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void choice_softmax(const float *scores, int n, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int k = 0; k < n; k++)   // a compare, not fmax: gcc 12's aarch64 vectoriser fails on an fmax reduction
        if (scores[k] > mx) mx = scores[k];
    for (int k = 0; k < n; k++) sum += p[k] = exp((double)scores[k] - mx);
    for (int k = 0; k < n; k++) p[k] /= sum;
}

// The head row in the weights the model runs on (fake-quantized under QAT,
// int4 at inference) and in the gradients.
static const float *head_row(const Model *m) {
    if (m->cfg.choice_id <= 0 || m->cfg.choice_id >= m->cfg.vocab_size)
        die("choice head: the model has no decision head (config choice_id %d)", m->cfg.choice_id);
    return m->w.lm_head + (size_t)m->cfg.choice_id * m->cfg.d_model;
}

double choice_head_loss(Model *m, const ChoiceGroups *g, float *dh, float grad_scale, float *scores_out, int *count) {
    Device *d = m->dev;
    const int N = m->B * m->T, H = m->cfg.d_model, n_cand = g->first[g->n_groups];
    const float *w = head_row(m);
    float *s_dev = m->head_rows, *ds_dev = m->head_rows + N;
    // One output column: every row's score (N x H, cheap next to the trunk).
    OP(d, matmul_forward, s_dev, m->a.lnf, w, N, H, 1, m->opt.matmul);
    float *s = m->host_head_rows, *ds = dh ? m->host_head_rows + N : NULL;
    if (ds) memset(ds, 0, (size_t)N * sizeof(float));
    OP(d, download, s, s_dev, (size_t)N * sizeof(float));
    double loss = 0;
    float cand[256];
    double p[256];
    for (int gi = 0; gi < g->n_groups; gi++) {
        const int a = g->first[gi], K = g->first[gi + 1] - a, y = g->label[gi];
        if (K < 1 || K > 256 || y < 0 || y >= K) die("choice head: group %d has %d candidates and label %d", gi, K, y);
        for (int k = 0; k < K; k++) cand[k] = s[g->last[a + k]];
        choice_softmax(cand, K, p);
        loss -= log(p[y]);
        if (ds)
            for (int k = 0; k < K; k++) ds[g->last[a + k]] = grad_scale * (float)(p[k] - (k == y));
    }
    if (scores_out)
        for (int k = 0; k < n_cand; k++) scores_out[k] = s[g->last[k]];
    if (ds) {
        // d(score)/dh = w, d(score)/dw = h: the matmul's own backward, one column.
        OP(d, upload, ds_dev, ds, (size_t)N * sizeof(float));
        // No lm_head gradient (a frozen base, as under LoRA): the head row stays, dh still flows.
        float *gw = m->g.lm_head ? m->g.lm_head + (size_t)m->cfg.choice_id * H : NULL;
        OP(d, matmul_backward, dh, gw, ds_dev, m->a.lnf, w, N, H, 1, m->opt.matmul);
    }
    if (count) *count = g->n_groups;
    return loss;
}

static double choice_head_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale,
                               int *count) {
    (void)in;
    return choice_head_loss(m, h->ctx, dh, grad_scale, NULL, count);
}

LossHead choice_loss_head(const ChoiceGroups *g) { return (LossHead){choice_head_pass, (void *)g}; }

// Feeds n tokens into the cache in passes of at most m->T rows; the last
// row's logits end in m->last_logits.
static void feed_all(Model *m, const int *tokens, int n) {
    for (int at = 0; at < n; at += m->T) model_feed(m, tokens + at, n - at < m->T ? n - at : m->T, NULL);
}

static float last_score(Model *m) {
    float s;
    OP(m->dev, download, &s, m->last_logits + (size_t)m->cfg.choice_id, sizeof(float));
    return s;
}

void choice_score_shared(Model *m, const int *prompt, int prompt_len, const int *const *cand, const int *cand_len,
                         int n, float *scores) {
    head_row(m);
    m->n_past = 0;
    feed_all(m, prompt, prompt_len);
    for (int k = 0; k < n; k++) {
        m->n_past = prompt_len;   // drop the previous candidate's cache rows: the prompt's stay
        feed_all(m, cand[k], cand_len[k]);
        scores[k] = last_score(m);
    }
}

void choice_score_alone(Model *m, const int *prompt, int prompt_len, const int *const *cand, const int *cand_len,
                        int n, float *scores) {
    head_row(m);
    int longest = 0;
    for (int k = 0; k < n; k++) longest = cand_len[k] > longest ? cand_len[k] : longest;
    int *seq = xmalloc((size_t)(prompt_len + longest) * sizeof(int), "candidate sequence");
    memcpy(seq, prompt, (size_t)prompt_len * sizeof(int));
    for (int k = 0; k < n; k++) {
        // One pass over the whole sequence (when it fits m->T): the batch's own
        // causal attention, not the cache's.
        memcpy(seq + prompt_len, cand[k], (size_t)cand_len[k] * sizeof(int));
        m->n_past = 0;
        feed_all(m, seq, prompt_len + cand_len[k]);
        scores[k] = last_score(m);
    }
    free(seq);
}
