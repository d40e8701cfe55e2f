// tokenize_corpus.c: the corpus path of `pocket tokenize` (tokenize_corpus.h).
//
// A three-stage pipeline over blocks of records: while the threads tokenize
// block k, one of them first writes block k-1 (in input order, dropping
// repeats) and reads block k+1, then joins the others. With one thread the
// same steps run one after the other; the output is the same.
#include "tokenize_corpus.h"
#include <omp.h>
#include <string.h>
#include "../data/corpus.h"
#include "../data/dataset.h"
#include "../data/dedup.h"
#include "tokenize_report.h"

enum { BLOCK_RECORDS = 4096, BLOCK_BYTES = 4 << 20 };

typedef enum { DOC_OK, DOC_EMPTY, DOC_BAD } DocStatus;

// One record and what its worker made of it.
typedef struct {
    CorpusRecord rec;
    int *ids;            // its tokens and <|endoftext|>
    size_t n, cap;
    DocHash hash;        // of the text (--dedup)
    DocStatus status;
    PtError err;
} Doc;

typedef struct {
    Doc *docs;           // BLOCK_RECORDS
    int n;
    int read_failed;     // reading stopped with read_err after these records
    PtError read_err;
    uint64_t bytes_to, input_to;   // where reading stood after the block (progress)
} Block;

typedef struct {
    const CorpusArgs *a;
    const Tokenizer *tok;
    int eot;
    Corpus *corpus;
    DatasetWriter *w;
    DedupSet seen;
    TokenizeCounts n;
    TokenizeProgress progress;
    int more;            // the corpus has records left
    uint64_t bytes_written, input_written;   // the input behind the documents written
    int failed;          // an error stopped the run; e says which
    PtError e;
} Run;

static void read_block(Run *r, Block *b) {
    size_t bytes = 0;
    while (r->more && b->n < BLOCK_RECORDS && bytes < BLOCK_BYTES) {
        int got = corpus_next(r->corpus, &b->docs[b->n].rec, &b->read_err);
        if (got <= 0) {
            b->read_failed = got < 0;
            r->more = 0;
            break;
        }
        bytes += b->docs[b->n++].rec.len;
    }
    b->bytes_to = corpus_bytes_read(r->corpus);
    b->input_to = corpus_input_done(r->corpus);
}

static void tokenize_doc(const Run *r, Doc *d) {
    char *text;
    size_t len;
    d->n = 0;
    d->status = DOC_BAD;
    if (corpus_record_text(&d->rec, &text, &len, &d->err)) return;
    PtError te;
    if (tokenizer_encode(r->tok, text, len, &d->ids, &d->n, &d->cap, &te)) {
        char where[1100];
        pt_fail(&d->err, "%s: %s", corpus_where(&d->rec, where, sizeof where), te.msg);
    } else if (d->n == 0) {
        d->status = DOC_EMPTY;
    } else {
        if (d->n == d->cap) {
            d->cap = 2 * d->cap + 1;
            int *grown = realloc(d->ids, d->cap * sizeof(int));
            if (!grown) die("out of memory growing token ids");
            d->ids = grown;
        }
        d->ids[d->n++] = r->eot;   // documents end with <|endoftext|>
        if (r->a->dedup) d->hash = doc_hash(text, len);
        d->status = DOC_OK;
    }
    free(text);
}

// One document in input order: written, or counted as what was left out; a
// bad record stops the run unless --skip-bad.
static void write_doc(Run *r, const Doc *d) {
    if (d->status == DOC_BAD && !r->a->skip_bad) {
        r->e = d->err;
        r->failed = 1;
    } else if (d->status == DOC_BAD) {
        tokenize_skip(&r->n, &d->err, &r->progress);
    } else if (d->status == DOC_EMPTY) {
        r->n.empty++;
    } else if (r->a->dedup && !dedup_add(&r->seen, d->hash)) {
        r->n.duplicates++;
    } else if (dataset_writer_add(r->w, d->ids, NULL, d->n, &r->e)) {
        r->failed = 1;
    }
}

// Writes the block's documents and empties it; a read error counts after the
// records read before it.
static void write_block(Run *r, Block *b) {
    for (int i = 0; i < b->n; i++) {
        Doc *d = &b->docs[i];
        if (!r->failed) write_doc(r, d);
        free(d->rec.data);
        d->rec.data = NULL;
        free(d->ids);   // not kept: a long document's buffer would stay with its slot
        d->ids = NULL;
        d->n = d->cap = 0;
    }
    if (b->n) {
        r->bytes_written = b->bytes_to;
        r->input_written = b->input_to;
    }
    b->n = 0;
    if (b->read_failed && !r->failed) {
        r->e = b->read_err;
        r->failed = 1;
    }
    b->read_failed = 0;
}

static void run_blocks(Run *r, int threads) {
    Block blocks[3] = {{0}};
    for (int i = 0; i < 3; i++) blocks[i].docs = xcalloc(BLOCK_RECORDS, sizeof(Doc), "documents");
    read_block(r, &blocks[0]);
    for (int k = 0; !r->failed; k++) {
        Block *work = &blocks[k % 3], *done = &blocks[(k + 2) % 3], *next = &blocks[(k + 1) % 3];
        if (!work->n && !work->read_failed && !done->n && !done->read_failed) break;
#pragma omp parallel num_threads(threads)
        {
#pragma omp single nowait
            {
                write_block(r, done);
                if (!r->failed) read_block(r, next);
            }
#pragma omp for schedule(dynamic, 1)
            for (int i = 0; i < work->n; i++) tokenize_doc(r, &work->docs[i]);
        }
        tokenize_progress(&r->progress, r->corpus, r->w, r->bytes_written, r->input_written, 0);
    }
    for (int i = 0; i < 3; i++) {   // what an error left unwritten
        for (int j = 0; j < blocks[i].n; j++) free(blocks[i].docs[j].rec.data), free(blocks[i].docs[j].ids);
        free(blocks[i].docs);
    }
}

int tokenize_corpus(const CorpusArgs *a, const Tokenizer *tok) {
    Run r = {.a = a, .tok = tok, .eot = tokenizer_token_id(tok, "<|endoftext|>"), .more = 1};
    if (r.eot < 0) {
        fprintf(stderr, "pocket tokenize: %s: the tokenizer has no <|endoftext|> token to separate documents\n",
                a->tokenizer);
        return 1;
    }
    if (corpus_open(&r.corpus, a->inputs, a->n_inputs, &r.e)) {
        fprintf(stderr, "pocket tokenize: %s\n", r.e.msg);
        return 1;
    }
    if (dataset_writer_open(&r.w, a->out, DATASET_CPT, tokenizer_vocab_size(tok), tokenizer_hash(tok), &r.e)) {
        fprintf(stderr, "pocket tokenize: %s\n", r.e.msg);
        corpus_close(r.corpus);
        return 1;
    }
    int threads = a->threads ? a->threads : omp_get_max_threads();
    dedup_init(&r.seen);
    tokenize_progress_start(&r.progress);
    run_blocks(&r, threads);
    dedup_free(&r.seen);
    tokenize_progress(&r.progress, r.corpus, r.w, r.bytes_written, r.input_written, 1);
    uint64_t tokens = dataset_writer_tokens(r.w), docs = dataset_writer_docs(r.w);
    if (!r.failed) r.failed = tokenize_finish(&r.n, docs, &r.e) != 0;
    double mb = corpus_bytes_read(r.corpus) / 1e6;
    int n_files = corpus_n_files(r.corpus);
    corpus_close(r.corpus);
    if (!r.failed) {
        dataset_writer_set_counts(r.w, 0, 0, r.n.skipped);
        dataset_writer_set_duplicates(r.w, r.n.duplicates);
        r.failed = dataset_writer_commit(r.w, &r.e) != 0;
    } else {
        dataset_writer_abort(r.w);
    }
    if (r.failed) {
        fprintf(stderr, "pocket tokenize: %s\n", r.e.msg);
        return 1;
    }
    tokenize_summary(a->out, "document", "documents", docs, tokens, n_files, mb, now_seconds() - r.progress.t0,
                     threads, &r.n, a->dedup);
    return 0;
}
