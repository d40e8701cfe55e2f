#include "evaluate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../data/loader.h"
#include "../model/generate.h"

void add_default_stops(GenParams *p, const ModelConfig *c, const Tokenizer *tok) {
    gen_add_stop(p, c->eos_id, c->vocab_size);
    if (!tok) return;
    gen_add_stop(p, tokenizer_token_id(tok, "<|im_end|>"), c->vocab_size);
    gen_add_stop(p, tokenizer_token_id(tok, "<|endoftext|>"), c->vocab_size);
}

ModelInput batch_input(const Batch *b) {
    return (ModelInput){.B = b->B, .T = b->T, .tokens = b->tokens, .targets = b->targets, .mask = b->mask,
                        .pos = b->pos, .seg = b->seg};
}

int eval_loss_sums(Model *m, const Dataset *d, int doc_mask, long max_batches, int rank, int world,
                   const HeadSource *heads, double *sum, long *count, PtError *e) {
    Loader l;
    if (loader_open(&l, d, m->B, m->T, 4242, rank, world, e)) return -1;
    if (d->kind == DATASET_CPT) loader_set_doc_mask(&l, doc_mask);
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, m->B, m->T);
    *sum = 0;
    *count = 0;
    // One pass: until the loader has handed out every item of its epoch (an
    // SFT row packs several examples, so batches != items / B). Each call
    // is one batch of every rank; this rank's is global batch i * world + rank.
    for (long i = 0; max_batches <= 0 || i * world < max_batches; i++) {
        if (loader_done(&l)) break;
        loader_next(&l, &b);
        if (max_batches > 0 && i * world + rank >= max_batches) continue;
        ModelInput in = batch_input(&b);
        const LossHead *head = heads ? heads->of(heads->ctx, &b, &in) : NULL;
        int cnt;
        *sum += model_forward_head(m, &in, head, &cnt);
        *count += cnt;
    }
    batch_free(&b);
    loader_close(&l);
    return 0;
}

double eval_loss(Model *m, const Dataset *d, int doc_mask, long max_batches, const HeadSource *heads, long *count,
                 PtError *e) {
    double sum;
    long n;
    if (eval_loss_sums(m, d, doc_mask, max_batches, 0, 1, heads, &sum, &n, e)) return NAN;
    if (count) *count = n;
    return n ? sum / (double)n : NAN;
}

double eval_exact_match(const Model *m, const Tokenizer *tok, const Dataset *d, int max_examples, int *n_scored,
                        FILE *log, PtError *e) {
    *n_scored = 0;
    if (d->kind != DATASET_SFT || !d->loss_mask) {
        pt_fail(e, "%s: exact match needs an SFT dataset", d->path);
        return NAN;
    }
    int max_len = m->cfg.max_seq;
    GenContext g;
    if (gen_init(&g, m, max_len, e)) return NAN;
    GenParams p;
    gen_params_default(&p);
    add_default_stops(&p, &m->cfg, tok);
    int *doc = xmalloc((size_t)max_len * sizeof(int), "example"), *out = xmalloc((size_t)max_len * sizeof(int), "completion");
    int hits = 0, scored = 0;
    for (uint64_t k = 0; k < d->n_docs && scored < max_examples; k++) {
        uint64_t off = d->doc_offsets[k], len = dataset_doc_len(d, k);
        if (len > (uint64_t)max_len) continue;
        // the last run of trained tokens is the reference reply
        int64_t end = (int64_t)len - 1;
        while (end >= 0 && !d->loss_mask[off + end]) end--;
        if (end < 0) continue;
        int64_t start = end;
        while (start > 0 && d->loss_mask[off + start - 1]) start--;
        if (start == 0) continue;
        for (uint64_t i = 0; i < len; i++) doc[i] = (int)dataset_token(d, off + i);
        int ref_len = (int)(end - start + 1);
        p.max_new = ref_len;
        // The reply's last trained token is the template's end-of-turn token: a stop.
        size_t end_len;
        const char *end_bytes = tokenizer_token_bytes(tok, doc[end], &end_len);
        if (end_len && tokenizer_special_prefix(tok, end_bytes, end_len) == end_len) gen_add_stop(&p, doc[end], m->cfg.vocab_size);   // a longer completion cannot match anyway
        int got = generate(&g, doc, (int)start, &p, out, max_len, e);
        if (got < 0) break;
        int match = got == ref_len && !memcmp(out, doc + start, ref_len * sizeof(int));
        hits += match;
        scored++;
        if (log && scored <= 3) {
            char *want = tokenizer_decode(tok, doc + start, ref_len, 1), *have = tokenizer_decode(tok, out, got, 1);
            fprintf(log, "  example %d: %s\n    reference: %s\n    generated: %s\n", scored, match ? "match" : "MISS",
                    want, have);
            free(want);
            free(have);
        }
    }
    free(doc);
    free(out);
    gen_free(&g);
    *n_scored = scored;
    return scored ? (double)hits / scored : NAN;
}

void chat_add_end_of_turn_stop(const ChatTemplate *t, const ChatMessage *prompt, int n, const Tokenizer *tok,
                               int vocab, GenParams *p) {
    // A probe reply "x" after the prompt's messages: the special token right after it ends a turn.
    ChatMessage m[CHAT_PROMPT_MAX + 1];
    if (n > CHAT_PROMPT_MAX) return;
    memcpy(m, prompt, (size_t)n * sizeof *m);
    m[n] = (ChatMessage){"assistant", "x"};
    ChatText probe;
    PtError ignore;
    if (chat_render(t, m, n + 1, 0, 0, &probe, &ignore)) return;
    size_t last = probe.len;
    for (size_t i = 0; i < probe.len; i++)
        if (probe.tag[i]) last = i + 1;
    size_t len = last < probe.len ? tokenizer_special_prefix(tok, probe.text + last, probe.len - last) : 0;
    if (len) {
        char *name = xmalloc(len + 1, "end token");
        memcpy(name, probe.text + last, len);
        name[len] = 0;
        gen_add_stop(p, tokenizer_token_id(tok, name), vocab);
        free(name);
    }
    chat_text_free(&probe);
}

int chat_generation_prompt(const ModelBundle *b, const char *ckpt, const Tokenizer *tok, const char *system,
                           const char *user, char **text, GenParams *p, PtError *e) {
    char src[1100];
    snprintf(src, sizeof src, "%s:/tokenizer/tokenizer_config.json", ckpt);
    ChatTemplate *t;
    if (chat_template_load(&t, b->tokenizer_config_json, b->tokenizer_config_json_len, src, e)) return -1;
    ChatMessage m[2] = {{"system", system}, {"user", user}};
    int first = system ? 0 : 1;
    ChatText c;
    int rc = chat_render(t, m + first, 2 - first, 1, 0, &c, e);
    if (rc == 0) {
        *text = c.text;
        free(c.tag);
        chat_add_end_of_turn_stop(t, m + first, 2 - first, tok, b->cfg.vocab_size, p);
    }
    chat_template_free(t);
    return rc;
}
