// test_tokenize_corpus.c: `pocket tokenize` of a corpus at scale: --dedup's
// count and the documents it keeps, both checked against an independent count
// (the texts sorted, each run of equal texts counted once, its first place in
// the input kept); byte-identical output on 1, 2 and 3 threads over several
// pipeline blocks; the progress line's share and ETA; the duplicate set.
//
// The corpus is made here (seeded): ~9,000 documents over a .jsonl, a
// .jsonl.gz and two .txt files, with repeats planted within and across files,
// near-repeats that must stay (a trailing space), and empty texts (counted as
// empty, never as duplicates). Needs the tokenizer fixture
// tests/fixtures/tok/tokenizer.json and POCKET (the binary).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>
#include <zlib.h>
#include "../cli/tokenize_report.h"
#include "../data/dataset.h"
#include "../data/dedup.h"
#include "test_cli_util.h"

#define TOKENIZER "tests/fixtures/tok/tokenizer.json"

enum { N_JSONL = 6000, N_GZ = 3000, N_DOCS = N_JSONL + N_GZ + 2 };

typedef struct {
    char dir[64];
    char *text[N_DOCS];   // every document of the corpus in input order
    Tokenizer *tok;
} Env;

static const char *WORDS[] = {"the", "corpus", "document", "token", "repeat", "model", "data", "text", "line",
                              "模型", "数据", "文本", "重复", "\"quoted\"", "tab\there", "new\nline", "42", "x"};

// A new random text of 1 to 40 words.
static char *random_text(Rng *r) {
    int n = 1 + (int)(rng_next(r) % 40);
    char *s = xmalloc(n * 16 + 1, "text");
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *w = WORDS[rng_next(r) % (sizeof WORDS / sizeof *WORDS)];
        len += (size_t)sprintf(s + len, "%s%s", i ? " " : "", w);
    }
    return s;
}

// Document i: every fifth a planted repeat of an earlier one, a few of those
// with a trailing space (not a duplicate), a few empty.
static char *make_text(Rng *r, char **earlier, int i) {
    uint64_t kind = rng_next(r) % 100;
    if (i > 0 && kind < 20) return xstrdup(earlier[rng_next(r) % (uint64_t)i]);
    if (i > 0 && kind < 23) {
        const char *base = earlier[rng_next(r) % (uint64_t)i];
        char *s = xmalloc(strlen(base) + 2, "text");
        sprintf(s, "%s ", base);
        return s;
    }
    if (kind == 99) return xstrdup("");
    return random_text(r);
}

static void write_line(FILE *f, gzFile gz, const char *text) {
    json_t *j = json_pack("{s:s}", "text", text);
    char *line = json_dumps(j, JSON_COMPACT);
    if (f) fprintf(f, "%s\n", line);
    else gzprintf(gz, "%s\n", line);
    free(line);
    json_decref(j);
}

static void write_txt(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

// DIR/corpus: a.jsonl, b.jsonl.gz, c.txt (a repeat of a JSON document), d.txt
// (new), in the order the directory walk gives them.
static int setup(void **state) {
    Env *v = xcalloc(1, sizeof *v, "env");
    strcpy(v->dir, "/tmp/pocket-test-corpus-XXXXXX");
    if (!mkdtemp(v->dir)) return -1;
    PtError e;
    if (tokenizer_load_file(&v->tok, TOKENIZER, &e)) return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/corpus", v->dir);
    if (sh("mkdir -p %s", path)) return -1;
    Rng r;
    rng_seed(&r, 77);
    snprintf(path, sizeof path, "%s/corpus/a.jsonl", v->dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < N_JSONL; i++) write_line(f, NULL, v->text[i] = make_text(&r, v->text, i));
    fclose(f);
    snprintf(path, sizeof path, "%s/corpus/b.jsonl.gz", v->dir);
    gzFile gz = gzopen(path, "wb");
    for (int i = N_JSONL; i < N_JSONL + N_GZ; i++) write_line(NULL, gz, v->text[i] = make_text(&r, v->text, i));
    gzclose(gz);
    snprintf(path, sizeof path, "%s/corpus", v->dir);
    v->text[N_DOCS - 2] = xstrdup(v->text[17]);
    v->text[N_DOCS - 1] = xstrdup("a .txt document of its own\n");
    write_txt(path, "c.txt", v->text[N_DOCS - 2]);
    write_txt(path, "d.txt", v->text[N_DOCS - 1]);
    *state = v;
    return 0;
}

static int teardown(void **state) {
    Env *v = *state;
    int rc = sh("rm -rf '%s'", v->dir);
    for (int i = 0; i < N_DOCS; i++) free(v->text[i]);
    tokenizer_free(v->tok);
    free(v);
    return rc ? -1 : 0;
}

// ---- the independent count: sort, then one keeper per run of equal texts

static int by_text_then_place(const void *a, const void *b, void *env) {
    const Env *v = env;
    int i = *(const int *)a, j = *(const int *)b, c = strcmp(v->text[i], v->text[j]);
    return c ? c : (i > j) - (i < j);
}

// keep[i] = 1 for the first place of each distinct non-empty text; returns the
// number of documents that repeat an earlier one, *empty the empty texts.
static int first_places(const Env *v, uint8_t *keep, int *empty) {
    int order[N_DOCS], repeats = 0;
    for (int i = 0; i < N_DOCS; i++) order[i] = i;
    qsort_r(order, N_DOCS, sizeof *order, by_text_then_place, (void *)v);
    *empty = 0;
    memset(keep, 0, N_DOCS);
    for (int k = 0; k < N_DOCS; k++) {
        int i = order[k];
        if (!v->text[i][0]) (*empty)++;
        else if (k > 0 && !strcmp(v->text[i], v->text[order[k - 1]])) repeats++;
        else keep[i] = 1;
    }
    return repeats;
}

static char *run_tokenize(const Env *v, const char *flags, const char *out_name) {
    char out[128], log[128];
    snprintf(out, sizeof out, "%s/%s", v->dir, out_name);
    snprintf(log, sizeof log, "%s/%s.log", v->dir, out_name);
    int rc = sh("%s tokenize --tokenizer " TOKENIZER " %s %s/corpus --out %s >%s 2>&1", pocket(), flags, v->dir, out,
                log);
    uint8_t *text;
    size_t len;
    PtError e;
    if (read_whole_file(log, &text, &len, &e)) fail_msg("%s", e.msg);
    if (rc) fail_msg("pocket tokenize %s failed: %s", flags, (char *)text);
    return (char *)text;
}

// The dataset's documents are the kept texts in input order, each tokenized
// and ended by <|endoftext|>.
static void expect_documents(const Env *v, const char *path, const uint8_t *keep) {
    Dataset ds;
    PtError e;
    if (dataset_open(&ds, path, &e)) fail_msg("%s", e.msg);
    int eot = tokenizer_token_id(v->tok, "<|endoftext|>");
    uint64_t d = 0;
    for (int i = 0; i < N_DOCS; i++) {
        if (!keep[i]) continue;
        int *ids = NULL;
        size_t n = 0, cap = 0;
        assert_int_equal(tokenizer_encode(v->tok, v->text[i], strlen(v->text[i]), &ids, &n, &cap, &e), 0);
        assert_true(d < ds.n_docs);
        assert_int_equal(dataset_doc_len(&ds, d), n + 1);
        for (size_t t = 0; t < n; t++) assert_int_equal(dataset_token(&ds, ds.doc_offsets[d] + t), ids[t]);
        assert_int_equal(dataset_token(&ds, ds.doc_offsets[d] + n), eot);
        free(ids);
        d++;
    }
    assert_int_equal(ds.n_docs, d);
    dataset_close(&ds);
}

static void test_dedup_against_independent_count(void **state) {
    Env *v = *state;
    uint8_t keep[N_DOCS];
    int empty, repeats = first_places(v, keep, &empty);
    assert_true(repeats > 1500);   // the planted ones are there, and the txt file's
    assert_true(empty > 10);
    char *log = run_tokenize(v, "--dedup --threads 2", "dedup.h5"), want[64];
    snprintf(want, sizeof want, "empty %d, duplicates %d\n", empty, repeats);
    if (!strstr(log, want)) fail_msg("want \"%s\" in: %s", want, log);
    free(log);
    char path[128];
    snprintf(path, sizeof path, "%s/dedup.h5", v->dir);
    Dataset ds;
    PtError e;
    if (dataset_open(&ds, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ds.n_duplicates, repeats);
    dataset_close(&ds);
    expect_documents(v, path, keep);

    for (int i = 0; i < N_DOCS; i++) keep[i] = v->text[i][0] != 0;   // without --dedup: every non-empty one
    log = run_tokenize(v, "--threads 2", "all.h5");
    assert_null(strstr(log, "duplicates"));
    free(log);
    snprintf(path, sizeof path, "%s/all.h5", v->dir);
    expect_documents(v, path, keep);
}

// ~9,000 records are three pipeline blocks: the files must not depend on the
// thread count, byte for byte.
static void test_threads_byte_identical(void **state) {
    Env *v = *state;
    const char *flags[] = {"--dedup --threads 1", "--dedup --threads 2", "--dedup --threads 3"};
    const char *outs[] = {"t1.h5", "t2.h5", "t3.h5"};
    for (int i = 0; i < 3; i++) free(run_tokenize(v, flags[i], outs[i]));
    free(run_tokenize(v, "--threads 1", "plain1.h5"));
    free(run_tokenize(v, "--threads 2", "plain2.h5"));
    assert_int_equal(sh("cmp -s %s/t1.h5 %s/t2.h5 && cmp -s %s/t1.h5 %s/t3.h5", v->dir, v->dir, v->dir, v->dir), 0);
    assert_int_equal(sh("cmp -s %s/plain1.h5 %s/plain2.h5", v->dir, v->dir), 0);
    assert_int_not_equal(sh("cmp -s %s/t1.h5 %s/plain1.h5", v->dir, v->dir), 0);   // dedup did drop some
}

static void test_dedup_usage(void **state) {
    Env *v = *state;
    char log[128];
    snprintf(log, sizeof log, "%s/usage.log", v->dir);
    assert_int_equal(sh("%s tokenize --tokenizer " TOKENIZER " --chat --dedup %s/corpus --out %s/x.h5 2>%s",
                        pocket(), v->dir, v->dir, log), 2);
    assert_int_equal(sh("grep -q 'dedup applies to a corpus' %s", log), 0);
    assert_true(no_entry_with_prefix(v->dir, "x.h5"));
}

// The ETA is the time so far scaled by what is left: 25% in 10 s leaves 30 s.
static void test_progress_text(void **state) {
    (void)state;
    char line[256];
    tokenize_progress_text(line, sizeof line, 250.0, 10.0, 0.25, 1234, 56);
    assert_string_equal(line, "250.0 MB read (25%), 25.00 MB/s, ETA 0m30s, 1234 tokens, 56 documents");
    tokenize_progress_text(line, sizeof line, 90.0, 100.0, 0.125, 1, 1);   // 7 eighths left at an eighth per 100 s
    assert_non_null(strstr(line, "(12%)"));
    assert_non_null(strstr(line, "ETA 11m40s"));
    tokenize_progress_text(line, sizeof line, 5.0, 2.0, -1, 0, 0);   // size unknown: no share, no ETA
    assert_string_equal(line, "5.0 MB read, 2.50 MB/s, 0 tokens, 0 documents");
}

// The set against a sorted list of the same hashes: one "new" per distinct
// value, across its growth, the all-zero hash included.
static int by_hash(const void *a, const void *b) {
    const DocHash *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return (x->hi > y->hi) - (x->hi < y->hi);
}

static void test_dedup_set(void **state) {
    (void)state;
    enum { N = 20000 };
    DocHash *h = xmalloc(N * sizeof *h, "hashes");
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < N; i++) {
        uint64_t pick = rng_next(&r) % 10;
        if (i && pick < 3) h[i] = h[rng_next(&r) % (uint64_t)i];
        else if (pick == 3) h[i] = (DocHash){rng_next(&r) % 4, 0};   // small values, zero among them
        else h[i] = (DocHash){rng_next(&r), rng_next(&r)};
    }
    DedupSet s;
    dedup_init(&s);
    int fresh = 0;
    for (int i = 0; i < N; i++) fresh += dedup_add(&s, h[i]);
    for (int i = 0; i < N; i++) assert_int_equal(dedup_add(&s, h[i]), 0);   // all known now
    dedup_free(&s);
    qsort(h, N, sizeof *h, by_hash);
    int distinct = 1;
    for (int i = 1; i < N; i++) distinct += by_hash(&h[i - 1], &h[i]) != 0;
    assert_int_equal(fresh, distinct);
    free(h);
    // Equal bytes, equal hash; one byte more, another.
    DocHash a = doc_hash("same text", 9), b = doc_hash("same text", 9), c = doc_hash("same text ", 10);
    assert_true(a.lo == b.lo && a.hi == b.hi);
    assert_false(a.lo == c.lo && a.hi == c.hi);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dedup_against_independent_count),
        cmocka_unit_test(test_threads_byte_identical),
        cmocka_unit_test(test_dedup_usage),
        cmocka_unit_test(test_progress_text),
        cmocka_unit_test(test_dedup_set),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
