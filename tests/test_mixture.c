// test_mixture.c: weighted mixtures of token datasets (data/mixture.h).
//
// Every set's ids say where they came from: set s's token i (its index in
// /tokens) is s * STRIDE + i. So the batches themselves tell, independently
// of the mixture's own counters, which set each position was drawn from and
// which window or example it is. Checked: each set's share of 10^6 tokens is
// within 1% of its weight (CPT 0.8/0.2 and SFT 0.1/0.3/0.6, sets of very
// different sizes and document lengths, two seeds); the stream with 2 or 3
// ranks is the one-rank stream dealt out (CPT, SFT and choice rows); a cursor
// saved mid-mixture resumes bit-identically; epochs are counted per set (the
// small one repeats); a mixture of one set is the plain loader; the recipe
// value's syntax and its errors; sets of another kind or tokenizer refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../data/mixture.h"

enum { STRIDE = 10000000, VOCAB = 4 * STRIDE, N_SETS = 8 };

typedef struct {
    char dir[64];
    Dataset cpt_small, cpt_big;          // 20,000 tokens in documents of 1-10; 2,000,000 in documents of 500-3,000
    Dataset sft_short, sft_mid, sft_long; // examples of 1-8, 20-60, 100-250 tokens
    Dataset choice_a, choice_b;           // groups of 2-4 candidates of 4-9 and 5-15 tokens
    Dataset other_tok;                   // CPT with another tokenizer hash
    const Dataset *cpt_pair[2], *sft_trio[3];   // the mixtures most tests draw from, at W_CPT and W_SFT
} Fixture;

static const double W_CPT[] = {0.8, 0.2}, W_SFT[] = {0.1, 0.3, 0.6};

// A set's ids: set * STRIDE + position, in documents of lo..hi tokens; SFT
// documents get a random mask, choice documents come in groups of 2-4 that
// share a prompt of 3 tokens.
static void write_set(const char *dir, const char *name, DatasetKind kind, int set, uint64_t n_tokens, int lo, int hi,
                      const char *hash, Dataset *out) {
    char *path = path_join(dir, name);
    PtError e;
    DatasetWriter *w;
    assert_int_equal(dataset_writer_open(&w, path, kind, VOCAB, hash, &e), 0);
    Rng r;
    rng_seed(&r, (uint64_t)set * 31 + 7);
    int *ids = xmalloc((size_t)(hi + 3) * sizeof(int), "ids");
    uint8_t *mask = xmalloc((size_t)hi + 3, "mask");
    uint64_t at = 0;
    while (at < n_tokens) {
        int cands = kind == DATASET_CHOICE ? 2 + (int)(rng_next(&r) % 3) : 1;
        for (int c = 0; c < cands; c++) {
            int len = lo + (int)(rng_next(&r) % (uint64_t)(hi - lo + 1));
            for (int i = 0; i < len; i++) {
                ids[i] = set * STRIDE + (int)(at + (uint64_t)i);
                mask[i] = kind == DATASET_CHOICE ? i >= 3 : rng_next(&r) % 3 != 0;
            }
            assert_int_equal(dataset_writer_add(w, ids, kind == DATASET_CPT ? NULL : mask, (size_t)len, &e), 0);
            at += (uint64_t)len;
        }
        if (kind == DATASET_CHOICE) assert_int_equal(dataset_writer_end_group(w, (uint32_t)(at % cands), &e), 0);
    }
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    if (dataset_open(out, path, &e)) fail_msg("%s", e.msg);
    free(ids);
    free(mask);
    free(path);
}

static int setup(void **state) {
    Fixture *f = xcalloc(1, sizeof *f, "fixture");
    strcpy(f->dir, "/tmp/pocket-test-mixture-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    write_set(f->dir, "cpt_small.h5", DATASET_CPT, 0, 20000, 1, 10, "tok", &f->cpt_small);
    write_set(f->dir, "cpt_big.h5", DATASET_CPT, 1, 2000000, 500, 3000, "tok", &f->cpt_big);
    write_set(f->dir, "sft_short.h5", DATASET_SFT, 0, 2500, 1, 8, "tok", &f->sft_short);
    write_set(f->dir, "sft_mid.h5", DATASET_SFT, 1, 200000, 20, 60, "tok", &f->sft_mid);
    write_set(f->dir, "sft_long.h5", DATASET_SFT, 2, 3500000, 100, 250, "tok", &f->sft_long);
    write_set(f->dir, "choice_a.h5", DATASET_CHOICE, 0, 3000, 4, 9, "tok", &f->choice_a);
    write_set(f->dir, "choice_b.h5", DATASET_CHOICE, 1, 20000, 5, 15, "tok", &f->choice_b);
    write_set(f->dir, "other_tok.h5", DATASET_CPT, 2, 5000, 1, 10, "another", &f->other_tok);
    f->cpt_pair[0] = &f->cpt_small, f->cpt_pair[1] = &f->cpt_big;
    f->sft_trio[0] = &f->sft_short, f->sft_trio[1] = &f->sft_mid, f->sft_trio[2] = &f->sft_long;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    Dataset *all[] = {&f->cpt_small, &f->cpt_big, &f->sft_short, &f->sft_mid, &f->sft_long,
                      &f->choice_a, &f->choice_b, &f->other_tok};
    for (int i = 0; i < N_SETS; i++) {
        unlink(all[i]->path);
        dataset_close(all[i]);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static int batches_equal(const Batch *a, const Batch *b) {
    size_t n = (size_t)a->B * a->T;
    if (memcmp(a->tokens, b->tokens, n * sizeof(int)) || memcmp(a->targets, b->targets, n * sizeof(int)) ||
        memcmp(a->pos, b->pos, n * sizeof(int)) || memcmp(a->seg, b->seg, n * sizeof(int)) ||
        memcmp(a->mask, b->mask, n) || memcmp(a->src, b->src, n * sizeof(int64_t)) || a->n_loss != b->n_loss ||
        a->n_groups != b->n_groups)
        return 0;
    int rows = a->group_first[a->n_groups];
    return !memcmp(a->group_first, b->group_first, (size_t)(a->n_groups + 1) * sizeof(int)) &&
           !memcmp(a->group_last, b->group_last, (size_t)rows * sizeof(int)) &&
           !memcmp(a->group_label, b->group_label, (size_t)a->n_groups * sizeof(int));
}

static void open_mix(MixLoader *m, const Dataset *const *sets, const double *w, int n, int B, int T, uint64_t seed,
                     int rank, int world) {
    PtError e;
    if (mix_open(m, sets, w, n, B, T, seed, rank, world, &e)) fail_msg("%s", e.msg);
}

// ---- shares

// Draws micro-batches of one rank until 10^6 tokens, counting the tokens of
// each written set (the ids' set number) from the batches; returns how many
// tokens in all.
static uint64_t draw_and_count(MixLoader *m, Batch *b, uint64_t *per_id) {
    uint64_t all = 0;
    memset(per_id, 0, MIX_MAX_SETS * sizeof *per_id);
    while (all < 1000000) {
        mix_next(m, b);
        for (size_t i = 0; i < (size_t)b->B * b->T; i++) {
            if (b->src[i] < 0) continue;   // padding
            int id = b->tokens[i] / STRIDE;
            assert_true(id >= 0 && id < MIX_MAX_SETS);
            assert_int_equal(b->tokens[i] % STRIDE, (int)b->src[i]);   // the token is the one at src
            per_id[id]++;
            all++;
        }
    }
    return all;
}

static void expect_shares(const Dataset *const *sets, const double *w, int n, int B, int T, uint64_t seed) {
    MixLoader m;
    Batch b;
    batch_alloc(&b, B, T);
    open_mix(&m, sets, w, n, B, T, seed, 0, 1);
    uint64_t per_id[MIX_MAX_SETS], all = draw_and_count(&m, &b, per_id), counted = 0;
    double sum = 0;
    for (int k = 0; k < n; k++) sum += w[k];
    for (int k = 0; k < n; k++) {
        uint64_t mine = per_id[dataset_token(sets[k], 0) / STRIDE];
        counted += mine;
        double share = (double)mine / (double)all, want = w[k] / sum;
        if (fabs(share - want) > 0.01 * want)
            fail_msg("seed %llu, set %d: share %.5f of %llu tokens, weight %.5f", (unsigned long long)seed, k, share,
                     (unsigned long long)all, want);
        MixShare s;   // the mixture's own report agrees with the count
        mix_share(&m, k, &s);
        assert_int_equal(s.tokens, mine);
    }
    assert_int_equal(counted, all);   // every token came from one of the sets
    mix_close(&m);
    batch_free(&b);
}

static void test_shares_within_one_percent(void **state) {
    Fixture *f = *state;
    for (uint64_t seed = 1; seed <= 2; seed++) {
        expect_shares(f->cpt_pair, W_CPT, 2, 8, 64, seed);
        expect_shares(f->sft_trio, W_SFT, 3, 4, 128, seed);
    }
    const double w_rev[] = {6, 3, 1};   // weights need not sum to 1; the small set gets the most
    const Dataset *sft_rev[] = {&f->sft_short, &f->sft_long, &f->sft_mid};
    expect_shares(sft_rev, w_rev, 3, 4, 128, 3);
}

// A set of weight 0 is never drawn.
static void test_zero_weight_never_drawn(void **state) {
    Fixture *f = *state;
    const Dataset *sets[] = {&f->cpt_small, &f->cpt_big};
    const double w[] = {0, 1};
    MixLoader m;
    Batch b;
    batch_alloc(&b, 4, 32);
    open_mix(&m, sets, w, 2, 4, 32, 5, 0, 1);
    for (int i = 0; i < 50; i++) {
        mix_next(&m, &b);
        for (int t = 0; t < 4 * 32; t++) assert_int_equal(b.tokens[t] / STRIDE, 1);
    }
    MixShare s;
    mix_share(&m, 0, &s);
    assert_int_equal(s.tokens, 0);
    assert_true(s.epochs == 0);
    mix_close(&m);
    batch_free(&b);
}

// ---- ranks

// World ranks with one micro-batch each see what one rank sees over world
// micro-batches, and every rank's cursor is the one rank's after each cycle.
static void ranks_follow_one_stream(const Dataset *const *sets, const double *w, int n, int B, int T, int world) {
    enum { CYCLES = 60 };
    Batch *one = xmalloc((size_t)world * CYCLES * sizeof *one, "batches"), mine;
    for (int i = 0; i < world * CYCLES; i++) batch_alloc(&one[i], B, T);
    batch_alloc(&mine, B, T);
    MixLoader m;
    MixCursor after[CYCLES], c;
    open_mix(&m, sets, w, n, B, T, 42, 0, 1);
    for (int k = 0; k < CYCLES; k++) {
        for (int i = 0; i < world; i++) mix_next(&m, &one[k * world + i]);
        mix_get_cursor(&m, &after[k]);
    }
    int wrapped = 0;   // some set crossed an epoch boundary
    for (int k = 0; k < n; k++) wrapped |= m.set[k].cur.epoch > 0;
    assert_true(wrapped);
    mix_close(&m);
    for (int rank = 0; rank < world; rank++) {
        open_mix(&m, sets, w, n, B, T, 42, rank, world);
        for (int k = 0; k < CYCLES; k++) {
            mix_next(&m, &mine);
            assert_true(batches_equal(&mine, &one[k * world + rank]));
            mix_get_cursor(&m, &c);
            assert_memory_equal(&c, &after[k], sizeof c);
        }
        mix_close(&m);
    }
    for (int i = 0; i < world * CYCLES; i++) batch_free(&one[i]);
    free(one);
    batch_free(&mine);
}

static void test_ranks_follow_one_stream(void **state) {
    Fixture *f = *state;
    const Dataset *choice[] = {&f->choice_a, &f->choice_b};
    const double w_choice[] = {0.5, 0.5};
    for (int world = 2; world <= 3; world++) {
        ranks_follow_one_stream(f->cpt_pair, W_CPT, 2, 4, 64, world);
        ranks_follow_one_stream(f->sft_trio, W_SFT, 3, 2, 128, world);
        ranks_follow_one_stream(choice, w_choice, 2, 2, 64, world);
    }
}

// ---- resume

static void test_resume_mid_mixture(void **state) {
    Fixture *f = *state;
    enum { N = 80, CUT = 37, B = 2, T = 128 };
    const Dataset *const *sets = f->sft_trio;
    const double *w = W_SFT;
    Batch a[N], c[N];
    for (int i = 0; i < N; i++) batch_alloc(&a[i], B, T), batch_alloc(&c[i], B, T);
    MixLoader m, r;
    open_mix(&m, sets, w, 3, B, T, 7, 1, 2);
    for (int i = 0; i < N; i++) mix_next(&m, &a[i]);
    assert_true(m.set[0].cur.epoch >= 1);   // the short set wrapped within the run
    MixShare end[3];
    for (int k = 0; k < 3; k++) mix_share(&m, k, &end[k]);
    mix_close(&m);
    open_mix(&m, sets, w, 3, B, T, 7, 1, 2);
    for (int i = 0; i < CUT; i++) mix_next(&m, &c[i]);
    MixCursor cur;
    mix_get_cursor(&m, &cur);
    mix_close(&m);
    open_mix(&r, sets, w, 3, B, T, 999, 1, 2);   // the cursor carries every set's RNG: the seed no longer matters
    PtError e;
    assert_int_equal(mix_set_cursor(&r, &cur, &e), 0);
    for (int i = CUT; i < N; i++) mix_next(&r, &c[i]);
    for (int i = 0; i < N; i++) assert_true(batches_equal(&a[i], &c[i]));
    for (int k = 0; k < 3; k++) {
        MixShare s;
        mix_share(&r, k, &s);
        assert_memory_equal(&s, &end[k], sizeof s);
    }
    // A cursor of another mixture, or past a set's epoch, is refused and changes nothing.
    MixCursor bad = cur, before;
    mix_get_cursor(&r, &before);
    bad.n_sets = 2;
    assert_int_equal(mix_set_cursor(&r, &bad, &e), -1);
    assert_non_null(strstr(e.msg, "2 datasets, but this mixture has 3"));
    bad = cur;
    bad.set[2].index = r.set[2].n_items + 1;
    assert_int_equal(mix_set_cursor(&r, &bad, &e), -1);
    assert_non_null(strstr(e.msg, "sft_long.h5"));
    mix_get_cursor(&r, &cur);
    assert_memory_equal(&cur, &before, sizeof cur);
    mix_close(&r);
    for (int i = 0; i < N; i++) batch_free(&a[i]), batch_free(&c[i]);
}

// ---- epochs

// CPT rows are whole windows: a set's epochs are its rows over its windows,
// counted from the batches' ids.
static void test_epochs_per_set(void **state) {
    Fixture *f = *state;
    enum { B = 8, T = 64 };
    MixLoader m;
    Batch b;
    batch_alloc(&b, B, T);
    open_mix(&m, f->cpt_pair, W_CPT, 2, B, T, 3, 0, 1);
    uint64_t rows[2] = {0, 0};
    for (int i = 0; i < 500; i++) {
        mix_next(&m, &b);
        for (int r = 0; r < B; r++) rows[b.tokens[r * T] / STRIDE]++;
    }
    const uint64_t windows[2] = {(f->cpt_small.n_tokens - 1) / T, (f->cpt_big.n_tokens - 1) / T};
    MixShare s[2];
    for (int k = 0; k < 2; k++) {
        mix_share(&m, k, &s[k]);
        assert_true(fabs(s[k].epochs - (double)rows[k] / (double)windows[k]) < 1e-12);
        assert_int_equal(s[k].tokens, rows[k] * T);
    }
    assert_true(s[0].epochs > 5);   // the small set repeats
    assert_true(s[1].epochs < 1);   // the big one is partly seen
    mix_close(&m);
    batch_free(&b);
}

// ---- one set

// A mixture of one set is that set's plain loader, batch for batch.
static void test_one_set_is_the_plain_loader(void **state) {
    Fixture *f = *state;
    const Dataset *sets[] = {&f->sft_mid};
    const double w[] = {1};
    MixLoader m;
    Loader l;
    Batch a, b;
    batch_alloc(&a, 3, 64);
    batch_alloc(&b, 3, 64);
    open_mix(&m, sets, w, 1, 3, 64, 11, 1, 2);
    PtError e;
    assert_int_equal(loader_open(&l, &f->sft_mid, 3, 64, 11, 1, 2, &e), 0);
    for (int i = 0; i < 200; i++) {
        mix_next(&m, &a);
        loader_next(&l, &b);
        assert_true(batches_equal(&a, &b));
    }
    assert_memory_equal(&m.set[0].cur, &l.cur, sizeof l.cur);
    loader_close(&l);
    mix_close(&m);
    batch_free(&a);
    batch_free(&b);
}

// ---- the sets and the recipe value

static void test_sets_of_one_kind_and_tokenizer(void **state) {
    Fixture *f = *state;
    const Dataset *sets[2] = {&f->cpt_small, &f->sft_mid};
    PtError e;
    assert_int_equal(mix_check_sets(sets, 2, &e), -1);
    assert_non_null(strstr(e.msg, "sft_mid.h5 is sft data and"));
    assert_non_null(strstr(e.msg, "cpt_small.h5 is cpt"));
    sets[1] = &f->other_tok;
    assert_int_equal(mix_check_sets(sets, 2, &e), -1);
    assert_non_null(strstr(e.msg, "different tokenizers (another, tok)"));
    MixLoader m;
    const double w[] = {1, 1};
    assert_int_equal(mix_open(&m, sets, w, 2, 2, 16, 1, 0, 1, &e), -1);
    sets[1] = &f->cpt_big;
    assert_int_equal(mix_check_sets(sets, 2, &e), 0);
}

static void expect_parse(const char *value, int n, const char *const *paths, const double *weights) {
    MixEntry *m;
    int got;
    PtError e;
    if (mix_parse(value, "[data] train", &m, &got, &e)) fail_msg("'%s': %s", value, e.msg);
    assert_int_equal(got, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(m[i].path, paths[i]);
        assert_true(m[i].weight == weights[i]);
    }
    mix_entries_free(m, got);
}

static void expect_parse_error(const char *value, const char *problem) {
    MixEntry *m;
    int n;
    PtError e;
    assert_int_equal(mix_parse(value, "[data] train", &m, &n, &e), -1);
    assert_null(m);
    if (strncmp(e.msg, "[data] train: ", 14) || !strstr(e.msg, problem))
        fail_msg("'%s' gave \"%s\", want \"[data] train: ...%s...\"", value, e.msg, problem);
}

static void test_parse_recipe_value(void **state) {
    (void)state;
    expect_parse("domain.h5:0.8, general.h5:0.2", 2, (const char *[]){"domain.h5", "general.h5"},
                 (const double[]){0.8, 0.2});
    expect_parse("  data/one.h5  ", 1, (const char *[]){"data/one.h5"}, (const double[]){1});
    expect_parse("a.h5,b.h5 ,c.h5", 3, (const char *[]){"a.h5", "b.h5", "c.h5"}, (const double[]){1, 1, 1});
    expect_parse("a.h5 : 3 ,b.h5:0,c:d.h5:1e-1", 3, (const char *[]){"a.h5", "b.h5", "c:d.h5"},
                 (const double[]){3, 0, 0.1});
    expect_parse_error("a.h5:abc, b.h5:0.2", "the weight 'abc' of a.h5 is not a number");
    expect_parse_error("a.h5:0.8x, b.h5:0.2", "the weight '0.8x' of a.h5 is not a number");
    expect_parse_error("a.h5:, b.h5:0.2", "the weight '' of a.h5 is not a number");
    expect_parse_error("a.h5:nan", "is not a number");
    expect_parse_error("a.h5:1e999", "is not a number");
    expect_parse_error("a.h5:0.8, b.h5:-0.2", "the weight -0.2 of b.h5 is negative");
    expect_parse_error("a.h5:0, b.h5:0.0", "every weight is zero");
    expect_parse_error("a.h5:0.5,,b.h5:0.5", "entry 2 is empty");
    expect_parse_error("a.h5:0.5,", "entry 2 is empty");
    expect_parse_error(":0.5", "entry 1 (':0.5') has no path");
    expect_parse_error("a.h5:0.8, b.h5", "1 of the 2 datasets have a weight");
    expect_parse_error("a.h5:0.5, ./b.h5:0.2, a.h5:0.3", "a.h5 is named twice");
    expect_parse_error("", "no dataset given");
    expect_parse_error("  ", "no dataset given");
    char many[400] = "";
    for (int i = 0; i <= MIX_MAX_SETS; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "%sd%d.h5:1",
                                                     i ? "," : "", i);
    expect_parse_error(many, "more than 16 datasets");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_within_one_percent),
        cmocka_unit_test(test_zero_weight_never_drawn),
        cmocka_unit_test(test_ranks_follow_one_stream),
        cmocka_unit_test(test_resume_mid_mixture),
        cmocka_unit_test(test_epochs_per_set),
        cmocka_unit_test(test_one_set_is_the_plain_loader),
        cmocka_unit_test(test_sets_of_one_kind_and_tokenizer),
        cmocka_unit_test(test_parse_recipe_value),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
