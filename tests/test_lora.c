// test_lora.c: LoRA adapters in the decoder (model/lora.h, model.c).
// - adapter gradients (dA, dB of every targeted projection) against central
//   finite differences of the loss, on tiny Qwen3 (tied) and Llama (no
//   QK-norm) models, every target, rank 3;
// - the base is frozen: the gradients are laid out by the adapter's table and
//   the base weights get none;
// - with B = 0 (PEFT's init) the adapter changes no bit of the base's logits;
// - with LoRA dropout: the gradients against finite differences at fixed
//   masks; only the training pass drops; a seed gives the same bits again and
//   with recompute;
// - recompute gives the same gradient bits; the KV cache fed in one pass the
//   full forward's logit bits with the adapter on;
// - the target list parser and the recipe-facing checks.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include "test_model_util.h"

typedef struct {
    TestModel tm;
    LoraAdapter ad;
} Adapted;

// A preset at the fixtures' scale with an adapter on `targets`, A and B
// both random (a zero B would leave dA zero).
static void adapted_init(Adapted *x, const char *preset, unsigned targets, const ModelOptions *opt) {
    load_preset(preset, 7, &x->tm);
    if (opt) x->tm.m.opt = *opt;
    lora_random_adapter(&x->ad, &x->tm.b.cfg, targets);
    model_use_lora(&x->tm.m, &x->ad.cfg, &x->ad.tt, x->ad.params);
}

static void adapted_free(Adapted *x) {
    test_model_free(&x->tm);
    lora_adapter_free(&x->ad);
}

// The mean loss; with dropout on, the loss model_forward_backward sees (the
// forward alone never drops): its masks are the seed's, so finite
// differences hold them fixed (the gradients it adds are not read).
typedef struct {
    Model *m;
    const ModelInput *in;
} LossAt;

static double mean_loss(void *ctx) {
    const LossAt *at = ctx;
    int count;
    double s = at->m->lora->dropout > 0 ? model_forward_backward(at->m, at->in, 0.0f, NULL, &count)
                                        : model_forward(at->m, at->in, NULL, &count);
    return s / count;
}

// dropout > 0: the gradients of the loss with y = base(x) + s B A dropout(x)
// (PEFT's formula; the masks fixed by the seed, every target its own).
static void check_finite_differences(const char *preset, float dropout) {
    Adapted x;
    adapted_init(&x, preset, (1u << LORA_N_TARGETS) - 1, NULL);
    x.ad.cfg.dropout = dropout;
    Model *m = &x.tm.m;
    model_set_dropout_seed(m, 0xfeedu);
    const int B = 2, T = 8, N = B * T;
    PtError e;
    assert_int_equal(model_plan(m, B, T, 1, NULL, &e), 0);
    assert_ptr_equal(model_grad_table(m), &x.ad.tt);
    int *tokens = random_tokens(N, x.tm.b.cfg.vocab_size, 3), *targets = random_tokens(N, x.tm.b.cfg.vocab_size, 4);
    ModelInput in = {.B = B, .T = T, .tokens = tokens, .targets = targets};
    model_zero_grads(m);
    int count;
    model_forward_backward(m, &in, 1.0f / N, NULL, &count);
    assert_int_equal(count, N);
    // The base gets no gradient: its views are NULL.
    assert_null(m->g.embed);
    assert_null(m->g.layer[0].wq);
    float *grads = xmalloc(x.ad.tt.total * sizeof(float), "grads");
    memcpy(grads, m->grads, x.ad.tt.total * sizeof(float));
    LossAt at = {m, &in};
    char why[256];
    const double worst = lora_check_finite_differences(&x.ad, grads, mean_loss, &at, why);
    if (worst < 0) fail_msg("%s, dropout %g: %s", preset, dropout, why);
    printf("  %s, dropout %g: %d adapter tensors, worst relative error against finite differences %.2e\n", preset,
           dropout, x.ad.tt.n, worst);
    free(grads);
    free(tokens);
    free(targets);
    adapted_free(&x);
}

static void test_finite_differences_qwen3(void **s) { (void)s; check_finite_differences("tiny", 0.0f); }
static void test_finite_differences_llama(void **s) { (void)s; check_finite_differences("tiny-llama", 0.0f); }
static void test_finite_differences_dropout(void **s) {
    (void)s;
    check_finite_differences("tiny", 0.3f);
    check_finite_differences("tiny-llama", 0.2f);
}

// With B = 0 the adapter adds exact zeros: the base's logits, bit for bit;
// dA is zero and dB is not.
static void test_zero_b_is_the_base(void **s) {
    (void)s;
    Adapted x;
    adapted_init(&x, "tiny-untied", (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_DOWN), NULL);
    lora_init(x.ad.params, &x.ad.tt, &x.ad.cfg, LORA_INIT_PEFT, 1);
    const int T = 12, V = x.tm.b.cfg.vocab_size;
    int *tokens = random_tokens(T, V, 8), *targets = random_tokens(T, V, 9);
    ModelInput in = {.B = 1, .T = T, .tokens = tokens, .targets = targets};
    PtError e;
    float *with = xmalloc((size_t)T * V * sizeof(float), "logits");
    float *without = xmalloc((size_t)T * V * sizeof(float), "logits");
    assert_int_equal(model_plan(&x.tm.m, 1, T, 1, NULL, &e), 0);
    model_zero_grads(&x.tm.m);
    model_forward_backward(&x.tm.m, &in, 1.0f / T, with, NULL);
    Model base;
    model_init(&base, &x.tm.dev, &x.tm.b.cfg, &x.tm.b.tt, x.tm.b.params, NULL);
    assert_int_equal(model_plan(&base, 1, T, 0, NULL, &e), 0);
    model_forward(&base, &in, without, NULL);
    assert_memory_equal(with, without, (size_t)T * V * sizeof(float));
    double a2 = 0, b2 = 0;
    for (int i = 0; i < x.ad.tt.n; i++) {
        const TensorInfo *t = &x.ad.tt.t[i];
        for (size_t j = 0; j < t->numel; j++) {
            double g = x.tm.m.grads[t->offset + j];
            *(t->flags & TF_LORA_B ? &b2 : &a2) += g * g;
        }
    }
    assert_true(a2 == 0 && b2 > 0);
    // PEFT's A: uniform in +-1/sqrt(in).
    const TensorInfo *a = &x.ad.tt.t[0];
    double bound = 1 / sqrt((double)a->shape[1]), most = 0;
    for (size_t j = 0; j < a->numel; j++) most = fmax(most, fabs(x.ad.params[a->offset + j]));
    assert_true(most <= bound && most > 0.9 * bound);
    model_free(&base);
    free(with);
    free(without);
    free(tokens);
    free(targets);
    adapted_free(&x);
}

// Recompute on and off give the same gradient bits; the cache fed in one
// pass gives the full forward's logits, with bf16 matmuls and A16 on.
static void test_recompute_and_cache(void **s) {
    (void)s;
    ModelOptions opt[2] = {{0, MATMUL_BF16, A16_FP16}, {1, MATMUL_BF16, A16_FP16}};
    const int T = 10;
    float *g[2];
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        Adapted x;
        adapted_init(&x, "tiny", (1u << LORA_N_TARGETS) - 1, &opt[k]);
        int V = x.tm.b.cfg.vocab_size, *tokens = random_tokens(T, V, 11), *targets = random_tokens(T, V, 12);
        ModelInput in = {.B = 1, .T = T, .tokens = tokens, .targets = targets};
        PtError e;
        assert_int_equal(model_plan(&x.tm.m, 1, T, 1, NULL, &e), 0);
        model_zero_grads(&x.tm.m);
        float *full = xmalloc((size_t)T * V * sizeof(float), "logits");
        model_forward_backward(&x.tm.m, &in, 1.0f / T, full, NULL);
        n = x.ad.tt.total;
        g[k] = xmalloc(n * sizeof(float), "grads");
        memcpy(g[k], x.tm.m.grads, n * sizeof(float));
        if (k == 0) {
            Model c;
            model_init(&c, &x.tm.dev, &x.tm.b.cfg, &x.tm.b.tt, x.tm.b.params, &opt[0]);
            model_use_lora(&c, &x.ad.cfg, &x.ad.tt, x.ad.params);
            assert_int_equal(model_plan_cache(&c, T, &e), 0);
            float *cached = xmalloc((size_t)T * V * sizeof(float), "logits");
            model_feed(&c, tokens, T, cached);
            assert_memory_equal(cached, full, (size_t)T * V * sizeof(float));
            free(cached);
            model_free(&c);
        }
        free(full);
        free(tokens);
        free(targets);
        adapted_free(&x);
    }
    assert_memory_equal(g[0], g[1], n * sizeof(float));
    free(g[0]);
    free(g[1]);
}

// LoRA dropout in the decoder: model_forward_backward drops (its loss is not
// the forward's), the forward and evaluation never do; one seed gives the same
// bits twice and with recompute on; another seed other masks.
static void test_dropout_in_the_decoder(void **s) {
    (void)s;
    const int T = 10;
    float *g[3];
    double dropped[3], plain[3];
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        ModelOptions opt = {k == 1, MATMUL_FP32, 0};
        Adapted x;
        adapted_init(&x, "tiny", (1u << LORA_N_TARGETS) - 1, &opt);
        x.ad.cfg.dropout = 0.25f;
        int V = x.tm.b.cfg.vocab_size, *tokens = random_tokens(T, V, 11), *targets = random_tokens(T, V, 12);
        ModelInput in = {.B = 1, .T = T, .tokens = tokens, .targets = targets};
        PtError e;
        assert_int_equal(model_plan(&x.tm.m, 1, T, 1, NULL, &e), 0);
        plain[k] = model_forward(&x.tm.m, &in, NULL, NULL);
        model_set_dropout_seed(&x.tm.m, k == 2 ? 77u : 76u);
        model_zero_grads(&x.tm.m);
        dropped[k] = model_forward_backward(&x.tm.m, &in, 1.0f / T, NULL, NULL);
        assert_true(model_forward(&x.tm.m, &in, NULL, NULL) == plain[k]);
        n = x.ad.tt.total;
        g[k] = xmalloc(n * sizeof(float), "grads");
        memcpy(g[k], x.tm.m.grads, n * sizeof(float));
        if (k == 0) {   // the same seed again: the same bits
            model_zero_grads(&x.tm.m);
            assert_true(model_forward_backward(&x.tm.m, &in, 1.0f / T, NULL, NULL) == dropped[0]);
            assert_memory_equal(x.tm.m.grads, g[0], n * sizeof(float));
        }
        free(tokens);
        free(targets);
        adapted_free(&x);
    }
    assert_true(plain[0] == plain[1] && plain[0] == plain[2]);
    assert_true(dropped[0] != plain[0]);
    assert_true(dropped[1] == dropped[0]);
    assert_memory_equal(g[0], g[1], n * sizeof(float));   // recompute: the same gradient bits
    assert_true(dropped[2] != dropped[0]);
    assert_true(memcmp(g[0], g[2], n * sizeof(float)) != 0);
    for (int k = 0; k < 3; k++) free(g[k]);
}

static void test_targets_and_checks(void **s) {
    (void)s;
    PtError e;
    unsigned mask;
    assert_int_equal(lora_targets_parse("q, v,down_proj", &mask, "x", &e), 0);
    assert_int_equal(mask, (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_DOWN));
    char list[64];
    lora_targets_format((1u << LORA_N_TARGETS) - 1, list, sizeof list);
    assert_string_equal(list, "q,k,v,o,gate,up,down");
    assert_int_equal(lora_targets_parse("q,lm_head", &mask, "x", &e), -1);
    assert_non_null(strstr(e.msg, "unknown LoRA target 'lm_head'"));
    assert_int_equal(lora_targets_parse(" , ", &mask, "x", &e), -1);
    LoraConfig lc = {.rank = 0, .alpha = 1, .targets = 1};
    assert_int_equal(lora_config_check(&lc, "x", &e), -1);
    assert_non_null(strstr(e.msg, "rank 0"));
    lc.rank = 4;
    assert_int_equal(lora_config_check(&lc, "x", &e), 0);
    ModelConfig c;
    assert_int_equal(config_preset(&c, "tiny-untied", &e), 0);
    TensorTable tt;
    lora_table_build(&tt, &c, &(LoraConfig){.rank = 4, .alpha = 8, .targets = (1u << LORA_O) | (1u << LORA_DOWN)});
    assert_int_equal(tt.n, c.n_layer * 4);
    assert_string_equal(tt.t[0].name, "base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight");
    assert_int_equal(tt.t[0].shape[0], 4);
    assert_int_equal(tt.t[0].shape[1], c.n_head * c.head_dim);
    assert_string_equal(tt.t[3].name, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
    assert_int_equal(tt.t[3].shape[0], c.d_model);
    assert_int_equal(lora_table_index(&tt, 1, LORA_DOWN, 1), 7);
    assert_int_equal(lora_table_index(&tt, 1, LORA_Q, 0), -1);
    tensor_table_free(&tt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_targets_and_checks),
        cmocka_unit_test(test_finite_differences_qwen3),
        cmocka_unit_test(test_finite_differences_llama),
        cmocka_unit_test(test_finite_differences_dropout),
        cmocka_unit_test(test_dropout_in_the_decoder),
        cmocka_unit_test(test_zero_b_is_the_base),
        cmocka_unit_test(test_recompute_and_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
