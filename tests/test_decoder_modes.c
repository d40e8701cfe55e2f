// test_decoder_modes.c: one decoder for training, evaluation and generation,
// so every numeric option holds on every path. In each mode (fp32, bf16
// matmuls, A16 rounding to bf16 or fp16, int4 weights, and all of them at
// once):
// - KV-cache logits against the full forward's: a prompt fed in one pass
//   runs the very same ops and gives the same bits; passes of 16 rows and
//   single steps attend through the cache kernel instead, whose last-bit
//   differences the 16-bit roundings may carry (then the difference must stay
//   well below the effect of the mode itself);
//   Since each mode moves the full forward's logits well away from fp32's,
//   equal bits in one pass show that the option reached generation;
// - greedy generation gives the tokens of greedy decoding by the full forward
//   rerun over the growing sequence;
// - `pocket generate --matmul bf16` gives those tokens too.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../formats/checkpoint.h"
#include "../model/generate.h"
#include "../qat/qat.h"
#include "test_model_util.h"

typedef struct {
    const char *name;
    ModelOptions opt;
    int int4;          // run the int4 weights (RTN, group 32)
} Mode;

static const Mode MODES[] = {
    {"fp32", {0, MATMUL_FP32, A16_OFF}, 0},
    {"bf16 matmuls", {0, MATMUL_BF16, A16_OFF}, 0},
    {"A16 bf16", {0, MATMUL_FP32, A16_BF16}, 0},
    {"A16 fp16", {0, MATMUL_FP32, A16_FP16}, 0},
    {"int4", {0, MATMUL_FP32, A16_OFF}, 1},
    {"int4 + A16 fp16 + bf16 matmuls", {0, MATMUL_BF16, A16_FP16}, 1},
};
#define N_MODES (int)(sizeof MODES / sizeof MODES[0])

// The tiny preset at the fixtures' weight scale, and its int4 weights.
typedef struct {
    TestModel tm;
    QatState q;
    float *int4;
} Weights;

static void weights_init(Weights *w, uint64_t seed) {
    load_preset("tiny", seed, &w->tm);
    const TensorTable *tt = &w->tm.b.tt;
    QuantSpec spec = {32, 0};
    PtError e;
    if (qat_init(&w->q, tt, &spec, 1, 0, "test", &e) ||
        qat_init_from_weights(&w->q, tt, w->tm.b.params, QAT_INIT_RTN, NULL, NULL, "test", &e))
        fail_msg("%s", e.msg);
    w->int4 = xaligned(tt->total * sizeof(float), "int4 weights");
    qat_forward_weights(&w->tm.dev, &w->q, tt, w->tm.b.params, w->int4);
}

static void weights_free(Weights *w) {
    free(w->int4);
    qat_free(&w->q);
    test_model_free(&w->tm);
}

static void mode_model(Model *m, Weights *w, const Mode *mode) {
    model_init(m, &w->tm.dev, &w->tm.b.cfg, &w->tm.b.tt, mode->int4 ? w->int4 : w->tm.b.params, &mode->opt);
}

// The full forward's logits [T, V].
static float *full_logits(Model *m, const int *tokens, int T) {
    PtError e;
    if (model_plan(m, 1, T, 0, NULL, &e)) fail_msg("%s", e.msg);
    float *logits = xmalloc((size_t)T * m->cfg.vocab_size * sizeof(float), "logits");
    ModelInput in = {.B = 1, .T = T, .tokens = tokens};
    model_forward(m, &in, logits, NULL);
    return logits;
}

// The logits of every position through the cache: in passes of `rows` (0: one
// pass), or one token at a time after a first pass of 10.
static void cached_logits(GenContext *g, const int *tokens, int T, int rows, int steps, float *out) {
    const int V = g->m.cfg.vocab_size, one_pass = g->m.T;
    PtError e;
    gen_reset(g);
    g->m.T = rows ? rows : one_pass;   // gen_feed splits a long prompt into passes of m.T rows
    int done = 0;
    if (steps) {
        if (gen_feed(g, tokens, 10, out, &e)) fail_msg("%s", e.msg);
        for (done = 10; done < T; done++)
            if (gen_feed(g, tokens + done, 1, out + (size_t)done * V, &e)) fail_msg("%s", e.msg);
    } else if (gen_feed(g, tokens, T, out, &e)) {
        fail_msg("%s", e.msg);
    }
    g->m.T = one_pass;
}

static void test_cache_equals_full_forward_every_mode(void **s) {
    (void)s;
    enum { T = 80 };
    Weights w;
    weights_init(&w, 300);
    const int V = w.tm.b.cfg.vocab_size;
    int *tokens = random_tokens(T, V, 301);
    Model fp32;
    mode_model(&fp32, &w, &MODES[0]);
    float *plain = full_logits(&fp32, tokens, T), *cached = xmalloc((size_t)T * V * sizeof(float), "cached");
    for (int i = 0; i < N_MODES; i++) {
        Model m;
        mode_model(&m, &w, &MODES[i]);
        float *full = full_logits(&m, tokens, T);
        const size_t n = (size_t)T * V;
        const double effect = rms_diff(full, plain, n);   // what the mode changes
        GenContext g;
        PtError e;
        if (gen_init(&g, &m, T, &e)) fail_msg("%s", e.msg);
        assert_true(g.m.T >= T);
        cached_logits(&g, tokens, T, 0, 0, cached);
        if (memcmp(cached, full, n * sizeof(float)))   // the same ops on the same rows
            fail_msg("%s: one pass through the cache differs from the full forward", MODES[i].name);
        const int rows[2] = {16, 0}, steps[2] = {0, 1};
        for (int k = 0; k < 2; k++) {
            cached_logits(&g, tokens, T, rows[k], steps[k], cached);
            int exact = 0;
            while (exact < T && !memcmp(cached + (size_t)exact * V, full + (size_t)exact * V, V * sizeof(float)))
                exact++;
            const double rms = rms_diff(cached, full, n), worst = max_diff(cached, full, n);
            printf("  %-31s %s: bitwise equal on the first %d of %d positions, max |diff| %.1e, RMS %.1e "
                   "(the mode's own effect: RMS %.1e)\n", MODES[i].name, steps[k] ? "steps     " : "passes of 16",
                   exact, T, worst, rms, effect);
            assert_true(exact >= 10);   // the first pass attends without the cache kernel
            if (i == 0) assert_true(worst <= 1e-4);
            else assert_true(rms <= effect / 2);
        }
        if (i > 0) assert_true(effect > 1e-3);   // the mode does change the numbers
        gen_free(&g);
        free(full);
        model_free(&m);
    }
    free(plain), free(cached), free(tokens);
    model_free(&fp32);
    weights_free(&w);
}

// Greedy decoding by rerunning the full forward over the growing sequence
// seq[0..n_prompt) each step; returns the smallest top-2 logit gap seen.
static double greedy_full(Model *m, int *seq, int n_prompt, int n_new) {
    double min_gap = INFINITY;
    for (int t = n_prompt; t < n_prompt + n_new; t++) {
        float *logits = full_logits(m, seq, t);
        const float *last = logits + (size_t)(t - 1) * m->cfg.vocab_size;
        int best = 0, second = -1;
        for (int i = 1; i < m->cfg.vocab_size; i++)
            if (last[i] > last[best]) second = best, best = i;
            else if (second < 0 || last[i] > last[second]) second = i;
        min_gap = fmin(min_gap, last[best] - last[second]);
        seq[t] = best;
        free(logits);
    }
    return min_gap;
}

enum { N_PROMPT = 6, N_NEW = 24 };
static const int PROMPT[N_PROMPT] = {3, 141, 59, 26, 53, 58};

static void test_generate_equals_full_forward_every_mode(void **s) {
    (void)s;
    Weights w;
    weights_init(&w, 500);
    int fp32_tokens[N_PROMPT + N_NEW];
    for (int i = 0; i < N_MODES; i++) {
        Model m;
        mode_model(&m, &w, &MODES[i]);
        int seq[N_PROMPT + N_NEW], out[N_NEW];
        memcpy(seq, PROMPT, sizeof PROMPT);
        double gap = greedy_full(&m, seq, N_PROMPT, N_NEW);
        GenContext g;
        GenParams p;
        PtError e;
        gen_params_default(&p);
        p.max_new = N_NEW;
        if (gen_init(&g, &m, N_PROMPT + N_NEW, &e)) fail_msg("%s", e.msg);
        assert_int_equal(generate(&g, PROMPT, N_PROMPT, &p, out, N_NEW, &e), N_NEW);
        int differ = i == 0 ? 0 : memcmp(seq, fp32_tokens, sizeof seq) != 0;
        printf("  %-31s %d greedy tokens equal to the full forward's (min top-2 gap %.1e)%s\n", MODES[i].name, N_NEW,
               gap, i == 0 ? "" : differ ? ", not fp32's" : ", the same as fp32's here");
        assert_true(gap > 1e-4);   // no near-tie that the cache kernel's last bits could flip
        assert_memory_equal(out, seq + N_PROMPT, sizeof out);
        if (i == 0) memcpy(fp32_tokens, seq, sizeof seq);
        gen_free(&g);
        model_free(&m);
    }
    weights_free(&w);
}

// `pocket generate --matmul bf16` against greedy decoding by the full bf16
// forward of the same checkpoint.
static void test_cli_generate_bf16(void **s) {
    (void)s;
    const char *pocket = getenv("POCKET") ? getenv("POCKET") : "./pocket";
    char dir[] = "/tmp/pocket-test-modes-XXXXXX", ckpt[64], cmd[512];
    assert_non_null(mkdtemp(dir));
    snprintf(ckpt, sizeof ckpt, "%s/tiny.h5", dir);
    Weights w;
    weights_init(&w, 700);
    PtError e;
    if (checkpoint_save(ckpt, &w.tm.b, &e)) fail_msg("%s", e.msg);
    Model m;
    mode_model(&m, &w, &MODES[1]);
    int seq[N_PROMPT + N_NEW];
    memcpy(seq, PROMPT, sizeof PROMPT);
    assert_true(greedy_full(&m, seq, N_PROMPT, N_NEW) > 1e-4);
    char expected[512] = "", *p = expected;
    for (int t = N_PROMPT; t < N_PROMPT + N_NEW; t++) p += sprintf(p, "%s%d", t > N_PROMPT ? " " : "", seq[t]);
    snprintf(cmd, sizeof cmd, "%s generate --ckpt %s --matmul bf16 --prompt-ids '3 141 59 26 53 58' --max-new %d "
             "--ids 2>/dev/null", pocket, ckpt, N_NEW);
    FILE *f = popen(cmd, "r");
    char got[512] = "";
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof got, f));
    assert_int_equal(pclose(f), 0);
    got[strcspn(got, "\n")] = 0;
    printf("  pocket generate --matmul bf16: %s\n", got);
    assert_string_equal(got, expected);
    model_free(&m);
    weights_free(&w);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_equals_full_forward_every_mode),
        cmocka_unit_test(test_generate_equals_full_forward_every_mode),
        cmocka_unit_test(test_cli_generate_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
