// pocket draft-data: an SFT dataset whose responses are the int4 target's own
// greedy continuations of another dataset's prompts. A speculative draft
// ([draft] in a recipe) is worth what the target accepts of it, so it learns
// best from what the target itself says rather than from the data's replies.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../model/generate.h"
#include "../train/evaluate.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket draft-data --ckpt TARGET.h5 --data SFT.h5 --out OUT.h5 [--max-new N] [--limit N]\n"
            "                         [--threads N]\n\n"
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
            "  --threads N          OpenMP threads (default: all cores)\n");
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || !*v || errno || x < lo || x > hi) {
        fprintf(stderr, "pocket draft-data: %s '%s' must be an integer in [%ld, %ld]\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

typedef struct {
    uint64_t written, skipped, ended, prompt_tokens, new_tokens;
} Counts;

// The examples [0, n) of d: each one's prompt and the target's continuation into w.
static int continue_prompts(const OpenModel *om, const Tokenizer *tok, const char *ckpt, const Dataset *d,
                            uint64_t n, int max_new, DatasetWriter *w, Counts *c, PtError *e) {
    const ModelConfig *cfg = &om->b.cfg;
    GenParams p;
    gen_params_default(&p);
    char *probe;   // the chat template's end-of-turn token joins the stops, as generate --chat has it
    if (chat_generation_prompt(&om->b, ckpt, tok, NULL, "x", &probe, &p, e)) return -1;
    free(probe);
    add_default_stops(&p, cfg, tok);
    GenContext g;
    if (gen_init(&g, &om->m, cfg->max_seq, e)) return -1;
    const int cap = cfg->max_seq;
    int *ids = xmalloc((size_t)cap * sizeof(int), "example"), rc = 0;
    uint8_t *mask = xcalloc((size_t)cap, 1, "example mask");
    const double t0 = now_seconds();
    double shown = 0;
    const int tty = isatty(2);
    for (uint64_t k = 0; k < n && rc == 0; k++) {
        const uint64_t off = d->doc_offsets[k], len = dataset_doc_len(d, k);
        uint64_t np = 0;
        while (np < len && !d->loss_mask[off + np]) np++;
        if (np == 0 || np == len || np >= (uint64_t)cap) {   // no prompt, no reply, or no room to continue
            c->skipped++;
            continue;
        }
        for (uint64_t i = 0; i < np; i++) ids[i] = (int)dataset_token(d, off + i);
        p.max_new = max_new < cap - (int)np ? max_new : cap - (int)np;
        int got = generate(&g, ids, (int)np, &p, ids + np, cap - (int)np, e);
        if (got < 0) {
            rc = -1;
            break;
        }
        c->ended += got > 0 && gen_is_stop(&p, ids[np + got - 1]);
        for (int i = 0; i < got; i++)   // a row past the tokenizer's (an lm_head's padding) ends the reply
            if (ids[np + i] >= d->vocab_size) got = i;
        memset(mask, 0, np);
        memset(mask + np, 1, (size_t)got);
        rc = dataset_writer_add(w, ids, mask, np + (size_t)got, e);
        c->written++;
        c->prompt_tokens += np;
        c->new_tokens += (uint64_t)got;
        const double dt = now_seconds() - t0;
        if (dt - shown >= (tty ? 0.5 : 10.0) || k + 1 == n) {   // a log gets a line every 10 s
            shown = dt;
            fprintf(stderr, "%sdraft-data: %llu/%llu examples, %.0f tokens/s%s", tty ? "\r" : "",
                    (unsigned long long)(k + 1), (unsigned long long)n,
                    dt > 0 ? (double)c->new_tokens / dt : 0.0, tty ? "   " : "\n");
        }
    }
    if (c->written && tty) fprintf(stderr, "\n");
    free(ids);
    free(mask);
    gen_free(&g);
    return rc;
}

int cmd_draft_data(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL, *out = NULL, *v;
    long max_new = 128, limit = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--data"))) data = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else if ((v = arg_value(argc, argv, &i, "--max-new"))) { if (parse_int("--max-new", v, 1, 1 << 24, &max_new)) return 2; }
        else if ((v = arg_value(argc, argv, &i, "--limit"))) { if (parse_int("--limit", v, 1, 1L << 40, &limit)) return 2; }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (parse_int("--threads", v, 0, 4096, &threads)) return 2; }
        else { fprintf(stderr, "pocket draft-data: unknown argument '%s' (see --help)\n", argv[i]); return 2; }
    }
    if (!ckpt || !data || !out) {
        fprintf(stderr, "pocket draft-data: --ckpt, --data and --out are required (see --help)\n");
        return 2;
    }
    PtError e;
    Dataset d = {0};
    Tokenizer *tok = NULL;
    DatasetWriter *w = NULL;
    OpenModel om;
    OpenOptions oo = {.int4 = 1, .threads = (int)threads};
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
                d.kind == DATASET_CPT ? "cpt" : "choice");
        goto fail;
    }
    if (d.vocab_size > om.b.cfg.vocab_size) {
        pt_fail(&e, "%s has a vocabulary of %d, more than the target's %d rows (%s)", data, d.vocab_size,
                om.b.cfg.vocab_size, ckpt);
        goto fail;
    }
    const uint64_t n = limit > 0 && (uint64_t)limit < d.n_docs ? (uint64_t)limit : d.n_docs;
    if (dataset_writer_open(&w, out, DATASET_SFT, d.vocab_size, d.tokenizer_hash, &e)) goto fail;
    if (continue_prompts(&om, tok, ckpt, &d, n, (int)max_new, w, &c, &e)) goto fail;
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
