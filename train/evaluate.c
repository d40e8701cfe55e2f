#include "evaluate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../data/loader.h"
#include "../model/generate.h"
#include "../model/sampler.h"

void add_default_stops(GenParams *p, const ModelConfig *c, const Tokenizer *tok) {
    gen_add_stop(p, c->eos_id, c->vocab_size);
    if (!tok) return;
    gen_add_stop(p, tokenizer_token_id(tok, "<|im_end|>"), c->vocab_size);
    gen_add_stop(p, tokenizer_token_id(tok, "<|endoftext|>"), c->vocab_size);
}

ModelInput batch_input(const Batch *b) {
    return (ModelInput){.B = b->rows, .T = b->T, .tokens = b->tokens, .targets = b->targets, .mask = b->mask,
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

int sft_reply_span(const Dataset *d, uint64_t k, int64_t *start, int64_t *end) {
    const uint64_t off = d->doc_offsets[k];
    int64_t e = (int64_t)dataset_doc_len(d, k) - 1;
    while (e >= 0 && !d->loss_mask[off + e]) e--;
    if (e < 0) return 0;
    int64_t s = e;
    while (s > 0 && d->loss_mask[off + s - 1]) s--;
    *start = s, *end = e;
    return s > 0;
}

int token_is_special(const Tokenizer *tok, int id) {
    size_t len = 0;
    const char *bytes = tok ? tokenizer_token_bytes(tok, id, &len) : NULL;
    return len && tokenizer_special_prefix(tok, bytes, len) == len;
}

double eval_exact_match(const Model *m, const Tokenizer *tok, const Dataset *d, int max_examples, int *n_scored,
                        FILE *log, PtError *e) {
    *n_scored = 0;
    if (d->kind != DATASET_SFT || !d->loss_mask) {
        pt_fail(e, "%s: exact match needs an SFT dataset", d->path);
        return NAN;
    }
    GenParams base;
    gen_params_default(&base);
    add_default_stops(&base, &m->cfg, tok);
    // The examples: the tokens before the last run of trained tokens are the
    // prompt, that run (the final reply) the reference; one sampler job each.
    const size_t cap = (uint64_t)max_examples < d->n_docs ? (size_t)max_examples : (size_t)d->n_docs;
    SampleJob *jobs = xcalloc(cap ? cap : 1, sizeof *jobs, "exact-match jobs");
    GenParams *params = xmalloc((cap ? cap : 1) * sizeof *params, "exact-match parameters");
    int n = 0, max_len = 1;
    for (uint64_t k = 0; k < d->n_docs && (size_t)n < cap; k++) {
        const uint64_t off = d->doc_offsets[k], len = dataset_doc_len(d, k);
        int64_t start, end;
        if (len > (uint64_t)m->cfg.max_seq || !sft_reply_span(d, k, &start, &end)) continue;
        int *doc = xmalloc((size_t)(end + 1) * sizeof(int), "example");
        for (int64_t i = 0; i <= end; i++) doc[i] = (int)dataset_token(d, off + (uint64_t)i);
        GenParams *p = &params[n];
        *p = base;
        p->max_new = (int)(end - start + 1);
        // The reply's last trained token is the template's end-of-turn token: a stop (a longer completion
        // cannot match anyway).
        if (token_is_special(tok, doc[end])) gen_add_stop(p, doc[end], m->cfg.vocab_size);
        jobs[n++] = (SampleJob){doc, (int)start, p, xmalloc((size_t)p->max_new * sizeof(int), "completion"), 0};
        max_len = (int)end + 1 > max_len ? (int)end + 1 : max_len;
    }
    Sampler s;
    int rc = 0, hits = 0;
    if (n > 0 && (rc = sampler_init(&s, m, n < EXACT_MATCH_ROWS ? n : EXACT_MATCH_ROWS, max_len, e)) == 0) {
        rc = sampler_run(&s, jobs, n, NULL, NULL, e);
        sampler_free(&s);
    }
    for (int j = 0; rc == 0 && j < n; j++) {
        const SampleJob *job = &jobs[j];
        const int *want = job->prompt + job->n_prompt, n_want = job->p->max_new;
        const int match = job->n_out == n_want && !memcmp(job->out, want, (size_t)n_want * sizeof(int));
        hits += match;
        if (log && tok && j < 3) {
            char *w = tokenizer_decode(tok, want, n_want, 1), *have = tokenizer_decode(tok, job->out, job->n_out, 1);
            fprintf(log, "  example %d: %s\n    reference: %s\n    generated: %s\n", j + 1, match ? "match" : "MISS",
                    w, have);
            free(w);
            free(have);
        }
    }
    for (int j = 0; j < n; j++) free((int *)jobs[j].prompt), free(jobs[j].out);
    free(jobs);
    free(params);
    if (rc) return NAN;
    *n_scored = n;
    return n ? (double)hits / n : NAN;
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
