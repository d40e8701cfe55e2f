// pocket teacher-topk: a token dataset with a teacher's top-k next-token
// logits stored beside its tokens (data/topk.h), for distillation without the
// teacher's forward in every training step ([distill] source = topk).
#include <stdlib.h>
#include <string.h>
#include "../data/loader.h"
#include "../data/topk.h"
#include "args.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket teacher-topk --teacher CKPT.h5 --data DATA.h5 --out OUT.h5 [options]\n\n"
            "Runs the teacher (its float weights; with --lora, with its adapter) over DATA.h5 once, on\n"
            "the rows a training run at --seq-len makes of it (CPT windows, or packed SFT examples: each\n"
            "token sees the context it has in training), and writes OUT.h5: DATA.h5's documents and, in\n"
            "/topk, the teacher's k largest logits and their ids after every token a loss counts, with the\n"
            "log-sum-exp of all its logits (6 bytes per token and k, and 4 per token).\n"
            "Train on OUT.h5 with [distill] enabled = 1, source = topk, at the same train.seq_len (and\n"
            "train.doc_mask for CPT data).\n\n"
            "  --k K              logits kept per token (default 64, at most 256)\n"
            "  --temperature T    the run's distill.temperature (default 1): the log-sum-exp of all the\n"
            "                     teacher's logits / T is stored too, so the k are exact probabilities and\n"
            "                     the mass of the rest is known\n"
            "  --seq-len T        tokens per row, the run's train.seq_len (default 512)\n"
            "  --doc-mask         CPT data: attention inside each document (the run's train.doc_mask = 1)\n"
            "  --batch B          rows per teacher forward (default 1)\n"
            "  --threads N        OpenMP threads (default: all cores)\n"
            RUN_FLAGS_HELP);
}

// The teacher over one pass of the loader: every counted position's top-k
// into t, at the dataset token its input is.
static int run_teacher(Model *m, const Dataset *d, int doc_mask, TopkData *t, PtError *e) {
    float *lse = xmalloc((size_t)m->B * m->T * sizeof(float), "top-k log-sum-exp");
    Loader l;
    if (loader_open(&l, d, m->B, m->T, 1, 0, 1, e)) return -1;
    if (d->kind == DATASET_CPT) loader_set_doc_mask(&l, doc_mask);
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, m->B, m->T);
    const int V = m->cfg.vocab_size, k = t->k;
    const size_t N = (size_t)m->B * m->T;
    float *dev_logits = m->dev->be->alloc(m->dev, N * V * sizeof(float), "teacher logits");
    float *logits = xmalloc(N * V * sizeof(float), "teacher logits on the host");
    int *ids = xmalloc(N * (size_t)k * sizeof(int), "top-k ids");
    float *vals = xmalloc(N * (size_t)k * sizeof(float), "top-k logits");
    const double t0 = now_seconds();
    double shown = 0;
    long batches = 0;
    while (!loader_done(&l)) {
        loader_next(&l, &b);
        ModelInput in = {.B = b.B, .T = b.T, .tokens = b.tokens, .targets = NULL, .mask = NULL, .pos = b.pos,
                         .seg = b.seg};
        model_forward(m, &in, dev_logits, NULL);
        OP(m->dev, download, logits, dev_logits, N * V * sizeof(float));
        #pragma omp parallel for schedule(dynamic, 8) num_threads(m->dev->threads)
        for (size_t i = 0; i < N; i++)
            if (b.src[i] >= 0 && b.targets[i] >= 0 && b.mask[i])
                lse[i] = (float)topk_select(logits + i * V, V, k, t->temperature, ids + i * k, vals + i * k);
        for (size_t i = 0; i < N; i++)
            if (b.src[i] >= 0 && b.targets[i] >= 0 && b.mask[i])
                topk_set_row(t, (uint64_t)b.src[i], ids + i * k, vals + i * k, lse[i]);
        batches++;
        const double dt = now_seconds() - t0;
        if (dt - shown < 0.5 && !loader_done(&l)) continue;
        shown = dt;
        fprintf(stderr, "\rteacher-topk: %.1f%% of %s, %.0f tokens/s   ", 100.0 * (double)l.cur.index / (double)l.n_items,
                d->path, dt > 0 ? (double)batches * N / dt : 0.0);
    }
    fprintf(stderr, "\n");
    m->dev->be->release(m->dev, dev_logits);
    free(logits);
    free(ids);
    free(vals);
    free(lse);
    batch_free(&b);
    loader_close(&l);
    return 0;
}

// OUT: DATA's documents (the same kind, mask and tokenizer) and the table.
static int write_out(const char *out, const Dataset *d, const TopkData *t, PtError *e) {
    DatasetWriter *w;
    if (dataset_writer_open(&w, out, d->kind, d->vocab_size, d->tokenizer_hash, e)) return -1;
    int *ids = NULL;
    size_t cap = 0;
    int rc = 0;
    for (uint64_t doc = 0; rc == 0 && doc < d->n_docs; doc++) {
        const uint64_t off = d->doc_offsets[doc], len = dataset_doc_len(d, doc);
        if (len > cap) {
            cap = len;
            ids = realloc(ids, cap * sizeof(int));
            if (!ids) die("out of memory copying %s", d->path);
        }
        for (uint64_t i = 0; i < len; i++) ids[i] = (int)dataset_token(d, off + i);
        rc = dataset_writer_add(w, ids, d->loss_mask ? d->loss_mask + off : NULL, (size_t)len, e);
    }
    free(ids);
    dataset_writer_set_counts(w, d->n_dropped, d->n_truncated, d->n_skipped);
    if (rc == 0 && topk_write(t, dataset_writer_file(w))) rc = pt_fail(e, "%s: writing /topk failed (disk full?)", out);
    if (rc) {
        dataset_writer_abort(w);
        return -1;
    }
    return dataset_writer_commit(w, e);
}

int cmd_teacher_topk(int argc, char **argv) {
    const char *teacher = NULL, *data = NULL, *out = NULL, *v;
    long k = 64, seq = 512, batch = 1;
    int threads = 0;
    double temperature = 1.0;
    int doc_mask = 0, flag;
    OpenOptions oo = {.log = NULL};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((flag = run_flag(argc, argv, &i, &oo))) { if (flag < 0) return ARGS_USAGE; }
        else if (!strcmp(argv[i], "--doc-mask")) doc_mask = 1;
        else if ((v = arg_value(argc, argv, &i, "--teacher"))) teacher = v;
        else if ((v = arg_value(argc, argv, &i, "--data"))) data = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else if ((v = arg_value(argc, argv, &i, "--k"))) { if (arg_long("--k", v, 1, DISTILL_MAX_TOPK, &k)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--temperature"))) {
            if (arg_real("--temperature", v, 0, 100, ARG_LO_OPEN, &temperature)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--seq-len"))) { if (arg_long("--seq-len", v, 2, 1 << 20, &seq)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--batch"))) { if (arg_long("--batch", v, 1, 65536, &batch)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (arg_threads("--threads", v, &threads)) return ARGS_USAGE; }
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!teacher || !data || !out) return arg_usage("--teacher, --data and --out are required (see --help)");
    oo.threads = threads;
    PtError e;
    Dataset d = {0};
    TopkData t = {0};
    OpenModel om;
    if (open_model(&om, teacher, &oo, &e)) { fprintf(stderr, "pocket teacher-topk: %s\n", e.msg); return 1; }
    int rc = 1;
    char hash[65];
    if (dataset_open(&d, data, &e)) goto fail;
    if (d.kind == DATASET_CHOICE) {
        pt_fail(&e, "%s: choice data trains the decision head's scores, which a teacher's top-k does not give", data);
        goto fail;
    }
    if (!om.b.tokenizer_json) {
        pt_fail(&e, "%s: the teacher stores no tokenizer.json, so its vocabulary cannot be checked against %s", teacher, data);
        goto fail;
    }
    if (d.vocab_size > om.b.cfg.vocab_size) {
        pt_fail(&e, "%s has a vocabulary of %d, more than the teacher's %d rows (%s)", data, d.vocab_size,
                om.b.cfg.vocab_size, teacher);
        goto fail;
    }
    {
        Tokenizer *tok;
        if (tokenizer_load(&tok, om.b.tokenizer_json, om.b.tokenizer_json_len, teacher, &e)) goto fail;
        int bad = dataset_check_tokenizer(&d, tokenizer_hash(tok), &e);
        tokenizer_free(tok);
        if (bad) goto fail;
    }
    if (seq > om.b.cfg.max_seq) {
        pt_fail(&e, "--seq-len %ld exceeds the teacher's context of %d positions", seq, om.b.cfg.max_seq);
        goto fail;
    }
    open_model_base_hash(&om, hash);
    if (topk_alloc(&t, d.n_tokens, (int)k, (float)temperature, (int)seq, d.kind == DATASET_CPT ? doc_mask : 0, teacher, hash, &e) ||
        model_plan(&om.m, (int)batch, (int)seq, 0, NULL, &e) || run_teacher(&om.m, &d, doc_mask, &t, &e) ||
        write_out(out, &d, &t, &e))
        goto fail;
    printf("pocket teacher-topk: %s: %s with the top-%ld logits of %s over %llu of its %llu tokens (rows of %ld)\n", out,
           data, k, teacher, (unsigned long long)t.covered, (unsigned long long)d.n_tokens, seq);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "pocket teacher-topk: %s\n", e.msg);
out:
    topk_close(&t);
    if (d.path) dataset_close(&d);
    open_model_close(&om);
    return rc;
}
