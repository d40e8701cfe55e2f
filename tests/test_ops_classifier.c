// test_ops_classifier: the lm head + cross-entropy of every device
// (test_backends.h) against the full double reference, independence from the
// chunk of rows a CPU device holds (CpuKernels.classifier_rows), and the rule
// that an uncounted position (mask 0, target -1, no targets) changes nothing,
// and a CPU device's bits on any thread count; classifier_scaled (a scale
// a row, chosen from the row's loss) against the reference a row at a time.
// Bounds (normwise): loss 1e-6 relative, logits/dh/dW 2e-6 (fp32 dot products
// of length C = 45, softmax sums in double, dW sums over <= 37 rows); 2e-5 for
// the gradients when the logits are in the hundreds (see the test). A GPU
// device is held to 1e-4 (dev_tol): cuBLASLt's fp32 products sum in another
// order and its expf is within 2 ulp. The bit-for-bit rules (masked targets,
// nothing counted) hold on every device.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "test_backends.h"
#include "test_ops_util.h"

enum { N = 37, C = 45, V = 301 };


// Device d with its classifier holding `rows` token rows at a time. The row
// count is a CPU kernel parameter, so for a CPU device this is a new device
// in *tmp with the same kernels; a device of another backend runs as it is.
static Device *with_rows(Device *tmp, Device *d, int rows) {
    if (d->be != backend_cpu()) return d;
    const CpuKernels *k = cpu_kernels(d);
    const CpuKernels kr = {k->f32, k->bf16, rows};
    cpu_device_init(tmp, d->threads, &kr);
    dev_reserve(tmp, classifier_workspace_bytes(tmp, N, V));
    return tmp;
}

static void with_rows_free(Device *used, Device *tmp) {
    if (used == tmp) dev_free(tmp);
}

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

// The classifier on dev over host arrays (mirrored there and back): dh, dW
// and logits may be NULL; dh and dW accumulate onto what they hold; targets
// and mask NULL as the op takes them.
static double classify_n(Device *dev, int n, float *dh, float *dW, float *logits, const float *h, const float *W,
                         const int *targets, const uint8_t *mask, float scale, int *count) {
    Mirrors mr = mirrors_on(dev);
    const size_t hb = (size_t)n * C * sizeof(float), wb = (size_t)V * C * sizeof(float);
    float *dh_d = dh ? mirror(&mr, dh, hb) : NULL;
    float *dW_d = dW ? mirror(&mr, dW, wb) : NULL;
    float *lg_d = logits ? mirror(&mr, logits, (size_t)n * V * sizeof(float)) : NULL;
    const float *h_d = mirror(&mr, h, hb), *W_d = mirror(&mr, W, wb);
    const int *t_d = targets ? mirror(&mr, targets, (size_t)n * sizeof(int)) : NULL;
    const uint8_t *m_d = mask ? mirror(&mr, mask, (size_t)n) : NULL;
    double loss = OP(dev, classifier, dh_d, dW_d, lg_d, h_d, W_d, t_d, m_d, n, C, V, scale, count, MATMUL_FP32);
    if (dh) fetch(dev, dh, dh_d, hb);
    if (dW) fetch(dev, dW, dW_d, wb);
    if (logits) fetch(dev, logits, lg_d, (size_t)n * V * sizeof(float));
    mirrors_free(&mr);
    return loss;
}

static double classify(Device *dev, float *dh, float *dW, float *logits, const float *h, const float *W,
                       const int *targets, const uint8_t *mask, float scale, int *count) {
    return classify_n(dev, N, dh, dW, logits, h, W, targets, mask, scale, count);
}

static ClsRun run_rows(Device *dev, const ClsData *d, int rows, float scale, int want_logits, const int *targets) {
    ClsRun o = {0};
    o.dh = zeros_f(N * C);
    o.dW = zeros_f(V * C);
    o.logits = want_logits ? zeros_f((size_t)N * V) : NULL;
    Device tmp, *used = with_rows(&tmp, dev, rows);
    o.loss = classify(used, o.dh, o.dW, o.logits, d->hf, d->Wf, targets ? targets : d->targets, d->mask, scale,
                      &o.count);
    with_rows_free(used, &tmp);
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
        float *dh0 = rand_f(&r, N * C, 0.01), *dW0 = rand_f(&r, V * C, 0.01);
        for (int i = 0; i < n_devs; i++) {
            Device tmp, *dev = with_rows(&tmp, &devs[i].dev, 8);   // several chunks of rows
            ClsRun o = {0};
            o.dh = copy_f(dh0, N * C);
            o.dW = copy_f(dW0, V * C);
            o.logits = zeros_f((size_t)N * V);
            o.loss = classify(dev, o.dh, o.dW, o.logits, d.hf, d.Wf, d.targets, d.mask, scale, &o.count);
            double e_loss = fabs(o.loss - loss_ref) / fabs(loss_ref);
            double e_logits = rel_err_f(o.logits, logits, (size_t)N * V);
            double e_dh = rel_err_delta_f(o.dh, dh0, dh, N * C), e_dW = rel_err_delta_f(o.dW, dW0, dW, V * C);
            printf("  %-26s h_sd=%-3.0f loss %.6f (ref %.6f, rel %.1e) count %d logits %.1e dh %.1e dW %.1e\n",
                   devs[i].name, h_sds[s], o.loss, loss_ref, e_loss, o.count, e_logits, e_dh, e_dW);
            assert_int_equal(o.count, count_ref);
            const TestDevice *td = &devs[i];
            if (!(e_loss < dev_tol(td, 1e-6, 1e-4) && e_logits < dev_tol(td, 2e-6, 1e-4) &&
                  e_dh < dev_tol(td, grad_tol[s], 1e-4) && e_dW < dev_tol(td, grad_tol[s], 1e-4)))
                fail_msg("%s: classifier h_sd=%.0f off the reference", devs[i].name, h_sds[s]);
            // Without gradients or logits (evaluation) the loss is the same; the
            // chunks then skip uncounted rows, so only the order of the sum differs.
            int count2 = -1;
            double loss2 = classify(dev, NULL, NULL, NULL, d.hf, d.Wf, d.targets, d.mask, scale, &count2);
            assert_true(fabs(loss2 - o.loss) <= 1e-12 * fabs(o.loss) && count2 == o.count);
            with_rows_free(dev, &tmp);
            run_free(&o);
        }
        free(dh); free(dW); free(logits); free(dh0); free(dW0);
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
    for (int dv = 0; dv < n_devs; dv++) {
        ClsRun base = run_rows(&devs[dv].dev, &d, chunks[0], 0.5f, 1, NULL);
        for (int i = 1; i < 4; i++) {
            ClsRun o = run_rows(&devs[dv].dev, &d, chunks[i], 0.5f, 1, NULL);
            double e_loss = fabs(o.loss - base.loss) / base.loss;
            double e_dh = rel_ff(o.dh, base.dh, N * C), e_dW = rel_ff(o.dW, base.dW, V * C);
            double e_lg = rel_ff(o.logits, base.logits, (size_t)N * V);
            printf("  %-26s rows %2d vs 1: loss %.1e logits %.1e dh %.1e dW %.1e\n", devs[dv].name, chunks[i], e_loss,
                   e_lg, e_dh, e_dW);
            assert_int_equal(o.count, base.count);
            if (!(e_loss < 1e-6 && e_lg < 1e-6 && e_dh < 1e-6 && e_dW < 1e-6))
                fail_msg("%s: %d rows at a time differ from 1", devs[dv].name, chunks[i]);
            run_free(&o);
        }
        run_free(&base);
    }
    data_free(&d);
}

// A CPU device's loss and gradients are the same bits on 1, 2 and 3 threads
// (the row losses are summed in row order, not by an OpenMP reduction).
static void test_classifier_thread_count(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 44);
    ClsData d;
    data_init(&d, &r, 1.0);
    ClsRun first = {0};
    for (int threads = 1; threads <= 3; threads++) {
        Device dev;
        cpu_device_init(&dev, threads, NULL);
        dev_reserve(&dev, classifier_workspace_bytes(&dev, N, V));
        ClsRun o = run_rows(&dev, &d, 256, 0.5f, 0, NULL);
        dev_free(&dev);
        printf("  cpu, %d thread(s): loss %.17g over %d rows\n", threads, o.loss, o.count);
        if (threads == 1) {
            first = o;
            continue;
        }
        assert_true(memcmp(&o.loss, &first.loss, sizeof o.loss) == 0);
        assert_memory_equal(o.dh, first.dh, (size_t)N * C * sizeof(float));
        assert_memory_equal(o.dW, first.dW, (size_t)V * C * sizeof(float));
        run_free(&o);
    }
    run_free(&first);
    data_free(&d);
}

// More rows than the GPU classifier holds at a time (1024): its chunks, and
// the row losses summed across them, against the reference.
static void test_classifier_many_rows(void **state) {
    (void)state;
    enum { NB = 1100 };
    Rng r;
    rng_seed(&r, 45);
    double *h = rand_d(&r, (size_t)NB * C, 1.0), *W = rand_d(&r, V * C, 0.3);
    float *hf = to_float_exact(h, (size_t)NB * C), *Wf = to_float_exact(W, V * C);
    int *targets = xmalloc(NB * sizeof(int), "targets");
    for (int n = 0; n < NB; n++) targets[n] = n % 11 == 5 ? -1 : (int)(rng_next(&r) % V);
    double *dh = zeros_d((size_t)NB * C), *dW = zeros_d(V * C);
    const float scale = 1.0f / 700.0f;
    double loss_ref = classifier_ref(dh, dW, h, W, targets, NULL, NB, C, V, scale);
    for (int i = 0; i < n_devs; i++) {
        float *dhf = zeros_f((size_t)NB * C), *dWf = zeros_f(V * C);
        int count = -1;
        double loss = classify_n(&devs[i].dev, NB, dhf, dWf, NULL, hf, Wf, targets, NULL, scale, &count);
        double e_loss = fabs(loss - loss_ref) / fabs(loss_ref);
        double e_dh = rel_err_f(dhf, dh, (size_t)NB * C), e_dW = rel_err_f(dWf, dW, V * C);
        printf("  %-26s N=%d: loss rel %.1e dh %.1e dW %.1e count %d\n", devs[i].name, NB, e_loss, e_dh, e_dW, count);
        assert_int_equal(count, NB - (NB + 5) / 11);
        if (!(e_loss < dev_tol(&devs[i], 1e-6, 1e-4) && e_dh < dev_tol(&devs[i], 2e-6, 1e-4) &&
              e_dW < dev_tol(&devs[i], 2e-6, 1e-4)))
            fail_msg("%s: classifier over %d rows off the reference", devs[i].name, NB);
        free(dhf); free(dWf);
    }
    free(h); free(W); free(hf); free(Wf); free(targets); free(dh); free(dW);
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
    int t2[N];
    memcpy(t2, d.targets, sizeof t2);
    t2[10] = (t2[10] + 17) % V;
    t2[2] = -1;
    for (int dv = 0; dv < n_devs; dv++)
        for (int i = 0; i < 3; i++) {
            ClsRun a = run_rows(&devs[dv].dev, &d, chunks[i], 0.25f, 0, NULL);
            ClsRun b = run_rows(&devs[dv].dev, &d, chunks[i], 0.25f, 0, t2);
            if (!(a.loss == b.loss && a.count == b.count) || memcmp(a.dh, b.dh, N * C * sizeof(float)) ||
                memcmp(a.dW, b.dW, V * C * sizeof(float)))
                fail_msg("%s (%d rows at a time): a masked-out target changed the result", devs[dv].name, chunks[i]);
            for (int n = 0; n < N; n++)   // and an uncounted row gets no gradient at all
                if (!d.mask[n] || d.targets[n] < 0)
                    for (int c = 0; c < C; c++) assert_true(a.dh[n * C + c] == 0.0f);
            run_free(&a);
            run_free(&b);
        }
    data_free(&d);
}

// Nothing counted (every mask 0, or no targets at all): loss 0, count 0,
// gradients untouched; without targets the logits are still made.
static void test_classifier_nothing_counted(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 44);
    ClsData d;
    data_init(&d, &r, 1.0);
    memset(d.mask, 0, sizeof d.mask);
    float *dh0 = rand_f(&r, N * C, 1.0), *dW0 = rand_f(&r, V * C, 1.0);
    double *logits_ref = zeros_d((size_t)N * V);
    matmul_forward_ref(logits_ref, d.h, d.W, N, C, V);
    for (int i = 0; i < n_devs; i++) {
        Device tmp, *dev = with_rows(&tmp, &devs[i].dev, 4);
        float *dh = copy_f(dh0, N * C), *dW = copy_f(dW0, V * C), *logits = zeros_f((size_t)N * V);
        int count = -1;
        double loss = classify(dev, dh, dW, NULL, d.hf, d.Wf, d.targets, d.mask, 1.0f, &count);
        if (!(loss == 0.0 && count == 0)) fail_msg("%s: all masked: loss %g count %d", devs[i].name, loss, count);
        count = -1;
        loss = classify(dev, dh, dW, logits, d.hf, d.Wf, NULL, NULL, 1.0f, &count);
        if (!(loss == 0.0 && count == 0)) fail_msg("%s: no targets: loss %g count %d", devs[i].name, loss, count);
        if (!(rel_err_f(logits, logits_ref, (size_t)N * V) < dev_tol(&devs[i], 2e-6, 1e-4)))
            fail_msg("%s: no targets: logits", devs[i].name);
        assert_memory_equal(dh, dh0, N * C * sizeof(float));
        assert_memory_equal(dW, dW0, V * C * sizeof(float));
        with_rows_free(dev, &tmp);
        free(dh); free(dW); free(logits);
    }
    free(dh0); free(dW0); free(logits_ref);
    data_free(&d);
}

// classifier_scaled: each row's own scale, chosen by the caller from the
// row's loss (here 0.2 + 0.1 loss; one counted row left at 0), against the
// double reference run a row at a time with that row's scale; every counted
// row handed to the caller once, in row order, on any chunk of rows.
typedef struct {
    double seen[N];   // each row's loss as the op handed it over; -1: not seen
    int next;         // the first row not yet handed over
    int bad;
} Scaler;

static void scale_rows(void *ctx, int n0, int rows, const double *row_loss, float *row_scale) {
    Scaler *s = ctx;
    s->bad |= n0 < s->next;
    s->next = n0 + rows;
    for (int r = 0; r < rows; r++) {
        s->seen[n0 + r] = row_loss[r];
        row_scale[r] = n0 + r == 20 ? 0.0f : (float)(0.2 + 0.1 * row_loss[r]);
    }
}

static void test_classifier_scaled_vs_ref(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 46);
    ClsData d;
    data_init(&d, &r, 1.0);
    assert_true(d.mask[20] && d.targets[20] >= 0);
    double loss_ref[N], *dh_ref = zeros_d(N * C), *dW_ref = zeros_d(V * C);
    for (int n = 0; n < N; n++) {
        loss_ref[n] = 0;
        if (!d.mask[n] || d.targets[n] < 0) continue;
        loss_ref[n] = classifier_ref(NULL, NULL, d.h + n * C, d.W, d.targets + n, NULL, 1, C, V, 0);
        const double s = n == 20 ? 0 : 0.2 + 0.1 * loss_ref[n];
        classifier_ref(dh_ref + n * C, dW_ref, d.h + n * C, d.W, d.targets + n, NULL, 1, C, V, s);
    }
    const int chunks[] = {1, 3, N};
    for (int i = 0; i < n_devs; i++)
        for (int c = 0; c < 3; c++)
            for (int grad = 0; grad < 2; grad++) {
                Device tmp, *dev = with_rows(&tmp, &devs[i].dev, chunks[c]);
                Mirrors mr = mirrors_on(dev);
                float *dh = zeros_f(N * C), *dW = zeros_f(V * C);
                float *dh_d = grad ? mirror(&mr, dh, N * C * sizeof(float)) : NULL;
                float *dW_d = grad ? mirror(&mr, dW, V * C * sizeof(float)) : NULL;
                Scaler s = {.next = 0};
                for (int n = 0; n < N; n++) s.seen[n] = -1;
                OP(dev, classifier_scaled, dh_d, dW_d, mirror(&mr, d.hf, N * C * sizeof(float)),
                   mirror(&mr, d.Wf, V * C * sizeof(float)), mirror(&mr, d.targets, sizeof d.targets),
                   mirror(&mr, d.mask, sizeof d.mask), N, C, V, scale_rows, &s, MATMUL_FP32);
                if (grad) {
                    fetch(dev, dh, dh_d, N * C * sizeof(float));
                    fetch(dev, dW, dW_d, V * C * sizeof(float));
                }
                mirrors_free(&mr);
                double e_loss = 0, mag = 0;
                for (int n = 0; n < N; n++) {
                    const int counted = d.mask[n] && d.targets[n] >= 0;
                    if (counted ? s.seen[n] < 0 : s.seen[n] > 0)
                        fail_msg("%s (%d rows at a time): row %d handed over as %g", devs[i].name, chunks[c], n,
                                 s.seen[n]);
                    e_loss = fmax(e_loss, fabs(fmax(s.seen[n], 0) - loss_ref[n]));
                    mag = fmax(mag, fabs(loss_ref[n]));
                }
                const double e_dh = grad ? rel_err_f(dh, dh_ref, N * C) : 0, e_dW = grad ? rel_err_f(dW, dW_ref, V * C) : 0;
                printf("  %-26s %2d rows at a time%s: loss rel %.1e dh %.1e dW %.1e\n", devs[i].name, chunks[c],
                       grad ? "" : " (losses only)", e_loss / mag, e_dh, e_dW);
                if (s.bad || !(e_loss / mag < dev_tol(&devs[i], 1e-6, 1e-4) && e_dh < dev_tol(&devs[i], 2e-6, 1e-4) &&
                               e_dW < dev_tol(&devs[i], 2e-6, 1e-4)))
                    fail_msg("%s (%d rows at a time): classifier_scaled off the reference", devs[i].name, chunks[c]);
                for (int k = 0; grad && k < C; k++) assert_true(dh[20 * C + k] == 0.0f);   // scale 0: no gradient
                free(dh); free(dW);
                with_rows_free(dev, &tmp);
            }
    free(dh_ref); free(dW_ref);
    data_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_classifier_vs_ref),
        cmocka_unit_test(test_classifier_chunk_independent),
        cmocka_unit_test(test_classifier_thread_count),
        cmocka_unit_test(test_classifier_many_rows),
        cmocka_unit_test(test_classifier_masked_target),
        cmocka_unit_test(test_classifier_nothing_counted),
        cmocka_unit_test(test_classifier_scaled_vs_ref),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}
