// test_qat: QAT state over the tensor table (qat/qat.h, formats/checkpoint_qat.h).
//  - tensor selection (TF_QUANT, + embedding) and the cols % G error;
//  - qat_forward_weights == master with quantized tensors replaced by
//    quantize -> pack -> unpack -> dequantize, bit for bit;
//  - STE mask and LSQ scale/zero gradients vs central finite differences in
//    double: of the straight-through surrogate (rounding frozen, its slope 1)
//    for every element, and of the real quantizer for clipped elements and for
//    scale 0 (where the real function is differentiable);
//  - the Adam step keeps every scale/zero fp16-exact and follows a double
//    Adam; learned scales lower the weight error below RTN's;
//  - /qat HDF5 save/load round trip and its refusals.
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



static void test_selection_and_errors(void **state) {
    (void)state;
    TensorTable tt;
    build_table(&tt, "tiny");   // tied, H 64, F 160, 2 layers
    QatState q;
    PtError e;
    QuantSpec g64 = {64, 0}, g32 = {32, 0};
    assert_int_equal(qat_init(&q, &tt, &g64, 0, 0, "recipe.ini", &e), -1);
    assert_non_null(strstr(e.msg, "recipe.ini"));
    assert_non_null(strstr(e.msg, "model.layers.0.mlp.down_proj.weight"));
    assert_non_null(strstr(e.msg, "160"));
    assert_int_equal(qat_init(&q, &tt, &g32, 0, 0, "recipe.ini", &e), 0);
    assert_int_equal(q.n, 2 * 7);
    for (int i = 0; i < q.n; i++) assert_true(tt.t[q.t[i].tensor].flags & TF_QUANT);
    const TensorInfo *emb = tensor_table_find(&tt, "model.embed_tokens.weight");
    assert_null(qat_find(&q, (int)(emb - tt.t)));
    qat_free(&q);
    assert_int_equal(qat_init(&q, &tt, &g32, 1, 0, "recipe.ini", &e), 0);
    assert_int_equal(q.n, 2 * 7 + 1);
    const QatTensor *qe = qat_find(&q, (int)(emb - tt.t));
    assert_non_null(qe);
    assert_int_equal(qe->n_groups, (size_t)(emb->shape[0] * emb->shape[1] / 32));
    // The tied lm_head is the embedding.
    assert_ptr_equal(qat_find(&q, (int)(tensor_table_find(&tt, "lm_head.weight") - tt.t)), qe);
    size_t total = 0;
    for (int i = 0; i < q.n; i++) total += q.t[i].n_groups;
    assert_int_equal(total, q.total);
    qat_free(&q);
    tensor_table_free(&tt);

    build_table(&tt, "tiny-untied");   // H 48, F 100: group 4 divides both
    QuantSpec g4 = {4, 1};
    assert_int_equal(qat_init(&q, &tt, &g4, 0, 1, "x", &e), 0);
    assert_int_equal(q.n, 3 * 7 + 1);   // + lm_head
    assert_non_null(q.grad_scale);
    qat_free(&q);
    tensor_table_free(&tt);
}

static void test_forward_weights(void **state) {
    (void)state;
    TensorTable tt;
    build_table(&tt, "tiny");
    float *master = random_params(&tt, 3);
    float *eff = xmalloc(tt.total * sizeof(float), "eff");
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec spec = {32, sym};
        QatState q;
        PtError e;
        assert_int_equal(qat_init(&q, &tt, &spec, 1, 0, "t", &e), 0);
        assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_RTN, NULL, NULL, "t", &e), 0);
        for (size_t k = 0; k < q.total; k++) assert_true(f16_exact(q.scale[k]) && f16_exact(q.zero[k]));
        qat_forward_weights(qat_test_device(), &q, &tt, master, eff);
        for (int i = 0; i < tt.n; i++) {
            const TensorInfo *t = &tt.t[i];
            const QatTensor *qt = qat_find(&q, i);
            if (!qt) {
                assert_memory_equal(eff + t->offset, master + t->offset, t->numel * sizeof(float));
                continue;
            }
            uint8_t *codes = xmalloc(t->numel, "codes"), *packed = xmalloc(t->numel / 2, "packed");
            float *deq = xmalloc(t->numel * sizeof(float), "deq");
            quant_codes(&spec, master + t->offset, qt->rows, qt->cols, q.scale + qt->offset, q.zero + qt->offset,
                        codes);
            quant_pack4(codes, t->numel, packed);
            memset(codes, 0, t->numel);
            quant_unpack4(packed, t->numel, codes);
            quant_dequant(&spec, codes, qt->rows, qt->cols, q.scale + qt->offset, q.zero + qt->offset, deq, 0);
            assert_memory_equal(eff + t->offset, deq, t->numel * sizeof(float));
            // And it really changed the weights.
            assert_true(memcmp(eff + t->offset, master + t->offset, t->numel * sizeof(float)) != 0);
            free(codes);
            free(packed);
            free(deq);
        }
        qat_free(&q);
    }
    free(master);
    free(eff);
    tensor_table_free(&tt);
}


// Real quantizer in double: code by the rule, then dequant.
static double real_wq(double x, double s, double z, int lo, int sym) {
    double u;
    if (s == 0.0) u = 8;
    else u = fmin(fmax(nearbyint((x - z) / s) + 8, lo), 15);
    return (u - 8) * s + (sym ? 0.0 : z);
}

typedef struct {
    double R[GR * GC];   // frozen rounded code (unclamped) - 8
    double t0[GR * GC];  // (x0 - z0) / s0
    int clipped[GR * GC];
    double ucl[GR * GC];
} Surrogate;

// Surrogate of the straight-through estimator around the base point: the
// rounding is frozen at its value there but keeps slope 1 in its argument.
static double sur_wq(const Surrogate *S, int i, double x, double s, double z, int sym) {
    double zz = sym ? 0.0 : z;
    if (S->clipped[i]) return (S->ucl[i] - 8) * s + zz;
    return (S->R[i] + (x - zz) / s - S->t0[i]) * s + zz;
}

static double loss(const Surrogate *S, const double *c, const double *x, const double *s, const double *z, int lo,
                   int sym, int surrogate) {
    double L = 0.0;
    for (int i = 0; i < GR * GC; i++) {
        int k = i / GG;   // GC is a multiple of GG: group index == i / GG
        double w = surrogate ? sur_wq(S, i, x[i], s[k], z[k], sym) : real_wq(x[i], s[k], z[k], lo, sym);
        L += c[i] * w;
    }
    return L;
}

static void check_close(const char *what, double got, double want, double scale) {
    if (fabs(got - want) > 2e-5 * scale + 1e-12) fail_msg("%s: got %.9g, finite differences %.9g", what, got, want);
}

// With fixed scales qat_backward takes a vectorised mask-only path; it must
// give exactly the learned-scale path's weight gradients (gm).
static void check_fixed_scale_mask(const QatState *learned, const TensorTable *tt, const float *master,
                                   const float *geff, const float *gm) {
    QatState fixed;
    PtError e;
    assert_int_equal(qat_init(&fixed, tt, &learned->spec, learned->quant_embedding, 0, "t", &e), 0);
    memcpy(fixed.scale, learned->scale, learned->total * sizeof(float));
    memcpy(fixed.zero, learned->zero, learned->total * sizeof(float));
    float *g = xmalloc(tt->total * sizeof(float), "fixed-scale grads");
    qat_backward(qat_test_device(), &fixed, tt, master, geff, g);
    assert_memory_equal(g, gm, tt->total * sizeof(float));
    free(g);
    qat_free(&fixed);
}

static void test_ste_lsq_finite_differences(void **state) {
    (void)state;
    TensorTable tt;
    small_table(&tt);
    Rng rng;
    rng_seed(&rng, 21);
    const int NG = GR * GC / GG;
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec spec = {GG, sym};
        QatState q;
        PtError e;
        assert_int_equal(qat_init(&q, &tt, &spec, 0, 1, "t", &e), 0);
        float *master = xcalloc(tt.total, sizeof(float), "master");
        for (int i = 0; i < GR * GC; i++) master[i] = 0.05f * (float)rng_normal(&rng);
        for (int i = 0; i < 16; i++) master[GR * GC + i] = 1.0f;
        assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_RTN, NULL, NULL, "t", &e), 0);
        // Shrink the scales and move the zeros so that both regimes occur.
        for (int k = 0; k < NG; k++) {
            q.scale[k] = f16_to_f32(f32_to_f16(q.scale[k] * (0.6f + 0.1f * (float)(k % 4))));
            if (!sym) q.zero[k] = f16_to_f32(f32_to_f16(q.zero[k] + 0.3f * q.scale[k] * (float)(k % 3 - 1)));
        }
        double x[GR * GC], s[GR * GC / GG], z[GR * GC / GG], c[GR * GC];
        float *geff = xcalloc(tt.total, sizeof(float), "geff"), *gm = xcalloc(tt.total, sizeof(float), "gm");
        for (int i = 0; i < GR * GC; i++) {
            x[i] = master[i];
            geff[i] = (float)rng_normal(&rng);
            c[i] = geff[i];
        }
        for (int i = 0; i < 16; i++) geff[GR * GC + i] = (float)rng_normal(&rng);
        for (int k = 0; k < NG; k++) {
            s[k] = q.scale[k];
            z[k] = sym ? 0.0 : q.zero[k];
        }
        const int lo = sym ? 1 : 0;
        static Surrogate S;
        int n_clipped = 0;
        for (int i = 0; i < GR * GC; i++) {
            int k = i / GG;
            double t = (x[i] - z[k]) / s[k], r = nearbyint(t);
            S.t0[i] = t;
            S.R[i] = r;
            S.clipped[i] = r + 8 < lo || r + 8 > 15;
            S.ucl[i] = r + 8 < lo ? lo : 15;
            n_clipped += S.clipped[i];
        }
        assert_true(n_clipped > 4 && n_clipped < GR * GC / 2);

        qat_backward(qat_test_device(), &q, &tt, master, geff, gm);
        // STE mask; the norm passes unchanged.
        for (int i = 0; i < GR * GC; i++) assert_true(gm[i] == (S.clipped[i] ? 0.0f : geff[i]));
        assert_memory_equal(gm + GR * GC, geff + GR * GC, 16 * sizeof(float));
        check_fixed_scale_mask(&q, &tt, master, geff, gm);

        // Surrogate finite differences for scale, zero and every weight.
        double gmag = 0.0;
        for (int k = 0; k < NG; k++) gmag = fmax(gmag, fabs(q.grad_scale[k]));
        for (int k = 0; k < NG; k++) {
            double h = 1e-4 * s[k], keep = s[k];
            s[k] = keep + h;
            double Lp = loss(&S, c, x, s, z, lo, sym, 1);
            s[k] = keep - h;
            double Lm = loss(&S, c, x, s, z, lo, sym, 1);
            s[k] = keep;
            check_close("dL/dscale", q.grad_scale[k], (Lp - Lm) / (2 * h), gmag);
            if (sym) {
                assert_true(q.grad_zero[k] == 0.0f);
                continue;
            }
            keep = z[k];
            z[k] = keep + h;
            Lp = loss(&S, c, x, s, z, lo, sym, 1);
            z[k] = keep - h;
            Lm = loss(&S, c, x, s, z, lo, sym, 1);
            z[k] = keep;
            check_close("dL/dzero", q.grad_zero[k], (Lp - Lm) / (2 * h), gmag);
        }
        for (int i = 0; i < GR * GC; i++) {
            double h = 1e-6, keep = x[i];
            x[i] = keep + h;
            double Lp = loss(&S, c, x, s, z, lo, sym, 1);
            x[i] = keep - h;
            double Lm = loss(&S, c, x, s, z, lo, sym, 1);
            x[i] = keep;
            check_close("dL/dx", gm[i], (Lp - Lm) / (2 * h), 1.0);
        }

        // Real quantizer, loss on the clipped elements only: differentiable
        // there (their codes stay clamped), so plain finite differences apply.
        for (int i = 0; i < GR * GC; i++) {
            if (!S.clipped[i]) c[i] = 0.0;
            geff[i] = (float)c[i];
        }
        qat_backward(qat_test_device(), &q, &tt, master, geff, gm);
        for (int k = 0; k < NG; k++) {
            double h = 1e-3 * s[k], keep = s[k];
            s[k] = keep + h;
            double Lp = loss(&S, c, x, s, z, lo, sym, 0);
            s[k] = keep - h;
            double Lm = loss(&S, c, x, s, z, lo, sym, 0);
            s[k] = keep;
            check_close("clipped dL/dscale (real)", q.grad_scale[k], (Lp - Lm) / (2 * h), gmag);
            if (sym) continue;
            keep = z[k];
            z[k] = keep + h;
            Lp = loss(&S, c, x, s, z, lo, sym, 0);
            z[k] = keep - h;
            Lm = loss(&S, c, x, s, z, lo, sym, 0);
            z[k] = keep;
            check_close("clipped dL/dzero (real)", q.grad_zero[k], (Lp - Lm) / (2 * h), gmag);
        }

        // Scale 0: the real function at scale 0+ (one-sided differences).
        q.scale[0] = 0.0f;
        s[0] = 0.0;
        for (int i = 0; i < GR * GC; i++) {
            c[i] = rng_normal(&rng);
            geff[i] = (float)c[i];
            c[i] = geff[i];
        }
        qat_backward(qat_test_device(), &q, &tt, master, geff, gm);
        double L0 = loss(&S, c, x, s, z, lo, sym, 0);
        s[0] = 1e-9;
        double L1 = loss(&S, c, x, s, z, lo, sym, 0);
        s[0] = 0.0;
        check_close("dL/dscale at scale 0", q.grad_scale[0], (L1 - L0) / 1e-9, gmag);
        if (!sym) {
            z[0] += 1e-7;
            double Lz = loss(&S, c, x, s, z, lo, sym, 0);
            z[0] -= 1e-7;
            check_close("dL/dzero at scale 0", q.grad_zero[0], (Lz - L0) / 1e-7, gmag);
        }
        for (int i = 0; i < GG; i++) assert_true(gm[i] == (x[i] == z[0] ? geff[i] : 0.0f));
        check_fixed_scale_mask(&q, &tt, master, geff, gm);

        // In place (grad_master == grad_eff) gives the same result.
        float *inplace = xmalloc(tt.total * sizeof(float), "inplace");
        memcpy(inplace, geff, tt.total * sizeof(float));
        qat_backward(qat_test_device(), &q, &tt, master, inplace, inplace);
        assert_memory_equal(inplace, gm, tt.total * sizeof(float));
        printf("  %s: STE/LSQ gradients match finite differences (%d of %d elements clipped)\n",
               sym ? "sym " : "asym", n_clipped, GR * GC);
        free(inplace);
        free(master);
        free(geff);
        free(gm);
        qat_free(&q);
    }
    free(tt.t);
}

static void test_adam_step(void **state) {
    (void)state;
    TensorTable tt;
    small_table(&tt);
    QuantSpec spec = {GG, 0};
    QatState q;
    PtError e;
    assert_int_equal(qat_init(&q, &tt, &spec, 0, 1, "t", &e), 0);
    const int NG = GR * GC / GG;
    Rng rng;
    rng_seed(&rng, 5);
    for (int k = 0; k < NG; k++) {
        q.scale[k] = f16_to_f32(f32_to_f16(0.01f + 0.001f * (float)k));
        q.zero[k] = f16_to_f32(f32_to_f16(0.05f * (float)rng_normal(&rng)));
    }
    AdamWConfig cfg = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    double ms[8] = {0}, vs[8] = {0}, mz[8] = {0}, vz[8] = {0};
    for (long step = 1; step <= 3; step++) {
        float old_s[8], old_z[8];
        for (int k = 0; k < NG; k++) {
            q.grad_scale[k] = (float)rng_normal(&rng);
            q.grad_zero[k] = (float)rng_normal(&rng);
            old_s[k] = q.scale[k];
            old_z[k] = q.zero[k];
        }
        const double lr = 1e-4;
        qat_step(qat_test_device(), &q, 0, q.total, &cfg, (float)lr, step);
        double bc1 = 1 - pow(0.9, step), bc2 = 1 - pow(0.999, step);
        for (int k = 0; k < NG; k++) {
            assert_true(f16_exact(q.scale[k]) && f16_exact(q.zero[k]));
            double *m[2] = {&ms[k], &mz[k]}, *v[2] = {&vs[k], &vz[k]};
            double g[2] = {q.grad_scale[k], q.grad_zero[k]}, old[2] = {old_s[k], old_z[k]};
            float got[2] = {q.scale[k], q.zero[k]};
            for (int j = 0; j < 2; j++) {
                *m[j] = 0.9 * *m[j] + 0.1 * g[j];
                *v[j] = 0.999 * *v[j] + 0.001 * g[j] * g[j];
                double want = old[j] - lr / bc1 * *m[j] / (sqrt(*v[j]) / sqrt(bc2) + 1e-8);
                // The stored value is fp16 want, or a neighbour when want sits
                // within float rounding of a midpoint.
                double ulp = fabs(f16_to_f32(f32_to_f16((float)want) + 1) - f16_to_f32(f32_to_f16((float)want)));
                assert_true(fabs(got[j] - want) <= 0.5 * ulp * (1 + 1e-4));
                if (step == 1) assert_true(got[j] != old[j]);   // moved by ~lr, far above half an ulp
            }
        }
    }
    // A huge step would make a scale negative: it stops at 0.
    memset(q.m_scale, 0, NG * sizeof(float));
    memset(q.v_scale, 0, NG * sizeof(float));
    for (int k = 0; k < NG; k++) q.grad_scale[k] = 1.0f;
    qat_step(qat_test_device(), &q, 0, q.total, &cfg, 10.0f, 1);
    for (int k = 0; k < NG; k++) assert_true(q.scale[k] == 0.0f);
    // Symmetric: the zero points never move.
    qat_free(&q);
    QuantSpec sym = {GG, 1};
    assert_int_equal(qat_init(&q, &tt, &sym, 0, 1, "t", &e), 0);
    for (int k = 0; k < NG; k++) {
        q.scale[k] = 0.01f;
        q.grad_scale[k] = 1.0f;
        q.grad_zero[k] = 1.0f;
    }
    qat_step(qat_test_device(), &q, 0, q.total, &cfg, 1e-3f, 1);
    for (int k = 0; k < NG; k++) assert_true(q.zero[k] == 0.0f && q.scale[k] < 0.01f && f16_exact(q.scale[k]));
    qat_free(&q);
    free(tt.t);
}

// Learned scales at work: minimise sum (w_q - x)^2 over scale and zero only
// (x fixed), starting from a poor grid (RTN scales doubled, so half the codes
// go unused). Adam on the LSQ gradients must recover most of the gap to RTN.
// (From RTN itself this objective is not a fair test: the STE scale gradient
// of an unclipped element, 2 (w_q - x)^2 / scale, always pushes the scale
// down, so LSQ does not minimise the weight error; it follows the task loss.)
static void test_learned_scales_reduce_error(void **state) {
    (void)state;
    TensorTable tt;
    build_table(&tt, "tiny");
    float *master = random_params(&tt, 8);
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec spec = {32, sym};
        QatState q;
        PtError e;
        assert_int_equal(qat_init(&q, &tt, &spec, 0, 1, "t", &e), 0);
        assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_RTN, NULL, NULL, "t", &e), 0);
        float *eff = xmalloc(tt.total * sizeof(float), "eff"), *g = xmalloc(tt.total * sizeof(float), "g");
        double rtn = 0;
        qat_forward_weights(qat_test_device(), &q, &tt, master, eff);
        for (size_t i = 0; i < tt.total; i++) rtn += ((double)eff[i] - master[i]) * ((double)eff[i] - master[i]);
        for (size_t k = 0; k < q.total; k++) q.scale[k] = f16_to_f32(f32_to_f16(2.0f * q.scale[k]));
        AdamWConfig cfg = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
        double first = 0, last = 0;
        for (long step = 1; step <= 100; step++) {
            qat_forward_weights(qat_test_device(), &q, &tt, master, eff);
            double sse = 0;
            for (size_t i = 0; i < tt.total; i++) {
                double d = (double)eff[i] - master[i];
                sse += d * d;
                g[i] = (float)(2 * d);
            }
            if (step == 1) first = sse;
            last = sse;
            qat_backward(qat_test_device(), &q, &tt, master, g, g);
            for (size_t k = 0; k < q.total; k++) assert_true(isfinite(q.grad_scale[k]) && isfinite(q.grad_zero[k]));
            qat_step(qat_test_device(), &q, 0, q.total, &cfg, 3e-4f, step);
        }
        for (size_t k = 0; k < q.total; k++) assert_true(f16_exact(q.scale[k]) && f16_exact(q.zero[k]));
        printf("  %s g32: weight SSE RTN %.4e; doubled scales %.4e -> %.4e after 100 learned-scale steps\n",
               sym ? "sym " : "asym", rtn, first, last);
        assert_true(last - rtn < 0.25 * (first - rtn));
        free(eff);
        free(g);
        qat_free(&q);
    }
    free(master);
    tensor_table_free(&tt);
}

static void test_save_load(void **state) {
    (void)state;
    TensorTable tt;
    build_table(&tt, "tiny");
    float *master = random_params(&tt, 4);
    QuantSpec spec = {32, 0};
    QatState q, r;
    PtError e;
    assert_int_equal(qat_init(&q, &tt, &spec, 1, 1, "t", &e), 0);
    assert_int_equal(qat_init_from_weights(&q, &tt, master, QAT_INIT_MSE, NULL, NULL, "t", &e), 0);
    for (size_t k = 0; k < q.total; k++) {
        q.m_scale[k] = (float)k * 1e-3f;
        q.v_zero[k] = (float)k * 2e-3f;
    }
    char path[] = "/tmp/pocket_qat_XXXXXX";
    close(mkstemp(path));
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    assert_int_equal(qat_save(f, &q, &tt, path, &e), 0);
    H5Fclose(f);

    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    QuantSpec got;
    int qemb = -1;
    assert_int_equal(qat_read_spec(f, &got, &qemb, path, &e), 0);
    assert_int_equal(got.group, 32);
    assert_int_equal(got.symmetric, 0);
    assert_int_equal(qemb, 1);
    assert_int_equal(qat_init(&r, &tt, &got, qemb, 1, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), 0);
    assert_memory_equal(r.scale, q.scale, q.total * sizeof(float));
    assert_memory_equal(r.zero, q.zero, q.total * sizeof(float));
    assert_memory_equal(r.m_scale, q.m_scale, q.total * sizeof(float));
    assert_memory_equal(r.v_zero, q.v_zero, q.total * sizeof(float));
    qat_free(&r);
    // A run with another spec, or without the embedding, is refused.
    QuantSpec other = {32, 1};
    assert_int_equal(qat_init(&r, &tt, &other, 1, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "symmetric"));
    qat_free(&r);
    assert_int_equal(qat_init(&r, &tt, &spec, 0, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), -1);
    assert_non_null(strstr(e.msg, "embedding"));
    qat_free(&r);
    H5Fclose(f);

    // A value that is not fp16-exact is refused, naming the dataset and index.
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "qat/model.layers.1.self_attn.k_proj.weight/zero", H5P_DEFAULT);
    assert_true(ds >= 0);
    const QatTensor *qt = qat_find(&q, (int)(tensor_table_find(&tt, "model.layers.1.self_attn.k_proj.weight") - tt.t));
    float *vals = xmalloc(qt->n_groups * sizeof(float), "vals");
    memcpy(vals, q.zero + qt->offset, qt->n_groups * sizeof(float));
    vals[3] = 0.1f;
    assert_true(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals) >= 0);
    H5Dclose(ds);
    assert_int_equal(qat_init(&r, &tt, &spec, 1, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), -1);
    assert_non_null(strstr(e.msg, "/qat/model.layers.1.self_attn.k_proj.weight/zero[1, 1]"));
    assert_non_null(strstr(e.msg, "fp16"));
    qat_free(&r);
    H5Fclose(f);

    // No /qat at all: 1, so the caller initialises from the weights.
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_int_equal(qat_init(&r, &tt, &spec, 1, 0, path, &e), 0);
    assert_int_equal(qat_load(f, &r, &tt, path, &e), 1);
    assert_int_equal(qat_read_spec(f, &got, &qemb, path, &e), 1);
    qat_free(&r);
    H5Fclose(f);
    unlink(path);
    free(vals);
    free(master);
    qat_free(&q);
    tensor_table_free(&tt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_and_errors),        cmocka_unit_test(test_forward_weights),
        cmocka_unit_test(test_ste_lsq_finite_differences),  cmocka_unit_test(test_adam_step),
        cmocka_unit_test(test_learned_scales_reduce_error), cmocka_unit_test(test_save_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
