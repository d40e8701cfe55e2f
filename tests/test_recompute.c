// test_recompute: activation recompute (ModelOptions.recompute) changes memory, not
// results. On tiny models (tied, untied with odd sizes, Llama without QK-norm),
// packed rows with segment ids and positions, masked targets, fp32 and bf16
// matmuls, with A16 rounding, on 1 and 2 threads: loss, logits and every
// gradient with recompute on equal recompute off bit for bit, over two steps.
// The plan keeps less with recompute on, and says so. A pass over fewer rows
// than planned (GRPO's packed rollouts) gives the bits of a plan of just
// those rows, recompute on and off. Through `pocket train`
// ([train] recompute, matmul), recompute changes no loss and bf16 trains.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <glob.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "../formats/checkpoint.h"
#include "test_model_util.h"
#include "test_cli_util.h"

typedef struct {
    int B, T;
    int *tokens, *targets, *pos, *seg;
    uint8_t *mask;
} TokenBatch;

// Two rows; row 1 packs three examples (positions restart, segment ids change)
// and some targets are uncounted (-1 or mask 0).
static void token_batch_init(TokenBatch *b, int B, int T, int V, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    size_t N = (size_t)B * T;
    b->B = B, b->T = T;
    b->tokens = malloc(N * sizeof(int)), b->targets = malloc(N * sizeof(int));
    b->pos = malloc(N * sizeof(int)), b->seg = malloc(N * sizeof(int)), b->mask = malloc(N);
    for (int row = 0; row < B; row++) {
        int seg = 0, start = 0;
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)row * T + t;
            if (row == 1 && (t == T / 3 || t == 2 * T / 3)) seg++, start = t;
            b->tokens[n] = (int)(rng_next(&r) % (uint64_t)V);
            b->pos[n] = t - start;
            b->seg[n] = seg;
            b->mask[n] = (uint8_t)(t % 7 != 3);
        }
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)row * T + t;
            b->targets[n] = t + 1 < T && b->seg[n + 1] == b->seg[n] ? b->tokens[n + 1] : -1;
        }
    }
}

static void token_batch_free(TokenBatch *b) { free(b->tokens), free(b->targets), free(b->pos), free(b->seg), free(b->mask); }

static void model_for(TestModel *t, const char *preset, int recompute, int bf16, int a16, int B, int T) {
    ModelConfig cfg;
    PtError e;
    assert_int_equal(config_preset(&cfg, preset, &e), 0);
    ModelBundle b;
    bundle_alloc(&b, &cfg);
    bundle_init_random(&b, 11);
    ModelOptions opt = {recompute, bf16 ? MATMUL_BF16 : MATMUL_FP32, a16};
    test_model_from_bundle(t, &b, &opt);
    assert_int_equal(model_plan(&t->m, B, T, 1, NULL, &e), 0);
}

// Loss, logits and gradients of two consecutive steps (the second after a
// small update of the weights, so stale activations would show).
typedef struct {
    double loss[2];
    float *logits, *grads;
} Result;

static void run_steps(Model *m, const TokenBatch *b, Result *res) {
    size_t NV = (size_t)b->B * b->T * m->cfg.vocab_size, P = m->tt->total;
    res->logits = malloc(NV * sizeof(float));
    res->grads = malloc(2 * P * sizeof(float));
    ModelInput in = {.B = b->B, .T = b->T, .tokens = b->tokens, .targets = b->targets, .mask = b->mask,
                     .pos = b->pos, .seg = b->seg};
    for (int step = 0; step < 2; step++) {
        model_zero_grads(m);
        int count;
        res->loss[step] = model_forward_backward(m, &in, 0.05f, step ? res->logits : NULL, &count);
        assert_true(count > 0);
        memcpy(res->grads + step * P, m->grads, P * sizeof(float));
        for (size_t i = 0; i < P; i++) m->weights[i] -= 0.01f * m->grads[i];
    }
}

static void check_same(const char *preset, int bf16, int a16, int threads) {
    omp_set_num_threads(threads);
    const int B = 2, T = 37;
    TestModel off, on;
    model_for(&off, preset, 0, bf16, a16, B, T);
    model_for(&on, preset, 1, bf16, a16, B, T);
    assert_true(on.m.arena_bytes < off.m.arena_bytes);
    TokenBatch b;
    token_batch_init(&b, B, T, off.b.cfg.vocab_size, 5);
    Result r_off, r_on;
    run_steps(&off.m, &b, &r_off);
    run_steps(&on.m, &b, &r_on);
    size_t NV = (size_t)B * T * off.b.cfg.vocab_size, P = off.b.tt.total;
    for (int s = 0; s < 2; s++)
        if (memcmp(&r_off.loss[s], &r_on.loss[s], sizeof(double)))
            fail_msg("%s bf16=%d a16=%d threads=%d step %d: loss %.17g (off) vs %.17g (on)", preset, bf16, a16,
                     threads, s, r_off.loss[s], r_on.loss[s]);
    assert_memory_equal(r_off.logits, r_on.logits, NV * sizeof(float));
    for (size_t i = 0; i < 2 * P; i++)
        if (memcmp(&r_off.grads[i], &r_on.grads[i], sizeof(float)))
            fail_msg("%s bf16=%d a16=%d threads=%d: gradient %zu of step %zu differs: %.9g vs %.9g", preset, bf16,
                     a16, threads, i % P, i / P, r_off.grads[i], r_on.grads[i]);
    free(r_off.logits), free(r_off.grads), free(r_on.logits), free(r_on.grads);
    token_batch_free(&b);
    test_model_free(&off);
    test_model_free(&on);
    omp_set_num_threads(2);
}

static void test_tiny(void **s) {
    (void)s;
    for (int threads = 1; threads <= 2; threads++) {
        check_same("tiny", 0, A16_OFF, threads);
        check_same("tiny", 1, A16_OFF, threads);
    }
}
static void test_tiny_untied(void **s) {
    (void)s;
    check_same("tiny-untied", 0, A16_OFF, 2);
    check_same("tiny-untied", 1, A16_BF16, 2);
}
static void test_tiny_llama(void **s) {
    (void)s;
    check_same("tiny-llama", 0, A16_FP16, 2);
    check_same("tiny-llama", 1, A16_OFF, 1);
}

// Two rows through a plan of five and a plan of two: the same loss, logits and gradients, bit for bit.
static void test_fewer_rows_than_planned(void **s) {
    (void)s;
    const int T = 37;
    for (int recompute = 0; recompute <= 1; recompute++) {
        TestModel big, two;
        model_for(&big, "tiny-untied", recompute, 0, A16_OFF, 5, T);
        model_for(&two, "tiny-untied", recompute, 0, A16_OFF, 2, T);
        TokenBatch b;
        token_batch_init(&b, 2, T, big.b.cfg.vocab_size, 5);
        Result r_big, r_two;
        run_steps(&big.m, &b, &r_big);
        run_steps(&two.m, &b, &r_two);
        const size_t NV = (size_t)2 * T * big.b.cfg.vocab_size, P = big.b.tt.total;
        assert_memory_equal(r_big.loss, r_two.loss, sizeof r_big.loss);
        assert_memory_equal(r_big.logits, r_two.logits, NV * sizeof(float));
        assert_memory_equal(r_big.grads, r_two.grads, 2 * P * sizeof(float));
        free(r_big.logits), free(r_big.grads), free(r_two.logits), free(r_two.grads);
        token_batch_free(&b);
        test_model_free(&big);
        test_model_free(&two);
    }
    printf("2 rows through a plan of 5: the bits of a plan of 2 (loss, logits, gradients), recompute off and on\n");
}

// ---- through the recipe: pocket train with [train] recompute and matmul.



static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = 0;
    fclose(f);
    return text;
}

// The "loss" values of metrics.jsonl, as text ("identical" means identical).
static char *losses(const char *run) {
    char cmd[1400], path[600];
    snprintf(path, sizeof path, "%s/losses.txt", run);
    snprintf(cmd, sizeof cmd, "grep -o '\"loss\": *[-0-9.e+]*' %s/metrics.jsonl > %s", run, path);
    assert_int_equal(sh("%s", cmd), 0);
    return slurp(path);
}

// The run's one checkpoint (save_interval = 0: only the final one).
static const char *final_checkpoint(const char *dir, const char *run, char *out, size_t cap) {
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/%s/ckpt-*.h5", dir, run);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc != 1) fail_msg("expected one checkpoint matching %s", pattern);
    snprintf(out, cap, "%s", g.gl_pathv[0]);
    globfree(&g);
    return out;
}

// Four updates of a tiny model on one thread: recompute on gives the same
// losses and final parameters, bit for bit, as off; matmul = bf16 trains
// (finite, close losses) and says so in the plan.
static void test_recipe_keys_reach_the_model(void **s) {
    (void)s;
    char dir[] = "/tmp/pocket_recompute_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[400];
    FILE *f;
    assert_int_equal(make_tiny_checkpoint(dir), 0);
    assert_int_equal(sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/tok/corpus.txt "
                        "--out %s/cpt.h5 >/dev/null", pocket(), dir), 0);
    snprintf(path, sizeof path, "%s/cpt.ini", dir);
    f = fopen(path, "w");
    fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/cpt.h5\n[train]\nmicro_batch = 2\nseq_len = 32\n"
               "steps = 4\neval_interval = 0\nsave_interval = 0\nthreads = 1\n[optim]\nlr = 0.003\nwarmup = 1\n", dir, dir);
    fclose(f);
    const char *runs[3][2] = {{"off", ""}, {"on", "--set train.recompute=true"}, {"bf16", "--set train.matmul=bf16"}};
    for (int i = 0; i < 3; i++)
        assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/%s %s > %s/%s.log", pocket(), dir, dir,
                            runs[i][0], runs[i][1], dir, runs[i][0]), 0);
    char run[400];
    snprintf(run, sizeof run, "%s/off.log", dir);
    char *log_off = slurp(run);
    snprintf(run, sizeof run, "%s/on.log", dir);
    char *log_on = slurp(run);
    snprintf(run, sizeof run, "%s/bf16.log", dir);
    char *log_bf16 = slurp(run);
    assert_non_null(strstr(log_off, "recompute off"));
    assert_non_null(strstr(log_on, "recompute on"));
    assert_non_null(strstr(log_bf16, "matmuls bf16"));
    assert_non_null(strstr(log_off, "matmuls fp32"));
    snprintf(run, sizeof run, "%s/off", dir);
    char *l_off = losses(run);
    snprintf(run, sizeof run, "%s/on", dir);
    char *l_on = losses(run);
    snprintf(run, sizeof run, "%s/bf16", dir);
    char *l_bf16 = losses(run);
    assert_true(strlen(l_off) > 0);
    assert_string_equal(l_off, l_on);
    assert_true(strcmp(l_off, l_bf16) != 0);   // bf16 really changes the products
    double a, b;
    const char *p = l_off, *q = l_bf16;
    int n = 0;
    while ((p = strstr(p, "\"loss\":")) && (q = strstr(q, "\"loss\":"))) {
        assert_int_equal(sscanf(p + 7, " %lf", &a), 1);
        assert_int_equal(sscanf(q + 7, " %lf", &b), 1);
        assert_true(isfinite(b) && fabs(a - b) <= 0.02 * fabs(a));
        p++, q++, n++;
    }
    assert_int_equal(n, 4);
    ModelBundle x, y;   // the final parameters, bit for bit
    PtError e;
    if (checkpoint_load(final_checkpoint(dir, "off", run, sizeof run), &x, &e)) fail_msg("%s", e.msg);
    if (checkpoint_load(final_checkpoint(dir, "on", run, sizeof run), &y, &e)) fail_msg("%s", e.msg);
    assert_int_equal(x.tt.total, y.tt.total);
    assert_memory_equal(x.params, y.params, x.tt.total * sizeof(float));
    bundle_free(&x);
    bundle_free(&y);
    free(log_off), free(log_on), free(log_bf16), free(l_off), free(l_on), free(l_bf16);
    sh("rm -rf %s", dir);
}

// The printed plan names the mode and the memory recompute saves.
static void test_plan_line(void **s) {
    (void)s;
    TestModel tm;
    PtError e;
    char *text = NULL;
    size_t len = 0;
    for (int recompute = 0; recompute <= 1; recompute++) {
        model_for(&tm, "tiny", recompute, 0, A16_OFF, 2, 16);
        FILE *f = open_memstream(&text, &len);
        assert_int_equal(model_plan(&tm.m, 2, 16, 1, f, &e), 0);
        fclose(f);
        assert_non_null(strstr(text, recompute ? "recompute on" : "recompute off"));
        assert_non_null(strstr(text, recompute ? "MiB less than off" : "would save"));
        free(text);
        test_model_free(&tm);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_tiny_untied),
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_fewer_rows_than_planned),
        cmocka_unit_test(test_plan_line),
        cmocka_unit_test(test_recipe_keys_reach_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
