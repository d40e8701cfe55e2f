// test_pairs.c: pairs datasets (preference data) and their loading.
//
// - the writer and reader: documents, masks, n_pairs and the drop counts by
//   reason round-trip; dataset_open refuses a file with an odd number of
//   documents, a document without a masked token, or two prompts that differ
//   in a pair, naming the file and the pair;
// - the loader on synthetic pairs whose ids say where they came from (pair
//   g's prompt (g+1)*1000 + i, its chosen response (g+1)*1000 + 300 + i, the
//   rejected + 600 + i), every expected value computed here from the lengths
//   the test drew: each pair whole in one row, chosen then rejected, each its
//   own segment with positions from 0, SFT targets and mask, the candidate
//   lists (group_first, group_last, cand_doc, cand_row0, label 0), padding,
//   n_loss = pairs; one epoch visits every pair once; world 2 equals one rank
//   accumulating 2 micro-batches; a cursor resumes the exact stream; one-pass
//   evaluation; a pair longer than T refused at open; choice groups get
//   cand_doc and cand_row0 too.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hdf5.h>
#include <string.h>
#include <unistd.h>
#include "../data/loader.h"

enum { STRIDE = 1000, CHOSEN = 300, REJECTED = 600, N_PAIRS = 150 };

typedef struct {
    char dir[64];
    char *path;
    Dataset d;
    int prompt[N_PAIRS], resp[N_PAIRS][2];   // lengths drawn by the test
    uint64_t first_token[N_PAIRS];           // where pair g's chosen document starts in /tokens
} Fixture;

static int id_of(int g, int side, int i, int n_prompt) {
    return (g + 1) * STRIDE + (i < n_prompt ? i : (side ? REJECTED : CHOSEN) + i - n_prompt);
}

// Pair g: a prompt of 1..20 tokens, responses of 1..16.
static void write_pairs(Fixture *f) {
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, f->path, DATASET_PAIRS, (N_PAIRS + 1) * STRIDE, "pairs-hash", &e), 0);
    Rng r;
    rng_seed(&r, 17);
    int ids[64];
    uint8_t mask[64];
    uint64_t at = 0;
    for (int g = 0; g < N_PAIRS; g++) {
        f->prompt[g] = 1 + (int)(rng_next(&r) % 20);
        f->first_token[g] = at;
        for (int side = 0; side < 2; side++) {
            f->resp[g][side] = 1 + (int)(rng_next(&r) % 16);
            int n = f->prompt[g] + f->resp[g][side];
            for (int i = 0; i < n; i++) ids[i] = id_of(g, side, i, f->prompt[g]), mask[i] = i >= f->prompt[g];
            assert_int_equal(dataset_writer_add(w, ids, mask, (size_t)n, &e), 0);
            at += (uint64_t)n;
        }
    }
    uint64_t drops[PAIR_DROP_REASONS] = {4, 3, 2, 1};
    dataset_writer_set_counts(w, 0, 5, 6);
    dataset_writer_set_pair_drops(w, drops);
    assert_int_equal(dataset_writer_commit(w, &e), 0);
}

static int setup(void **state) {
    Fixture *f = xcalloc(1, sizeof *f, "fixture");
    strcpy(f->dir, "/tmp/pocket-test-pairs-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    f->path = path_join(f->dir, "pairs.h5");
    write_pairs(f);
    PtError e;
    if (dataset_open(&f->d, f->path, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    dataset_close(&f->d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f->path);
    free(f);
    return rc ? -1 : 0;
}

static void test_round_trip(void **state) {
    Fixture *f = *state;
    const Dataset *d = &f->d;
    assert_int_equal(d->kind, DATASET_PAIRS);
    assert_int_equal(d->n_pairs, N_PAIRS);
    assert_int_equal(d->n_docs, 2 * N_PAIRS);
    assert_int_equal(d->n_dropped, 4 + 3 + 2 + 1);
    assert_int_equal(d->n_dropped_pair[PAIR_DROP_EQUAL], 4);
    assert_int_equal(d->n_dropped_pair[PAIR_DROP_PROMPT_MISMATCH], 3);
    assert_int_equal(d->n_dropped_pair[PAIR_DROP_TOO_LONG], 2);
    assert_int_equal(d->n_dropped_pair[PAIR_DROP_EMPTY], 1);
    assert_int_equal(d->n_truncated, 5);
    assert_int_equal(d->n_skipped, 6);
    for (int g = 0; g < N_PAIRS; g++)
        for (int side = 0; side < 2; side++) {
            uint64_t doc = 2 * (uint64_t)g + (uint64_t)side, off = d->doc_offsets[doc];
            int n = f->prompt[g] + f->resp[g][side];
            assert_int_equal(dataset_doc_len(d, doc), n);
            for (int i = 0; i < n; i++) {
                assert_int_equal(dataset_token(d, off + (uint64_t)i), id_of(g, side, i, f->prompt[g]));
                assert_int_equal(d->loss_mask[off + (uint64_t)i], i >= f->prompt[g]);
            }
        }
}

// A pairs file with one defect; dataset_open names the file and the pair.
// The writer checks ids, not pairs: documents go in as given; n_pairs !=
// UINT64_MAX is written over the writer's (an odd number of documents is
// written as SFT data and relabelled, since the writer refuses half a pair).
static void expect_bad(const Fixture *f, const int *const docs[], const int *lens, const uint8_t *const masks[],
                       int n_docs, uint64_t n_pairs, const char *needle) {
    char *path = path_join(f->dir, "bad.h5");
    PtError e;
    DatasetWriter *w;
    int odd = n_docs % 2;
    assert_int_equal(dataset_writer_open(&w, path, odd ? DATASET_SFT : DATASET_PAIRS, 100, "h", &e), 0);
    for (int k = 0; k < n_docs; k++) assert_int_equal(dataset_writer_add(w, docs[k], masks[k], (size_t)lens[k], &e), 0);
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    if (n_pairs != UINT64_MAX) {
        hid_t h = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), sp = H5Screate(H5S_SCALAR);
        if (odd) {
            hid_t type = H5Tcopy(H5T_C_S1);
            H5Tset_size(type, 5);
            H5Adelete(h, "kind");
            hid_t k = H5Acreate2(h, "kind", type, sp, H5P_DEFAULT, H5P_DEFAULT);
            assert_true(H5Awrite(k, type, "pairs") >= 0);
            H5Aclose(k);
            H5Tclose(type);
        }
        hid_t a = odd ? H5Acreate2(h, "n_pairs", H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT)
                      : H5Aopen(h, "n_pairs", H5P_DEFAULT);
        assert_true(a >= 0 && H5Awrite(a, H5T_NATIVE_UINT64, &n_pairs) >= 0);
        H5Aclose(a);
        H5Sclose(sp);
        H5Fclose(h);
    }
    Dataset d;
    assert_int_equal(dataset_open(&d, path, &e), -1);
    if (!strstr(e.msg, needle) || !strstr(e.msg, path)) fail_msg("want '%s' and the path in: %s", needle, e.msg);
    unlink(path);
    free(path);
}

static void test_open_refuses_bad_pairs(void **state) {
    Fixture *f = *state;
    const int a[] = {5, 6, 7, 8}, b[] = {5, 6, 9}, c[] = {5, 4, 9, 9};
    const uint8_t m_a[] = {0, 0, 1, 1}, m_b[] = {0, 0, 1}, none[] = {0, 0, 0, 0}, m_late[] = {0, 0, 0, 1};
    const int lens[] = {4, 3, 4, 3};
    {   // the good pair, then one whose rejected has no masked token
        const int *docs[] = {a, b, a, b};
        const uint8_t *masks[] = {m_a, m_b, m_a, none};
        expect_bad(f, docs, lens, masks, 4, UINT64_MAX, "pair 1: the rejected (document 3) has no masked token");
    }
    {   // prompts of other tokens: 5 6 against 5 4
        const int *docs[] = {a, c};
        const uint8_t *masks[] = {m_a, m_a};
        expect_bad(f, docs, (const int[]){4, 4}, masks, 2, UINT64_MAX, "pair 0: the prompts differ");
    }
    {   // prompts of other lengths: 2 and 3 tokens before the responses
        const int *docs[] = {a, c};
        const uint8_t *masks[] = {m_a, m_late};
        expect_bad(f, docs, (const int[]){4, 4}, masks, 2, UINT64_MAX, "pair 0: the prompts differ (2 and 3 tokens");
    }
    {   // three documents; n_pairs that is not half the documents
        const int *docs[] = {a, b, a};
        const uint8_t *masks[] = {m_a, m_b, m_a};
        expect_bad(f, docs, lens, masks, 3, 1, "3 documents and n_pairs = 1");
        expect_bad(f, docs, lens, masks, 2, 2, "2 documents and n_pairs = 2");
    }
    // The writer refuses half a pair and leaves nothing.
    char *path = path_join(f->dir, "half.h5");
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, DATASET_PAIRS, 100, "h", &e), 0);
    assert_int_equal(dataset_writer_add(w, a, m_a, 4, &e), 0);
    assert_int_equal(dataset_writer_commit(w, &e), -1);
    assert_non_null(strstr(e.msg, "two per pair"));
    assert_false(path_exists(path));
    free(path);
}

// ---------------------------------------------------------------- the loader

// Compares everything a pairs batch holds.
static int batches_equal(const Batch *a, const Batch *b) {
    size_t n = (size_t)a->B * a->T;
    if (a->n_loss != b->n_loss || a->n_groups != b->n_groups) return 0;
    int k = a->group_first[a->n_groups];
    return !memcmp(a->tokens, b->tokens, n * sizeof(int)) && !memcmp(a->targets, b->targets, n * sizeof(int)) &&
           !memcmp(a->pos, b->pos, n * sizeof(int)) && !memcmp(a->seg, b->seg, n * sizeof(int)) &&
           !memcmp(a->mask, b->mask, n) && !memcmp(a->src, b->src, n * sizeof(int64_t)) &&
           !memcmp(a->group_first, b->group_first, (size_t)(a->n_groups + 1) * sizeof(int)) &&
           !memcmp(a->group_last, b->group_last, (size_t)k * sizeof(int)) &&
           !memcmp(a->group_label, b->group_label, (size_t)a->n_groups * sizeof(int)) &&
           !memcmp(a->cand_doc, b->cand_doc, (size_t)k * sizeof(int64_t)) &&
           !memcmp(a->cand_row0, b->cand_row0, (size_t)k * sizeof(int));
}

// One batch against the pairs the test wrote; counts each pair's uses.
static void check_batch(const Fixture *f, const Batch *b, int *used) {
    const int T = b->T;
    assert_int_equal(b->n_loss, b->n_groups);
    assert_int_equal(b->group_first[0], 0);
    uint8_t *covered = xcalloc((size_t)b->B * T, 1, "covered");
    for (int g = 0; g < b->n_groups; g++) {
        assert_int_equal(b->group_first[g], 2 * g);
        assert_int_equal(b->group_first[g + 1], 2 * g + 2);
        assert_int_equal(b->group_label[g], 0);
        int pair = (int)(b->cand_doc[2 * g] / 2);
        assert_true(pair >= 0 && pair < N_PAIRS);
        used[pair]++;
        for (int side = 0; side < 2; side++) {
            int k = 2 * g + side, row0 = b->cand_row0[k], n = f->prompt[pair] + f->resp[pair][side];
            assert_int_equal(b->cand_doc[k], 2 * pair + side);   // chosen, then rejected
            assert_int_equal(b->group_last[k], row0 + n - 1);
            assert_int_equal(row0 / T, (row0 + n - 1) / T);       // whole in one row
            assert_int_equal(row0 / T, b->cand_row0[2 * g] / T);  // both in the same row
            if (side) assert_int_equal(row0, b->group_last[k - 1] + 1);   // right after the chosen
            uint64_t src0 = f->first_token[pair] + (side ? (uint64_t)(f->prompt[pair] + f->resp[pair][0]) : 0);
            for (int i = 0; i < n; i++) {
                int at = row0 + i, last = i == n - 1;
                covered[at] = 1;
                assert_int_equal(b->tokens[at], id_of(pair, side, i, f->prompt[pair]));
                assert_int_equal(b->src[at], (int64_t)(src0 + (uint64_t)i));
                assert_int_equal(b->pos[at], i);
                assert_int_equal(b->seg[at], b->seg[row0]);
                assert_int_equal(b->targets[at], last ? -1 : id_of(pair, side, i + 1, f->prompt[pair]));
                assert_int_equal(b->mask[at], !last && i + 1 >= f->prompt[pair]);
            }
            if (row0 % T) assert_int_not_equal(b->seg[row0], b->seg[row0 - 1]);   // its own segment
        }
    }
    for (int r = 0; r < b->B; r++) {   // the rest is padding after the row's last pair
        int t = T;
        while (t > 0 && !covered[r * T + t - 1]) t--;
        for (int i = 0; i < t; i++) assert_true(covered[r * T + i]);
        for (int i = t; i < T; i++) {
            int at = r * T + i;
            assert_int_equal(b->tokens[at], 0);
            assert_int_equal(b->targets[at], -1);
            assert_int_equal(b->mask[at], 0);
            assert_int_equal(b->src[at], -1);
            if (t) assert_int_not_equal(b->seg[at], b->seg[r * T + t - 1]);
        }
    }
    free(covered);
}

static void test_packing(void **state) {
    Fixture *f = *state;
    const int B = 3, T = 80;
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, &f->d, B, T, 5, 0, 1, &e), 0);
    assert_int_equal(l.n_items, N_PAIRS);
    Batch b;
    batch_alloc(&b, B, T);
    int used[N_PAIRS] = {0}, batches = 0, multi = 0, in_order = 1, next = -1;
    while (l.cur.epoch == 0 && l.cur.index < l.n_items) {
        loader_next(&l, &b);
        check_batch(f, &b, used);
        batches++;
        multi += b.n_groups > B;   // some row holds more than one pair
        for (int g = 0; g < b.n_groups; g++) {
            int pair = (int)(b.cand_doc[2 * g] / 2);
            in_order &= pair == next + 1;
            next = pair;
        }
    }
    int twice = 0;   // the last batch may reach into the next epoch
    for (int g = 0; g < N_PAIRS; g++) {
        assert_true(used[g] == 1 || used[g] == 2);
        twice += used[g] == 2;
    }
    assert_true(twice < B * T / 4);
    assert_true(multi > 0);
    assert_false(in_order);   // shuffled
    assert_true(batches > 1);
    batch_free(&b);
    loader_close(&l);
}

static void run_batches(Loader *l, Batch *out, int n) {
    for (int i = 0; i < n; i++) loader_next(l, &out[i]);
}

// World 2: rank r's k-th micro-batch is the one-rank stream's 2k + r, and
// the cursors agree after each step; a cursor saved mid-stream (past an epoch
// boundary) resumes it exactly.
static void test_ranks_and_resume(void **state) {
    Fixture *f = *state;
    enum { B = 2, T = 80, STEPS = 60, CUT = 23 };
    Batch one[2 * STEPS], mine, c[STEPS];
    for (int i = 0; i < 2 * STEPS; i++) batch_alloc(&one[i], B, T);
    for (int i = 0; i < STEPS; i++) batch_alloc(&c[i], B, T);
    batch_alloc(&mine, B, T);
    Loader l;
    PtError e;
    int used[N_PAIRS] = {0};
    LoaderCursor after[STEPS];
    assert_int_equal(loader_open(&l, &f->d, B, T, 9, 0, 1, &e), 0);
    for (int k = 0; k < STEPS; k++) {
        run_batches(&l, one + 2 * k, 2);
        loader_get_cursor(&l, &after[k]);
        check_batch(f, &one[2 * k], used);
        check_batch(f, &one[2 * k + 1], used);
    }
    assert_true(l.cur.epoch >= 1);
    loader_close(&l);
    for (int rank = 0; rank < 2; rank++) {
        assert_int_equal(loader_open(&l, &f->d, B, T, 9, rank, 2, &e), 0);
        for (int k = 0; k < STEPS; k++) {
            loader_next(&l, &mine);
            assert_true(batches_equal(&mine, &one[2 * k + rank]));
            assert_memory_equal(&l.cur, &after[k], sizeof after[k]);
        }
        loader_close(&l);
    }
    assert_int_equal(loader_open(&l, &f->d, B, T, 9, 1, 2, &e), 0);
    run_batches(&l, c, CUT);
    LoaderCursor cur;
    loader_get_cursor(&l, &cur);
    loader_close(&l);
    assert_int_equal(loader_open(&l, &f->d, B, T, 777, 1, 2, &e), 0);
    assert_int_equal(loader_set_cursor(&l, &cur, &e), 0);
    run_batches(&l, c + CUT, STEPS - CUT);
    for (int k = 0; k < STEPS; k++) assert_true(batches_equal(&c[k], &one[2 * k + 1]));
    loader_close(&l);
    for (int i = 0; i < 2 * STEPS; i++) batch_free(&one[i]);
    for (int i = 0; i < STEPS; i++) batch_free(&c[i]);
    batch_free(&mine);
}

// Evaluation: every pair once, then padding.
static void test_one_pass(void **state) {
    Fixture *f = *state;
    const int B = 4, T = 72;
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, &f->d, B, T, 2, 0, 1, &e), 0);
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, B, T);
    int used[N_PAIRS] = {0};
    while (!loader_done(&l)) {
        loader_next(&l, &b);
        check_batch(f, &b, used);
    }
    for (int g = 0; g < N_PAIRS; g++) assert_int_equal(used[g], 1);
    loader_next(&l, &b);
    assert_int_equal(b.n_groups, 0);
    assert_int_equal(b.n_loss, 0);
    for (int i = 0; i < B * T; i++) assert_int_equal(b.mask[i], 0);
    batch_free(&b);
    loader_close(&l);
}

static void test_pair_longer_than_row(void **state) {
    Fixture *f = *state;
    int longest = 0, which = 0;
    for (int g = 0; g < N_PAIRS; g++) {
        int n = 2 * f->prompt[g] + f->resp[g][0] + f->resp[g][1];
        if (n > longest) longest = n, which = g;
    }
    Loader l;
    PtError e;
    assert_int_equal(loader_open(&l, &f->d, 2, longest, 1, 0, 1, &e), 0);
    loader_close(&l);
    assert_int_equal(loader_open(&l, &f->d, 2, longest - 1, 1, 0, 1, &e), -1);
    char want[128];
    snprintf(want, sizeof want, "pair %d holds %d tokens", which, longest);   // the first of the longest
    if (!strstr(e.msg, want) || !strstr(e.msg, f->path)) fail_msg("want '%s' and the path in: %s", want, e.msg);
    snprintf(want, sizeof want, "more than a row of %d", longest - 1);
    assert_non_null(strstr(e.msg, want));
}

// Choice groups list their candidates' documents and first rows as pairs do.
static void test_choice_candidates(void **state) {
    Fixture *f = *state;
    char *path = path_join(f->dir, "choice.h5");
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, DATASET_CHOICE, 100, "h", &e), 0);
    const int ids[] = {1, 2, 3, 4, 5, 6, 7};
    const uint8_t mask[] = {0, 0, 1, 1, 1, 1, 1};
    int doc_len[12], n_docs = 0;
    for (int g = 0; g < 5; g++) {
        for (int k = 0; k < 2 + g % 2; k++) {
            doc_len[n_docs] = 3 + (g + k) % 4;
            assert_int_equal(dataset_writer_add(w, ids, mask, (size_t)doc_len[n_docs++], &e), 0);
        }
        assert_int_equal(dataset_writer_end_group(w, 1, &e), 0);
    }
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    Dataset d;
    assert_int_equal(dataset_open(&d, path, &e), 0);
    Loader l;
    assert_int_equal(loader_open(&l, &d, 2, 24, 3, 0, 1, &e), 0);
    Batch b;
    batch_alloc(&b, 2, 24);
    loader_next(&l, &b);
    assert_true(b.n_groups >= 2);
    for (int k = 0; k < b.group_first[b.n_groups]; k++) {
        int64_t doc = b.cand_doc[k];
        assert_true(doc >= 0 && doc < n_docs);
        assert_int_equal(b.group_last[k] - b.cand_row0[k] + 1, doc_len[doc]);
        assert_int_equal(b.src[b.cand_row0[k]], (int64_t)d.doc_offsets[doc]);
        assert_int_equal(b.pos[b.cand_row0[k]], 0);
        assert_int_equal(b.targets[b.cand_row0[k]], -1);   // choice: no token targets
    }
    batch_free(&b);
    loader_close(&l);
    dataset_close(&d);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_open_refuses_bad_pairs),
        cmocka_unit_test(test_packing),
        cmocka_unit_test(test_ranks_and_resume),
        cmocka_unit_test(test_one_pass),
        cmocka_unit_test(test_pair_longer_than_row),
        cmocka_unit_test(test_choice_candidates),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
