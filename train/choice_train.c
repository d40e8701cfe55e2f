// choice_train.c: the decision head's row for a run, and batches with groups (choice_train.h).
#include "choice_train.h"
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "../data/choice.h"
#include "../data/tokenizer.h"
#include "../model/backend.h"
#include "evaluate.h"

// The bundle with one more vocabulary row, zero: the embedding (and an untied
// lm_head) keep their rows, every other tensor is copied as it is.
static void grow_vocab(ModelBundle *b) {
    const int V = b->cfg.vocab_size;
    int *rows = xmalloc(((size_t)V + 1) * sizeof *rows, "vocabulary rows");
    for (int r = 0; r < V; r++) rows[r] = r;
    rows[V] = -1;
    ModelBundle g;
    bundle_take_vocab_rows(b, rows, V + 1, &g);
    free(rows);
    g.tokenizer_json = b->tokenizer_json;
    g.tokenizer_json_len = b->tokenizer_json_len;
    g.tokenizer_config_json = b->tokenizer_config_json;
    g.tokenizer_config_json_len = b->tokenizer_config_json_len;
    b->tokenizer_json = b->tokenizer_config_json = NULL;
    bundle_free(b);
    *b = g;
}

int choice_head_setup(ModelBundle *b, int requested, FILE *log, PtError *e) {
    ModelConfig *c = &b->cfg;
    if (c->choice_id > 0) {
        if (requested && requested != c->choice_id)
            return pt_fail(e, "train.choice_token = %d, but the model's decision head is row %d", requested, c->choice_id);
        return 0;
    }
    if (requested) {
        if (requested >= c->vocab_size)
            return pt_fail(e, "train.choice_token = %d is outside the vocabulary of %d", requested, c->vocab_size);
        c->choice_id = requested;
        if (log) fprintf(log, "decision head: lm_head row %d (train.choice_token)\n", requested);
        return 0;
    }
    if (!b->tokenizer_json) return pt_fail(e, "choice: the model has no tokenizer to find a free row past its tokens");
    Tokenizer *tok;
    if (tokenizer_load(&tok, b->tokenizer_json, b->tokenizer_json_len, "the model's tokenizer", e)) return -1;
    int n_tok = tokenizer_vocab_size(tok);
    tokenizer_free(tok);
    int grown = n_tok >= c->vocab_size;
    if (grown) grow_vocab(b);
    b->cfg.choice_id = grown ? b->cfg.vocab_size - 1 : n_tok;
    if (log)
        fprintf(log, "decision head: lm_head row %d, %s\n", b->cfg.choice_id,
                grown ? "appended (the tokenizer fills the vocabulary)" : "the first row past the tokenizer's tokens");
    return 0;
}

int choice_head_frozen_check(const ModelBundle *b, int requested, const char *src, PtError *e) {
    const ModelConfig *c = &b->cfg;
    const char *instead = "train the head first with full fine-tuning ([train] mode = choice without [lora]), then "
                          "train the adapter on that checkpoint";
    if (c->choice_id <= 0)
        return pt_fail(e, "%s: [lora] with mode = choice needs a base with a decision head, and this one has none (its "
                          "row would be new and LoRA freezes lm_head): %s", src, instead);
    if (requested && requested != c->choice_id)
        return pt_fail(e, "train.choice_token = %d, but the model's decision head is row %d", requested, c->choice_id);
    ParamViews w;
    param_views(&w, &b->tt, b->params);
    const float *row = w.lm_head + (size_t)c->choice_id * c->d_model;
    for (int i = 0; i < c->d_model; i++)
        if (row[i] != 0) return 0;
    return pt_fail(e, "%s: [lora] with mode = choice: the decision head (lm_head row %d) is all zeros, so every score "
                      "is 0 and no gradient reaches the adapter: %s", src, c->choice_id, instead);
}

int choice_check_data(const Dataset *d, int choice_id, PtError *e) {
    for (uint64_t i = 0; i < d->n_tokens; i++)
        if (dataset_token(d, i) == (uint32_t)choice_id)
            return pt_fail(e, "%s: token %d is the decision head's row but is an input at /tokens[%" PRIu64 "]; "
                              "choose another with train.choice_token", d->path, choice_id, i);
    return 0;
}

ChoiceGroups batch_choice_groups(const Batch *b) {
    return (ChoiceGroups){b->n_groups, b->group_first, b->group_last, b->group_label};
}

void choice_metrics_add(ChoiceMetrics *mt, double bins[CHOICE_ECE_BINS][3], const float *scores, int K, int y) {
    double p[CHOICE_MAX_CANDIDATES];
    choice_softmax(scores, K, p);
    int pick = 0;
    for (int k = 1; k < K; k++)
        if (scores[k] > scores[pick]) pick = k;
    int b = (int)ceil(p[pick] * CHOICE_ECE_BINS) - 1;   // (b/BINS, (b+1)/BINS]
    b = b < 0 ? 0 : b >= CHOICE_ECE_BINS ? CHOICE_ECE_BINS - 1 : b;
    bins[b][0] += 1;
    bins[b][1] += pick == y;
    bins[b][2] += p[pick];
    mt->groups++;
    mt->correct += pick == y;
    mt->loss -= log(p[y]);
}

void choice_metrics_finish(ChoiceMetrics *mt, double bins[CHOICE_ECE_BINS][3]) {
    mt->accuracy = mt->groups ? (double)mt->correct / mt->groups : NAN;
    mt->ece = 0;
    for (int b = 0; b < CHOICE_ECE_BINS && mt->groups; b++)
        if (bins[b][0] > 0) mt->ece += bins[b][0] / mt->groups * fabs(bins[b][1] / bins[b][0] - bins[b][2] / bins[b][0]);
    if (!mt->groups) mt->ece = NAN;
}

int choice_evaluate(Model *m, const Dataset *d, ChoiceMetrics *mt, FILE *dump, PtError *e) {
    Loader l;
    memset(mt, 0, sizeof *mt);
    if (d->kind != DATASET_CHOICE) return pt_fail(e, "%s: not a choice dataset", d->path);
    if (loader_open(&l, d, m->B, m->T, 4242, 0, 1, e)) return -1;
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, m->B, m->T);
    const int N = m->B * m->T;
    float *s = xmalloc((size_t)2 * N * sizeof(float), "scores");
    float *cand = s + N;
    double bins[CHOICE_ECE_BINS][3] = {{0}};
    // The loader's one pass visits the groups in a fixed shuffled order; the
    // dump names each group by its index in the dataset.
    while (!loader_done(&l)) {
        uint64_t at = l.cur.index;
        loader_next(&l, &b);
        if (!b.n_groups) continue;
        ChoiceGroups g = batch_choice_groups(&b);
        ModelInput in = batch_input(&b);
        LossHead head = choice_loss_head(&g);
        model_forward_head(m, &in, &head, NULL);
        OP(m->dev, download, s, m->head_rows, (size_t)N * sizeof(float));   // every row's score
        for (int gi = 0; gi < b.n_groups; gi++) {
            const int a = b.group_first[gi], K = b.group_first[gi + 1] - a, y = b.group_label[gi];
            for (int k = 0; k < K; k++) cand[k] = s[b.group_last[a + k]];
            choice_metrics_add(mt, bins, cand, K, y);
            if (!dump) continue;
            fprintf(dump, "{\"group\": %" PRIu64 ", \"label\": %d, \"scores\": [", l.order[at + (uint64_t)gi], y);
            for (int k = 0; k < K; k++) fprintf(dump, "%s%.9g", k ? ", " : "", cand[k]);
            fprintf(dump, "]}\n");
        }
    }
    choice_metrics_finish(mt, bins);
    free(s);
    batch_free(&b);
    loader_close(&l);
    return 0;
}
