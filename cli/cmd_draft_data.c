// pocket draft-data: an SFT dataset whose responses are the int4 target's own
// greedy continuations of another dataset's prompts. A speculative draft
// ([draft] in a recipe) is worth what the target accepts of it, so it learns
// best from what the target itself says rather than from the data's replies.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../model/generate.h"
#include "../train/evaluate.h"
#include "args.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket draft-data --ckpt TARGET.h5 --data SFT.h5 --out OUT.h5 [--max-new N] [--limit N]\n"
            "                         [--batch N] [--threads N]\n\n"
            "For each example of the SFT dataset SFT.h5, takes its prompt (the tokens before its first\n"
            "trained token: the chat up to its first reply, with the assistant header) and lets the int4\n"
            "model of the target (what pocket generate --int4 runs: its QAT scales, else RTN group 64)\n"
            "continue it greedily until an end token (the config's eos id, <|im_end|>, <|endoftext|> or\n"
            "the chat template's end of turn) or --max-new tokens. Writes OUT.h5, an SFT dataset with the same\n"
            "tokenizer: the prompt without loss, the generated tokens (the end token included) with loss;\n"
            "the data to train a speculative draft for that target on ([draft] in a recipe). Examples\n"
            "with no prompt, or one that fills the target's context, are skipped (counted).\n\n"
            "  --ckpt TARGET.h5     the target checkpoint (float, or QAT: its int4 model is what runs)\n"
            "  --data SFT.h5        an SFT token dataset made with the target's tokenizer\n"
            "  --out OUT.h5         the dataset to write (atomically)\n"
            "  --max-new N          new tokens per example at most (default 128; less where the\n"
            "                       target's context ends)\n"
            "  --limit N            the first N examples only (default: all)\n"
            "  --batch N            prompts of the same length continued together after each is read\n"
            "                       in a pass of its own, the matmuls over all of them at once\n"
            "                       (default 16; the replies are the same as one at a time)\n"
            "  --threads N          OpenMP threads (default: all cores)\n");
}

typedef struct {
    uint64_t written, skipped, ended, prompt_tokens, new_tokens;
} Counts;

typedef struct {
    uint64_t k;   // the example
    int np;       // its prompt's tokens
} Prompt;

static int by_length(const void *a, const void *b) {
    const Prompt *x = a, *y = b;
    if (x->np != y->np) return x->np < y->np ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

// Greedy replies to `rows` prompts of np tokens each: each prompt is read in
// one pass of its own (as generate reads it) and its cache copied into a
// lockstep plan, where the rows then advance together (one token each per
// pass, the matmuls over all of them) until each makes an end token or has
// max_new. out[r * stride ..] gets row r's reply, got[r] its length.
static int continue_rows(const Model *src, const Dataset *d, const Prompt *ps, int rows, int max_new, int stride,
                         const GenParams *p, int *out, int *got, PtError *e) {
    const int np = ps[0].np, V = src->cfg.vocab_size;
    GenContext g;
    if (gen_init(&g, src, np, e)) return -1;
    Model m;
    model_init(&m, src->dev, &src->cfg, src->tt, src->weights, &src->opt);
    // The last new token is never fed: nothing reads its logits.
    if (model_plan_cache_rows(&m, rows, np + max_new - 1, e)) {
        model_free(&m);
        gen_free(&g);
        return -1;
    }
    float *dev_logits = m.dev->be->alloc(m.dev, (size_t)rows * V * sizeof(float), "draft-data logits");
    float *logits = xmalloc((size_t)rows * V * sizeof(float), "draft-data logits on the host");
    float *probs = xmalloc((size_t)V * sizeof(float), "sampling scratch");
    int *order = xmalloc((size_t)V * sizeof(int), "sampling scratch");
    int *next = xmalloc((size_t)(rows > np ? rows : np) * sizeof(int), "next tokens"), live = rows, rc = 0;
    Rng rng;
    rng_seed(&rng, p->seed);
    for (int r = 0; r < rows && rc == 0; r++) {
        for (int t = 0; t < np; t++) next[t] = (int)dataset_token(d, d->doc_offsets[ps[r].k] + (uint64_t)t);
        if (gen_prefill_logits(&g, next, np, e) == NULL) {
            rc = -1;
            break;
        }
        model_cache_copy_row(&m, r, &g.m);
        const int id = sample_token(g.logits, V, p, &rng, probs, order);
        out[(size_t)r * stride] = id;
        got[r] = gen_is_stop(p, id) || max_new == 1 ? 1 : -1;   // -1: still generating
        live -= got[r] > 0;
    }
    for (int i = 1; i < max_new && live > 0 && rc == 0; i++) {
        for (int r = 0; r < rows; r++)   // (a finished row is fed its last token again: nothing reads it)
            next[r] = out[(size_t)r * stride + (got[r] > 0 ? got[r] : i) - 1];
        model_feed_rows(&m, next, dev_logits);
        OP(m.dev, download, logits, dev_logits, (size_t)rows * V * sizeof(float));
        for (int r = 0; r < rows; r++) {
            if (got[r] > 0) continue;
            const int id = sample_token(logits + (size_t)r * V, V, p, &rng, probs, order);
            out[(size_t)r * stride + i] = id;
            if (gen_is_stop(p, id) || i + 1 == max_new) {
                got[r] = i + 1;
                live--;
            }
        }
    }
    m.dev->be->release(m.dev, dev_logits);
    free(logits);
    free(probs);
    free(order);
    free(next);
    model_free(&m);
    gen_free(&g);
    return rc;
}

// The examples [0, n) of d: each one's prompt and the target's continuation into
// w, in the dataset's order; prompts of one length run `batch` at a time.
static int continue_prompts(const OpenModel *om, const Tokenizer *tok, const char *ckpt, const Dataset *d,
                            uint64_t n, int max_new, int batch, DatasetWriter *w, Counts *c, PtError *e) {
    const ModelConfig *cfg = &om->b.cfg;
    GenParams p;
    gen_params_default(&p);
    char *probe;   // the chat template's end-of-turn token joins the stops, as generate --chat has it
    if (chat_generation_prompt(&om->b, ckpt, tok, NULL, "x", &probe, &p, e)) return -1;
    free(probe);
    add_default_stops(&p, cfg, tok);
    const int cap = cfg->max_seq;
    Prompt *ps = xmalloc((size_t)(n ? n : 1) * sizeof *ps, "prompt list");
    int *where = xmalloc((size_t)(n ? n : 1) * sizeof(int), "prompt index");   // example -> its place in ps, or -1
    uint64_t m = 0;
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t off = d->doc_offsets[k], len = dataset_doc_len(d, k);
        uint64_t np = 0;
        while (np < len && !d->loss_mask[off + np]) np++;
        where[k] = -1;
        if (np == 0 || np == len || np >= (uint64_t)cap) {   // no prompt, no reply, or no room to continue
            c->skipped++;
            continue;
        }
        ps[m++] = (Prompt){k, (int)np};
    }
    qsort(ps, m, sizeof *ps, by_length);
    for (uint64_t j = 0; j < m; j++) where[ps[j].k] = (int)j;
    int *replies = xmalloc((size_t)(m ? m : 1) * max_new * sizeof(int), "replies");
    int *got = xmalloc((size_t)(m ? m : 1) * sizeof(int), "reply lengths"), rc = 0;
    const double t0 = now_seconds();
    double shown = 0;
    const int tty = isatty(2);
    uint64_t done_new = 0;
    for (uint64_t j = 0; j < m && rc == 0;) {
        uint64_t end = j + 1;
        while (end < m && end - j < (uint64_t)batch && ps[end].np == ps[j].np) end++;
        const int room = max_new < cap - ps[j].np ? max_new : cap - ps[j].np;   // where the context ends first
        rc = continue_rows(&om->m, d, ps + j, (int)(end - j), room, max_new, &p, replies + (size_t)j * max_new,
                           got + j, e);
        for (uint64_t r = j; rc == 0 && r < end; r++) done_new += (uint64_t)got[r];
        j = end;
        const double dt = now_seconds() - t0;
        if (rc == 0 && (dt - shown >= (tty ? 0.5 : 10.0) || j == m)) {   // a log gets a line every 10 s
            shown = dt;
            fprintf(stderr, "%sdraft-data: %llu/%llu examples, %.0f tokens/s%s", tty ? "\r" : "",
                    (unsigned long long)j, (unsigned long long)m, dt > 0 ? (double)done_new / dt : 0.0,
                    tty ? "   " : "\n");
        }
    }
    if (m && tty) fprintf(stderr, "\n");
    int *ids = xmalloc((size_t)cap * sizeof(int), "example");
    uint8_t *mask = xcalloc((size_t)cap, 1, "example mask");
    for (uint64_t k = 0; k < n && rc == 0; k++) {
        if (where[k] < 0) continue;
        const uint64_t j = (uint64_t)where[k], off = d->doc_offsets[k];
        const int np = ps[j].np;
        int g = got[j];
        const int *reply = replies + j * max_new;
        c->ended += g > 0 && gen_is_stop(&p, reply[g - 1]);
        for (int i = 0; i < g; i++)   // a row past the tokenizer's (an lm_head's padding) ends the reply
            if (reply[i] >= d->vocab_size) g = i;
        for (int i = 0; i < np; i++) ids[i] = (int)dataset_token(d, off + (uint64_t)i);
        memcpy(ids + np, reply, (size_t)g * sizeof(int));
        memset(mask, 0, (size_t)np);
        memset(mask + np, 1, (size_t)g);
        rc = dataset_writer_add(w, ids, mask, (size_t)np + (size_t)g, e);
        c->written++;
        c->prompt_tokens += (uint64_t)np;
        c->new_tokens += (uint64_t)g;
    }
    free(ids);
    free(mask);
    free(ps);
    free(where);
    free(replies);
    free(got);
    return rc;
}

int cmd_draft_data(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL, *out = NULL, *v;
    long max_new = 128, limit = 0, batch = 16;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--data"))) data = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else if ((v = arg_value(argc, argv, &i, "--max-new"))) { if (arg_long("--max-new", v, 1, 1 << 24, &max_new)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--limit"))) { if (arg_long("--limit", v, 1, 1L << 40, &limit)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--batch"))) { if (arg_long("--batch", v, 1, 4096, &batch)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (arg_threads("--threads", v, &threads)) return ARGS_USAGE; }
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!ckpt || !data || !out) return arg_usage("--ckpt, --data and --out are required (see --help)");
    PtError e;
    Dataset d = {0};
    Tokenizer *tok = NULL;
    DatasetWriter *w = NULL;
    OpenModel om;
    OpenOptions oo = {.int4 = 1, .threads = threads};
    if (open_model(&om, ckpt, &oo, &e)) { fprintf(stderr, "pocket draft-data: %s\n", e.msg); return 1; }
    int rc = 1;
    Counts c = {0};
    if (!om.b.tokenizer_json) {
        pt_fail(&e, "%s: the checkpoint stores no tokenizer.json, so %s cannot be checked against it", ckpt, data);
        goto fail;
    }
    char src[1100];
    snprintf(src, sizeof src, "%s:/tokenizer/tokenizer.json", ckpt);
    if (tokenizer_load(&tok, om.b.tokenizer_json, om.b.tokenizer_json_len, src, &e) || dataset_open(&d, data, &e) ||
        dataset_check_tokenizer(&d, tokenizer_hash(tok), &e))
        goto fail;
    if (d.kind != DATASET_SFT) {
        pt_fail(&e, "%s: a %s dataset, not SFT data (pocket tokenize --chat): its examples have no prompts", data,
                dataset_kind_name(d.kind));
        goto fail;
    }
    if (d.vocab_size > om.b.cfg.vocab_size) {
        pt_fail(&e, "%s has a vocabulary of %d, more than the target's %d rows (%s)", data, d.vocab_size,
                om.b.cfg.vocab_size, ckpt);
        goto fail;
    }
    const uint64_t n = limit > 0 && (uint64_t)limit < d.n_docs ? (uint64_t)limit : d.n_docs;
    if (dataset_writer_open(&w, out, DATASET_SFT, d.vocab_size, d.tokenizer_hash, &e)) goto fail;
    if (continue_prompts(&om, tok, ckpt, &d, n, (int)max_new, (int)batch, w, &c, &e)) goto fail;
    if (c.written == 0) {
        pt_fail(&e, "%s: none of its %llu example(s) has a prompt before its first trained token", data,
                (unsigned long long)n);
        goto fail;
    }
    dataset_writer_set_counts(w, 0, 0, c.skipped);
    rc = dataset_writer_commit(w, &e);
    w = NULL;
    if (rc) goto fail;
    printf("pocket draft-data: %s: %llu examples, %llu prompt + %llu generated tokens (%llu ended at an end token), "
           "%llu skipped; the int4 model of %s (%s, group %d)\n", out, (unsigned long long)c.written,
           (unsigned long long)c.prompt_tokens, (unsigned long long)c.new_tokens, (unsigned long long)c.ended,
           (unsigned long long)c.skipped, ckpt, om.from_qat ? "its QAT scales" : "round-to-nearest", om.q.spec.group);
    goto done;
fail:
    rc = 1;
    fprintf(stderr, "pocket draft-data: %s\n", e.msg);
done:
    if (w) dataset_writer_abort(w);
    if (d.path) dataset_close(&d);
    if (tok) tokenizer_free(tok);
    open_model_close(&om);
    return rc;
}
