// pocket draft-data: an SFT dataset whose responses are the int4 target's own
// greedy continuations of another dataset's prompts. A speculative draft
// ([draft] in a recipe) is worth what the target accepts of it, so it learns
// best from what the target itself says rather than from the data's replies.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../model/sampler.h"
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
            "  --batch N            replies decoded together, the matmuls over all of them at once, a\n"
            "                       finished one replaced by the next prompt (default 16; the replies are\n"
            "                       the same as one at a time)\n"
            "  --threads N          OpenMP threads (default: all cores)\n");
}

typedef struct {
    uint64_t written, skipped, ended, prompt_tokens, new_tokens;
} Counts;

typedef struct {
    double t0, shown;
    int tty;
    const SampleJob *jobs;
} Progress;

// A line every half second on a terminal, every 10 s into a log, and at the end; the tokens made so far are
// counted only for a line that is printed.
static void show_progress(void *ctx, int done, int n) {
    Progress *pr = ctx;
    const double dt = now_seconds() - pr->t0;
    if (dt - pr->shown < (pr->tty ? 0.5 : 10.0) && done < n) return;
    pr->shown = dt;
    uint64_t made = 0;
    for (int j = 0; j < n; j++) made += (uint64_t)pr->jobs[j].n_out;
    fprintf(stderr, "%sdraft-data: %d/%d examples, %.0f tokens/s%s", pr->tty ? "\r" : "", done, n,
            dt > 0 ? (double)made / dt : 0.0, pr->tty ? (done == n ? "\n" : "   ") : "\n");
}

// The examples [0, n) of d: each one's prompt and the target's greedy
// continuation into w, in the dataset's order. The batched sampler decodes
// `rows` of them together, a finished one replaced by the next prompt.
static int continue_prompts(const OpenModel *om, const Tokenizer *tok, const char *ckpt, const Dataset *d,
                            uint64_t n, int max_new, int rows, DatasetWriter *w, Counts *c, PtError *e) {
    const ModelConfig *cfg = &om->b.cfg;
    GenParams p;
    gen_params_default(&p);
    char *probe;   // the chat template's end-of-turn token joins the stops, as generate --chat has it
    if (chat_generation_prompt(&om->b, ckpt, tok, NULL, "x", &probe, &p, e)) return -1;
    free(probe);
    add_default_stops(&p, cfg, tok);
    const int cap = cfg->max_seq;
    // Each usable example a job: its prompt, room for max_new tokens or what the context leaves.
    SampleJob *jobs = xcalloc(n ? n : 1, sizeof *jobs, "sampling jobs");
    GenParams *params = xmalloc((size_t)(n ? n : 1) * sizeof *params, "sampling parameters");
    int m = 0, max_len = 1, rc = 0;
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t off = d->doc_offsets[k], len = dataset_doc_len(d, k);
        uint64_t np = 0;
        while (np < len && !d->loss_mask[off + np]) np++;
        if (np == 0 || np == len || np >= (uint64_t)cap) {   // no prompt, no reply, or no room to continue
            c->skipped++;
            continue;
        }
        int *prompt = xmalloc(np * sizeof(int), "prompt");
        for (uint64_t t = 0; t < np; t++) prompt[t] = (int)dataset_token(d, off + t);
        params[m] = p;
        params[m].max_new = max_new < cap - (int)np ? max_new : cap - (int)np;
        jobs[m] = (SampleJob){prompt, (int)np, &params[m], xmalloc((size_t)params[m].max_new * sizeof(int), "reply"),
                              0};
        max_len = (int)np + params[m].max_new > max_len ? (int)np + params[m].max_new : max_len;
        m++;
    }
    Sampler s;
    Progress pr = {now_seconds(), 0, isatty(2), jobs};
    if (m > 0) {
        rc = sampler_init(&s, &om->m, rows < m ? rows : m, max_len, e);
        if (rc == 0) {
            rc = sampler_run(&s, jobs, m, show_progress, &pr, e);
            sampler_free(&s);
        }
    }
    int *ids = xmalloc((size_t)cap * sizeof(int), "example");
    uint8_t *mask = xcalloc((size_t)cap, 1, "example mask");
    for (int j = 0; j < m && rc == 0; j++) {
        const SampleJob *job = &jobs[j];
        int g = job->n_out;
        c->ended += g > 0 && gen_is_stop(&p, job->out[g - 1]);
        for (int i = 0; i < g; i++)   // a row past the tokenizer's (an lm_head's padding) ends the reply
            if (job->out[i] >= d->vocab_size) g = i;
        memcpy(ids, job->prompt, (size_t)job->n_prompt * sizeof(int));
        memcpy(ids + job->n_prompt, job->out, (size_t)g * sizeof(int));
        memset(mask, 0, (size_t)job->n_prompt);
        memset(mask + job->n_prompt, 1, (size_t)g);
        rc = dataset_writer_add(w, ids, mask, (size_t)job->n_prompt + (size_t)g, e);
        c->written++;
        c->prompt_tokens += (uint64_t)job->n_prompt;
        c->new_tokens += (uint64_t)g;
    }
    for (int j = 0; j < m; j++) free((int *)jobs[j].prompt), free(jobs[j].out);
    free(ids);
    free(mask);
    free(jobs);
    free(params);
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
    // With few rows the sampler's passes read the int4 weights packed.
    OpenOptions oo = {.int4 = 1, .threads = threads, .pack_int4 = batch <= PACKED_MAX_ROWS};
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
