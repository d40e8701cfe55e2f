// test_preference.c: the preference losses (model/preference.h) against the
// float64 fixture tests/ref/make_preference_fixtures.py writes from TRL
// 1.16.0's DPOTrainer and CPOTrainer: each pair's loss, metrics and
// derivatives from the fixture's log-probabilities; then the head on the
// fixture's model (qwen3-untied): the responses' log-probabilities with the
// pairs packed into rows as the loader packs them, the loss, and every
// parameter's gradient.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../formats/hf_import.h"
#include "../model/preference.h"
#include "test_fixture_util.h"
#include "test_model_util.h"

#define FIXTURE "tests/fixtures/pref/expected.safetensors"
enum { PAIRS = 3, CANDS = 2 * PAIRS, CASES = 8 };

typedef struct {
    StFile st;
    double logps[CANDS], ref[CANDS];   // float64: the stored float32 plus its residual
    float *n_tokens;
    int *seq[CANDS];   // prompt + response of candidate k (chosen 2g, rejected 2g+1)
    int len[CANDS], prompt_len[CANDS];
} Fixture;

static void fixture_open(Fixture *f) {
    PtError e;
    if (st_open(&f->st, FIXTURE, &e)) fail_msg("%s", e.msg);
    float *hi = expected(&f->st, "logps", CANDS), *lo = expected(&f->st, "logps_lo", CANDS);
    float *ref_hi = expected(&f->st, "ref_logps", CANDS), *ref_lo = expected(&f->st, "ref_logps_lo", CANDS);
    for (int k = 0; k < CANDS; k++) {
        f->logps[k] = (double)hi[k] + lo[k];
        f->ref[k] = (double)ref_hi[k] + ref_lo[k];
    }
    free(hi), free(lo), free(ref_hi), free(ref_lo);
    f->n_tokens = expected(&f->st, "n_tokens", CANDS);
    for (int g = 0; g < PAIRS; g++) {
        char name[64];
        snprintf(name, sizeof name, "pair%d.prompt", g);
        const StTensor *tp = st_find(&f->st, name);
        assert_non_null(tp);
        float *prompt = expected(&f->st, name, tp->numel);
        for (int side = 0; side < 2; side++) {
            snprintf(name, sizeof name, "pair%d.%s", g, side ? "rejected" : "chosen");
            const StTensor *tr = st_find(&f->st, name);
            assert_non_null(tr);
            float *resp = expected(&f->st, name, tr->numel);
            const int k = 2 * g + side, n = (int)(tp->numel + tr->numel);
            f->seq[k] = malloc((size_t)n * sizeof(int));
            for (size_t i = 0; i < tp->numel; i++) f->seq[k][i] = (int)prompt[i];
            for (size_t i = 0; i < tr->numel; i++) f->seq[k][tp->numel + i] = (int)resp[i];
            f->len[k] = n;
            f->prompt_len[k] = (int)tp->numel;
            free(resp);
        }
        free(prompt);
    }
}

static void fixture_close(Fixture *f) {
    free(f->n_tokens);
    for (int k = 0; k < CANDS; k++) free(f->seq[k]);
    st_close(&f->st);
}

static PrefLoss case_loss(Fixture *f, int c) {
    char name[64];
    snprintf(name, sizeof name, "case%d.params", c);
    float *p = expected(&f->st, name, 5);
    PrefLoss l = {(int)p[0], p[1], p[2], p[3], p[4]};
    free(p);
    return l;
}

static double rel(double got, double want) { return fabs(got - want) / fmax(fabs(want), 1e-30); }

// Each case's loss (mean over the pairs, plus the sft term over them all),
// metrics and d loss / d logps from the fixture's own log-probabilities: the
// loss math alone.
static void test_pair_losses_match_trl(void **s) {
    (void)s;
    Fixture f;
    fixture_open(&f);
    for (int c = 0; c < CASES; c++) {
        PrefLoss l = case_loss(&f, c);
        char name[64];
        snprintf(name, sizeof name, "case%d.loss", c);
        float *want_loss = expected(&f.st, name, 1);
        snprintf(name, sizeof name, "case%d.metrics", c);
        float *want_m = expected(&f.st, name, PREF_METRICS);
        snprintf(name, sizeof name, "case%d.dlogps", c);
        float *want_d = expected(&f.st, name, CANDS);
        int n_tokens[CANDS];
        for (int k = 0; k < CANDS; k++) n_tokens[k] = (int)f.n_tokens[k];
        double d_sft, sft = pref_sft_loss(l.sft_weight, f.logps, n_tokens, PAIRS, &d_sft);
        double loss = 0, m[PREF_METRICS] = {0}, worst = 0;
        for (int g = 0; g < PAIRS; g++) {
            double dc, dr;
            loss += pref_pair_loss(&l, f.logps[2 * g], f.logps[2 * g + 1], f.ref[2 * g], f.ref[2 * g + 1],
                                   n_tokens[2 * g], n_tokens[2 * g + 1], &dc, &dr, m);
            // the fixture's derivatives are of the mean: ours are per pair
            worst = fmax(worst, rel(dc / PAIRS + d_sft, want_d[2 * g]));
            worst = fmax(worst, rel(dr / PAIRS, want_d[2 * g + 1]));
        }
        assert_true(l.sft_weight > 0 ? sft > 0 : sft == 0);
        worst = fmax(worst, rel(loss / PAIRS + sft, want_loss[0]));
        for (int k = 0; k < PREF_METRICS; k++) worst = fmax(worst, rel(m[k] / PAIRS, want_m[k]));
        printf("case %d (%s, beta %g, e %g, gamma %g, sft %g): loss %.9g (TRL %.9g), worst relative error %.1e\n", c,
               pref_loss_name(l.kind), l.beta, l.label_smoothing, l.simpo_gamma, l.sft_weight, loss / PAIRS + sft,
               (double)want_loss[0], worst);
        // the expected values are float64 results stored as float32 (6e-8 each)
        assert_true(worst < 1e-6);
        free(want_loss);
        free(want_m);
        free(want_d);
    }
    fixture_close(&f);
}

// The pairs packed into rows of T as the loader packs them: a pair's two
// sequences side by side, each its own segment, SFT targets and the mask
// on response tokens; pairs per row as many as fit.
typedef struct {
    int B, T;
    int *tokens, *targets, *pos, *seg;
    uint8_t *mask;
    int row0[CANDS], last[CANDS];
} Packed;

static void pack(const Fixture *f, int T, Packed *p) {
    p->T = T;
    p->B = 0;
    int used = T;   // the first pair opens a row
    const size_t cap = (size_t)CANDS * T;
    p->tokens = calloc(cap, sizeof(int));
    p->targets = malloc(cap * sizeof(int));
    p->pos = calloc(cap, sizeof(int));
    p->seg = calloc(cap, sizeof(int));
    p->mask = calloc(cap, 1);
    for (size_t i = 0; i < cap; i++) p->targets[i] = -1;
    int s = 0;
    for (int g = 0; g < PAIRS; g++) {
        const int need = f->len[2 * g] + f->len[2 * g + 1];
        assert_true(need <= T);
        if (used + need > T) {
            // padding of the row before: a segment of its own
            for (int i = used; i < T && p->B > 0; i++) p->seg[(p->B - 1) * T + i] = s + 1;
            p->B++, used = 0, s = 0;
        }
        for (int side = 0; side < 2; side++, s++) {
            const int k = 2 * g + side, o = (p->B - 1) * T + used;
            for (int i = 0; i < f->len[k]; i++) {
                p->tokens[o + i] = f->seq[k][i];
                p->pos[o + i] = i;
                p->seg[o + i] = s;
                if (i + 1 < f->len[k]) {
                    p->targets[o + i] = f->seq[k][i + 1];
                    p->mask[o + i] = i + 1 >= f->prompt_len[k];
                }
            }
            p->row0[k] = o;
            p->last[k] = o + f->len[k] - 1;
            used += f->len[k];
        }
    }
    for (int i = used; i < T; i++) p->seg[(p->B - 1) * T + i] = s;
}

static void packed_free(Packed *p) {
    free(p->tokens);
    free(p->targets);
    free(p->pos);
    free(p->seg);
    free(p->mask);
}

static ModelInput packed_input(const Packed *p) {
    return (ModelInput){p->B, p->T, p->tokens, p->targets, p->mask, p->pos, p->seg};
}

static void load_fixture_model(TestModel *tm) {
    ModelBundle b;
    PtError e;
    if (hf_import("tests/fixtures/hf/qwen3-untied", &b, &e)) fail_msg("%s", e.msg);
    test_model_from_bundle(tm, &b, NULL);
}

// The responses' log-probabilities with the pairs packed in rows of 40
// (two rows) and of 128 (one row): transformers' float64 numbers, each
// sequence fed alone, within float32's rounding.
static void test_logps_match_transformers_packed(void **s) {
    (void)s;
    Fixture f;
    fixture_open(&f);
    TestModel tm;
    load_fixture_model(&tm);
    const int widths[] = {40, 128};
    for (int w = 0; w < 2; w++) {
        Packed p;
        pack(&f, widths[w], &p);
        PtError e;
        assert_int_equal(model_plan(&tm.m, p.B, p.T, 0, NULL, &e), 0);
        double logps[CANDS];
        int n_tokens[CANDS];
        PrefHead ph = {.loss = {PREF_SIGMOID, 0.1, 0, 0, 0}, .measure_only = 1, .n_pairs = PAIRS, .row0 = p.row0,
                       .last = p.last, .logps = logps, .n_tokens = n_tokens};
        LossHead head = pref_loss_head(&ph);
        ModelInput in = packed_input(&p);
        int count;
        model_forward_head(&tm.m, &in, &head, &count);
        assert_int_equal(count, PAIRS);
        double worst = 0;
        for (int k = 0; k < CANDS; k++) {
            assert_int_equal(n_tokens[k], (int)f.n_tokens[k]);
            worst = fmax(worst, rel(logps[k], f.logps[k]));
        }
        printf("rows of %d (%d rows): log-probabilities within %.1e of transformers' (relative)\n", p.T, p.B, worst);
        assert_true(worst < 2e-6);
        packed_free(&p);
    }
    test_model_free(&tm);
    fixture_close(&f);
}

// The loss and every parameter's gradient of the five gradient cases
// (sigmoid DPO; conservative DPO; IPO; SimPO with label smoothing; DPO with
// the sft term) against the fixture.
static void test_gradients_match_torch(void **s) {
    (void)s;
    Fixture f;
    fixture_open(&f);
    TestModel tm;
    load_fixture_model(&tm);
    Packed p;
    pack(&f, 40, &p);
    PtError e;
    assert_int_equal(model_plan(&tm.m, p.B, p.T, 1, NULL, &e), 0);
    const int grad_cases[] = {0, 1, 3, 5, 6};
    for (int i = 0; i < 5; i++) {
        const int c = grad_cases[i];
        double logps[CANDS], ref[CANDS];
        int n_tokens[CANDS];
        for (int k = 0; k < CANDS; k++) ref[k] = f.ref[k];
        PrefHead ph = {.loss = case_loss(&f, c), .n_pairs = PAIRS, .row0 = p.row0, .last = p.last, .ref = ref,
                       .logps = logps, .n_tokens = n_tokens};
        LossHead head = pref_loss_head(&ph);
        ModelInput in = packed_input(&p);
        model_zero_grads(&tm.m);
        int count;
        const double loss = model_forward_backward_head(&tm.m, &in, &head, 1.0f / PAIRS, &count) / PAIRS;
        char name[160];
        snprintf(name, sizeof name, "case%d.loss", c);
        float *want_loss = expected(&f.st, name, 1);
        const double loss_err = rel(loss, want_loss[0]);
        free(want_loss);
        // every tensor's gradient, normwise against the fixture's
        const char *worst_name;
        double worst;
        snprintf(name, sizeof name, "case%d.grad.", c);
        const double all = fixture_grad_error(&f.st, name, &tm.b.tt, tm.m.grads, &worst, &worst_name);
        snprintf(name, sizeof name, "case%d.floor32", c);
        float *floor32 = expected(&f.st, name, 1);
        printf("case %d (%s, sft %g): loss %.9g, relative error %.1e; the whole gradient within %.2e (PyTorch in "
               "float32: %.2e), its %d tensors each within %.1e (%s)\n", c, pref_loss_name(ph.loss.kind),
               ph.loss.sft_weight, loss, loss_err, all, (double)floor32[0], tm.b.tt.n, worst, worst_name);
        // Within 1e-6 of the float64 gradient or, where float32 itself cannot get there, within twice PyTorch's
        // own float32 run of the case (1.45e-6 for case 1: its log-probabilities of ~47 carry ~2e-6 of float32
        // rounding, which beta and the sigmoid pass on to each sequence's weight).
        assert_true(all < fmax(1e-6, FLOAT32_FLOOR_MARGIN * floor32[0]));
        free(floor32);
        assert_true(loss_err < 1e-6);
        assert_true(worst < 5e-6);
    }
    packed_free(&p);
    test_model_free(&tm);
    fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_losses_match_trl),
        cmocka_unit_test(test_logps_match_transformers_packed),
        cmocka_unit_test(test_gradients_match_torch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
