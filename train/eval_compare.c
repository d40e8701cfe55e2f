// eval_compare.c: a model's next-token distributions against a reference
// model's (eval_compare.h).
#include "eval_compare.h"
#include <math.h>
#include <string.h>
#include "../data/loader.h"
#include "evaluate.h"

// log sum exp of a row, in double.
static double row_lse(const float *z, int V, int *argmax) {
    float mx = z[0];
    int at = 0;
    for (int v = 1; v < V; v++)
        if (z[v] > mx) {
            mx = z[v];
            at = v;
        }
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp((double)z[v] - mx);
    if (argmax) *argmax = at;
    return mx + log(s);
}

void compare_row(const float *ref_logits, const float *logits, int V, int target, double *kl, int *same_top1,
                 double *loss, double *ref_loss) {
    int top_ref, top;
    const double lse_ref = row_lse(ref_logits, V, &top_ref), lse = row_lse(logits, V, &top);
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        const double lp = ref_logits[v] - lse_ref, lq = logits[v] - lse;
        sum += exp(lp) * (lp - lq);
    }
    *kl = sum > 0 ? sum : 0.0;   // rounding can leave a tiny negative for equal rows
    *same_top1 = top == top_ref;
    *loss = target >= 0 ? lse - logits[target] : 0.0;
    *ref_loss = target >= 0 ? lse_ref - ref_logits[target] : 0.0;
}

int eval_compare(Model *m, Model *ref, const Dataset *d, int doc_mask, long max_batches, CompareStats *out,
                 PtError *e) {
    memset(out, 0, sizeof *out);
    if (m->cfg.vocab_size != ref->cfg.vocab_size)
        return pt_fail(e, "the model's vocabulary (%d) is not the reference's (%d)", m->cfg.vocab_size,
                       ref->cfg.vocab_size);
    if (m->B != ref->B || m->T != ref->T) die("eval_compare: the two models are planned differently");
    const int B = m->B, T = m->T, V = m->cfg.vocab_size;
    const size_t N = (size_t)B * T, bytes = N * V * sizeof(float);
    Loader l;
    if (loader_open(&l, d, B, T, 4242, 0, 1, e)) return -1;   // eval_loss's order
    if (d->kind == DATASET_CPT) loader_set_doc_mask(&l, doc_mask);
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, B, T);
    float *dev_q = m->dev->be->alloc(m->dev, bytes, "logits"), *dev_p = ref->dev->be->alloc(ref->dev, bytes, "logits");
    float *q = xmalloc(bytes, "logits on the host"), *p = xmalloc(bytes, "reference logits on the host");
    double kl_sum = 0, kl_sq = 0, loss = 0, ref_loss = 0;
    long same = 0, n = 0;
    for (long i = 0; (max_batches <= 0 || i < max_batches) && !loader_done(&l); i++) {
        loader_next(&l, &b);
        ModelInput in = batch_input(&b);
        int cnt;
        model_forward(m, &in, dev_q, &cnt);
        model_forward(ref, &in, dev_p, &cnt);
        OP(m->dev, download, q, dev_q, bytes);
        OP(ref->dev, download, p, dev_p, bytes);
        double kl[64], l1[64], l2[64];
        int top[64];
        // Rows in blocks of 64 over the threads, summed in row order (the
        // figures do not depend on the thread count).
        for (size_t r0 = 0; r0 < N; r0 += 64) {
            const int rows = N - r0 < 64 ? (int)(N - r0) : 64;
            #pragma omp parallel for schedule(dynamic, 4) num_threads(m->dev->threads)
            for (int r = 0; r < rows; r++) {
                const size_t k = r0 + (size_t)r;
                kl[r] = -1;
                if (b.targets[k] < 0 || !b.mask[k]) continue;
                compare_row(p + k * V, q + k * V, V, b.targets[k], &kl[r], &top[r], &l1[r], &l2[r]);
            }
            for (int r = 0; r < rows; r++) {
                if (kl[r] < 0) continue;
                kl_sum += kl[r];
                kl_sq += kl[r] * kl[r];
                if (kl[r] > out->kl_max) out->kl_max = kl[r];
                same += top[r];
                loss += l1[r];
                ref_loss += l2[r];
                n++;
            }
        }
    }
    free(q);
    free(p);
    m->dev->be->release(m->dev, dev_q);
    ref->dev->be->release(ref->dev, dev_p);
    batch_free(&b);
    loader_close(&l);
    if (n == 0) return pt_fail(e, "%s: the data counts no target token", d->path);
    out->positions = n;
    out->kl_mean = kl_sum / n;
    const double var = n > 1 ? (kl_sq - kl_sum * kl_sum / n) / (n - 1) : 0.0;
    out->kl_stderr = var > 0 ? sqrt(var / n) : 0.0;
    out->top1 = (double)same / n;
    out->loss = loss / n;
    out->ref_loss = ref_loss / n;
    return 0;
}
