// test_qat_freeze: the frozen-code phase of QAT (qat/qat.h, qat_freeze).
//  - the freeze takes its codes by the one code rule and turns the quantized
//    master weights into the int4 model (== fake-quant of the old masters);
//  - with codes frozen, the scale/zero gradients of qat_backward against
//    central finite differences of the real function of (scale, zero): the
//    float effective weights of qat_forward_weights under a smooth loss;
//    the quantized master gradient is 0, the norm's passes unchanged;
//  - over many Adam steps + qat_frozen_sync, the master weights stay the
//    dequantized frozen codes and quant_codes (what exporters and --int4 runs
//    call) gives those codes back with the tuned scales, asymmetric and
//    symmetric, on a whole model's table;
//  - /qat codes save/load round trip and its refusals.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <hdf5.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../qat/qat.h"
#include "../formats/checkpoint_qat.h"
#include "test_qat_util.h"




// The smooth loss of the test, in double over the float effective weights:
// L = sum c_i w_i + 1/2 sum d_i w_i^2 over the quantized tensor.
static double smooth_loss(const QatState *q, const TensorTable *tt, const float *master, float *eff, const double *c,
                          const double *d) {
    qat_forward_weights(qat_test_device(), q, tt, master, eff);
    double L = 0.0;
    for (int i = 0; i < GR * GC; i++) L += c[i] * eff[i] + 0.5 * d[i] * (double)eff[i] * eff[i];
    return L;
}

static void test_frozen_gradients_finite_differences(void **state) {
    (void)state;
    TensorTable tt;
    small_table(&tt);
    Rng rng;
    rng_seed(&rng, 5);
    const int NG = GR * GC / GG;
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec spec = {GG, sym};
        QatState q;
        PtError e;
        assert_int_equal(qat_init(&q, &tt, &spec, 0, 0, "t", &e), 0);
        float *master = xcalloc(tt.total, sizeof(float), "master"), *before = xcalloc(tt.total, sizeof(float), "m0");
        for (int i = 0; i < GR * GC; i++) master[i] = 0.05f * (float)rng_normal(&rng);
        for (int i = 0; i < NORM; i++) master[GR * GC + i] = 1.0f + 0.1f * (float)rng_normal(&rng);
        assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_RTN, NULL, NULL, "t", &e), 0);
        // Shrunk scales: some weights clip, whose codes must come out clamped.
        for (int k = 0; k < NG; k++) q.scale[k] = f16_to_f32(f32_to_f16(q.scale[k] * 0.8f));
        memcpy(before, master, tt.total * sizeof(float));

        qat_freeze(qat_test_device(), &q, &tt, master);
        assert_non_null(q.codes);
        assert_non_null(q.grad_scale);
        uint8_t want[GR * GC];
        quant_codes(&spec, before, GR, GC, q.scale, q.zero, want);
        assert_memory_equal(q.codes, want, sizeof want);
        int n_clamped = 0;
        for (int i = 0; i < GR * GC; i++) n_clamped += want[i] == 15 || want[i] == (sym ? 1 : 0);
        assert_true(n_clamped > 0);
        float fake[GR * GC];
        quant_fake(&spec, before, GR, GC, q.scale, q.zero, fake, 0);
        assert_memory_equal(master, fake, sizeof fake);   // the masters are the int4 model
        assert_memory_equal(master + GR * GC, before + GR * GC, NORM * sizeof(float));

        double c[GR * GC], d[GR * GC];
        float *eff = xcalloc(tt.total, sizeof(float), "eff"), *geff = xcalloc(tt.total, sizeof(float), "geff"),
              *gm = xcalloc(tt.total, sizeof(float), "gm");
        for (int i = 0; i < GR * GC; i++) {
            c[i] = rng_normal(&rng);
            d[i] = 50.0 * rng_uniform(&rng);
        }
        smooth_loss(&q, &tt, master, eff, c, d);
        assert_memory_equal(eff, master, GR * GC * sizeof(float));
        for (int i = 0; i < GR * GC; i++) geff[i] = (float)(c[i] + d[i] * eff[i]);
        for (int i = 0; i < NORM; i++) geff[GR * GC + i] = (float)rng_normal(&rng);
        qat_backward(qat_test_device(), &q, &tt, master, geff, gm);
        for (int i = 0; i < GR * GC; i++) assert_true(gm[i] == 0.0f);
        assert_memory_equal(gm + GR * GC, geff + GR * GC, NORM * sizeof(float));

        double gmag = 0.0;
        for (int k = 0; k < NG; k++) gmag = fmax(gmag, fabs(q.grad_scale[k]) + fabs(q.grad_zero[k]));
        for (int k = 0; k < NG; k++) {
            for (int which = 0; which < 2 - sym; which++) {
                float *p = which ? &q.zero[k] : &q.scale[k], keep = *p, h = q.scale[k] / 64.0f;
                *p = keep + h;
                double Lp = smooth_loss(&q, &tt, master, eff, c, d), up = *p;
                *p = keep - h;
                double Lm = smooth_loss(&q, &tt, master, eff, c, d), dn = *p;
                *p = keep;
                double fd = (Lp - Lm) / (up - dn), got = which ? q.grad_zero[k] : q.grad_scale[k];
                if (fabs(got - fd) > 1e-4 * gmag)
                    fail_msg("%s, group %d: dL/d%s = %.9g, finite differences %.9g", sym ? "symmetric" : "asymmetric",
                             k, which ? "zero" : "scale", got, fd);
            }
            if (sym) assert_true(q.grad_zero[k] == 0.0f);
        }
        free(master), free(before), free(eff), free(geff), free(gm);
        qat_free(&q);
    }
    tensor_table_free(&tt);
}

// Adam steps on the scales with frozen codes: scales stay fp16, masters stay
// the int4 model, and re-deriving the codes gives the frozen ones.
static void test_steps_keep_codes(void **state) {
    (void)state;
    TensorTable tt;
    build_table(&tt, "tiny");
    for (int sym = 0; sym < 2; sym++) {
        float *master = random_params(&tt, 11 + (uint64_t)sym);
        QuantSpec spec = {32, sym};
        QatState q;
        PtError e;
        assert_int_equal(qat_init(&q, &tt, &spec, 1, 0, "t", &e), 0);
        assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_RTN, NULL, NULL, "t", &e), 0);
        qat_freeze(qat_test_device(), &q, &tt, master);
        size_t n_codes = q.total * (size_t)spec.group;
        uint8_t *frozen = xmalloc(n_codes, "frozen");
        memcpy(frozen, q.codes, n_codes);
        float *scale0 = xmalloc(q.total * sizeof(float), "scale0");
        memcpy(scale0, q.scale, q.total * sizeof(float));
        float *grads = xcalloc(tt.total, sizeof(float), "grads"), *eff = xcalloc(tt.total, sizeof(float), "eff");
        Rng rng;
        rng_seed(&rng, 99);
        AdamWConfig adam = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
        for (long step = 1; step <= 25; step++) {
            for (size_t i = 0; i < tt.total; i++) grads[i] = (float)rng_normal(&rng);
            qat_backward(qat_test_device(), &q, &tt, master, grads, grads);
            qat_step(qat_test_device(), &q, 0, q.total, &adam, 3e-4f, step);   // about a tenth of a scale per step: large moves
            qat_frozen_sync(qat_test_device(), &q, &tt, master);
        }
        size_t moved = 0;
        for (size_t k = 0; k < q.total; k++) {
            assert_true(f16_exact(q.scale[k]) && f16_exact(q.zero[k]));
            moved += q.scale[k] != scale0[k];
            if (sym) assert_true(q.zero[k] == 0.0f);
        }
        assert_true(moved > q.total / 2);
        assert_memory_equal(q.codes, frozen, n_codes);
        qat_forward_weights(qat_test_device(), &q, &tt, master, eff);
        for (int i = 0; i < q.n; i++) {
            size_t off = tt.t[q.t[i].tensor].offset;
            assert_memory_equal(eff + off, master + off, q.t[i].rows * q.t[i].cols * sizeof(float));
        }
        assert_frozen_codes_rederive(&q, &tt, master);
        free(master), free(frozen), free(scale0), free(grads), free(eff);
        qat_free(&q);
    }
    tensor_table_free(&tt);
}

static void test_codes_save_load(void **state) {
    (void)state;
    TensorTable tt;
    build_table(&tt, "tiny");
    float *master = random_params(&tt, 4);
    QuantSpec spec = {32, 0};
    QatState q, r;
    PtError e;
    assert_int_equal(qat_init(&q, &tt, &spec, 1, 0, "t", &e), 0);
    assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_RTN, NULL, NULL, "t", &e), 0);
    qat_freeze(qat_test_device(), &q, &tt, master);
    for (size_t k = 0; k < q.total; k++) q.m_scale[k] = (float)k * 1e-3f;
    size_t n_codes = q.total * (size_t)spec.group;
    char path[] = "/tmp/pocket_qatfreeze_XXXXXX";
    close(mkstemp(path));
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_int_equal(qat_save(f, &q, &tt, path, &e), 0);
    H5Fclose(f);

    // A reader that does not learn scales (eval --int4, export) gets the codes
    // and the scale arrays with them; the moments come back too.
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_int_equal(qat_init(&r, &tt, &spec, 1, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), 0);
    assert_non_null(r.codes);
    assert_memory_equal(r.codes, q.codes, n_codes);
    assert_memory_equal(r.scale, q.scale, q.total * sizeof(float));
    assert_memory_equal(r.m_scale, q.m_scale, q.total * sizeof(float));
    float *a = xcalloc(tt.total, sizeof(float), "a"), *b = xcalloc(tt.total, sizeof(float), "b");
    qat_forward_weights(qat_test_device(), &q, &tt, master, a);
    qat_forward_weights(qat_test_device(), &r, &tt, master, b);
    assert_memory_equal(a, b, tt.total * sizeof(float));
    qat_free(&r);
    H5Fclose(f);

    // An out-of-range code is refused, naming the dataset and the place.
    const char *name = "model.layers.0.mlp.up_proj.weight";
    const QatTensor *qt = qat_find(&q, (int)(tensor_table_find(&tt, name) - tt.t));
    size_t n = (size_t)(qt->rows * qt->cols);
    uint8_t *codes = xmalloc(n, "codes");
    memcpy(codes, qat_codes_of(&q, qt), n);
    codes[qt->cols + 2] = 16;
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    char link[256];
    snprintf(link, sizeof link, "qat/%s/codes", name);
    hid_t ds = H5Dopen2(f, link, H5P_DEFAULT);
    assert_true(ds >= 0);
    assert_true(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, codes) >= 0);
    H5Dclose(ds);
    assert_int_equal(qat_init(&r, &tt, &spec, 1, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), -1);
    snprintf(link, sizeof link, "/qat/%s/codes[1, 2] = 16", name);
    if (!strstr(e.msg, link) || !strstr(e.msg, path)) fail_msg("got \"%s\"", e.msg);
    qat_free(&r);
    // Codes on some tensors only: refused.
    snprintf(link, sizeof link, "qat/%s/codes", name);
    assert_true(H5Ldelete(f, link, H5P_DEFAULT) >= 0);
    assert_int_equal(qat_init(&r, &tt, &spec, 1, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), -1);
    if (!strstr(e.msg, name) || !strstr(e.msg, "every quantized tensor or none")) fail_msg("got \"%s\"", e.msg);
    qat_free(&r);
    H5Fclose(f);
    unlink(path);
    free(codes), free(a), free(b), free(master);
    qat_free(&q);
    tensor_table_free(&tt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frozen_gradients_finite_differences),
        cmocka_unit_test(test_steps_keep_codes),
        cmocka_unit_test(test_codes_save_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
