// speculative.c: greedy decoding with a DFlash draft (speculative.h).
#include "speculative.h"
#include <string.h>

int spec_init(SpecContext *s, GenContext *g, const Draft *draft, float *draft_weights, PtError *e) {
    memset(s, 0, sizeof *s);
    const DraftConfig *dc = &draft->cfg;
    const TensorTable *tt = &draft->tt;
    Model *m = &g->m;
    Device *d = m->dev;
    const ModelConfig *c = &m->cfg;
    if (draft_config_check(dc, c, "the draft", e)) return -1;
    if (draft->n_vocab && draft_vocab_check(draft->vocab, draft->n_vocab, c->vocab_size, "the draft", e)) return -1;
    s->g = g;
    s->vocab = draft->vocab;
    draft_model_init(&s->dm, d, c, dc, tt, draft_weights, m->w.embed, m->w.lm_head, m->opt.matmul);
    draft_model_use_vocab(&s->dm, draft->vocab, draft->n_vocab);
    if (draft_model_plan(&s->dm, 1, m->cache_len, 1, 0, e)) {
        draft_model_free(&s->dm);
        return -1;
    }
    const size_t V = c->vocab_size;
    s->captures = d->be->alloc(d, (size_t)m->cache_len * dc->n_target * c->d_model * sizeof(float), "target captures");
    s->logits = d->be->alloc(d, (size_t)dc->block * V * sizeof(float), "block logits");
    s->host_logits = xmalloc((size_t)dc->block * V * sizeof(float), "block logits on the host");
    return 0;
}

void spec_free(SpecContext *s) {
    if (!s->g) return;
    Device *d = s->g->m.dev;
    model_capture(&s->g->m, NULL, 0, NULL);
    d->be->release(d, s->captures);
    d->be->release(d, s->logits);
    free(s->host_logits);
    draft_model_free(&s->dm);
    memset(s, 0, sizeof *s);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// Feeds n tokens to the target at its n_past, its chosen layers into their
// rows of the captures; with all_logits, every row's logits [n, V] (device).
static void feed(SpecContext *s, const int *tokens, int n, float *all_logits) {
    Model *m = &s->g->m;
    const DraftConfig *dc = &s->dm.dc;
    const size_t W = (size_t)dc->n_target * m->cfg.d_model, V = m->cfg.vocab_size;
    for (int done = 0; done < n; done += m->T) {
        const int rows = n - done < m->T ? n - done : m->T;
        model_capture(m, dc->target_layers, dc->n_target, s->captures + (size_t)m->n_past * W);
        model_feed(m, tokens + done, rows, all_logits ? all_logits + (size_t)done * V : NULL);
    }
}

int spec_generate(SpecContext *s, const int *prompt, int n_prompt, const GenParams *p, int *out, int max_out,
                  SpecStats *st, PtError *e) {
    Model *m = &s->g->m;
    Device *d = m->dev;
    const int V = m->cfg.vocab_size, blk = s->dm.dc.block;
    if (st) memset(st, 0, sizeof *st);
    if (p->temperature > 0) return pt_fail(e, "speculative decoding with the draft is greedy only (temperature 0)");
    if (n_prompt < 1) return pt_fail(e, "the prompt is empty");
    if (max_out < p->max_new)
        return pt_fail(e, "output room for %d tokens is less than max_new %d", max_out, p->max_new);
    if ((long)n_prompt + p->max_new + blk > m->cache_len)
        return pt_fail(e, "prompt of %d tokens + %d new tokens + a block of %d exceeds the cache of %d positions",
                       n_prompt, p->max_new, blk, m->cache_len);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return pt_fail(e, "token %d of the prompt is %d, outside the vocabulary [0, %d)", i + 1, prompt[i], V);
    if (p->max_new == 0) return 0;
    gen_reset(s->g);
    s->ctx_done = 0;
    feed(s, prompt, n_prompt, NULL);
    OP(d, download, s->host_logits, m->last_logits, (size_t)V * sizeof(float));
    int n = 0, cur = argmax(s->host_logits, V);   // cur: the newest token, not yet fed
    int block[DRAFT_MAX_BLOCK];
    for (;;) {
        out[n++] = cur;
        if (p->on_token) p->on_token(p->on_token_ctx, cur);
        if (gen_is_stop(p, cur) || n == p->max_new) break;
        // Draft: [cur, mask, ..., mask] at positions n_past.. over the context of every fed position.
        const int at = m->n_past;
        block[0] = cur;
        for (int i = 1; i < blk; i++) block[i] = s->dm.dc.mask_token;
        DraftInput in = {.block_tokens = block, .anchors = &at, .ctx_from = s->ctx_done, .ctx_rows = at};
        draft_forward(&s->dm, s->captures, &in, s->logits, NULL);
        s->ctx_done = at;
        // (with a vocabulary of its own, column k is its token k: they increase, so ties still go to the lower id)
        const int n_out = s->dm.n_out;
        OP(d, download, s->host_logits, s->logits, (size_t)blk * n_out * sizeof(float));
        for (int i = 1; i < blk; i++) {
            const int k = argmax(s->host_logits + (size_t)i * n_out, n_out);
            block[i] = s->vocab ? s->vocab[k] : k;
        }
        // Verify: the target's next token after each block row.
        feed(s, block, blk, s->logits);
        OP(d, download, s->host_logits, s->logits, (size_t)blk * V * sizeof(float));
        int accepted = 0;
        cur = argmax(s->host_logits, V);
        while (accepted < blk - 1 && cur == block[accepted + 1] && !gen_is_stop(p, cur)) {
            accepted++;
            cur = argmax(s->host_logits + (size_t)accepted * V, V);
        }
        // Keep the cache (and captures) of block[0 .. accepted]; the rest is overwritten later.
        m->n_past = at + 1 + accepted;
        if (st) st->passes++;
        for (int i = 1; i <= accepted; i++) {
            out[n++] = block[i];
            if (p->on_token) p->on_token(p->on_token_ctx, block[i]);
            if (n == p->max_new) break;
        }
        if (n == p->max_new) break;
    }
    if (st) st->tokens = n - 1;   // every new token after the first came from a pass over a block
    return n;
}
