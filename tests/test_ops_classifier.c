// test_ops_classifier: the chunked float lm head + cross-entropy against the
// full double reference, independence from the chunk size, and the rule that
// an uncounted position (mask 0 or target -1) changes nothing.
// Bounds (normwise): loss 1e-6 relative, logits/dh/dW 2e-6 (fp32 dot products
// of length C = 45, softmax sums in double, dW sums over <= 37 rows); 2e-5 for
// the gradients when the logits are in the hundreds (see the test).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "test_ops_util.h"

enum { N = 37, C = 45, V = 301 };

typedef struct {
    double *h, *W;
    float *hf, *Wf;
    int targets[N];
    uint8_t mask[N];
} ClsData;

static void data_init(ClsData *d, Rng *r, double h_sd) {
    d->h = rand_d(r, N * C, h_sd);
    d->W = rand_d(r, V * C, 0.3);
    d->hf = to_float_exact(d->h, N * C);
    d->Wf = to_float_exact(d->W, V * C);
    for (int n = 0; n < N; n++) {
        d->targets[n] = n % 9 == 4 ? -1 : (int)(rng_next(r) % V);
        d->mask[n] = n < 5 || n % 7 == 3 ? 0 : 1;   // a masked prefix, like a chat prompt
    }
    d->targets[N - 1] = V - 1;   // the last vocabulary row
}

static void data_free(ClsData *d) {
    free(d->h); free(d->W); free(d->hf); free(d->Wf);
}

typedef struct { double loss; int count; float *dh, *dW, *logits; } ClsRun;

static ClsRun run_fast(const ClsData *d, int chunk, float scale, int want_logits, const int *targets) {
    ClsRun o = {0};
    o.dh = zeros_f(N * C);
    o.dW = zeros_f(V * C);
    o.logits = want_logits ? zeros_f((size_t)N * V) : NULL;
    float *scratch = zeros_f((size_t)chunk * V);
    o.loss = classifier_forward_backward(o.dh, o.dW, o.logits, scratch, chunk, d->hf, d->Wf, targets ? targets : d->targets,
                                         d->mask, N, C, V, scale, &o.count);
    free(scratch);
    return o;
}

static void run_free(ClsRun *o) {
    free(o->dh); free(o->dW); free(o->logits);
}

static double rel_ff(const float *a, const float *b, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        mag = fmax(mag, fabs((double)b[i]));
    }
    return mag > 0.0 ? diff / mag : diff;
}

static void test_classifier_vs_ref(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 41);
    // The second case gives logits in the hundreds (expf would overflow without
    // the max shift). Its float logits are off by ~1e-4 absolute, which moves
    // the nearly one-hot softmax by ~1e-4 relative, hence the looser gradient bound.
    double h_sds[] = {1.0, 60.0}, grad_tol[] = {2e-6, 2e-5};
    for (int s = 0; s < 2; s++) {
        ClsData d;
        data_init(&d, &r, h_sds[s]);
        const float scale = 1.0f / 23.0f;
        double *dh = zeros_d(N * C), *dW = zeros_d(V * C), *logits = zeros_d((size_t)N * V);
        double loss_ref = classifier_ref(dh, dW, d.h, d.W, d.targets, d.mask, N, C, V, scale);
        matmul_forward_ref(logits, d.h, d.W, N, C, V);
        int count_ref = 0;
        for (int n = 0; n < N; n++) count_ref += d.targets[n] >= 0 && d.mask[n];
        // Gradients accumulate onto whatever the buffers hold.
        ClsRun o = {0};
        o.dh = rand_f(&r, N * C, 0.01);
        o.dW = rand_f(&r, V * C, 0.01);
        o.logits = zeros_f((size_t)N * V);
        float *dh0 = copy_f(o.dh, N * C), *dW0 = copy_f(o.dW, V * C), *scratch = zeros_f(8 * V);
        o.loss = classifier_forward_backward(o.dh, o.dW, o.logits, scratch, 8, d.hf, d.Wf, d.targets, d.mask, N, C, V,
                                             scale, &o.count);
        double e_loss = fabs(o.loss - loss_ref) / fabs(loss_ref);
        double e_logits = rel_err_f(o.logits, logits, (size_t)N * V);
        double e_dh = rel_err_delta_f(o.dh, dh0, dh, N * C), e_dW = rel_err_delta_f(o.dW, dW0, dW, V * C);
        printf("  h_sd=%-3.0f loss %.6f (ref %.6f, rel %.1e) count %d logits %.1e dh %.1e dW %.1e\n", h_sds[s],
               o.loss, loss_ref, e_loss, o.count, e_logits, e_dh, e_dW);
        assert_int_equal(o.count, count_ref);
        assert_true(e_loss < 1e-6);
        assert_true(e_logits < 2e-6 && e_dh < grad_tol[s] && e_dW < grad_tol[s]);
        // Without gradients or logits (evaluation) the loss is the same; the
        // chunks then skip uncounted rows, so only the order of the sum differs.
        float *scratch2 = zeros_f(8 * V);
        int count2 = -1;
        double loss2 = classifier_forward_backward(NULL, NULL, NULL, scratch2, 8, d.hf, d.Wf, d.targets, d.mask, N, C, V,
                                                   scale, &count2);
        assert_true(fabs(loss2 - o.loss) <= 1e-12 * fabs(o.loss) && count2 == o.count);
        free(scratch2);
        free(dh); free(dW); free(logits); free(dh0); free(dW0); free(scratch);
        run_free(&o);
        data_free(&d);
    }
}

static void test_classifier_chunk_independent(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 42);
    ClsData d;
    data_init(&d, &r, 1.0);
    int chunks[] = {1, 3, N, 64};
    ClsRun base = run_fast(&d, chunks[0], 0.5f, 1, NULL);
    for (int i = 1; i < 4; i++) {
        ClsRun o = run_fast(&d, chunks[i], 0.5f, 1, NULL);
        double e_loss = fabs(o.loss - base.loss) / base.loss;
        double e_dh = rel_ff(o.dh, base.dh, N * C), e_dW = rel_ff(o.dW, base.dW, V * C);
        double e_lg = rel_ff(o.logits, base.logits, (size_t)N * V);
        printf("  chunk %2d vs 1: loss %.1e logits %.1e dh %.1e dW %.1e\n", chunks[i], e_loss, e_lg, e_dh, e_dW);
        assert_int_equal(o.count, base.count);
        assert_true(e_loss < 1e-6 && e_lg < 1e-6 && e_dh < 1e-6 && e_dW < 1e-6);
        run_free(&o);
    }
    run_free(&base);
    data_free(&d);
}

// A masked-out position's target (even -1 or a different id) changes neither
// the loss nor any gradient, bit for bit.
static void test_classifier_masked_target(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 43);
    ClsData d;
    data_init(&d, &r, 1.0);
    assert_true(d.mask[10] == 0 && d.mask[2] == 0);
    int chunks[] = {1, 3, N};
    for (int i = 0; i < 3; i++) {
        ClsRun a = run_fast(&d, chunks[i], 0.25f, 0, NULL);
        int t2[N];
        memcpy(t2, d.targets, sizeof t2);
        t2[10] = (t2[10] + 17) % V;
        t2[2] = -1;
        ClsRun b = run_fast(&d, chunks[i], 0.25f, 0, t2);
        assert_true(a.loss == b.loss && a.count == b.count);
        assert_memory_equal(a.dh, b.dh, N * C * sizeof(float));
        assert_memory_equal(a.dW, b.dW, V * C * sizeof(float));
        for (int n = 0; n < N; n++)   // and an uncounted row gets no gradient at all
            if (!d.mask[n] || d.targets[n] < 0)
                for (int c = 0; c < C; c++) assert_true(a.dh[n * C + c] == 0.0f);
        run_free(&a);
        run_free(&b);
    }
    data_free(&d);
}

// Nothing counted: loss 0, count 0, gradients untouched.
static void test_classifier_nothing_counted(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 44);
    ClsData d;
    data_init(&d, &r, 1.0);
    memset(d.mask, 0, sizeof d.mask);
    float *dh = rand_f(&r, N * C, 1.0), *dW = rand_f(&r, V * C, 1.0);
    float *dh0 = copy_f(dh, N * C), *dW0 = copy_f(dW, V * C), *scratch = zeros_f(4 * V);
    int count = -1;
    double loss = classifier_forward_backward(dh, dW, NULL, scratch, 4, d.hf, d.Wf, d.targets, d.mask, N, C, V, 1.0f,
                                              &count);
    assert_true(loss == 0.0 && count == 0);
    assert_memory_equal(dh, dh0, N * C * sizeof(float));
    assert_memory_equal(dW, dW0, V * C * sizeof(float));
    free(dh); free(dW); free(dh0); free(dW0); free(scratch);
    data_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classifier_vs_ref),
        cmocka_unit_test(test_classifier_chunk_independent),
        cmocka_unit_test(test_classifier_masked_target),
        cmocka_unit_test(test_classifier_nothing_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
