// pocket draft-data: an SFT dataset whose responses are the int4 target's own
// greedy continuations of another dataset's prompts, and optionally a few
// sampled ones. A speculative draft ([draft] in a recipe) is worth what the
// target accepts of it, so it learns best from what the target itself says
// rather than from the data's replies.
#include <limits.h>
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
            "                         [--samples N [--temperature T] [--top-p P] [--top-k K] [--seed S]]\n"
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
            "  --samples N          per prompt, after its greedy reply, N replies sampled from the\n"
            "                       target (default 0); a reply equal to an earlier one of its prompt\n"
            "                       is dropped (counted: n_duplicates)\n"
            "  --temperature T      (--samples) sampling temperature, > 0 (default 0.7)\n"
            "  --top-p P            (--samples) nucleus mass, in (0, 1] (default 1: all)\n"
            "  --top-k K            (--samples) the K most likely tokens only (default 0: all)\n"
            "  --seed S             (--samples) sample j (from 0) of example k (from 0, in SFT.h5)\n"
            "                       uses seed S + k x N + j (default 1): pocket generate --int4 with\n"
            "                       that --seed, the same prompt ids and flags gives the same reply\n"
            "  --batch N            replies decoded together, the matmuls over all of them at once, a\n"
            "                       finished one replaced by the next prompt (default 16; the replies are\n"
            "                       the same as one at a time)\n"
            "  --threads N          OpenMP threads (default: all cores)\n");
}

typedef struct {
    int samples;             // sampled replies per prompt, after the greedy one
    float temperature, top_p;
    int top_k;
    uint64_t seed;           // sample j of example k: seed + k * samples + j
} Sampling;

typedef struct {
    uint64_t written, skipped, ended, duplicates, prompt_tokens, new_tokens;
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
    fprintf(stderr, "%sdraft-data: %d/%d replies, %.0f tokens/s%s", pr->tty ? "\r" : "", done, n,
            dt > 0 ? (double)made / dt : 0.0, pr->tty ? (done == n ? "\n" : "   ") : "\n");
}

// The tokens of a job's reply that go into the dataset: a row past the tokenizer's (an lm_head's padding) ends it.
static int reply_len(const SampleJob *job, int vocab) {
    int g = 0;
    while (g < job->n_out && job->out[g] < vocab) g++;
    return g;
}

// The examples [0, n) of d: each one's prompt, then the target's greedy
// continuation and sm->samples sampled ones into w, in the dataset's order.
// The batched sampler decodes `rows` replies together, a finished one
// replaced by the next; a prompt's replies are consecutive jobs on one
// prompt array, so it is read once.
static int continue_prompts(const OpenModel *om, const Tokenizer *tok, const char *ckpt, const Dataset *d,
                            uint64_t n, int max_new, const Sampling *sm, int rows, DatasetWriter *w, Counts *c,
                            PtError *e) {
    const ModelConfig *cfg = &om->b.cfg;
    const int per_prompt = 1 + sm->samples;
    if (n > (uint64_t)(INT_MAX / per_prompt))
        return pt_fail(e, "%llu examples x %d replies is more than one run can hold: use --limit",
                       (unsigned long long)n, per_prompt);
    GenParams p;
    gen_params_default(&p);
    char *probe;   // the chat template's end-of-turn token joins the stops, as generate --chat has it
    if (chat_generation_prompt(&om->b, ckpt, tok, NULL, "x", &probe, &p, e)) return -1;
    free(probe);
    add_default_stops(&p, cfg, tok);
    const int cap = cfg->max_seq;
    // Each usable example per_prompt jobs on its prompt: the greedy one, then the samples; room for max_new
    // tokens or what the context leaves.
    const size_t n_jobs = (size_t)(n ? n : 1) * (size_t)per_prompt;
    SampleJob *jobs = xcalloc(n_jobs, sizeof *jobs, "sampling jobs");
    GenParams *params = xmalloc(n_jobs * sizeof *params, "sampling parameters");
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
        for (int j = 0; j < per_prompt; j++, m++) {
            params[m] = p;
            params[m].max_new = max_new < cap - (int)np ? max_new : cap - (int)np;
            if (j > 0) {   // the seed follows the example's index in d, not its place in the run
                params[m].temperature = sm->temperature;
                params[m].top_p = sm->top_p;
                params[m].top_k = sm->top_k;
                params[m].seed = sm->seed + k * (uint64_t)sm->samples + (uint64_t)(j - 1);
            }
            jobs[m] = (SampleJob){prompt, (int)np, &params[m],
                                  xmalloc((size_t)params[m].max_new * sizeof(int), "reply"), 0};
        }
        max_len = (int)np + params[m - 1].max_new > max_len ? (int)np + params[m - 1].max_new : max_len;
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
    // the replies of the current prompt written so far: their jobs and lengths
    int *kept = xmalloc((size_t)per_prompt * sizeof(int), "a prompt's replies");
    int *kept_len = xmalloc((size_t)per_prompt * sizeof(int), "a prompt's reply lengths");
    for (int j0 = 0; j0 < m && rc == 0; j0 += per_prompt) {
        int n_kept = 0;
        for (int j = j0; j < j0 + per_prompt && rc == 0; j++) {
            const SampleJob *job = &jobs[j];
            const int g = reply_len(job, d->vocab_size);
            // A sample equal to a reply already kept for its prompt adds nothing for a draft to learn.
            int seen = 0;
            for (int i = 0; i < n_kept && !seen; i++)
                seen = kept_len[i] == g && !memcmp(jobs[kept[i]].out, job->out, (size_t)g * sizeof(int));
            if (seen) {
                c->duplicates++;
                continue;
            }
            kept[n_kept] = j, kept_len[n_kept++] = g;
            c->ended += job->n_out > 0 && gen_is_stop(&p, job->out[job->n_out - 1]);
            memcpy(ids, job->prompt, (size_t)job->n_prompt * sizeof(int));
            memcpy(ids + job->n_prompt, job->out, (size_t)g * sizeof(int));
            memset(mask, 0, (size_t)job->n_prompt);
            memset(mask + job->n_prompt, 1, (size_t)g);
            rc = dataset_writer_add(w, ids, mask, (size_t)job->n_prompt + (size_t)g, e);
            c->written++;
            c->prompt_tokens += (uint64_t)job->n_prompt;
            c->new_tokens += (uint64_t)g;
        }
    }
    for (int j = 0; j < m; j++) {
        if (j % per_prompt == 0) free((int *)jobs[j].prompt);   // one array for a prompt's replies
        free(jobs[j].out);
    }
    free(kept);
    free(kept_len);
    free(ids);
    free(mask);
    free(jobs);
    free(params);
    return rc;
}

int cmd_draft_data(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL, *out = NULL, *v;
    long max_new = 128, limit = 0, batch = 16;
    int threads = 0, sampling_flags = 0;
    Sampling sm = {.samples = 0, .temperature = 0.7f, .top_p = 1.0f, .top_k = 0, .seed = 1};
    for (int i = 1; i < argc; i++) {
        double x;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--data"))) data = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else if ((v = arg_value(argc, argv, &i, "--max-new"))) { if (arg_long("--max-new", v, 1, 1 << 24, &max_new)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--limit"))) { if (arg_long("--limit", v, 1, 1L << 40, &limit)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--batch"))) { if (arg_long("--batch", v, 1, 4096, &batch)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (arg_threads("--threads", v, &threads)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--samples"))) { if (arg_int("--samples", v, 0, 1024, &sm.samples)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--temperature"))) {
            if (arg_real("--temperature", v, 0.0, 1e4, ARG_LO_OPEN, &x)) return ARGS_USAGE;
            sm.temperature = (float)x, sampling_flags = 1;
        } else if ((v = arg_value(argc, argv, &i, "--top-p"))) {
            if (arg_real("--top-p", v, 0.0, 1.0, ARG_LO_OPEN, &x)) return ARGS_USAGE;
            sm.top_p = (float)x, sampling_flags = 1;
        } else if ((v = arg_value(argc, argv, &i, "--top-k"))) {
            if (arg_int("--top-k", v, 0, 1 << 30, &sm.top_k)) return ARGS_USAGE;
            sampling_flags = 1;
        } else if ((v = arg_value(argc, argv, &i, "--seed"))) {
            if (arg_u64("--seed", v, &sm.seed)) return ARGS_USAGE;
            sampling_flags = 1;
        } else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!ckpt || !data || !out) return arg_usage("--ckpt, --data and --out are required (see --help)");
    if (sampling_flags && sm.samples == 0)
        return arg_usage("--temperature, --top-p, --top-k and --seed go with --samples N (see --help)");
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
    if (continue_prompts(&om, tok, ckpt, &d, n, (int)max_new, &sm, (int)batch, w, &c, &e)) goto fail;
    if (c.written == 0) {
        pt_fail(&e, "%s: none of its %llu example(s) has a prompt before its first trained token", data,
                (unsigned long long)n);
        goto fail;
    }
    dataset_writer_set_counts(w, 0, 0, c.skipped);
    dataset_writer_set_duplicates(w, c.duplicates);
    rc = dataset_writer_commit(w, &e);
    w = NULL;
    if (rc) goto fail;
    char sampled[160] = "";
    if (sm.samples > 0)
        snprintf(sampled, sizeof sampled, " (greedy + %d sampled a prompt, %llu duplicate(s) dropped)", sm.samples,
                 (unsigned long long)c.duplicates);
    printf("pocket draft-data: %s: %llu examples%s, %llu prompt + %llu generated tokens (%llu ended at an end token), "
           "%llu skipped; the int4 model of %s (%s, group %d)\n", out, (unsigned long long)c.written, sampled,
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
