// test_onpolicy_loss.c: on-policy distillation's loss, the reversed KL of
// classifier_distill through the distillation head, on the fixture's student
// (qwen3-untied) with its teacher (llama-noqk), against the float64 fixture
// tests/ref/make_onpolicy_fixtures.py writes and checks against TRL 1.16.0's
// GKDTrainer.generalized_jsd_loss at beta = 1: the loss, the mean KL and
// every student parameter's gradient, at temperatures 1 and 2. One sequence
// a row, its completion tokens scored; the teacher's forward gives the
// hidden states the head reads, as a run's teacher does.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../formats/hf_import.h"
#include "../model/distill_head.h"
#include "test_fixture_util.h"
#include "test_model_util.h"

#define FIXTURE "tests/fixtures/onpolicy/expected.safetensors"
enum { SEQS = 4, PROMPT = 6, COMP = 7, LEN = PROMPT + COMP, T_ROW = 16, CASES = 2 };

static float read_one(const StFile *st, const char *name) {
    float *v = expected(st, name, 1), x = v[0];
    free(v);
    return x;
}

static void test_loss_and_gradients_match_trl(void **s) {
    (void)s;
    StFile st;
    PtError e;
    if (st_open(&st, FIXTURE, &e)) fail_msg("%s", e.msg);
    ModelBundle sb, tb;
    if (hf_import("tests/fixtures/hf/qwen3-untied", &sb, &e)) fail_msg("%s", e.msg);
    if (hf_import("tests/fixtures/hf/llama-noqk", &tb, &e)) fail_msg("%s", e.msg);
    TestModel student, teacher;
    test_model_from_bundle(&student, &sb, NULL);
    test_model_from_bundle(&teacher, &tb, NULL);
    assert_int_equal(model_plan(&student.m, SEQS, T_ROW, 1, NULL, &e), 0);
    assert_int_equal(model_plan(&teacher.m, SEQS, T_ROW, 0, NULL, &e), 0);
    // one sequence a row from position 0; completion token t is the target of the position before it
    int tokens[SEQS * T_ROW] = {0}, targets[SEQS * T_ROW], pos[SEQS * T_ROW], seg[SEQS * T_ROW] = {0};
    uint8_t mask[SEQS * T_ROW] = {0};
    float n_tok[SEQS];
    float *n_stored = expected(&st, "n_tokens", SEQS);
    memcpy(n_tok, n_stored, sizeof n_tok);
    free(n_stored);
    int all = 0;
    for (int k = 0; k < SEQS; k++) {
        char name[16];
        snprintf(name, sizeof name, "seq%d", k);
        float *ids = expected(&st, name, LEN);
        const int n = (int)n_tok[k];
        all += n;
        for (int t = 0; t < T_ROW; t++) {
            const int i = k * T_ROW + t;
            tokens[i] = t < LEN ? (int)ids[t] : 0;
            pos[i] = t;
            targets[i] = t + 1 < LEN ? (int)ids[t + 1] : -1;
            mask[i] = t >= PROMPT - 1 && t < PROMPT - 1 + n;
        }
        free(ids);
    }
    const ModelInput in = {SEQS, T_ROW, tokens, targets, mask, pos, seg};
    for (int c = 0; c < CASES; c++) {
        char name[160];
        snprintf(name, sizeof name, "case%d.T", c);
        const float T = read_one(&st, name);
        DistillTarget target = {.ce_weight = 0, .kd_weight = 1, .temperature = T, .reverse = 1};
        target.h = model_forward_hidden(&teacher.m, &in);
        target.W = teacher.m.w.lm_head;
        DistillHead dh = {.target = &target};
        const LossHead head = distill_loss_head(&dh);
        model_zero_grads(&student.m);
        int count;
        const double loss = model_forward_backward_head(&student.m, &in, &head, 1.0f / all, &count) / all;
        assert_int_equal(count, all);
        snprintf(name, sizeof name, "case%d.loss", c);
        const double want_loss = read_one(&st, name);
        snprintf(name, sizeof name, "case%d.kl", c);
        const double want_kl = read_one(&st, name), kl = dh.sums.kl / all;
        const double loss_err = fabs(loss - want_loss) / want_loss, kl_err = fabs(kl - want_kl) / want_kl;
        const char *worst_name;
        double worst;
        snprintf(name, sizeof name, "case%d.grad.", c);
        const double whole = fixture_grad_error(&st, name, &student.b.tt, student.m.grads, &worst, &worst_name);
        snprintf(name, sizeof name, "case%d.floor32", c);
        const double floor32 = read_one(&st, name);
        printf("T %g: loss %.9g within %.1e, mean KL within %.1e; the whole gradient within %.2e (PyTorch in float32: "
               "%.2e), its %d tensors each within %.1e (%s)\n", (double)T, loss, loss_err, kl_err, whole, floor32,
               student.b.tt.n, worst, worst_name);
        assert_true(loss_err < 1e-6);
        assert_true(kl_err < 1e-6);
        // within 1e-6 of float64, or of float32's floor: twice PyTorch's own float32 run of the case (test_preference)
        assert_true(whole < fmax(1e-6, FLOAT32_FLOOR_MARGIN * floor32));
        assert_true(worst < 3e-6);
    }
    test_model_free(&student);
    test_model_free(&teacher);
    st_close(&st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_and_gradients_match_trl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
