// test_ops_fast: each op of every device (test_backends.h) against its double
// reference on random inputs, forward outputs and every gradient, with shapes
// that are not multiples of any vector width. Inputs are rounded to float
// first so both sides see the same values. Float gradients start from random
// non-zero values (the ops must ACCUMULATE); the increment is compared with
// the reference. Errors are normwise: max|op - ref| / max|ref|. Bounds (fp32
// unit roundoff 2^-24 ~ 6e-8):
//   embedding, residual  5e-7  (copies and single adds onto the start value)
//   swiglu               1e-6  (expf within a few ulp, a handful of roundings)
//   rmsnorm              2e-6  (float sums of length C <= 131; dw over <= 300 rows)
//   rope                 1e-5  (positions < 64: float angles are off by up to
//                               pos * 2^-24 rad, as in transformers)
// The vectorised exp of attention and the classifier (fast_exp.h): within one
// ulp of exp in double, elementwise, on [-87, 88]; 0 below -87.
// A GPU device is held to 1e-5 where these are tighter (dev_tol): its sums run
// in other orders and its expf is within 2 ulp, not correctly rounded.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "../model/ops/fast_exp.h"
#include "test_backends.h"
#include "test_ops_util.h"


static void check(const TestDevice *td, const char *what, double err, double tol) {
    tol = dev_tol(td, tol, 1e-5);
    printf("  %-26s %-44s rel err %.2e (bound %.0e)\n", td->name, what, err, tol);
    if (!(err <= tol)) fail_msg("%s: %s: rel err %.3g > %.3g", td->name, what, err, tol);
}

static void test_embedding_fast(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 21);
    enum { V = 13, C = 71, N = 29 };
    int tokens[N];
    for (int n = 0; n < N; n++) tokens[n] = (int)(rng_next(&r) % 7);   // many repeats
    double *E = rand_d(&r, V * C, 1.0), *dout = rand_d(&r, N * C, 1.0), *dE = zeros_d(V * C);
    float *Ef = to_float_exact(E, V * C), *doutf = to_float_exact(dout, N * C);
    float *dE0 = rand_f(&r, V * C, 0.5);
    double *out = zeros_d(N * C);
    embedding_forward_ref(out, tokens, E, N, C);
    embedding_backward_ref(dE, dout, tokens, N, C, 2);
    for (int i = 0; i < n_devs; i++) {
        Device *d = &devs[i].dev;
        float *outf = zeros_f(N * C), *dEf = copy_f(dE0, V * C);
        Mirrors mr = mirrors_on(d);
        int *tok_d = mirror(&mr, tokens, sizeof tokens);
        float *E_d = mirror(&mr, Ef, V * C * sizeof(float)), *dout_d = mirror(&mr, doutf, N * C * sizeof(float));
        float *out_d = mirror(&mr, outf, N * C * sizeof(float)), *dE_d = mirror(&mr, dEf, V * C * sizeof(float));
        OP(d, embedding_forward, out_d, tok_d, E_d, N, C);
        fetch(d, outf, out_d, N * C * sizeof(float));
        for (int j = 0; j < N * C; j++)
            if ((double)outf[j] != out[j])
                fail_msg("%s: embedding out[%d] %g, want %g", devs[i].name, j, outf[j], out[j]);
        OP(d, embedding_backward, dE_d, dout_d, tok_d, N, C, 2);
        fetch(d, dEf, dE_d, V * C * sizeof(float));
        check(&devs[i], "embedding dE (repeated tokens, skip_id 2)", rel_err_delta_f(dEf, dE0, dE, V * C), 5e-7);
        for (int j = 0; j < C; j++) assert_true(dEf[2 * C + j] == dE0[2 * C + j]);   // skipped row untouched
        mirrors_free(&mr);
        free(outf); free(dEf);
    }
    free(E); free(dout); free(dE); free(Ef); free(doutf); free(dE0); free(out);
}

static void test_rmsnorm_fast(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 22);
    // {300, 20}: more rows than one block of the GPU's dw partial sums (256).
    int shapes[][2] = {{37, 131}, {53, 6}, {5, 64}, {300, 20}};
    for (int s = 0; s < 4; s++) {
        int N = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)N * C;
        double *x = rand_d(&r, n, 2.0), *w = rand_d(&r, C, 1.0), *dout = rand_d(&r, n, 1.0);
        double *dx = zeros_d(n), *dw = zeros_d(C);
        float *xf = to_float_exact(x, n), *wf = to_float_exact(w, C), *doutf = to_float_exact(dout, n);
        float *dx0 = rand_f(&r, n, 0.5), *dw0 = rand_f(&r, C, 0.5);
        double *out = zeros_d(n), *rstd = zeros_d(N);
        rmsnorm_forward_ref(out, rstd, x, w, N, C, 1e-6);
        rmsnorm_backward_ref(dx, dw, dout, x, w, rstd, N, C);
        for (int i = 0; i < n_devs; i++) {
            Device *d = &devs[i].dev;
            float *outf = zeros_f(n), *rstdf = zeros_f(N), *dxf = copy_f(dx0, n), *dwf = copy_f(dw0, C);
            Mirrors mr = mirrors_on(d);
            const size_t nb = n * sizeof(float), cb = (size_t)C * sizeof(float);
            float *x_d = mirror(&mr, xf, nb), *w_d = mirror(&mr, wf, cb), *dout_d = mirror(&mr, doutf, nb);
            float *out_d = mirror(&mr, outf, nb), *rstd_d = mirror(&mr, rstdf, (size_t)N * sizeof(float));
            float *dx_d = mirror(&mr, dxf, nb), *dw_d = mirror(&mr, dwf, cb);
            OP(d, rmsnorm_forward, out_d, rstd_d, x_d, w_d, N, C, 1e-6f);
            OP(d, rmsnorm_backward, dx_d, dw_d, dout_d, x_d, w_d, rstd_d, N, C);
            fetch(d, outf, out_d, nb);
            fetch(d, rstdf, rstd_d, (size_t)N * sizeof(float));
            fetch(d, dxf, dx_d, nb);
            fetch(d, dwf, dw_d, cb);
            char what[64];
            snprintf(what, sizeof what, "rmsnorm N=%d C=%d out", N, C);
            check(&devs[i], what, rel_err_f(outf, out, n), 2e-6);
            snprintf(what, sizeof what, "rmsnorm N=%d C=%d rstd", N, C);
            check(&devs[i], what, rel_err_f(rstdf, rstd, N), 2e-6);
            snprintf(what, sizeof what, "rmsnorm N=%d C=%d dx", N, C);
            check(&devs[i], what, rel_err_delta_f(dxf, dx0, dx, n), 2e-6);
            snprintf(what, sizeof what, "rmsnorm N=%d C=%d dw", N, C);
            check(&devs[i], what, rel_err_delta_f(dwf, dw0, dw, C), 2e-6);
            // A NULL gradient is skipped and leaves the other one unchanged.
            float *dx2 = zeros_f(n), *dx3 = zeros_f(n), *dw2 = zeros_f(C);
            float *dx2_d = mirror(&mr, dx2, nb), *dx3_d = mirror(&mr, dx3, nb), *dw2_d = mirror(&mr, dw2, cb);
            OP(d, rmsnorm_backward, dx2_d, NULL, dout_d, x_d, w_d, rstd_d, N, C);
            OP(d, rmsnorm_backward, dx3_d, dw2_d, dout_d, x_d, w_d, rstd_d, N, C);
            fetch(d, dx2, dx2_d, nb);
            fetch(d, dx3, dx3_d, nb);
            assert_memory_equal(dx2, dx3, n * sizeof(float));
            mirrors_free(&mr);
            free(outf); free(rstdf); free(dxf); free(dwf); free(dx2); free(dx3); free(dw2);
        }
        free(x); free(w); free(dout); free(dx); free(dw); free(xf); free(wf); free(doutf);
        free(dx0); free(dw0); free(out); free(rstd);
    }
}

// rmsnorm_backward on a CPU device gives the same bits on 1, 2 and 3 threads:
// dw's partial sums are per block of rows, added in block order.
static void test_rmsnorm_thread_count(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 23);
    const int N = 301, C = 37;
    const size_t n = (size_t)N * C;
    float *x = rand_f(&r, n, 2.0), *w = rand_f(&r, C, 1.0), *dout = rand_f(&r, n, 1.0);
    float *first_dx = NULL, *first_dw = NULL;
    for (int threads = 1; threads <= 3; threads++) {
        Device d;
        cpu_device_init(&d, threads, NULL);
        dev_reserve(&d, rmsnorm_workspace_bytes(N, C));
        float *out = zeros_f(n), *rstd = zeros_f(N), *dx = zeros_f(n), *dw = zeros_f(C);
        rmsnorm_forward(&d, out, rstd, x, w, N, C, 1e-6f);
        rmsnorm_backward(&d, dx, dw, dout, x, w, rstd, N, C);
        dev_free(&d);
        free(out);
        free(rstd);
        if (!first_dx) {
            first_dx = dx;
            first_dw = dw;
            continue;
        }
        assert_memory_equal(dx, first_dx, n * sizeof(float));
        assert_memory_equal(dw, first_dw, (size_t)C * sizeof(float));
        free(dx);
        free(dw);
    }
    free(first_dx); free(first_dw); free(x); free(w); free(dout);
}

static void test_rope_fast(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 23);
    int hds[] = {6, 64, 18};
    float thetas[] = {1e6f, 1e6f, 1e4f};
    for (int s = 0; s < 3; s++) {
        int N = 23, nh = 3, hd = hds[s], pos[23];
        for (int n = 0; n < N; n++) pos[n] = (int)(rng_next(&r) % 64);
        size_t n = (size_t)N * nh * hd;
        double *x = rand_d(&r, n, 1.0), *g = rand_d(&r, n, 1.0);
        float *x0 = to_float_exact(x, n), *g0 = to_float_exact(g, n);
        rope_forward_ref(x, pos, N, nh, hd, thetas[s]);
        rope_backward_ref(g, pos, N, nh, hd, thetas[s]);
        for (int i = 0; i < n_devs; i++) {
            Device *d = &devs[i].dev;
            RopeTable rt;
            rope_table_init(&rt, d, 64, hd, thetas[s]);
            float *xf = copy_f(x0, n), *gf = copy_f(g0, n);   // in place
            Mirrors mr = mirrors_on(d);
            float *x_d = mirror(&mr, xf, n * sizeof(float)), *g_d = mirror(&mr, gf, n * sizeof(float));
            int *pos_d = mirror(&mr, pos, sizeof pos);
            OP(d, rope_forward, x_d, &rt, pos_d, N, nh, hd);
            OP(d, rope_backward, g_d, &rt, pos_d, N, nh, hd);
            fetch(d, xf, x_d, n * sizeof(float));
            fetch(d, gf, g_d, n * sizeof(float));
            mirrors_free(&mr);
            char what[64];
            snprintf(what, sizeof what, "rope hd=%d forward", hd);
            check(&devs[i], what, rel_err_f(xf, x, n), 1e-5);
            snprintf(what, sizeof what, "rope hd=%d backward", hd);
            check(&devs[i], what, rel_err_f(gf, g, n), 1e-5);
            rope_table_free(&rt, d);
            free(xf); free(gf);
        }
        free(x); free(g); free(x0); free(g0);
    }
}

static void test_elementwise_fast(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 24);
    size_t n = 1003;
    double *a = rand_d(&r, n, 4.0), *b = rand_d(&r, n, 1.0), *dout = rand_d(&r, n, 1.0);
    a[0] = -120.0;   // exp(-gate) overflows float: silu must still be finite, as its gradient
    a[1] = 95.0;
    double *out = zeros_d(n), *res = zeros_d(n), *da = zeros_d(n), *db = zeros_d(n);
    float *af = to_float_exact(a, n), *bf = to_float_exact(b, n), *doutf = to_float_exact(dout, n);
    float *da0 = rand_f(&r, n, 0.5), *db0 = rand_f(&r, n, 0.5);
    swiglu_forward_ref(out, a, b, n);
    swiglu_backward_ref(da, db, dout, a, b, n);
    residual_forward_ref(res, a, b, n);
    for (int i = 0; i < n_devs; i++) {
        Device *d = &devs[i].dev;
        const size_t nb = n * sizeof(float);
        float *outf = zeros_f(n), *daf = copy_f(da0, n), *dbf = copy_f(db0, n);
        float *dg_only = zeros_f(n), *dg_both = zeros_f(n), *du = zeros_f(n);
        Mirrors mr = mirrors_on(d);
        float *a_d = mirror(&mr, af, nb), *b_d = mirror(&mr, bf, nb), *dout_d = mirror(&mr, doutf, nb);
        float *out_d = mirror(&mr, outf, nb), *da_d = mirror(&mr, daf, nb), *db_d = mirror(&mr, dbf, nb);
        float *dg_only_d = mirror(&mr, dg_only, nb), *dg_both_d = mirror(&mr, dg_both, nb), *du_d = mirror(&mr, du, nb);
        OP(d, swiglu_forward, out_d, a_d, b_d, n);
        fetch(d, outf, out_d, nb);
        check(&devs[i], "swiglu out", rel_err_f(outf, out, n), 1e-6);
        OP(d, swiglu_backward, da_d, db_d, dout_d, a_d, b_d, n);
        fetch(d, daf, da_d, nb);
        fetch(d, dbf, db_d, nb);
        check(&devs[i], "swiglu dgate", rel_err_delta_f(daf, da0, da, n), 1e-6);
        check(&devs[i], "swiglu dup", rel_err_delta_f(dbf, db0, db, n), 1e-6);
        OP(d, swiglu_backward, dg_only_d, NULL, dout_d, a_d, b_d, n);
        OP(d, swiglu_backward, dg_both_d, du_d, dout_d, a_d, b_d, n);
        fetch(d, dg_only, dg_only_d, nb);
        fetch(d, dg_both, dg_both_d, nb);
        assert_memory_equal(dg_only, dg_both, n * sizeof(float));
        // The residual's backward passes the gradient through: no op to test.
        OP(d, residual_forward, out_d, a_d, b_d, n);
        fetch(d, outf, out_d, nb);
        check(&devs[i], "residual out", rel_err_f(outf, res, n), 5e-7);
        mirrors_free(&mr);
        free(outf); free(daf); free(dbf); free(dg_only); free(dg_both); free(du);
    }
    free(a); free(b); free(dout); free(out); free(res); free(da); free(db); free(af); free(bf);
    free(doutf); free(da0); free(db0);
}

// Dropout against its reference on every device, the same bits on each (the
// mask is a hash of (seed, i), integer arithmetic everywhere), and with p = 0
// the identity.
static void test_dropout_fast(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 25);
    const size_t n = 4099;
    const double p = 0.25;
    const uint64_t seed = 0x5eedull;
    double *x = rand_d(&r, n, 2.0), *dout = rand_d(&r, n, 1.0), *out = zeros_d(n), *dx = zeros_d(n);
    float *xf = to_float_exact(x, n), *doutf = to_float_exact(dout, n), *dx0 = rand_f(&r, n, 0.5);
    dropout_forward_ref(out, x, n, p, seed);
    dropout_backward_ref(dx, dout, n, p, seed);
    float *first_out = NULL, *first_dx = NULL;
    for (int i = 0; i < n_devs; i++) {
        Device *d = &devs[i].dev;
        const size_t nb = n * sizeof(float);
        float *outf = zeros_f(n), *dxf = copy_f(dx0, n), *same = zeros_f(n);
        Mirrors mr = mirrors_on(d);
        float *x_d = mirror(&mr, xf, nb), *dout_d = mirror(&mr, doutf, nb), *out_d = mirror(&mr, outf, nb);
        float *dx_d = mirror(&mr, dxf, nb), *same_d = mirror(&mr, same, nb);
        OP(d, dropout_forward, out_d, x_d, n, (float)p, seed);
        fetch(d, outf, out_d, nb);
        check(&devs[i], "dropout out", rel_err_f(outf, out, n), 5e-7);
        OP(d, dropout_backward, dx_d, dout_d, n, (float)p, seed);
        fetch(d, dxf, dx_d, nb);
        check(&devs[i], "dropout dx", rel_err_delta_f(dxf, dx0, dx, n), 5e-7);
        if (!first_out) {
            first_out = copy_f(outf, n);
            first_dx = copy_f(dxf, n);
        } else {   // every device and thread count: the first one's bits
            assert_memory_equal(outf, first_out, nb);
            assert_memory_equal(dxf, first_dx, nb);
        }
        OP(d, dropout_forward, same_d, x_d, n, 0.0f, seed);
        fetch(d, same, same_d, nb);
        assert_memory_equal(same, xf, nb);
        mirrors_free(&mr);
        free(outf); free(dxf); free(same);
    }
    free(first_out); free(first_dx);
    free(x); free(dout); free(out); free(dx); free(xf); free(doutf); free(dx0);
}

// The mask's statistics over 2^20 values: the kept fraction within 5 sigma of
// 1 - p, kept values x * (float)(1/(1-p)) exactly, dropped ones 0; another
// seed (q, k and v's masks over one input) draws an independent mask: both
// keep within 5 sigma of (1-p)^2.
static void test_dropout_statistics(void **state) {
    (void)state;
    const size_t n = (size_t)1 << 20;
    Device *d = &devs[0].dev;
    float *x = xaligned(n * sizeof(float), "x"), *o1 = xaligned(n * sizeof(float), "o1");
    float *o2 = xaligned(n * sizeof(float), "o2");
    for (size_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 97) * 0.01f;
    const float ps[] = {0.05f, 0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 4; k++) {
        const double p = ps[k], q = 1.0 - p;
        const float s = 1.0f / (1.0f - ps[k]);
        OP(d, dropout_forward, o1, x, n, ps[k], 1234u + k);
        OP(d, dropout_forward, o2, x, n, ps[k], 98765u + k);
        size_t kept = 0, both = 0;
        for (size_t i = 0; i < n; i++) {
            if (o1[i] != 0.0f) {
                assert_true(o1[i] == x[i] * s);
                kept++;
                both += o2[i] != 0.0f;
            }
        }
        const double sigma = sqrt(n * p * q), sigma2 = sqrt(n * q * q * (1 - q * q));
        assert_true(fabs((double)kept - n * q) < 5 * sigma);
        assert_true(fabs((double)both - n * q * q) < 5 * sigma2);
        assert_true(kept < n || ps[k] == 0.0f);
    }
    free(x); free(o1); free(o2);
}

// exp_block against exp in double: a grid over [-87, 88] and random points,
// in a block whose length is no multiple of the chunk or of any vector width;
// then the edges (below -87, -inf, NaN).
static void test_fast_exp(void **state) {
    (void)state;
    enum { N = 64 * 300 + 37 };
    float *x = xmalloc(N * sizeof(float), "exp inputs"), *y = xmalloc(N * sizeof(float), "exp outputs");
    Rng r;
    rng_seed(&r, 11);
    for (int i = 0; i < N; i++)
        x[i] = i % 2 ? (float)(-87.0 + 175.0 * i / N) : (float)(-87.0 + 175.0 * rng_uniform(&r));
    x[0] = -87.0f, x[2] = 0.0f, x[4] = 88.0f, x[6] = -0.0f;
    exp_block(y, x, N);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        const double want = exp((double)x[i]);
        const double ulp = nextafterf((float)want, INFINITY) - (float)want;
        const double err = fabs((double)y[i] - want) / ulp;
        if (!(err <= worst)) worst = err;
    }
    printf("  exp_block on [-87, 88]: worst %.3f ulp over %d values\n", worst, N);
    assert_true(worst <= 1.0);
    const float edge[5] = {-87.5f, -1000.0f, -INFINITY, NAN, -88.0f};
    float out[5];
    exp_block(out, edge, 5);
    assert_true(out[0] == 0.0f && out[1] == 0.0f && out[2] == 0.0f && out[4] == 0.0f);
    assert_true(isnan(out[3]));
    free(x);
    free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_embedding_fast),
        cmocka_unit_test(test_rmsnorm_fast),
        cmocka_unit_test(test_rmsnorm_thread_count),
        cmocka_unit_test(test_rope_fast),
        cmocka_unit_test(test_elementwise_fast),
        cmocka_unit_test(test_dropout_fast),
        cmocka_unit_test(test_dropout_statistics),
        cmocka_unit_test(test_fast_exp),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}
