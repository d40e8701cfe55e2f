// test_loader.c: the data loader against datasets built from synthetic ids
// whose values say where they came from (CPT: id = stream position; SFT:
// id = (example + 1) * 1000 + position in the example; 0 is padding), so every batch can be
// checked against the dataset it was cut from.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>
#include "../data/loader.h"

enum { SFT_STRIDE = 1000 };

typedef struct {
    char dir[64];
    char *cpt_path, *sft_path;
    Dataset cpt, sft;
    uint64_t *sft_len;     // length of each SFT example
    int n_sft;
} Fixture;

// CPT: n_tokens ids 0..n-1 in documents of 1..40 tokens.
static void write_cpt(const char *path, uint64_t n_tokens) {
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, DATASET_CPT, (int)n_tokens, "cpt-hash", &e), 0);
    int *ids = xmalloc(n_tokens * sizeof(int), "ids");
    for (uint64_t i = 0; i < n_tokens; i++) ids[i] = (int)i;
    Rng r;
    rng_seed(&r, 7);
    for (uint64_t at = 0; at < n_tokens;) {
        uint64_t len = 1 + rng_next(&r) % 40;
        if (len > n_tokens - at) len = n_tokens - at;
        assert_int_equal(dataset_writer_add(w, ids + at, NULL, len, &e), 0);
        at += len;
    }
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    free(ids);
}

// SFT: example k has id (k+1)*1000 + i at position i and a random mask.
static uint64_t *write_sft(const char *path, int n_examples, int max_len) {
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, DATASET_SFT, (n_examples + 1) * SFT_STRIDE, "sft-hash", &e), 0);
    uint64_t *lens = xmalloc(n_examples * sizeof(uint64_t), "lens");
    int ids[SFT_STRIDE];
    uint8_t mask[SFT_STRIDE];
    Rng r;
    rng_seed(&r, 11);
    for (int k = 0; k < n_examples; k++) {
        lens[k] = 1 + rng_next(&r) % max_len;
        for (uint64_t i = 0; i < lens[k]; i++) {
            ids[i] = (k + 1) * SFT_STRIDE + (int)i;
            mask[i] = rng_next(&r) % 3 != 0;
        }
        assert_int_equal(dataset_writer_add(w, ids, mask, lens[k], &e), 0);
    }
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    return lens;
}

static int setup(void **state) {
    Fixture *f = xcalloc(1, sizeof *f, "fixture");
    strcpy(f->dir, "/tmp/pocket-test-loader-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    f->cpt_path = path_join(f->dir, "cpt.h5");
    f->sft_path = path_join(f->dir, "sft.h5");
    write_cpt(f->cpt_path, 16 * 120 + 1);   // 120 windows of T = 16
    f->n_sft = 240;
    f->sft_len = write_sft(f->sft_path, f->n_sft, 45);   // some longer than T = 32
    PtError e;
    if (dataset_open(&f->cpt, f->cpt_path, &e) || dataset_open(&f->sft, f->sft_path, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    dataset_close(&f->cpt);
    dataset_close(&f->sft);
    unlink(f->cpt_path);
    unlink(f->sft_path);
    rmdir(f->dir);
    free(f->cpt_path);
    free(f->sft_path);
    free(f->sft_len);
    free(f);
    return 0;
}

static int batches_equal(const Batch *a, const Batch *b) {
    size_t n = (size_t)a->B * a->T;
    return !memcmp(a->tokens, b->tokens, n * sizeof(int)) && !memcmp(a->targets, b->targets, n * sizeof(int)) &&
           !memcmp(a->pos, b->pos, n * sizeof(int)) && !memcmp(a->seg, b->seg, n * sizeof(int)) &&
           !memcmp(a->mask, b->mask, n) && a->n_loss == b->n_loss;
}

static void test_cpt_windows(void **state) {
    Fixture *f = *state;
    const int B = 4, T = 16;
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, &f->cpt, B, T, 1, 0, 1, &e), 0);
    assert_int_equal(l.n_items, 120);
    Batch b;
    batch_alloc(&b, B, T);
    int seen[120] = {0}, in_order = 1;
    for (int step = 0; step < 30; step++) {   // exactly one epoch
        loader_next(&l, &b);
        assert_int_equal(b.n_loss, B * T);
        for (int r = 0; r < B; r++) {
            const int *tok = b.tokens + r * T;
            assert_int_equal(tok[0] % T, 0);   // windows start at multiples of T
            seen[tok[0] / T]++;
            if (tok[0] / T != step * B + r) in_order = 0;
            for (int t = 0; t < T; t++) {
                assert_int_equal(tok[t], tok[0] + t);                 // a contiguous piece of the stream
                assert_int_equal(b.targets[r * T + t], tok[t] + 1);   // the next token, the last one too
                assert_int_equal(b.pos[r * T + t], t);
                assert_int_equal(b.seg[r * T + t], 0);
            }
        }
    }
    for (int i = 0; i < 120; i++) assert_int_equal(seen[i], 1);
    assert_false(in_order);   // shuffled
    assert_int_equal(l.cur.epoch, 0);
    loader_next(&l, &b);
    assert_int_equal(l.cur.epoch, 1);
    batch_free(&b);
    loader_close(&l);
}

static void test_cpt_document_mask(void **state) {
    Fixture *f = *state;
    const int B = 8, T = 16;
    const Dataset *d = &f->cpt;
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, d, B, T, 3, 0, 1, &e), 0);
    loader_set_doc_mask(&l, 1);
    Batch b;
    batch_alloc(&b, B, T);
    for (int step = 0; step < 15; step++) {
        loader_next(&l, &b);
        for (int r = 0; r < B; r++) {
            const int *tok = b.tokens + r * T;
            for (int t = 0; t < T; t++) {
                uint64_t i = (uint64_t)tok[t];
                int starts_doc = 0, ends_doc = 0;
                for (uint64_t k = 1; k < d->n_docs; k++) {
                    starts_doc |= d->doc_offsets[k] == i;
                    ends_doc |= d->doc_offsets[k] == i + 1;
                }
                if (t > 0) {
                    assert_int_equal(b.seg[r * T + t], b.seg[r * T + t - 1] + starts_doc);
                    assert_int_equal(b.pos[r * T + t], starts_doc ? 0 : b.pos[r * T + t - 1] + 1);
                } else {
                    assert_int_equal(b.seg[r * T], 0);
                    assert_int_equal(b.pos[r * T], 0);
                }
                assert_int_equal(b.targets[r * T + t], ends_doc ? -1 : tok[t] + 1);
                assert_int_equal(b.mask[r * T + t], !ends_doc);
            }
        }
    }
    batch_free(&b);
    loader_close(&l);
}

// Checks one SFT batch against the dataset; marks the examples it used.
static void check_sft_batch(const Fixture *f, const Batch *b, int *used) {
    const Dataset *d = &f->sft;
    int T = b->T;
    for (int r = 0; r < b->B; r++) {
        const int *tok = b->tokens + r * T, *tgt = b->targets + r * T, *pos = b->pos + r * T, *seg = b->seg + r * T;
        const uint8_t *mask = b->mask + r * T;
        int t = 0, s = 0;
        while (t < T && tok[t] != 0) {
            // one example: ids (k+1)*1000 + 0, 1, 2, ... with positions 0, 1, 2, ...
            int k = tok[t] / SFT_STRIDE - 1, len = 0;
            assert_int_equal(tok[t] % SFT_STRIDE, 0);   // starts at its first token
            uint64_t full = f->sft_len[k];
            int expect = full > (uint64_t)T ? T : (int)full;
            for (; len < expect; len++) {
                int at = t + len;
                assert_true(at < T);
                assert_int_equal(tok[at], (k + 1) * SFT_STRIDE + len);
                assert_int_equal(pos[at], len);
                assert_int_equal(seg[at], s);
                int has_next = (uint64_t)len + 1 < full;
                assert_int_equal(tgt[at], has_next ? tok[at] + 1 : -1);
                uint8_t want = has_next ? d->loss_mask[d->doc_offsets[k] + len + 1] : 0;
                assert_int_equal(mask[at], want);
            }
            if (t + len < T) assert_int_not_equal(seg[t + len], s);   // the next position starts anew
            used[k]++;
            t += len;
            s++;
        }
        for (; t < T; t++) {   // padding never trains and has its own segment
            assert_int_equal(tok[t], 0);
            assert_int_equal(tgt[t], -1);
            assert_int_equal(mask[t], 0);
            assert_int_equal(seg[t], s);
        }
        // Visibility: equal segment ids <=> same example.
        for (int u = 0; u < T; u++)
            for (int v = 0; v < u; v++)
                if (tok[u] && tok[v]) assert_int_equal(seg[u] == seg[v], tok[u] / SFT_STRIDE == tok[v] / SFT_STRIDE);
    }
}

static void test_sft_packing(void **state) {
    Fixture *f = *state;
    const int B = 4, T = 32;
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, &f->sft, B, T, 5, 0, 1, &e), 0);
    Batch b;
    batch_alloc(&b, B, T);
    int *used = xcalloc(f->n_sft, sizeof(int), "used");
    int truncated = 0;
    for (int k = 0; k < f->n_sft; k++) truncated += f->sft_len[k] > (uint64_t)T;
    assert_true(truncated > 0);
    while (l.cur.epoch == 0 && !(l.cur.index == l.n_items)) {
        loader_next(&l, &b);
        check_sft_batch(f, &b, used);
    }
    // One epoch: every example exactly once (the last batch may reach into epoch 1).
    int once = 0;
    for (int k = 0; k < f->n_sft; k++) {
        assert_true(used[k] >= 1 && used[k] <= 2);
        once += used[k] == 1;
    }
    assert_true(once > f->n_sft - B * T);
    assert_true(l.n_truncated >= (uint64_t)truncated);
    free(used);
    batch_free(&b);
    loader_close(&l);
}

// Runs n batches into out[] (allocated by the caller).
static void run_batches(Loader *l, Batch *out, int n) {
    for (int i = 0; i < n; i++) loader_next(l, &out[i]);
}

static void same_seed_and_resume(const Dataset *d, int B, int T) {
    enum { N = 40, CUT = 17 };
    Batch a[N], c[N];
    for (int i = 0; i < N; i++) { batch_alloc(&a[i], B, T); batch_alloc(&c[i], B, T); }
    Loader l1, l2;
    PtError e;
    // Same seed, same batches; another seed, other batches.
    assert_int_equal(loader_open(&l1, d, B, T, 99, 1, 2, &e), 0);
    assert_int_equal(loader_open(&l2, d, B, T, 99, 1, 2, &e), 0);
    run_batches(&l1, a, N);
    run_batches(&l2, c, N);
    for (int i = 0; i < N; i++) assert_true(batches_equal(&a[i], &c[i]));
    assert_true(l1.cur.epoch >= 1);   // the sequence crossed an epoch boundary
    loader_close(&l2);
    assert_int_equal(loader_open(&l2, d, B, T, 100, 1, 2, &e), 0);
    run_batches(&l2, c, 3);
    assert_false(batches_equal(&a[0], &c[0]) && batches_equal(&a[1], &c[1]) && batches_equal(&a[2], &c[2]));
    loader_close(&l2);
    // Save a cursor after CUT batches, restore it in a fresh loader.
    loader_close(&l1);
    assert_int_equal(loader_open(&l1, d, B, T, 99, 1, 2, &e), 0);
    run_batches(&l1, c, CUT);
    LoaderCursor cur;
    loader_get_cursor(&l1, &cur);
    loader_close(&l1);
    assert_int_equal(loader_open(&l2, d, B, T, 12345, 1, 2, &e), 0);   // the cursor carries the RNG state
    assert_int_equal(loader_set_cursor(&l2, &cur, &e), 0);
    run_batches(&l2, c + CUT, N - CUT);
    for (int i = CUT; i < N; i++) assert_true(batches_equal(&a[i], &c[i]));
    cur.index = l2.n_items + 1;
    assert_int_equal(loader_set_cursor(&l2, &cur, &e), -1);
    loader_close(&l2);
    for (int i = 0; i < N; i++) { batch_free(&a[i]); batch_free(&c[i]); }
}

static void test_same_seed_and_resume_cpt(void **state) { same_seed_and_resume(&((Fixture *)*state)->cpt, 3, 16); }
static void test_same_seed_and_resume_sft(void **state) { same_seed_and_resume(&((Fixture *)*state)->sft, 3, 32); }

// World 3: rank r's k-th micro-batch is the one-rank stream's micro-batch
// 3k + r, for CPT windows and for packed SFT rows (whose packing the other
// ranks follow from the example lengths), across an epoch boundary; and
// every rank's cursor is the one-rank loader's after each cycle.
static void ranks_follow_one_stream(const Dataset *d, int B, int T) {
    enum { WORLD = 3, CYCLES = 50 };
    Batch one[WORLD * CYCLES], mine;
    Loader l;
    PtError e;
    for (int i = 0; i < WORLD * CYCLES; i++) batch_alloc(&one[i], B, T);
    batch_alloc(&mine, B, T);
    assert_int_equal(loader_open(&l, d, B, T, 8, 0, 1, &e), 0);
    LoaderCursor after[CYCLES];
    for (int k = 0; k < CYCLES; k++) {
        run_batches(&l, one + k * WORLD, WORLD);
        loader_get_cursor(&l, &after[k]);
    }
    assert_true(l.cur.epoch >= 1);   // the stream crossed an epoch boundary
    loader_close(&l);
    for (int rank = 0; rank < WORLD; rank++) {
        assert_int_equal(loader_open(&l, d, B, T, 8, rank, WORLD, &e), 0);
        for (int k = 0; k < CYCLES; k++) {
            loader_next(&l, &mine);
            assert_true(batches_equal(&mine, &one[k * WORLD + rank]));
            assert_memory_equal(&l.cur, &after[k], sizeof after[k]);
        }
        loader_close(&l);
    }
    for (int i = 0; i < WORLD * CYCLES; i++) batch_free(&one[i]);
    batch_free(&mine);
}

static void test_ranks_follow_one_stream(void **state) {
    Fixture *f = *state;
    ranks_follow_one_stream(&f->cpt, 2, 16);
    ranks_follow_one_stream(&f->sft, 2, 32);
}

static void test_open_errors(void **state) {
    Fixture *f = *state;
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, &f->cpt, 0, 16, 1, 0, 1, &e), -1);
    assert_int_equal(loader_open(&l, &f->cpt, 1, 16, 1, 2, 2, &e), -1);
    assert_int_equal(loader_open(&l, &f->cpt, 1, 4096, 1, 0, 1, &e), -1);   // 1921 tokens: no window of 4097
    assert_non_null(strstr(e.msg, f->cpt_path));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpt_windows),
        cmocka_unit_test(test_cpt_document_mask),
        cmocka_unit_test(test_sft_packing),
        cmocka_unit_test(test_same_seed_and_resume_cpt),
        cmocka_unit_test(test_same_seed_and_resume_sft),
        cmocka_unit_test(test_ranks_follow_one_stream),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
