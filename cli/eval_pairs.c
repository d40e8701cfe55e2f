// eval_pairs.c: `pocket eval` on a pairs dataset (tokenize --pairs): the
// preference loss over one pass, TRL's metrics, and each pair's
// log-probabilities (eval_pairs.h).
#include "eval_pairs.h"
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "../train/evaluate.h"
#include "../train/preference_train.h"

// The reference's summed log-probability of every document: --ref's model,
// opened with the numerics of the model evaluated (its adapter left out).
static int reference_logps(const Model *m, const Dataset *d, const char *ref, const OpenOptions *oo, double *out,
                           PtError *e) {
    OpenOptions ro = *oo;
    ro.lora = NULL;
    ro.log = NULL;
    OpenModel rm;
    if (open_model(&rm, ref, &ro, e)) return -1;
    Comm one = {.rank = 0, .world = 1};
    int rc = -1;
    if (rm.b.cfg.vocab_size != m->cfg.vocab_size)
        pt_fail(e, "--ref %s has %d vocabulary rows, the model %d", ref, rm.b.cfg.vocab_size, m->cfg.vocab_size);
    else if (model_plan(&rm.m, m->B, m->T, 0, NULL, e) == 0)
        rc = pref_measure_logps(&rm.m, d, &one, out, NULL, e);
    open_model_close(&rm);
    return rc;
}

int eval_pairs(Model *m, const Dataset *d, const char *ckpt, const char *ref, const OpenOptions *oo,
               const PrefLoss *l, const char *dump, PtError *e) {
    const int uses_ref = pref_loss_uses_reference(l->kind);
    if (uses_ref && !ref)
        return pt_fail(e, "--loss %s compares with a reference model: give --ref REF.h5 (the start of the "
                          "training run), or --loss simpo", pref_loss_name(l->kind));
    const double t0 = now_seconds();
    double *ref_of_doc = NULL;
    if (uses_ref) {
        ref_of_doc = xmalloc((size_t)d->n_docs * sizeof(double), "reference log-probabilities");
        if (reference_logps(m, d, ref, oo, ref_of_doc, e)) {
            free(ref_of_doc);
            return -1;
        }
    }
    AtomicFile af;
    if (dump && atomic_open(&af, dump, e)) {
        free(ref_of_doc);
        return -1;
    }
    Loader lo;
    if (loader_open(&lo, d, m->B, m->T, 4242, 0, 1, e)) {
        if (dump) atomic_abort(&af);
        free(ref_of_doc);
        return -1;
    }
    loader_set_one_pass(&lo);
    Batch b;
    batch_alloc(&b, m->B, m->T);
    const size_t n = (size_t)m->B * m->T;
    int *row0 = xmalloc(n * sizeof(int), "pair rows"), *last = xmalloc(n * sizeof(int), "pair rows");
    int *n_tokens = xmalloc(n * sizeof(int), "pair token counts");
    double *logps = xmalloc(n * sizeof(double), "log-probabilities"), *refs = xmalloc(n * sizeof(double), "refs");
    double loss = 0, metrics[PREF_METRICS] = {0};
    long pairs = 0;
    while (!loader_done(&lo)) {
        loader_next(&lo, &b);
        const int n_cand = b.group_first[b.n_groups];
        for (int k = 0; k < n_cand; k++) {
            row0[k] = b.cand_row0[k];
            last[k] = b.group_last[k];
            refs[k] = uses_ref ? ref_of_doc[b.cand_doc[k]] : 0;
        }
        PrefHead ph = {.loss = *l, .n_pairs = b.n_groups, .row0 = row0, .last = last, .ref = uses_ref ? refs : NULL,
                       .logps = logps, .n_tokens = n_tokens};
        LossHead head = pref_loss_head(&ph);
        ModelInput in = batch_input(&b);
        int count;
        loss += model_forward_head(m, &in, &head, &count);
        pairs += count;
        for (int k = 0; k < PREF_METRICS; k++) metrics[k] += ph.metrics[k];
        for (int g = 0; dump && g < b.n_groups; g++) {
            const int c = 2 * g, r = c + 1;
            fprintf(af.f, "{\"pair\": %" PRId64 ", \"chosen_logp\": %.17g, \"rejected_logp\": %.17g, "
                          "\"ref_chosen_logp\": %.17g, \"ref_rejected_logp\": %.17g, \"chosen_tokens\": %d, "
                          "\"rejected_tokens\": %d}\n", b.cand_doc[c] / 2, logps[c], logps[r], refs[c], refs[r],
                    n_tokens[c], n_tokens[r]);
        }
    }
    free(row0);
    free(last);
    free(n_tokens);
    free(logps);
    free(refs);
    free(ref_of_doc);
    batch_free(&b);
    loader_close(&lo);
    if (dump && atomic_commit(&af, e)) return -1;
    if (pairs == 0) return pt_fail(e, "%s: no pairs to evaluate", d->path);
    char sft[64] = "";
    if (l->sft_weight > 0) snprintf(sft, sizeof sft, ", sft weight %g", l->sft_weight);
    printf("%s on %s: %s loss (beta %g%s%s) %.4f over %ld pairs; preference accuracy %.1f%% (the chosen response "
           "rewarded above the rejected one), mean margin %.4f (%.1f s)\n", ckpt, d->path, pref_loss_name(l->kind),
           l->beta, sft, uses_ref ? ", against --ref" : "", loss / pairs, pairs, 100 * metrics[PREF_ACCURACY] / pairs,
           metrics[PREF_MARGIN] / pairs, now_seconds() - t0);
    printf("pairs: %ld\nloss: %.9g\n", pairs, loss / pairs);
    for (int k = 0; k < PREF_METRICS; k++) printf("%s: %.9g\n", pref_metric_names[k], metrics[k] / pairs);
    return 0;
}
