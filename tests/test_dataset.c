// test_dataset.c: HDF5 token datasets: write -> read round trips (uint16 and
// uint32 storage, across chunk boundaries), the reader's validation of
// corrupt, truncated and hand-made bad files, the tokenizer-hash check and
// inspect's output.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hdf5.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"

#define HASH_A "1111111111111111111111111111111111111111111111111111111111111111"
#define HASH_B "2222222222222222222222222222222222222222222222222222222222222222"

typedef struct { char dir[64]; } TmpDir;

static char *tmp_file(const TmpDir *t, const char *name) { return path_join(t->dir, name); }

static int setup(void **state) {
    TmpDir *t = xmalloc(sizeof *t, "tmpdir");
    strcpy(t->dir, "/tmp/pocket-test-dataset-XXXXXX");
    if (!mkdtemp(t->dir)) return -1;
    *state = t;
    return 0;
}

static int teardown(void **state) {
    TmpDir *t = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    if (system(cmd) != 0) return -1;
    free(t);
    return 0;
}

// No "PATH.tmp.*" sibling may survive a write, good or failed.
static void assert_no_temp_files(const TmpDir *t) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q '\\.tmp\\.'", t->dir);
    assert_int_not_equal(system(cmd), 0);
}

// Documents with pseudo-random lengths and ids, written then read back.
static void round_trip(const TmpDir *t, DatasetKind kind, int vocab, int n_docs, int max_len) {
    char *path = tmp_file(t, kind == DATASET_SFT ? "sft.h5" : "cpt.h5");
    Rng r;
    rng_seed(&r, 42 + vocab);
    int *lens = xmalloc(n_docs * sizeof(int), "lens");
    size_t total = 0;
    for (int d = 0; d < n_docs; d++) total += lens[d] = 1 + (int)(rng_next(&r) % max_len);
    int *ids = xmalloc(total * sizeof(int), "ids");
    uint8_t *mask = xmalloc(total, "mask");
    for (size_t i = 0; i < total; i++) {
        ids[i] = (int)(rng_next(&r) % vocab);
        mask[i] = rng_next(&r) & 1;
    }
    ids[0] = vocab - 1;   // the largest id survives the narrow storage
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, kind, vocab, HASH_A, &e), 0);
    size_t at = 0;
    for (int d = 0; d < n_docs; d++) {
        assert_int_equal(dataset_writer_add(w, ids + at, mask + at, lens[d], &e), 0);
        at += lens[d];
    }
    dataset_writer_set_counts(w, 3, 2, 1);
    assert_false(path_exists(path));   // only the temp file exists until commit
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    assert_no_temp_files(t);

    Dataset ds;
    if (dataset_open(&ds, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ds.kind, kind);
    assert_string_equal(ds.tokenizer_hash, HASH_A);
    assert_int_equal(ds.vocab_size, vocab);
    assert_int_equal(ds.token_bytes, vocab <= 65536 ? 2 : 4);
    assert_int_equal(ds.n_tokens, total);
    assert_int_equal(ds.n_docs, n_docs);
    assert_int_equal(ds.n_dropped, 3);
    assert_int_equal(ds.n_truncated, 2);
    assert_int_equal(ds.n_skipped, 1);
    at = 0;
    for (int d = 0; d < n_docs; d++) {
        assert_int_equal(ds.doc_offsets[d], at);
        assert_int_equal(dataset_doc_len(&ds, d), lens[d]);
        at += lens[d];
    }
    assert_int_equal(ds.doc_offsets[n_docs], total);
    for (size_t i = 0; i < total; i++) {
        if (dataset_token(&ds, i) != (uint32_t)ids[i]) fail_msg("token %zu: %u != %d", i, dataset_token(&ds, i), ids[i]);
        if (kind == DATASET_SFT && ds.loss_mask[i] != mask[i]) fail_msg("mask %zu differs", i);
    }
    if (kind == DATASET_CPT) assert_null(ds.loss_mask);
    dataset_close(&ds);
    free(ids);
    free(mask);
    free(lens);
    free(path);
}

// 20000 documents: more than one chunk of offsets (16384) and of tokens (65536).
static void test_round_trip_cpt_uint16(void **state) { round_trip(*state, DATASET_CPT, 65536, 20000, 12); }
static void test_round_trip_sft_uint32(void **state) { round_trip(*state, DATASET_SFT, 151936, 3000, 60); }

static void test_writer_rejects_bad_ids_and_abort_leaves_nothing(void **state) {
    TmpDir *t = *state;
    char *path = tmp_file(t, "bad.h5");
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, DATASET_CPT, 100, HASH_A, &e), 0);
    int ok[] = {1, 2, 99}, bad[] = {5, 100};
    assert_int_equal(dataset_writer_add(w, ok, NULL, 3, &e), 0);
    assert_int_equal(dataset_writer_add(w, bad, NULL, 2, &e), -1);
    assert_non_null(strstr(e.msg, "100"));
    assert_non_null(strstr(e.msg, path));
    dataset_writer_abort(w);
    assert_false(path_exists(path));
    assert_no_temp_files(t);
    // SFT documents need a mask.
    assert_int_equal(dataset_writer_open(&w, path, DATASET_SFT, 100, HASH_A, &e), 0);
    assert_int_equal(dataset_writer_add(w, ok, NULL, 3, &e), -1);
    dataset_writer_abort(w);
    assert_false(path_exists(path));
    free(path);
}

static void write_small(const char *path, DatasetKind kind) {
    PtError e;
    DatasetWriter *w;
    int ids[] = {10, 11, 12, 13, 14, 15, 16};
    uint8_t mask[] = {0, 0, 1, 1, 0, 1, 1};
    assert_int_equal(dataset_writer_open(&w, path, kind, 1000, HASH_A, &e), 0);
    assert_int_equal(dataset_writer_add(w, ids, mask, 5, &e), 0);
    assert_int_equal(dataset_writer_add(w, ids + 5, mask + 5, 2, &e), 0);
    assert_int_equal(dataset_writer_commit(w, &e), 0);
}

static void expect_open_error(const char *path, const char *needle) {
    Dataset ds;
    PtError e;
    assert_int_equal(dataset_open(&ds, path, &e), -1);
    if (!strstr(e.msg, path)) fail_msg("error does not name the file: %s", e.msg);
    if (needle && !strstr(e.msg, needle)) fail_msg("error lacks '%s': %s", needle, e.msg);
    assert_null(strchr(e.msg, '\n'));
}

static void test_not_hdf5_and_truncated(void **state) {
    TmpDir *t = *state;
    char *text = tmp_file(t, "text.h5"), *good = tmp_file(t, "good.h5"), *cut = tmp_file(t, "cut.h5");
    FILE *f = fopen(text, "w");
    fputs("this is not an HDF5 file\n", f);
    fclose(f);
    expect_open_error(text, "HDF5");
    char *missing = tmp_file(t, "missing.h5");
    expect_open_error(missing, "no such file");
    free(missing);

    write_small(good, DATASET_SFT);
    uint8_t *data;
    size_t len;
    PtError e;
    assert_int_equal(read_whole_file(good, &data, &len, &e), 0);
    size_t keep[] = {len / 3, len / 2, len - 100};
    for (int k = 0; k < 3; k++) {
        f = fopen(cut, "wb");
        fwrite(data, 1, keep[k], f);
        fclose(f);
        expect_open_error(cut, NULL);
    }
    free(data);
    free(text);
    free(good);
    free(cut);
}

// Hand-made files through the raw HDF5 API, one defect each.
typedef struct {
    const char *kind;
    hid_t tok_type;            // file type of /tokens, -1: leave it out
    uint64_t tokens[6];
    int n_tokens_data;
    hid_t off_type;            // -1: leave /doc_offsets out
    uint64_t offsets[4];
    int n_offsets;
    int with_mask;
    uint8_t mask[6];
    uint64_t vocab, n_tokens_attr, n_docs_attr;
    int without_vocab_attr;
    hsize_t declared_tokens;   // != 0: /tokens declares this many entries in chunks never written
} RawSpec;

static void write_u64(hid_t f, const char *name, uint64_t v) {
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_UINT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

static void write_str(hid_t f, const char *name, const char *v) {   // fixed-length, as some writers do
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(v));
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(type);
}

static void write_vec(hid_t f, const char *name, hid_t ftype, hid_t mtype, const void *data, hsize_t n) {
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t ds = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(ds);
    H5Sclose(sp);
}

static void write_raw(const char *path, const RawSpec *s) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    write_str(f, "kind", s->kind);
    write_str(f, "tokenizer_hash", HASH_A);
    if (!s->without_vocab_attr) write_u64(f, "vocab_size", s->vocab);
    write_u64(f, "n_tokens", s->n_tokens_attr);
    write_u64(f, "n_docs", s->n_docs_attr);
    if (s->declared_tokens) {
        hsize_t chunk = 1 << 16;
        hid_t sp = H5Screate_simple(1, &s->declared_tokens, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 1, &chunk);
        H5Dclose(H5Dcreate2(f, "tokens", s->tok_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        H5Pclose(dcpl);
        H5Sclose(sp);
    } else if (s->tok_type >= 0) {
        write_vec(f, "tokens", s->tok_type, H5T_NATIVE_UINT64, s->tokens, s->n_tokens_data);
    }
    if (s->off_type >= 0) write_vec(f, "doc_offsets", s->off_type, H5T_NATIVE_UINT64, s->offsets, s->n_offsets);
    if (s->with_mask) write_vec(f, "loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, s->mask, s->n_tokens_data);
    H5Fclose(f);
}

static RawSpec good_spec(void) {
    RawSpec s = {.kind = "sft", .tok_type = H5T_STD_U16LE, .tokens = {1, 2, 3, 4, 5, 6}, .n_tokens_data = 6,
                 .off_type = H5T_STD_U64LE, .offsets = {0, 2, 6}, .n_offsets = 3, .with_mask = 1,
                 .mask = {0, 1, 0, 0, 1, 1}, .vocab = 10, .n_tokens_attr = 6, .n_docs_attr = 2};
    return s;
}

typedef struct { const char *needle; RawSpec s; } BadCase;

static void test_bad_files(void **state) {
    TmpDir *t = *state;
    char *path = tmp_file(t, "raw.h5");
    RawSpec s = good_spec();
    write_raw(path, &s);   // the hand-made layout itself is readable
    Dataset ds;
    PtError e;
    if (dataset_open(&ds, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ds.loss_mask[4], 1);
    dataset_close(&ds);

    BadCase cases[20];
    int n = 0;
    s = good_spec(); s.tok_type = -1;                        cases[n++] = (BadCase){"/tokens", s};
    s = good_spec(); s.off_type = -1;                        cases[n++] = (BadCase){"/doc_offsets", s};
    s = good_spec(); s.with_mask = 0;                        cases[n++] = (BadCase){"/loss_mask", s};
    s = good_spec(); s.tok_type = H5T_IEEE_F32LE;            cases[n++] = (BadCase){"/tokens has the wrong dtype", s};
    s = good_spec(); s.tok_type = H5T_STD_I32LE;             cases[n++] = (BadCase){"/tokens has the wrong dtype", s};
    s = good_spec(); s.off_type = H5T_STD_U32LE;             cases[n++] = (BadCase){"/doc_offsets has the wrong dtype", s};
    s = good_spec(); s.offsets[1] = 5; s.offsets[2] = 4;     cases[n++] = (BadCase){"not monotonic", s};
    s = good_spec(); s.offsets[2] = 7;                       cases[n++] = (BadCase){"/doc_offsets ends at 7", s};
    s = good_spec(); s.offsets[0] = 1;                       cases[n++] = (BadCase){"/doc_offsets[0]", s};
    s = good_spec(); s.tokens[3] = 10;                       cases[n++] = (BadCase){"/tokens[3] = 10", s};
    s = good_spec(); s.mask[2] = 7;                          cases[n++] = (BadCase){"/loss_mask[2]", s};
    s = good_spec(); s.n_tokens_attr = 5;                    cases[n++] = (BadCase){"/tokens has 6 entries", s};
    s = good_spec(); s.n_docs_attr = 3;                      cases[n++] = (BadCase){"/doc_offsets has 3 entries", s};
    s = good_spec(); s.without_vocab_attr = 1;               cases[n++] = (BadCase){"vocab_size", s};
    s = good_spec(); s.kind = "pretrain";                    cases[n++] = (BadCase){"kind", s};
    // A length no file this small holds (chunks never written read as zeros): refused before 128 GB are
    // allocated for it (found probing fuzz_dataset).
    s = good_spec(); s.declared_tokens = s.n_tokens_attr = 1ull << 36;
    cases[n++] = (BadCase){"/tokens declares 137 GB of data, more than a file of", s};
    for (int i = 0; i < n; i++) {
        write_raw(path, &cases[i].s);
        expect_open_error(path, cases[i].needle);
    }
    free(path);
}

static void test_tokenizer_hash_mismatch(void **state) {
    TmpDir *t = *state;
    char *path = tmp_file(t, "hash.h5");
    write_small(path, DATASET_CPT);
    Dataset ds;
    PtError e;
    assert_int_equal(dataset_open(&ds, path, &e), 0);
    assert_int_equal(dataset_check_tokenizer(&ds, HASH_A, &e), 0);
    assert_int_equal(dataset_check_tokenizer(&ds, HASH_B, &e), -1);
    assert_non_null(strstr(e.msg, HASH_A));
    assert_non_null(strstr(e.msg, HASH_B));
    assert_non_null(strstr(e.msg, path));
    dataset_close(&ds);
    free(path);
}

static void test_inspect_marks_mask(void **state) {
    TmpDir *t = *state;
    char *path = tmp_file(t, "inspect.h5");
    write_small(path, DATASET_SFT);
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    PtError e;
    assert_int_equal(dataset_inspect(path, NULL, out, &e), 0);
    fclose(out);
    // Document 0 is ids 10..14 with mask 0 0 1 1 0.
    if (!strstr(buf, "10 11 [[12 13]] 14\n")) fail_msg("sample not marked:\n%s", buf);
    assert_non_null(strstr(buf, "documents       2"));
    assert_non_null(strstr(buf, "tokens          7"));
    assert_non_null(strstr(buf, "4 tokens trained"));
    assert_non_null(strstr(buf, HASH_A));
    free(buf);
    assert_true(dataset_is_token_file(path));
    free(path);
    assert_false(dataset_is_token_file("Makefile"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_cpt_uint16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_sft_uint32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_rejects_bad_ids_and_abort_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_hdf5_and_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokenizer_hash_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inspect_marks_mask, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
