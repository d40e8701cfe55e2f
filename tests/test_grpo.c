// test_grpo.c: GRPO's loss (model/grpo.h) against the float64 fixture
// tests/ref/make_grpo_fixtures.py writes and checks against TRL 1.16.0's
// GRPOTrainer: each case's loss, metrics and per-token derivatives from the
// fixture's own log-probabilities; then the head on the fixture's model
// (qwen3-untied), the four completions packed into rows as segments: the
// tokens' log-probabilities, the loss and every parameter's gradient; and
// the advantages of groups of rewards, as GRPOTrainer normalises them.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../formats/hf_import.h"
#include "../model/grpo.h"
#include "test_fixture_util.h"
#include "test_model_util.h"

#define FIXTURE "tests/fixtures/grpo/expected.safetensors"
enum { SEQS = 4, PROMPT = 6, COMP = 7, LEN = PROMPT + COMP, CASES = 4 };

typedef struct {
    StFile st;
    int seq[SEQS][LEN], n_tokens[SEQS];
    double logps[SEQS][COMP];         // float64: the stored float32 plus its residual
    float old[SEQS][COMP], ref[SEQS][COMP], adv[SEQS];
} Fixture;

static void read_into(const StFile *st, const char *name, float *out, size_t n) {
    float *v = expected(st, name, n);
    memcpy(out, v, n * sizeof(float));
    free(v);
}

static void fixture_open(Fixture *f) {
    PtError e;
    if (st_open(&f->st, FIXTURE, &e)) fail_msg("%s", e.msg);
    float hi[SEQS * COMP], lo[SEQS * COMP], n[SEQS], ids[COMP];
    read_into(&f->st, "logps", hi, SEQS * COMP);
    read_into(&f->st, "logps_lo", lo, SEQS * COMP);
    read_into(&f->st, "old_logps", &f->old[0][0], SEQS * COMP);
    read_into(&f->st, "ref_logps", &f->ref[0][0], SEQS * COMP);
    read_into(&f->st, "advantages", f->adv, SEQS);
    read_into(&f->st, "n_tokens", n, SEQS);
    for (int k = 0; k < SEQS; k++) {
        char name[32];
        f->n_tokens[k] = (int)n[k];
        for (int t = 0; t < COMP; t++) f->logps[k][t] = (double)hi[k * COMP + t] + lo[k * COMP + t];
        snprintf(name, sizeof name, "prompt%d", k / 2);
        read_into(&f->st, name, ids, PROMPT);
        for (int t = 0; t < PROMPT; t++) f->seq[k][t] = (int)ids[t];
        snprintf(name, sizeof name, "completion%d", k);
        read_into(&f->st, name, ids, COMP);
        for (int t = 0; t < COMP; t++) f->seq[k][PROMPT + t] = (int)ids[t];
    }
}

static GrpoLoss case_loss(const Fixture *f, int c) {
    char name[32];
    snprintf(name, sizeof name, "case%d.params", c);
    float p[4];
    read_into(&f->st, name, p, 4);
    return (GrpoLoss){p[0], p[1], p[2], (int)p[3]};
}

static double rel(double got, double want) { return fabs(got - want) / fmax(fabs(want), 1e-30); }

// Each case's loss, metrics and d loss / d logp from the fixture's own log-probabilities: the loss math alone.
static void test_token_losses_match_trl(void **s) {
    (void)s;
    Fixture f;
    fixture_open(&f);
    int all = 0;
    for (int k = 0; k < SEQS; k++) all += f.n_tokens[k];
    for (int c = 0; c < CASES; c++) {
        const GrpoLoss l = case_loss(&f, c);
        char name[32];
        float want_loss, want_m[3], want_d[SEQS * COMP];
        snprintf(name, sizeof name, "case%d.loss", c);
        read_into(&f.st, name, &want_loss, 1);
        snprintf(name, sizeof name, "case%d.metrics", c);
        read_into(&f.st, name, want_m, 3);
        snprintf(name, sizeof name, "case%d.dlogps", c);
        read_into(&f.st, name, want_d, SEQS * COMP);
        double loss = 0, m[GRPO_METRICS] = {0}, worst = 0;
        for (int k = 0; k < SEQS; k++) {
            // the fixture's derivatives are of the normalised loss: grpo means per completion, bnpo over all
            const double w = l.norm == GRPO_NORM_SEQUENCE ? 1.0 / (SEQS * f.n_tokens[k]) : 1.0 / all;
            for (int t = 0; t < f.n_tokens[k]; t++) {
                double d;
                loss += w * grpo_token_loss(&l, f.logps[k][t], f.old[k][t], f.ref[k][t], f.adv[k], &d, m);
                worst = fmax(worst, rel(w * d, want_d[k * COMP + t]));
            }
        }
        assert_int_equal((int)m[GRPO_TOKENS], all);
        worst = fmax(worst, rel(loss, want_loss));
        const double got_m[3] = {m[GRPO_KL] / all, m[GRPO_CLIP_LOW] / all, m[GRPO_CLIP_HIGH] / all};
        for (int i = 0; i < 3; i++) worst = fmax(worst, want_m[i] == 0 ? fabs(got_m[i]) : rel(got_m[i], want_m[i]));
        printf("case %d (%s, clip [%g, %g], beta %g): loss %.9g (TRL %.9g), kl %.6g, clipped low %.4f high %.4f, "
               "worst relative error %.1e\n", c, grpo_norm_name(l.norm), 1 - l.epsilon_low, 1 + l.epsilon_high, l.beta,
               loss, (double)want_loss, got_m[0], got_m[1], got_m[2], worst);
        assert_true(worst < 1e-6);   // float64 results stored as float32
    }
    st_close(&f.st);
}

// The four sequences packed two to a row of 32 (each its own segment, the
// rest of a row padding), targets the next token, the mask on the rows that
// predict a completion token the completion counts; old and ref per row.
typedef struct {
    int tokens[2 * 32], targets[2 * 32], pos[2 * 32], seg[2 * 32];
    uint8_t mask[2 * 32];
    float old[2 * 32], ref[2 * 32], logp[2 * 32];
    int row0[SEQS], last[SEQS];
    double adv[SEQS];
} Packed;

static void pack(const Fixture *f, Packed *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 2 * 32; i++) p->targets[i] = -1, p->seg[i] = 2;   // padding: a segment of its own
    for (int k = 0; k < SEQS; k++) {
        const int o = (k / 2) * 32 + (k % 2) * LEN;
        p->row0[k] = o, p->last[k] = o + LEN - 1, p->adv[k] = f->adv[k];
        for (int i = 0; i < LEN; i++) {
            p->tokens[o + i] = f->seq[k][i], p->pos[o + i] = i, p->seg[o + i] = k % 2;
            if (i + 1 < LEN) p->targets[o + i] = f->seq[k][i + 1];
            const int t = i + 1 - PROMPT;   // the completion token row i predicts
            if (t >= 0 && t < COMP && t < f->n_tokens[k]) {
                p->mask[o + i] = 1;
                p->old[o + i] = f->old[k][t], p->ref[o + i] = f->ref[k][t];
            }
        }
    }
}

// The loss, the tokens' log-probabilities and every parameter's gradient of the two gradient cases (grpo with the
// KL and an upper clip of its own; bnpo) against the fixture.
static void test_gradients_match_torch(void **s) {
    (void)s;
    Fixture f;
    fixture_open(&f);
    ModelBundle b;
    PtError e;
    if (hf_import("tests/fixtures/hf/qwen3-untied", &b, &e)) fail_msg("%s", e.msg);
    TestModel tm;
    test_model_from_bundle(&tm, &b, NULL);
    Packed p;
    pack(&f, &p);
    assert_int_equal(model_plan(&tm.m, 2, 32, 1, NULL, &e), 0);
    int all = 0;
    for (int k = 0; k < SEQS; k++) all += f.n_tokens[k];
    const int grad_cases[] = {1, 2};
    for (int i = 0; i < 2; i++) {
        const int c = grad_cases[i];
        GrpoHead h = {.loss = case_loss(&f, c), .n = SEQS, .row0 = p.row0, .last = p.last, .advantage = p.adv,
                      .old_logp = p.old, .ref_logp = p.ref, .logp = p.logp};
        const int n = h.loss.norm == GRPO_NORM_SEQUENCE ? SEQS : all;
        LossHead head = grpo_loss_head(&h);
        ModelInput in = {2, 32, p.tokens, p.targets, p.mask, p.pos, p.seg};
        model_zero_grads(&tm.m);
        int count;
        const double loss = model_forward_backward_head(&tm.m, &in, &head, 1.0f / n, &count) / n;
        assert_int_equal(count, n);
        double logp_err = 0;
        for (int k = 0; k < SEQS; k++)
            for (int t = 0; t < f.n_tokens[k]; t++)
                logp_err = fmax(logp_err, rel(p.logp[p.row0[k] + PROMPT - 1 + t], f.logps[k][t]));
        char name[160];
        float want_loss;
        snprintf(name, sizeof name, "case%d.loss", c);
        read_into(&f.st, name, &want_loss, 1);
        const double loss_err = rel(loss, want_loss);
        const char *worst_name;
        double worst;
        snprintf(name, sizeof name, "case%d.grad.", c);
        const double whole = fixture_grad_error(&f.st, name, &tm.b.tt, tm.m.grads, &worst, &worst_name);
        float floor32;
        snprintf(name, sizeof name, "case%d.floor32", c);
        read_into(&f.st, name, &floor32, 1);
        printf("case %d (%s): token log-probabilities within %.1e, loss %.9g within %.1e; the whole gradient within "
               "%.2e (PyTorch in float32: %.2e), its %d tensors each within %.1e (%s)\n", c,
               grpo_norm_name(h.loss.norm), logp_err, loss, loss_err, whole, (double)floor32, tm.b.tt.n, worst,
               worst_name);
        assert_true(logp_err < 2e-6);
        assert_true(loss_err < 1e-6);
        // within 1e-6 of float64, or of float32's floor: twice PyTorch's own float32 run of the case (test_preference)
        assert_true(whole < fmax(1e-6, FLOAT32_FLOOR_MARGIN * floor32));
        assert_true(worst < 3e-6);
    }
    test_model_free(&tm);
    st_close(&f.st);
}

// Advantages of 3 groups of 4 rewards, each way of scaling, against GRPOTrainer's; the all-equal group counted.
static void test_advantages_match_trl(void **s) {
    (void)s;
    Fixture f;
    fixture_open(&f);
    float r32[12], want[12];
    read_into(&f.st, "adv.rewards", r32, 12);
    double rewards[12], adv[12];
    for (int i = 0; i < 12; i++) rewards[i] = r32[i];
    const char *names[GRPO_SCALE_COUNT] = {"adv.group", "adv.batch", "adv.none"};
    for (int scale = 0; scale < GRPO_SCALE_COUNT; scale++) {
        assert_int_equal(grpo_advantages(rewards, 12, 4, scale, adv), 1);
        read_into(&f.st, names[scale], want, 12);
        double worst = 0;
        for (int i = 0; i < 12; i++) worst = fmax(worst, fabs(adv[i] - want[i]) / fmax(1.0, fabs(want[i])));
        printf("%s: within %.1e of TRL's\n", names[scale], worst);
        assert_true(worst < 1e-6);   // float64 stored as float32
    }
    st_close(&f.st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_losses_match_trl),
        cmocka_unit_test(test_gradients_match_torch),
        cmocka_unit_test(test_advantages_match_trl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
