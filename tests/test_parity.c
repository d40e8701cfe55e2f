// Parity with transformers: tiny HF checkpoints written by
// tests/ref/make_model_fixtures.py (Qwen3ForCausalLM / LlamaForCausalLM in
// fp32, eager attention) are imported through the `pocket import` code and
// run forward+backward; logits, loss and every gradient must match the
// fixture's values computed by transformers.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include "../formats/hf_import.h"
#include "test_model_util.h"
#include "test_fixture_util.h"

#define FIXTURES "tests/fixtures/hf/"

static int *read_ids(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int cap = 64, *ids = malloc(cap * sizeof(int)), v;
    *n = 0;
    while (fscanf(f, "%d", &v) == 1) {
        if (*n == cap) ids = realloc(ids, (cap *= 2) * sizeof(int));
        ids[(*n)++] = v;
    }
    fclose(f);
    return ids;
}

static void check_fixture(const char *name) {
    char dir[256], path[300];
    snprintf(dir, sizeof dir, FIXTURES "%s", name);
    PtError e;
    ModelBundle b;
    if (hf_import(dir, &b, &e)) fail_msg("import %s: %s", dir, e.msg);
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    int N;
    int *tokens = read_ids(path, &N);
    assert_true(N >= 64);
    int *targets = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) targets[i] = i + 1 < N ? tokens[i + 1] : -1;

    TestModel tm;
    test_model_from_bundle(&tm, &b, NULL);
    Model *m = &tm.m;
    const TensorTable *tt = &tm.b.tt;
    assert_int_equal(model_plan(m, 1, N, 1, NULL, &e), 0);
    int V = tm.b.cfg.vocab_size, count;
    float *logits = malloc((size_t)N * V * sizeof(float));
    ModelInput in = {.B = 1, .T = N, .tokens = tokens, .targets = targets};
    model_zero_grads(m);
    double sum = model_forward_backward(m, &in, 1.0f / (N - 1), logits, &count);
    assert_int_equal(count, N - 1);

    StFile ref;
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    if (st_open(&ref, path, &e)) fail_msg("%s", e.msg);
    float *ref_logits = expected(&ref, "logits", (size_t)N * V);
    double max_err = 0;
    for (size_t i = 0; i < (size_t)N * V; i++) max_err = fmax(max_err, fabs(logits[i] - ref_logits[i]));
    float *ref_loss = expected(&ref, "loss", 1);
    double loss = sum / count, rel_loss = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
    printf("  %s: logits max|err| %.2e, loss %.7f vs %.7f (rel %.1e)\n", name, max_err, loss, ref_loss[0], rel_loss);
    assert_true(max_err <= 1e-4);
    assert_true(rel_loss <= 1e-5);

    const char *worst_name;
    double worst;
    fixture_grad_error(&ref, "grad.", tt, m->grads, &worst, &worst_name);
    if (worst > 1e-4) fail_msg("%s: gradient of %s off by %.2e relative", name, worst_name, worst);
    printf("  %s: %d gradients, worst relative error %.2e\n", name, tt->n, worst);
    st_close(&ref);
    free(ref_logits);
    free(ref_loss);
    free(logits);
    free(tokens);
    free(targets);
    test_model_free(&tm);
}

static void test_qwen3_tied_bf16(void **s) { (void)s; check_fixture("qwen3-tied"); }
static void test_qwen3_untied_sharded(void **s) { (void)s; check_fixture("qwen3-untied"); }
static void test_llama_no_qk_norm_f16(void **s) { (void)s; check_fixture("llama-noqk"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_tied_bf16),
        cmocka_unit_test(test_qwen3_untied_sharded),
        cmocka_unit_test(test_llama_no_qk_norm_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
