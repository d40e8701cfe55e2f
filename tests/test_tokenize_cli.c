// test_tokenize_cli.c: `pocket tokenize` end to end through the real binary
// ($POCKET): txt / jsonl / gz / directory inputs, the SFT loss mask, limits,
// --print-ids, tokenizers read from checkpoints, and bad inputs (non-zero
// exit, one stderr line naming the place, no output file left behind).
//
// The expected documents come straight from the fixture files (read here
// with jansson); the dataset's documents must decode back to them and hold
// the ids the tokenizer gives for them. Needs the tokenizer fixture written
// by tests/ref/make_tokenizer_fixtures.py (POCKET_TEST_TOKENIZER overrides it).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hdf5.h>
#include <jansson.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include "../data/dataset.h"

#define FIX "tests/fixtures/data"

typedef struct {
    char dir[64];
    const char *pocket, *tok_path;
    Tokenizer *tok;
} Env;

static char *tmp(const Env *v, const char *name) { return path_join(v->dir, name); }

static int setup(void **state) {
    Env *v = xcalloc(1, sizeof *v, "env");
    v->pocket = getenv("POCKET") ? getenv("POCKET") : "./pocket";
    v->tok_path = getenv("POCKET_TEST_TOKENIZER") ? getenv("POCKET_TEST_TOKENIZER") : "tests/fixtures/tok/tokenizer.json";
    strcpy(v->dir, "/tmp/pocket-test-tokenize-XXXXXX");
    if (!mkdtemp(v->dir)) return -1;
    PtError e;
    if (path_exists(v->tok_path) && tokenizer_load_file(&v->tok, v->tok_path, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    *state = v;
    return 0;
}

static int teardown(void **state) {
    Env *v = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", v->dir);
    int rc = system(cmd);
    if (v->tok) tokenizer_free(v->tok);
    free(v);
    return rc ? -1 : 0;
}

#define NEED_TOKENIZER(v)                                                                        \
    do {                                                                                         \
        if (!(v)->tok) {                                                                         \
            fprintf(stderr, "skipped: no tokenizer fixture at %s\n", (v)->tok_path);             \
            skip();                                                                              \
        }                                                                                        \
    } while (0)

// Runs `$POCKET tokenize --tokenizer TOK ARGS`; returns the exit status and
// stdout/stderr (malloc'd) when asked.
static int run_tokenize(const Env *v, const char *tok, const char *args, char **out, char **err) {
    char *out_path = tmp(v, "stdout.txt"), *err_path = tmp(v, "stderr.txt");
    size_t n = strlen(args) + 1024;
    char *cmd = xmalloc(n, "command");
    snprintf(cmd, n, "%s tokenize --tokenizer %s %s >%s 2>%s", v->pocket, tok ? tok : v->tok_path, args, out_path,
             err_path);
    int status = system(cmd);
    uint8_t *data;
    size_t len;
    PtError e;
    if (out) *out = read_whole_file(out_path, &data, &len, &e) ? xstrdup("") : (char *)data;
    if (err) *err = read_whole_file(err_path, &data, &len, &e) ? xstrdup("") : (char *)data;
    free(cmd);
    free(out_path);
    free(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static char *read_text(const char *path) {
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file(path, &data, &len, &e)) fail_msg("%s", e.msg);
    return (char *)data;
}

// Expected documents: whole .txt files and the "text" of each JSONL line.
typedef struct { char *text[16]; int n; } Docs;

static void add_txt(Docs *d, const char *path) { d->text[d->n++] = read_text(path); }

static void add_jsonl(Docs *d, const char *path) {
    char *all = read_text(path), *save = NULL;
    for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        if (!j) fail_msg("%s: %s", path, je.text);
        d->text[d->n++] = xstrdup(json_string_value(json_object_get(j, "text")));
        json_decref(j);
    }
    free(all);
}

static void free_docs(Docs *d) {
    for (int i = 0; i < d->n; i++) free(d->text[i]);
}

static void open_ok(Dataset *ds, const char *path) {
    PtError e;
    if (dataset_open(ds, path, &e)) fail_msg("%s", e.msg);
}

// The dataset's documents are the expected texts, each tokenized and closed by <|endoftext|>.
static void check_cpt(const Env *v, const char *path, const Docs *want) {
    Dataset ds;
    open_ok(&ds, path);
    assert_int_equal(ds.kind, DATASET_CPT);
    assert_string_equal(ds.tokenizer_hash, tokenizer_hash(v->tok));
    assert_int_equal(ds.vocab_size, tokenizer_vocab_size(v->tok));
    assert_int_equal(ds.n_docs, want->n);
    int eot = tokenizer_token_id(v->tok, "<|endoftext|>");
    for (int d = 0; d < want->n; d++) {
        int *ids = NULL;
        size_t n = 0, cap = 0;
        PtError e;
        assert_int_equal(tokenizer_encode(v->tok, want->text[d], strlen(want->text[d]), &ids, &n, &cap, &e), 0);
        uint64_t off = ds.doc_offsets[d];
        assert_int_equal(dataset_doc_len(&ds, d), n + 1);
        int *got = xmalloc((n + 1) * sizeof(int), "ids");
        for (size_t i = 0; i <= n; i++) got[i] = (int)dataset_token(&ds, off + i);
        assert_memory_equal(got, ids, n * sizeof(int));
        assert_int_equal(got[n], eot);
        char *text = tokenizer_decode(v->tok, got, n, 0);
        assert_string_equal(text, want->text[d]);
        free(text);
        free(got);
        free(ids);
    }
    dataset_close(&ds);
}

static void test_directory_input(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *out = tmp(v, "dir.h5"), args[512], *so;
    snprintf(args, sizeof args, FIX "/corpus --out %s", out);
    assert_int_equal(run_tokenize(v, NULL, args, &so, NULL), 0);
    assert_non_null(strstr(so, "5 documents"));   // the summary line
    free(so);
    Docs want = {0};   // sorted walk: 01_intro.txt, 02_mixed.jsonl, nested/03_code.txt; notes.md ignored
    add_txt(&want, FIX "/corpus/01_intro.txt");
    add_jsonl(&want, FIX "/corpus/02_mixed.jsonl");
    add_txt(&want, FIX "/corpus/nested/03_code.txt");
    check_cpt(v, out, &want);
    free_docs(&want);
    free(out);
}

// Explicit files keep the command-line order.
static void test_file_inputs_in_order(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *out = tmp(v, "files.h5"), args[512];
    snprintf(args, sizeof args, FIX "/corpus/nested/03_code.txt " FIX "/corpus/02_mixed.jsonl --out %s", out);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    Docs want = {0};
    add_txt(&want, FIX "/corpus/nested/03_code.txt");
    add_jsonl(&want, FIX "/corpus/02_mixed.jsonl");
    check_cpt(v, out, &want);
    free_docs(&want);
    free(out);
}

static void gzip_file(const char *src, const char *dst, size_t keep_bytes) {
    char *text = read_text(src);
    gzFile gz = gzopen(dst, "wb");
    gzwrite(gz, text, (unsigned)strlen(text));
    gzclose(gz);
    free(text);
    if (keep_bytes) assert_int_equal(truncate(dst, (off_t)keep_bytes), 0);
}

static void test_gzip_inputs(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *gz_txt = tmp(v, "intro.txt.gz"), *gz_jsonl = tmp(v, "mixed.jsonl.gz"), *out = tmp(v, "gz.h5"), args[1024];
    gzip_file(FIX "/corpus/01_intro.txt", gz_txt, 0);
    gzip_file(FIX "/corpus/02_mixed.jsonl", gz_jsonl, 0);
    snprintf(args, sizeof args, "%s %s --out %s", gz_txt, gz_jsonl, out);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    Docs want = {0};
    add_txt(&want, FIX "/corpus/01_intro.txt");
    add_jsonl(&want, FIX "/corpus/02_mixed.jsonl");
    check_cpt(v, out, &want);
    free_docs(&want);
    free(gz_txt);
    free(gz_jsonl);
    free(out);
}

// The output does not depend on the number of threads.
static void test_threads_deterministic(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *one = tmp(v, "t1.h5"), *two = tmp(v, "t2.h5"), args[512];
    snprintf(args, sizeof args, "--threads 1 " FIX "/corpus " FIX "/corpus --out %s", one);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    snprintf(args, sizeof args, "--threads 2 " FIX "/corpus " FIX "/corpus --out %s", two);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    Dataset a, b;
    open_ok(&a, one);
    open_ok(&b, two);
    assert_int_equal(a.n_tokens, b.n_tokens);
    assert_int_equal(a.n_docs, 10);
    assert_memory_equal(a.tokens, b.tokens, a.n_tokens * a.token_bytes);
    assert_memory_equal(a.doc_offsets, b.doc_offsets, (a.n_docs + 1) * sizeof(uint64_t));
    dataset_close(&a);
    dataset_close(&b);
    uint8_t *bytes_one, *bytes_two;   // no timestamps inside: the files are identical byte for byte
    size_t len_one, len_two;
    PtError e;
    assert_int_equal(read_whole_file(one, &bytes_one, &len_one, &e), 0);
    assert_int_equal(read_whole_file(two, &bytes_two, &len_two, &e), 0);
    assert_int_equal(len_one, len_two);
    assert_memory_equal(bytes_one, bytes_two, len_one);
    free(bytes_one);
    free(bytes_two);
    free(one);
    free(two);
}

// Assistant replies of each chat.jsonl line, in order, each + "<|im_end|>".
typedef struct { char *reply[8]; int n; } Replies;

static int read_replies(Replies *r, int max) {
    char *all = read_text(FIX "/chat.jsonl"), *save = NULL;
    int lines = 0;
    for (char *line = strtok_r(all, "\n", &save); line && lines < max; line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *msgs = json_object_get(j, "messages");
        Replies *x = &r[lines++];
        x->n = 0;
        if (!msgs) {
            x->reply[x->n++] = xstrdup(json_string_value(json_object_get(j, "completion")));
        } else {
            for (size_t i = 0; i < json_array_size(msgs); i++) {
                json_t *m = json_array_get(msgs, i);
                if (strcmp(json_string_value(json_object_get(m, "role")), "assistant")) continue;
                x->reply[x->n++] = xstrdup(json_string_value(json_object_get(m, "content")));
            }
        }
        json_decref(j);
    }
    free(all);
    return lines;
}

// Every maximal run of mask-1 tokens decodes to one assistant reply plus
// <|im_end|>, in order; nothing else is masked in.
static void test_sft_mask_covers_replies(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *out = tmp(v, "sft.h5"), args[512];
    snprintf(args, sizeof args, "--chat " FIX "/chat.jsonl --out %s", out);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    Replies want[8];
    int n_lines = read_replies(want, 8);
    Dataset ds;
    open_ok(&ds, out);
    assert_int_equal(ds.kind, DATASET_SFT);
    assert_int_equal(ds.n_docs, n_lines);
    for (int d = 0; d < n_lines; d++) {
        uint64_t a = ds.doc_offsets[d], b = ds.doc_offsets[d + 1];
        int run = 0;
        for (uint64_t i = a; i < b;) {
            if (!ds.loss_mask[i]) { i++; continue; }
            uint64_t j = i;
            int ids[4096], n = 0;
            while (j < b && ds.loss_mask[j]) ids[n++] = (int)dataset_token(&ds, j++);
            char *text = tokenizer_decode(v->tok, ids, n, 0);
            assert_true(run < want[d].n);
            size_t len = strlen(want[d].reply[run]) + 16;
            char *expect = xmalloc(len, "expect");
            snprintf(expect, len, "%s<|im_end|>", want[d].reply[run]);
            if (strcmp(text, expect)) fail_msg("example %d run %d: [%s] != [%s]", d, run, text, expect);
            free(expect);
            free(text);
            run++;
            i = j;
        }
        assert_int_equal(run, want[d].n);
        for (int k = 0; k < want[d].n; k++) free(want[d].reply[k]);
    }
    dataset_close(&ds);
    free(out);
}

static void test_max_len_drop_and_truncate(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *full = tmp(v, "full.h5"), *dropped = tmp(v, "drop.h5"), *cut = tmp(v, "cut.h5"), args[512];
    snprintf(args, sizeof args, "--chat " FIX "/chat.jsonl --out %s", full);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    Dataset f, ds;
    open_ok(&f, full);
    // A limit between the shortest and the longest example.
    uint64_t lo = UINT64_MAX, hi = 0, limit, longer = 0;
    for (uint64_t d = 0; d < f.n_docs; d++) {
        uint64_t n = dataset_doc_len(&f, d);
        lo = n < lo ? n : lo;
        hi = n > hi ? n : hi;
    }
    limit = (lo + hi) / 2;
    for (uint64_t d = 0; d < f.n_docs; d++) longer += dataset_doc_len(&f, d) > limit;
    assert_true(longer > 0 && longer < f.n_docs);
    snprintf(args, sizeof args, "--chat --max-len %llu " FIX "/chat.jsonl --out %s", (unsigned long long)limit, dropped);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    open_ok(&ds, dropped);
    assert_int_equal(ds.n_docs, f.n_docs - longer);
    assert_int_equal(ds.n_dropped, longer);
    dataset_close(&ds);
    snprintf(args, sizeof args, "--chat --max-len %llu --truncate " FIX "/chat.jsonl --out %s",
             (unsigned long long)limit, cut);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    open_ok(&ds, cut);
    assert_int_equal(ds.n_docs + ds.n_dropped, f.n_docs);
    assert_int_equal(ds.n_truncated + ds.n_dropped, longer);
    for (uint64_t d = 0, k = 0; d < f.n_docs; d++) {   // kept examples: a prefix of the full one
        uint64_t n = dataset_doc_len(&f, d);
        if (n > limit && !memchr(f.loss_mask + f.doc_offsets[d], 1, limit)) continue;   // dropped: nothing to train
        uint64_t m = dataset_doc_len(&ds, k);
        assert_int_equal(m, n > limit ? limit : n);
        for (uint64_t i = 0; i < m; i++) {
            assert_int_equal(dataset_token(&ds, ds.doc_offsets[k] + i), dataset_token(&f, f.doc_offsets[d] + i));
            assert_int_equal(ds.loss_mask[ds.doc_offsets[k] + i], f.loss_mask[f.doc_offsets[d] + i]);
        }
        k++;
    }
    dataset_close(&ds);
    dataset_close(&f);
    free(full);
    free(dropped);
    free(cut);
}

static void test_print_ids_and_checkpoint_tokenizer(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    const char *file = FIX "/corpus/01_intro.txt";
    char *text = read_text(file), *so, args[512];
    int *ids = NULL;
    size_t n = 0, cap = 0;
    PtError e;
    assert_int_equal(tokenizer_encode(v->tok, text, strlen(text), &ids, &n, &cap, &e), 0);
    size_t len = n * 12 + 2, k = 0;
    char *expect = xmalloc(len, "expect");
    for (size_t i = 0; i < n; i++) k += snprintf(expect + k, len - k, i ? " %d" : "%d", ids[i]);
    snprintf(expect + k, len - k, "\n");
    snprintf(args, sizeof args, "--print-ids %s", file);
    assert_int_equal(run_tokenize(v, NULL, args, &so, NULL), 0);
    assert_string_equal(so, expect);
    free(so);
    // The same through a checkpoint holding tokenizer.json: as bytes and as a string.
    char *json = read_text(v->tok_path);
    for (int as_string = 0; as_string < 2; as_string++) {
        char *ckpt = tmp(v, as_string ? "ckpt_str.h5" : "ckpt_u8.h5");
        hid_t f = H5Fcreate(ckpt, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t g = H5Gcreate2(f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t nb = strlen(json);
        hid_t type = H5T_STD_U8LE, sp;
        if (as_string) {
            type = H5Tcopy(H5T_C_S1);
            H5Tset_size(type, H5T_VARIABLE);
            sp = H5Screate(H5S_SCALAR);
        } else sp = H5Screate_simple(1, &nb, NULL);
        hid_t ds = H5Dcreate2(g, "tokenizer.json", type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (as_string) H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &json);
        else H5Dwrite(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, json);
        H5Dclose(ds);
        H5Sclose(sp);
        if (as_string) H5Tclose(type);
        H5Gclose(g);
        H5Fclose(f);
        assert_int_equal(run_tokenize(v, ckpt, args, &so, NULL), 0);
        assert_string_equal(so, expect);
        free(so);
        free(ckpt);
    }
    free(json);
    free(expect);
    free(ids);
    free(text);
}

// A failing run: non-zero exit, exactly one stderr line holding `needle`,
// and neither OUT nor a temp file of it.
static void expect_failure(const Env *v, const char *inputs, const char *flags, const char *needle) {
    char *out = tmp(v, "fail.h5"), args[1024], *err;
    snprintf(args, sizeof args, "%s %s --out %s", flags, inputs, out);
    int rc = run_tokenize(v, NULL, args, NULL, &err);
    if (rc == 0) fail_msg("'%s' succeeded", args);
    char *nl = strchr(err, '\n');
    if (!nl || nl[1] != 0) fail_msg("stderr is not one line: [%s]", err);
    if (!strstr(err, needle)) fail_msg("stderr lacks '%s': %s", needle, err);
    if (strncmp(err, "pocket tokenize: ", 17)) fail_msg("stderr does not start with the command: %s", err);
    assert_false(path_exists(out));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q 'fail.h5.tmp'", v->dir);
    assert_int_not_equal(system(cmd), 0);
    free(err);
    free(out);
}

static void test_bad_inputs(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    expect_failure(v, FIX "/bad/malformed.jsonl", "--chat", "malformed.jsonl:2: malformed JSON");
    expect_failure(v, FIX "/bad/no_messages.jsonl", "--chat", "no_messages.jsonl:1: no \"messages\"");
    expect_failure(v, FIX "/bad/unknown_role.jsonl", "--chat", "unknown_role.jsonl:2: message 1: unknown role \"bot\"");
    expect_failure(v, FIX "/bad/empty_assistant.jsonl", "--chat", "empty_assistant.jsonl:1: message 1: empty assistant");
    expect_failure(v, FIX "/bad/system_late.jsonl", "--chat", "system_late.jsonl:1: ");
    expect_failure(v, FIX "/bad/reply_newline.jsonl", "--chat", "reply_newline.jsonl:1: token 14 (\"\\n\\n\") joins the chat template's text and message 1's reply");
    expect_failure(v, FIX "/bad/malformed_text.jsonl", "", "malformed_text.jsonl:3: malformed JSON");
    expect_failure(v, FIX "/corpus/01_intro.txt", "--chat", "--chat reads chat .jsonl");
    expect_failure(v, FIX "/corpus/notes.md", "", "unknown input type");
    expect_failure(v, FIX "/no/such/file.txt", "", "no such file");

    char *bad_utf8 = tmp(v, "bad_utf8.txt"), *gz = tmp(v, "cut.txt.gz"), *big = tmp(v, "big.txt");
    FILE *f = fopen(bad_utf8, "wb");
    fputs("valid text, then \xff a bad byte", f);   // offset 17
    fclose(f);
    expect_failure(v, bad_utf8, "", "bad_utf8.txt: invalid UTF-8 at byte offset 17");
    char *bad_line = tmp(v, "bad_utf8.jsonl"), *fake_gz = tmp(v, "plain.txt.gz");
    f = fopen(bad_line, "wb");
    fputs("{\"text\": \"fine\"}\n{\"text\": \"bad \xc3\x28 sequence\"}\n", f);
    fclose(f);
    expect_failure(v, bad_line, "", "bad_utf8.jsonl:2: invalid UTF-8");
    f = fopen(fake_gz, "wb");
    fputs("plain text under a .gz name\n", f);
    fclose(f);
    expect_failure(v, fake_gz, "", "plain.txt.gz: not gzip-compressed");
    free(bad_line);
    free(fake_gz);
    // A truncated .gz: big enough that the cut lands inside the deflate stream.
    f = fopen(big, "wb");
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 20000; i++) fprintf(f, "word%llu ", (unsigned long long)(rng_next(&r) % 100000));
    fclose(f);
    gzip_file(big, gz, 20000);
    expect_failure(v, gz, "", "cut.txt.gz: truncated");
    free(bad_utf8);
    free(gz);
    free(big);
}

// The dataset at path holds docs documents and says skipped were skipped.
static void expect_skipped(const char *path, uint64_t skipped, uint64_t docs) {
    Dataset ds;
    open_ok(&ds, path);
    assert_int_equal(ds.n_skipped, skipped);
    assert_int_equal(ds.n_docs, docs);
    dataset_close(&ds);
}

static void test_skip_bad_counts(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *out = tmp(v, "skip.h5"), args[512], *err;
    snprintf(args, sizeof args, "--chat --skip-bad " FIX "/bad/malformed.jsonl " FIX "/bad/unknown_role.jsonl --out %s",
             out);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, &err), 0);
    assert_non_null(strstr(err, "malformed.jsonl:2"));   // each skip is reported
    assert_non_null(strstr(err, "unknown_role.jsonl:2"));
    free(err);
    expect_skipped(out, 2, 3);
    free(out);
}

static void test_usage_errors(void **state) {
    Env *v = *state;
    char *so, *err;
    assert_int_equal(run_tokenize(v, NULL, "--help", &so, NULL), 0);
    assert_non_null(strstr(so, "usage: pocket tokenize"));
    free(so);
    assert_int_equal(run_tokenize(v, NULL, FIX "/corpus", NULL, &err), 2);   // no --out
    assert_non_null(strstr(err, "--out"));
    free(err);
    assert_int_equal(run_tokenize(v, NULL, "--max-len 5 " FIX "/corpus --out x.h5", NULL, &err), 2);
    free(err);
    assert_false(path_exists("x.h5"));
}

#define FMT FIX "/formats/"

// Two datasets hold the same tokens, documents and loss masks.
static void expect_same_datasets(const char *a_path, const char *b_path) {
    Dataset a, b;
    open_ok(&a, a_path);
    open_ok(&b, b_path);
    assert_int_equal(a.kind, DATASET_SFT);
    assert_int_equal(b.kind, DATASET_SFT);
    assert_true(a.n_docs >= 3);
    assert_int_equal(a.n_docs, b.n_docs);
    assert_memory_equal(a.doc_offsets, b.doc_offsets, (a.n_docs + 1) * sizeof *a.doc_offsets);
    uint64_t n = a.doc_offsets[a.n_docs];
    for (uint64_t i = 0; i < n; i++) assert_int_equal(dataset_token(&a, i), dataset_token(&b, i));
    assert_memory_equal(a.loss_mask, b.loss_mask, n);
    dataset_close(&a);
    dataset_close(&b);
}

// `tokenize --chat FLAGS INPUTS` and `tokenize --chat OPENAI` write the same dataset.
static void expect_same_as_openai(const Env *v, const char *flags, const char *inputs, const char *openai) {
    char *a = tmp(v, "format.h5"), *b = tmp(v, "openai.h5"), args[1024], *err;
    snprintf(args, sizeof args, "--chat %s %s --out %s", flags, inputs, a);
    if (run_tokenize(v, NULL, args, NULL, &err)) fail_msg("%s: %s", args, err);
    free(err);
    snprintf(args, sizeof args, "--chat %s --out %s", openai, b);
    assert_int_equal(run_tokenize(v, NULL, args, NULL, NULL), 0);
    expect_same_datasets(a, b);
    free(a);
    free(b);
}

// Each format, found per file in one run, gives what its OpenAI-messages
// equivalent gives; --format and the column flags do the same for files
// their names do not describe.
static void test_sft_formats_end_to_end(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    expect_same_as_openai(v, "", FMT "sharegpt.jsonl", FMT "sharegpt.openai.jsonl");
    expect_same_as_openai(v, "", FMT "alpaca.jsonl", FMT "alpaca.openai.jsonl");
    expect_same_as_openai(v, "", FMT "table.csv", FMT "table.openai.jsonl");
    expect_same_as_openai(v, "", FMT "table.tsv", FMT "table.tsv.openai.jsonl");
    expect_same_as_openai(v, "--threads 1", FMT "sharegpt.jsonl " FMT "alpaca.jsonl " FMT "table.csv " FMT "table.tsv",
                          FMT "sharegpt.openai.jsonl " FMT "alpaca.openai.jsonl " FMT "table.openai.jsonl "
                          FMT "table.tsv.openai.jsonl");
    expect_same_as_openai(v, "--prompt-column question --completion-column answer", FMT "named.csv",
                          FMT "named.openai.jsonl");
    char *txt = tmp(v, "export.txt"), *gz = tmp(v, "table.csv.gz"), flags[700];
    snprintf(flags, sizeof flags, "cp " FMT "table.tsv %s", txt);
    assert_int_equal(system(flags), 0);
    expect_same_as_openai(v, "--format tsv", txt, FMT "table.tsv.openai.jsonl");
    gzip_file(FMT "table.csv", gz, 0);
    expect_same_as_openai(v, "", gz, FMT "table.openai.jsonl");   // .csv.gz: a table by its name
    expect_same_as_openai(v, "--format alpaca", FMT "alpaca.jsonl", FMT "alpaca.openai.jsonl");
    // A directory gives its tables too, in name order.
    char *dir = tmp(v, "sft_dir");
    snprintf(flags, sizeof flags, "mkdir %s && cp " FMT "table.tsv " FMT "alpaca.jsonl %s/", dir, dir);
    assert_int_equal(system(flags), 0);
    expect_same_as_openai(v, "", dir, FMT "alpaca.openai.jsonl " FMT "table.tsv.openai.jsonl");
    free(dir);
    free(txt);
    free(gz);
}

static void test_sft_format_bad_inputs(void **state) {
    Env *v = *state;
    char *help;
    assert_int_equal(run_tokenize(v, NULL, "--help", &help, NULL), 0);
    const char *listed[] = {"openai", "sharegpt", "alpaca", "csv, tsv", "--format F", "--prompt-column C",
                            "--completion-column C", "--system-column C", "--skip-bad"};
    for (int i = 0; i < 9; i++)
        if (!strstr(help, listed[i])) fail_msg("--help does not list %s", listed[i]);
    free(help);
    NEED_TOKENIZER(v);
    expect_failure(v, FIX "/bad/table_no_column.csv", "--chat",
                   "table_no_column.csv:2: the header (line 1) has no column \"prompt\" "
                   "(it has \"question\", \"answer\")");
    expect_failure(v, FIX "/bad/table_no_column.csv", "--chat --prompt-column question --completion-column reply",
                   "table_no_column.csv:2: the header (line 1) has no column \"reply\"");
    expect_failure(v, FIX "/bad/sharegpt_role.jsonl", "--chat", "sharegpt_role.jsonl:2: turn 1: unknown role \"bot\"");
    expect_failure(v, FIX "/bad/alpaca_no_output.jsonl", "--chat", "alpaca_no_output.jsonl:2: no \"output\" string");
    expect_failure(v, FIX "/bad/mixed_formats.jsonl", "--chat",
                   "mixed_formats.jsonl:2: a sharegpt record in a file of alpaca records (from line 1)");
    expect_failure(v, FIX "/bad/no_messages.jsonl", "--chat", "no_messages.jsonl:1: no \"messages\"");
    expect_failure(v, FIX "/bad/table_bad_quote.csv", "--chat",
                   "table_bad_quote.csv:4: field 2: text after its closing quote");
    expect_failure(v, FIX "/bad/table_fields.csv", "--chat", "table_fields.csv:2: the row has 3 fields, the header");
    expect_failure(v, FIX "/bad/malformed.jsonl", "--chat --format sharegpt", "malformed.jsonl:1: \"conversations\"");
    expect_failure(v, FMT "table.csv", "--chat --format alpaca", "table.csv:2: --format alpaca reads JSON lines");
    expect_failure(v, FMT "table.csv", "", "table.csv: a table of prompts and completions is SFT data");
    char *bad = tmp(v, "bad_utf8.csv");
    FILE *f = fopen(bad, "wb");
    fputs("prompt,completion\nHi,Hello!\n\"Two\nlines\",ok \xe2\x28\xa1\n", f);   // the bad row starts on line 3
    fclose(f);
    expect_failure(v, bad, "--chat", "bad_utf8.csv:3: invalid UTF-8 at byte 15 of the row");
    free(bad);
    char *err;
    assert_int_equal(run_tokenize(v, NULL, "--chat --format yaml " FMT "table.csv --out x.h5", NULL, &err), 2);
    assert_non_null(strstr(err, "--format 'yaml' (want openai, sharegpt, alpaca, csv or tsv)"));
    free(err);
    assert_int_equal(run_tokenize(v, NULL, "--prompt-column q " FMT "table.csv --out x.h5", NULL, &err), 2);
    assert_non_null(strstr(err, "apply to --chat only"));
    free(err);
    assert_int_equal(run_tokenize(v, NULL, "--chat --format sharegpt --prompt-column q " FMT "table.csv --out x.h5",
                                  NULL, &err), 2);
    free(err);
    assert_false(path_exists("x.h5"));
}

// --skip-bad skips each bad record of any format, prints the count and stores it.
static void test_sft_format_skip_bad(void **state) {
    Env *v = *state;
    NEED_TOKENIZER(v);
    char *out = tmp(v, "skip_formats.h5"), args[1024], *so, *err;
    snprintf(args, sizeof args, "--chat --skip-bad " FIX "/bad/sharegpt_role.jsonl " FIX "/bad/alpaca_no_output.jsonl "
             FIX "/bad/mixed_formats.jsonl " FIX "/bad/table_fields.csv --out %s", out);
    assert_int_equal(run_tokenize(v, NULL, args, &so, &err), 0);
    const char *where[] = {"sharegpt_role.jsonl:2", "alpaca_no_output.jsonl:2", "mixed_formats.jsonl:2",
                           "table_fields.csv:2"};
    for (int i = 0; i < 4; i++)
        if (!strstr(err, where[i])) fail_msg("stderr does not report %s: %s", where[i], err);
    assert_non_null(strstr(so, "skipped 4,"));
    expect_skipped(out, 4, 5);
    free(so);
    free(err);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_directory_input),
        cmocka_unit_test(test_file_inputs_in_order),
        cmocka_unit_test(test_gzip_inputs),
        cmocka_unit_test(test_threads_deterministic),
        cmocka_unit_test(test_sft_mask_covers_replies),
        cmocka_unit_test(test_max_len_drop_and_truncate),
        cmocka_unit_test(test_print_ids_and_checkpoint_tokenizer),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_skip_bad_counts),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_sft_formats_end_to_end),
        cmocka_unit_test(test_sft_format_bad_inputs),
        cmocka_unit_test(test_sft_format_skip_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
