// choice_train.c: the decision head's row for a run, and batches with groups (choice_train.h).
#include "choice_train.h"
#include <inttypes.h>
#include <string.h>
#include "../data/tokenizer.h"

// The bundle with one more vocabulary row, zero: the embedding (and an untied
// lm_head) keep their rows, every other tensor is copied as it is.
static void grow_vocab(ModelBundle *b) {
    ModelConfig cfg = b->cfg;
    cfg.vocab_size++;
    ModelBundle g;
    bundle_alloc(&g, &cfg);
    for (int i = 0; i < b->tt.n; i++)
        memcpy(g.params + g.tt.t[i].offset, b->params + b->tt.t[i].offset, b->tt.t[i].numel * sizeof(float));
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

int choice_check_data(const Dataset *d, int choice_id, PtError *e) {
    for (uint64_t i = 0; i < d->n_tokens; i++)
        if (dataset_token(d, i) == (uint32_t)choice_id)
            return pt_fail(e, "%s: token %d is the decision head's row but is an input at /tokens[%" PRIu64 "]; "
                              "choose another with train.choice_token", d->path, choice_id, i);
    return 0;
}

ModelInput choice_batch_input(const Batch *b, int choice, ChoiceGroups *g) {
    *g = (ChoiceGroups){b->n_groups, b->group_first, b->group_last, b->group_label};
    return (ModelInput){.B = b->B, .T = b->T, .tokens = b->tokens, .targets = choice ? NULL : b->targets,
                        .mask = choice ? NULL : b->mask, .pos = b->pos, .seg = b->seg,
                        .choice = choice && b->n_groups ? g : NULL};
}
