// tokenize_pairs.c: `pocket tokenize --pairs` (tokenize_pairs.h).
//
// As the other modes: lines are read in blocks on the main thread, encoded
// in parallel (a line per task) and written in input order, so the output
// does not depend on the thread count. Dropped pairs are reported after the
// run succeeds, so a bad record stays the one line an error prints.
#include "tokenize_pairs.h"
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include "../data/corpus.h"
#include "../data/pairs.h"

enum { BLOCK_LINES = 1024, BLOCK_BYTES = 8 << 20, MAX_REPORTS = 5 };

typedef enum { LINE_OK, LINE_BAD, LINE_FATAL } LineStatus;

typedef struct {
    CorpusRecord rec;
    PairExample ex;
    LineStatus status;
    int drop;          // PAIR_KEPT or the PairDropReason
    int truncated;
    PtError err;       // why it is bad or dropped
} PairJob;

static void run_job(const PairCoder *c, const PairsOptions *o, PairJob *j) {
    char where[1100];
    corpus_where(&j->rec, where, sizeof where);
    j->status = LINE_OK;
    j->truncated = 0;
    if (j->rec.format != CORPUS_JSONL) {
        pt_fail(&j->err, "%s: --pairs reads .jsonl files of preference pairs, not .txt", where);
        j->status = LINE_FATAL;
    } else if (pair_encode_line(c, j->rec.data, j->rec.len, where, &j->ex, &j->drop, &j->err)) {
        j->status = LINE_BAD;
    } else if (j->drop == PAIR_KEPT) {
        j->drop = pair_fit(&j->ex, o->max_len, o->truncate, where, &j->truncated, &j->err);
    }
}

typedef struct {
    uint64_t dropped[PAIR_DROP_REASONS], n_dropped, truncated, skipped;
    PtError first_skip, reports[MAX_REPORTS];   // the first drops, printed once the run succeeds
} PairCounts;

// A job's outcome into w and n; -1 (e) ends the run.
static int take(const PairsOptions *o, PairJob *j, DatasetWriter *w, PairCounts *n, PtError *e) {
    if (j->status == LINE_FATAL || (j->status == LINE_BAD && !o->skip_bad)) {
        *e = j->err;
        return -1;
    }
    if (j->status == LINE_BAD) {
        if (n->skipped == 0) n->first_skip = j->err;
        if (n->skipped++ < MAX_REPORTS) fprintf(stderr, "pocket tokenize: skipped %s\n", j->err.msg);
    } else if (j->drop != PAIR_KEPT) {
        if (n->n_dropped < MAX_REPORTS) n->reports[n->n_dropped] = j->err;
        n->n_dropped++;
        n->dropped[j->drop]++;
    } else {
        if (pair_write(w, &j->ex, e)) return -1;
        n->truncated += (uint64_t)j->truncated;
    }
    return 0;
}

// "equal 1, prompt_mismatch 0, ..." into buf.
static const char *drop_list(const PairCounts *n, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r < PAIR_DROP_REASONS && at < cap; r++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s %" PRIu64, r ? ", " : "", pair_drop_name(r), n->dropped[r]);
    return buf;
}

// Reads, encodes and writes every line; 0, or -1 with e.
static int run(const PairsOptions *o, const PairCoder *c, Corpus *corpus, DatasetWriter *w, int threads,
               PairCounts *n, PtError *e) {
    PairJob *jobs = xcalloc(BLOCK_LINES, sizeof *jobs, "jobs");
    int rc = 0, more = 1;
    while (more && !rc) {
        int n_jobs = 0, read_failed = 0;
        size_t bytes = 0;
        PtError read_err;
        while (n_jobs < BLOCK_LINES && bytes < BLOCK_BYTES) {
            int got = corpus_next(corpus, &jobs[n_jobs].rec, &read_err);
            if (got <= 0) {
                read_failed = got < 0;
                more = 0;
                break;
            }
            bytes += jobs[n_jobs++].rec.len;
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int i = 0; i < n_jobs; i++) run_job(c, o, &jobs[i]);
        for (int i = 0; i < n_jobs; i++) {
            if (!rc) rc = take(o, &jobs[i], w, n, e);
            free(jobs[i].rec.data);
            jobs[i].rec.data = NULL;
        }
        if (!rc && read_failed) {   // after the lines read before it, in input order
            *e = read_err;
            rc = -1;
        }
    }
    for (int i = 0; i < BLOCK_LINES; i++) pair_example_free(&jobs[i].ex);
    free(jobs);
    if (!rc && dataset_writer_docs(w) == 0) {
        char why[256];
        if (n->skipped && !n->n_dropped)
            pt_fail(e, "every line (%" PRIu64 ") was bad and skipped, so no dataset is written; the first: %s",
                    n->skipped, n->first_skip.msg);
        else
            pt_fail(e, "no pair kept (%" PRIu64 " dropped: %s; %" PRIu64 " skipped), so no dataset is written%s%s",
                    n->n_dropped, drop_list(n, why, sizeof why), n->skipped, n->n_dropped ? "; the first: " : "",
                    n->n_dropped ? n->reports[0].msg : "");
        rc = -1;
    }
    return rc;
}

int tokenize_pairs(const PairsOptions *o, const Tokenizer *tok, const ChatTemplate *tmpl) {
    PtError e;
    Corpus *corpus;
    DatasetWriter *w;
    if (corpus_open(&corpus, o->inputs, o->n_inputs, &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        return 1;
    }
    if (dataset_writer_open(&w, o->out, DATASET_PAIRS, tokenizer_vocab_size(tok), tokenizer_hash(tok), &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        corpus_close(corpus);
        return 1;
    }
    PairCoder c = {tok, tmpl, pair_eos_token(tok, tmpl)};
    int threads = o->threads ? o->threads : omp_get_max_threads();
    double t0 = now_seconds();
    PairCounts *n = xcalloc(1, sizeof *n, "pair counts");
    int rc = run(o, &c, corpus, w, threads, n, &e);
    double mb = corpus_bytes_read(corpus) / 1e6;
    int n_files = corpus_n_files(corpus);
    corpus_close(corpus);
    uint64_t pairs = dataset_writer_docs(w) / 2, tokens = dataset_writer_tokens(w);
    if (!rc) {
        dataset_writer_set_counts(w, 0, n->truncated, n->skipped);
        dataset_writer_set_pair_drops(w, n->dropped);
        rc = dataset_writer_commit(w, &e);
    } else {
        dataset_writer_abort(w);
    }
    if (rc) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        free(n);
        return 1;
    }
    char why[256];
    for (uint64_t i = 0; i < n->n_dropped && i < MAX_REPORTS; i++)
        fprintf(stderr, "pocket tokenize: dropped %s\n", n->reports[i].msg);
    fprintf(stderr, "pocket tokenize: %" PRIu64 " pairs kept (%" PRIu64 " truncated), %" PRIu64 " dropped (%s), %" PRIu64
                    " skipped (bad)\n", pairs, n->truncated, n->n_dropped, drop_list(n, why, sizeof why), n->skipped);
    double dt = now_seconds() - t0;
    printf("pocket tokenize: %s: %" PRIu64 " pairs (%" PRIu64 " documents), %" PRIu64 " tokens from %d file%s (%.2f MB in "
           "%.2f s, %d threads)\n", o->out, pairs, 2 * pairs, tokens, n_files, n_files == 1 ? "" : "s", mb, dt, threads);
    free(n);
    return 0;
}
