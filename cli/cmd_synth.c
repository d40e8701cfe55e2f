// pocket synth: data-free training data, sampled from the model itself (as
// LLM-QAT does for data-free QAT): each sequence starts with a token drawn
// uniformly from the tokenizer's ordinary tokens, continues greedily for a
// few tokens, then samples from the model's distribution. Sequences are
// generated in lockstep batches (one KV cache for the batch), written to a
// partial file after each batch (its settings line, then the batches' ids as
// native ints), so an interrupted run resumes where it stopped and gives the
// same tokens as an uninterrupted one.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../model/generate.h"
#include "../util/h5.h"
#include "args.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket synth --ckpt CKPT.h5 --out SYN.h5 [options]\n\n"
            "Samples sequences from the model into a token dataset (CPT kind, one document per sequence),\n"
            "so that QAT or distillation can run without text of the user's own (data-free, as LLM-QAT):\n"
            "the first token of each sequence is drawn uniformly from the tokenizer's ordinary (not special)\n"
            "tokens, the next --greedy-prefix tokens are the model's most likely ones, the rest are sampled.\n"
            "Sequences are made --batch at a time in lockstep; after each batch they are appended to\n"
            "SYN.h5.partial, and the same command resumes from it (the same settings are required; the\n"
            "result is the same tokens as an uninterrupted run). The settings are stored as attributes of\n"
            "the dataset (synth_*).\n\n"
            "  --sequences N      sequences to make (default 512)\n"
            "  --length L         tokens per sequence, the first included (default 513: one 512-token window\n"
            "                     of training plus its last target)\n"
            "  --batch R          sequences sampled together (default 16)\n"
            "  --seed S           the first tokens and the sampling (default 1234); sequence i draws from its\n"
            "                     own stream, so it does not depend on the batch it is made in\n"
            "  --temperature T    sampling temperature (default 1: the model's own distribution)\n"
            "  --top-p P          nucleus sampling (default 1: off)\n"
            "  --greedy-prefix K  the most likely token for the K positions after the first (default 4)\n"
            "  --int4             sample from the int4 model (the checkpoint's QAT state, else RTN) instead\n"
            "                     of the float one\n"
            "  --threads N        OpenMP threads (default: all cores)\n"
            "  --device D         cpu (default), or cuda / cuda:N in a pocket built with make CUDA=1\n");
}

typedef struct {
    long sequences, length, batch, seed, greedy;
    double temperature, top_p;
    int int4;
} SynthOptions;

// The partial file's first line: every setting the tokens depend on.
static void header_line(const SynthOptions *o, const char *ckpt, const char *weights, char *out, size_t cap) {
    snprintf(out, cap,
             "pocket synth 1: ckpt=%s weights_sha256=%s length=%ld batch=%ld seed=%ld temperature=%.9g top_p=%.9g "
             "greedy_prefix=%ld int4=%d\n",
             ckpt, weights, o->length, o->batch, o->seed, o->temperature, o->top_p, o->greedy, o->int4);
}

// Opens PATH.partial for appending after its whole batches (a batch cut short
// by a crash is dropped); *done = the sequences it holds.
static FILE *open_partial(const char *path, const char *header, const SynthOptions *o, long *done, PtError *e) {
    *done = 0;
    const size_t hlen = strlen(header), batch_bytes = (size_t)o->batch * o->length * sizeof(int);
    FILE *f = fopen(path, "r+b");
    if (!f) {
        if (errno != ENOENT) {
            pt_fail(e, "%s: %s", path, strerror(errno));
            return NULL;
        }
        f = fopen(path, "w+b");
        if (!f || fwrite(header, 1, hlen, f) != hlen || fflush(f)) {
            pt_fail(e, "%s: cannot write: %s", path, strerror(errno));
            if (f) fclose(f);
            return NULL;
        }
        return f;
    }
    char *line = xmalloc(hlen + 1, "partial header");
    size_t got = fread(line, 1, hlen, f);
    const int same = got == hlen && !memcmp(line, header, hlen);
    free(line);
    if (!same) {
        fclose(f);
        pt_fail(e, "%s was started with other settings (its first line says which): run with those, or remove it to "
                   "start over", path);
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st)) {
        fclose(f);
        pt_fail(e, "%s: %s", path, strerror(errno));
        return NULL;
    }
    const long batches = (long)(((size_t)st.st_size - hlen) / batch_bytes);
    if (ftruncate(fileno(f), (off_t)(hlen + (size_t)batches * batch_bytes)) || fseek(f, 0, SEEK_END)) {
        fclose(f);
        pt_fail(e, "%s: %s", path, strerror(errno));
        return NULL;
    }
    *done = batches * o->batch;
    return f;
}

// Ordinary token ids the first token is drawn from (not special, not empty).
static int *first_token_ids(const Tokenizer *tok, int vocab, int *n) {
    int V = tokenizer_vocab_size(tok) < vocab ? tokenizer_vocab_size(tok) : vocab, k = 0;
    int *ids = xmalloc((size_t)(V > 0 ? V : 1) * sizeof(int), "first-token ids");
    for (int id = 0; id < V; id++) {
        size_t len;
        const char *b = tokenizer_token_bytes(tok, id, &len);
        if (len && tokenizer_special_prefix(tok, b, len) != len) ids[k++] = id;
    }
    *n = k;
    return ids;
}

typedef struct {
    long batch, batches, rows;
    long tokens_before;
    double t0;
} Progress;

static void progress(void *ctx, int done, int len) {
    Progress *p = ctx;
    const double dt = now_seconds() - p->t0, made = (double)p->tokens_before + (double)done * (double)p->rows;
    if (done % 16 && done != len) return;
    fprintf(stderr, "\rsynth: batch %ld/%ld, position %d/%d, %.0f tokens/s   ", p->batch + 1, p->batches, done, len,
            dt > 0 ? made / dt : 0.0);
}

static int write_dataset(const char *out, FILE *partial, size_t hlen, const SynthOptions *o, const char *ckpt,
                         const char *weights, const Tokenizer *tok, int vocab, PtError *e) {
    DatasetWriter *w;
    if (dataset_writer_open(&w, out, DATASET_CPT, vocab, tokenizer_hash(tok), e)) return -1;
    int *ids = xmalloc((size_t)o->length * sizeof(int), "sequence ids");
    int rc = fseek(partial, (long)hlen, SEEK_SET) ? pt_fail(e, "%s.partial: %s", out, strerror(errno)) : 0;
    for (long s = 0; rc == 0 && s < o->sequences; s++) {
        if (fread(ids, sizeof(int), (size_t)o->length, partial) != (size_t)o->length) {
            rc = pt_fail(e, "%s.partial: sequence %ld is cut short", out, s);
            break;
        }
        rc = dataset_writer_add(w, ids, NULL, (size_t)o->length, e);
    }
    free(ids);
    hid_t f = dataset_writer_file(w);
    const long values[] = {o->sequences, o->length, o->seed, o->greedy};
    const char *names[] = {"synth_sequences", "synth_length", "synth_seed", "synth_greedy_prefix"};
    for (int i = 0; rc == 0 && i < 4; i++)
        if (h5_write_attr(f, names[i], H5T_NATIVE_LONG, &values[i], 1)) rc = pt_fail(e, "%s: writing %s", out, names[i]);
    const double temps[] = {o->temperature, o->top_p};
    if (rc == 0 && (h5_write_attr(f, "synth_temperature", H5T_NATIVE_DOUBLE, &temps[0], 1) ||
                    h5_write_attr(f, "synth_top_p", H5T_NATIVE_DOUBLE, &temps[1], 1) ||
                    h5_write_utf8_attr(f, "synth_ckpt", ckpt) || h5_write_str_attr(f, "synth_weights_sha256", weights) ||
                    h5_write_str_attr(f, "synth_model", o->int4 ? "int4" : "float") ||
                    h5_write_str_attr(f, "synth_first_token", "uniform over the tokenizer's non-special tokens")))
        rc = pt_fail(e, "%s: writing the synth attributes", out);
    if (rc) {
        dataset_writer_abort(w);
        return -1;
    }
    return dataset_writer_commit(w, e);
}

int cmd_synth(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *v;
    SynthOptions o = {512, 513, 16, 1234, 4, 1.0, 1.0, 0};
    OpenOptions oo = {.log = NULL};
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if (!strcmp(argv[i], "--int4")) o.int4 = 1;
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else if ((v = arg_value(argc, argv, &i, "--device"))) oo.device = v;
        else if ((v = arg_value(argc, argv, &i, "--sequences"))) {
            if (arg_long("--sequences", v, 1, 100000000, &o.sequences)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--length"))) { if (arg_long("--length", v, 2, 1 << 20, &o.length)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--batch"))) { if (arg_long("--batch", v, 1, 4096, &o.batch)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--seed"))) {
            if (arg_long("--seed", v, 0, 9000000000000000000L, &o.seed)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--greedy-prefix"))) {
            if (arg_long("--greedy-prefix", v, 0, 1 << 20, &o.greedy)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (arg_threads("--threads", v, &threads)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--temperature"))) {
            if (arg_real("--temperature", v, 1e-3, 100, ARG_CLOSED, &o.temperature)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--top-p"))) { if (arg_real("--top-p", v, 1e-6, 1, ARG_CLOSED, &o.top_p)) return ARGS_USAGE; }
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!ckpt || !out) return arg_usage("--ckpt and --out are required (see --help)");
    if (o.sequences % o.batch)
        return arg_usage("--sequences %ld is not a multiple of --batch %ld (batches are the unit a run resumes by)",
                         o.sequences, o.batch);
    oo.int4 = o.int4;
    oo.threads = threads;
    PtError e;
    OpenModel om;
    if (open_model(&om, ckpt, &oo, &e)) { fprintf(stderr, "pocket synth: %s\n", e.msg); return 1; }
    int rc = 1;
    Tokenizer *tok = NULL;
    FILE *partial = NULL;
    int *first_ids = NULL, *tokens = NULL;
    Rng *rngs = NULL;
    char *ppath = xmalloc(strlen(out) + 16, "partial path");
    sprintf(ppath, "%s.partial", out);
    if (!om.b.tokenizer_json) { fprintf(stderr, "pocket synth: %s: the checkpoint stores no tokenizer\n", ckpt); goto out; }
    if (tokenizer_load(&tok, om.b.tokenizer_json, om.b.tokenizer_json_len, ckpt, &e)) goto fail;
    if (o.length > om.b.cfg.max_seq) {
        fprintf(stderr, "pocket synth: --length %ld exceeds the model's context of %d positions\n", o.length,
                om.b.cfg.max_seq);
        goto out;
    }
    int n_first;
    first_ids = first_token_ids(tok, om.b.cfg.vocab_size, &n_first);
    if (n_first == 0) { fprintf(stderr, "pocket synth: %s: the tokenizer has no ordinary token to start from\n", ckpt); goto out; }
    char weights[65], header[2048];
    open_model_base_hash(&om, weights);
    header_line(&o, ckpt, weights, header, sizeof header);
    long done;
    if (!(partial = open_partial(ppath, header, &o, &done, &e))) goto fail;
    if (model_plan_cache_rows(&om.m, (int)o.batch, (int)o.length, &e)) goto fail;
    const long batches = o.sequences / o.batch;
    if (done >= o.sequences) done = o.sequences;
    else if (done > 0) fprintf(stderr, "synth: resuming from %s: %ld of %ld sequences made\n", ppath, done, o.sequences);
    tokens = xmalloc((size_t)o.batch * o.length * sizeof(int), "batch tokens");
    rngs = xmalloc((size_t)o.batch * sizeof(Rng), "sequence RNGs");
    GenParams gp;
    gen_params_default(&gp);
    gp.temperature = (float)o.temperature;
    gp.top_p = (float)o.top_p;
    Progress pr = {done / o.batch, batches, o.batch, 0, now_seconds()};
    int *first = xmalloc((size_t)o.batch * sizeof(int), "first tokens");
    for (long b = done / o.batch; b < batches; b++) {
        for (long r = 0; r < o.batch; r++) {
            const uint64_t i = (uint64_t)(b * o.batch + r);
            rng_seed(&rngs[r], (uint64_t)o.seed ^ (0x9E3779B97F4A7C15ull * (i + 1)));
            first[r] = first_ids[rng_next(&rngs[r]) % (uint64_t)n_first];
        }
        pr.batch = b;
        generate_rows(&om.m, first, (int)o.length, (int)o.greedy, &gp, rngs, tokens, progress, &pr);
        pr.tokens_before += o.batch * o.length;
        const size_t n = (size_t)o.batch * o.length;
        if (fwrite(tokens, sizeof(int), n, partial) != n || fflush(partial) || fsync(fileno(partial))) {
            free(first);
            pt_fail(&e, "%s: cannot write: %s", ppath, strerror(errno));
            goto fail;
        }
    }
    free(first);
    fprintf(stderr, "\n");
    if (write_dataset(out, partial, strlen(header), &o, ckpt, weights, tok, om.b.cfg.vocab_size, &e)) goto fail;
    fclose(partial);
    partial = NULL;
    unlink(ppath);
    printf("pocket synth: %s: %ld sequences of %ld tokens from %s (%s model, seed %ld, temperature %g, top-p %g, "
           "%ld greedy), %.1f s\n", out, o.sequences, o.length, ckpt, o.int4 ? "int4" : "float", o.seed,
           o.temperature, o.top_p, o.greedy, now_seconds() - pr.t0);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "pocket synth: %s\n", e.msg);
out:
    if (partial) fclose(partial);
    free(ppath);
    free(first_ids);
    free(tokens);
    free(rngs);
    if (tok) tokenizer_free(tok);
    open_model_close(&om);
    return rc;
}
