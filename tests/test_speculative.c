// test_speculative: greedy decoding with a DFlash draft (model/speculative.h)
// gives the target's own greedy output token for token: with an untrained
// draft (nearly every block rejected) and with a draft fitted to the
// target's continuations (most of each block accepted, so the cache rolls
// back past rejected rows and the context grows by several rows a step).
// Also: model_capture copies exactly the layer outputs a training pass keeps.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "../model/speculative.h"
#include "test_model_util.h"

enum { N_PROMPTS = 4, PROMPT_LEN = 7, MAX_NEW = 40 };

typedef struct {
    TestModel tm;
    Draft d;
    GenContext g;
    SpecContext s;
    int *prompts[N_PROMPTS];
    int plain[N_PROMPTS][MAX_NEW], n_plain[N_PROMPTS];
} Setup;

static void setup_make(Setup *su, int block) {
    memset(su, 0, sizeof *su);
    load_preset("tiny", 41, &su->tm);
    const ModelConfig *c = &su->tm.b.cfg;
    DraftConfig dc = {.n_layer = 1, .block = block, .mask_token = c->vocab_size - 1, .d_ff = 64};
    draft_layers_default(&dc, 2, c->n_layer);
    draft_alloc(&su->d, c, &dc);
    draft_init(&su->d, 7);
    PtError e;
    assert_int_equal(gen_init(&su->g, &su->tm.m, PROMPT_LEN + MAX_NEW + block, &e), 0);
    su->g.m.T = 5;   // feed in chunks: the captures must follow the cache position across chunks
    assert_int_equal(spec_init(&su->s, &su->g, &su->d, su->d.params, &e), 0);
    GenParams p;
    gen_params_default(&p);
    p.max_new = MAX_NEW;
    for (int k = 0; k < N_PROMPTS; k++) {
        su->prompts[k] = random_tokens(PROMPT_LEN, c->vocab_size, 100 + k);
        su->n_plain[k] = generate(&su->g, su->prompts[k], PROMPT_LEN, &p, su->plain[k], MAX_NEW, &e);
        assert_int_equal(su->n_plain[k], MAX_NEW);
    }
}

static void setup_free(Setup *su) {
    spec_free(&su->s);
    gen_free(&su->g);
    draft_free(&su->d);
    for (int k = 0; k < N_PROMPTS; k++) free(su->prompts[k]);
    test_model_free(&su->tm);
}

// The speculative context again, for the draft as it is now (its vocabulary).
static void respec(Setup *su) {
    PtError e;
    spec_free(&su->s);
    if (spec_init(&su->s, &su->g, &su->d, su->d.params, &e)) fail_msg("%s", e.msg);
}

// Every prompt's output with the draft equals the plain greedy output; returns the mean acceptance.
static double check_same_output(Setup *su) {
    GenParams p;
    gen_params_default(&p);
    p.max_new = MAX_NEW;
    long passes = 0, tokens = 0;
    for (int k = 0; k < N_PROMPTS; k++) {
        int out[MAX_NEW];
        SpecStats st;
        PtError e;
        int n = spec_generate(&su->s, su->prompts[k], PROMPT_LEN, &p, out, MAX_NEW, &st, &e);
        assert_int_equal(n, su->n_plain[k]);
        for (int i = 0; i < n; i++)
            if (out[i] != su->plain[k][i])
                fail_msg("prompt %d: token %d is %d with the draft, %d without", k, i, out[i], su->plain[k][i]);
        passes += st.passes;
        tokens += st.tokens;
        assert_int_equal(st.tokens, n - 1);   // the first new token comes from the prompt's pass
    }
    return (double)tokens / passes;
}

static void test_untrained_draft(void **state) {
    (void)state;
    Setup su;
    setup_make(&su, 4);
    double acc = check_same_output(&su);
    printf("  untrained draft: mean acceptance %.2f tokens per target pass\n", acc);
    setup_free(&su);
}

// Fits the draft to the target's greedy continuations of the prompts (the
// data a draft trains on), then decodes with it.
static void test_fitted_draft(void **state) {
    (void)state;
    Setup su;
    const int blk = 4;
    setup_make(&su, blk);
    const ModelConfig *c = &su.tm.b.cfg;
    Device *d = &su.tm.dev;
    const int T = PROMPT_LEN + MAX_NEW, A = MAX_NEW - blk, S = N_PROMPTS * A, R = blk * S, nt = su.d.cfg.n_target;
    // The target's captures of each whole sequence: a cache pass over it.
    float *captures = xmalloc((size_t)N_PROMPTS * T * nt * c->d_model * sizeof(float), "captures");
    int *seq = xmalloc((size_t)N_PROMPTS * T * sizeof(int), "sequences");
    for (int k = 0; k < N_PROMPTS; k++) {
        memcpy(seq + k * T, su.prompts[k], PROMPT_LEN * sizeof(int));
        memcpy(seq + k * T + PROMPT_LEN, su.plain[k], MAX_NEW * sizeof(int));
        gen_reset(&su.g);
        for (int t = 0; t < T; t += su.g.m.T) {
            const int rows = T - t < su.g.m.T ? T - t : su.g.m.T;
            model_capture(&su.g.m, su.d.cfg.target_layers, nt, captures + ((size_t)k * T + t) * nt * c->d_model);
            model_feed(&su.g.m, seq + k * T + t, rows, NULL);
        }
    }
    model_capture(&su.g.m, NULL, 0, NULL);
    // A block at every anchor of the continuation
    int *tokens = xmalloc((size_t)R * sizeof(int), "tokens"), *targets = xmalloc((size_t)R * sizeof(int), "targets");
    int *anchors = xmalloc((size_t)S * sizeof(int), "anchors");
    for (int k = 0; k < N_PROMPTS; k++)
        for (int j = 0; j < A; j++) {
            const int s = k * A + j, pos = PROMPT_LEN + j;
            anchors[s] = pos;
            for (int i = 0; i < blk; i++) {
                tokens[i * S + s] = i ? su.d.cfg.mask_token : seq[k * T + pos];
                targets[i * S + s] = i && pos + i < T ? seq[k * T + pos + i] : -1;
            }
        }
    float pw[DRAFT_MAX_BLOCK];
    draft_pos_weights(pw, blk, 7.0f);
    DraftModel dm;
    PtError e;
    draft_model_init(&dm, d, c, &su.d.cfg, &su.d.tt, su.d.params, su.tm.m.w.embed, su.tm.m.w.lm_head, MATMUL_FP32);
    assert_int_equal(draft_model_plan(&dm, N_PROMPTS, T, A, 1, &e), 0);
    float *m1 = xcalloc(su.d.tt.total, sizeof(float), "m"), *v1 = xcalloc(su.d.tt.total, sizeof(float), "v");
    AdamWConfig ac = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f};
    DraftInput in = {.block_tokens = tokens, .anchors = anchors, .targets = targets, .pos_weight = pw};
    double first = 0, loss = 0, weight = 0;
    for (int step = 0; step < 300; step++) {
        draft_zero_grads(&dm);
        loss = draft_forward_backward(&dm, captures, &in, 1.0f, &weight);
        loss /= weight;
        if (!step) first = loss;
        OP(d, grad_scale, dm.grads, su.d.tt.total, 1.0f / (float)weight);
        OP(d, adamw_step, su.d.params, dm.grads, m1, v1, &su.d.tt, &ac, ac.lr, step + 1);
    }
    printf("  fitting the draft: loss %.3f -> %.3f\n", first, loss);
    assert_true(loss < 0.5 * first);
    double acc = check_same_output(&su);
    printf("  fitted draft: mean acceptance %.2f tokens per target pass (block %d)\n", acc, blk);
    assert_true(acc > 2.0);
    // Restricted to the tokens of the outputs, the draft still proposes them; restricted to
    // one token the target never says, it is never right: one token per pass.
    const int V = c->vocab_size;
    uint64_t *counts = xcalloc((size_t)V, sizeof(uint64_t), "counts");
    for (int k = 0; k < N_PROMPTS; k++)
        for (int i = 0; i < MAX_NEW; i++) counts[su.plain[k][i]]++;
    int never = 0;
    while (counts[never]) never++;
    draft_pick_vocab(&su.d, counts, V, V);
    respec(&su);
    double acc_said = check_same_output(&su);
    printf("  fitted draft, vocabulary of the %d tokens said: mean acceptance %.2f\n", su.d.n_vocab, acc_said);
    assert_true(acc_said > 2.0);
    memset(counts, 0, (size_t)V * sizeof(uint64_t));
    counts[never] = 1;
    draft_pick_vocab(&su.d, counts, V, V);
    respec(&su);
    assert_int_equal(su.d.n_vocab, 1);
    assert_true(check_same_output(&su) == 1.0);
    free(counts);
    draft_model_free(&dm);
    free(captures), free(seq), free(tokens), free(targets), free(anchors), free(m1), free(v1);
    setup_free(&su);
}

static void test_capture(void **state) {
    (void)state;
    TestModel tm;
    load_preset("tiny", 5, &tm);
    const ModelConfig *c = &tm.b.cfg;
    const int B = 2, T = 6, N = B * T, H = c->d_model, layers[2] = {1, 0};
    PtError e;
    assert_int_equal(model_plan(&tm.m, B, T, 1, NULL, &e), 0);
    float *cap = xcalloc((size_t)N * 2 * H, sizeof(float), "captures");
    model_capture(&tm.m, layers, 2, cap);
    int *tokens = random_tokens(N, c->vocab_size, 3);
    ModelInput in = {.B = B, .T = T, .tokens = tokens};
    model_forward(&tm.m, &in, NULL, NULL);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < 2; k++)   // a training plan keeps every layer's output: x[l + 1]
            assert_true(memcmp(cap + ((size_t)r * 2 + k) * H, tm.m.a.x + ((size_t)(layers[k] + 1) * N + r) * H,
                               (size_t)H * sizeof(float)) == 0);
    free(cap);
    free(tokens);
    test_model_free(&tm);
}

// The vocabulary: the most frequent ids, ties to the lower id, never-seen ids left out, in increasing order.
static void test_pick_vocab(void **state) {
    (void)state;
    const uint64_t counts[10] = {5, 0, 1, 5, 0, 0, 0, 9, 0, 0};
    Draft d = {0};
    draft_pick_vocab(&d, counts, 10, 3);
    assert_int_equal(d.n_vocab, 3);
    assert_int_equal(d.vocab[0], 0), assert_int_equal(d.vocab[1], 3), assert_int_equal(d.vocab[2], 7);
    draft_pick_vocab(&d, counts, 10, 2);   // 0 and 3 tie at 5: the lower id
    assert_int_equal(d.n_vocab, 2);
    assert_int_equal(d.vocab[0], 0), assert_int_equal(d.vocab[1], 7);
    draft_pick_vocab(&d, counts, 10, 10);   // only the 4 seen
    assert_int_equal(d.n_vocab, 4);
    assert_int_equal(d.vocab[1], 2);
    PtError e;
    assert_int_equal(draft_vocab_check(d.vocab, d.n_vocab, 10, "x", &e), 0);
    const int bad[2][3] = {{1, 1, 4}, {1, 4, 10}};
    assert_int_equal(draft_vocab_check(bad[0], 3, 10, "x", &e), -1);
    assert_non_null(strstr(e.msg, "entry 1 (1) does not follow 1"));
    assert_int_equal(draft_vocab_check(bad[1], 3, 10, "x", &e), -1);
    assert_non_null(strstr(e.msg, "entry 2 is token 10, outside [0, 10)"));
    free(d.vocab);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture),
        cmocka_unit_test(test_pick_vocab),
        cmocka_unit_test(test_untrained_draft),
        cmocka_unit_test(test_fitted_draft),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
