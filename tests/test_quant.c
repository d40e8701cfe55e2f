// test_quant: the int4 grid of model/int4_grid.h and the CPU kernels of model/ops/quant.h.
//  - RTN scale/zero/codes/dequant vs an independent torch implementation of the
//    same rule (tests/ref/make_quant_fixtures.py -> tests/fixtures/quant/), all
//    bit for bit, groups 32/64/128, asymmetric and symmetric;
//  - a 2x128 example worked out by hand (fp16 bits and packed bytes);
//  - fake-quant == quantize -> pack -> unpack -> dequantize, bit for bit, and
//    every device's (test_backends.h) fake-quant and dequant give those bits;
//  - every stored scale/zero is fp16-exact; MSE init never loses to RTN;
//  - errors: cols % G != 0, bad group, non-finite weights;
//  - A16 rounding == torch .to(bfloat16) / .to(float16) (fixture) on every
//    device;
//  - the QAT ops of every device against the CPU kernels: the STE mask,
//    frozen-code zeroing and the fp16 Adam bit for bit, the per-group sums of
//    the learned-scale and frozen backward to float rounding.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include "../formats/safetensors.h"
#include "../model/ops/quant.h"
#include "test_backends.h"

#define FIXTURE "tests/fixtures/quant/quant.safetensors"


static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }
static int f16_exact(float x) { return same_bits(f16_to_f32(f32_to_f16(x)), x); }

static float *read_f32(const StFile *f, const char *name, size_t want_numel) {
    const StTensor *t = st_find(f, name);
    if (!t) fail_msg("fixture has no tensor %s", name);
    assert_int_equal(t->numel, want_numel);
    float *x = xmalloc(t->numel * sizeof(float), name);
    PtError e;
    if (st_read_f32(f, t, x, &e)) fail_msg("%s", e.msg);
    return x;
}

// (b) RTN vs the torch reference: scale, zero, codes and dequantized values.
static void test_rtn_matches_torch(void **state) {
    (void)state;
    StFile f;
    PtError e;
    if (st_open(&f, FIXTURE, &e)) fail_msg("%s", e.msg);
    const int64_t R = 8, C = 256;
    float *w = read_f32(&f, "w", (size_t)(R * C));
    const int groups[3] = {32, 64, 128};
    for (int gi = 0; gi < 3; gi++) {
        for (int sym = 0; sym < 2; sym++) {
            QuantSpec q = {groups[gi], sym};
            size_t ng = quant_n_groups(&q, R, C);
            char nm[64];
            const char *tag = sym ? "sym" : "asym";
            snprintf(nm, sizeof nm, "g%d_%s_scale", q.group, tag);
            float *ref_scale = read_f32(&f, nm, ng);
            snprintf(nm, sizeof nm, "g%d_%s_zero", q.group, tag);
            float *ref_zero = read_f32(&f, nm, ng);
            snprintf(nm, sizeof nm, "g%d_%s_deq", q.group, tag);
            float *ref_deq = read_f32(&f, nm, (size_t)(R * C));
            snprintf(nm, sizeof nm, "g%d_%s_codes", q.group, tag);
            const StTensor *tc = st_find(&f, nm);
            assert_non_null(tc);
            assert_string_equal(tc->dtype, "U8");
            const uint8_t *ref_codes = st_data(&f, tc);

            float *scale = xmalloc(ng * sizeof(float), "scale"), *zero = xmalloc(ng * sizeof(float), "zero");
            uint8_t *codes = xmalloc((size_t)(R * C), "codes");
            float *deq = xmalloc((size_t)(R * C) * sizeof(float), "deq");
            assert_int_equal(quant_init_rtn(&q, w, R, C, scale, zero, "fixture", &e), 0);
            quant_codes(&q, w, R, C, scale, zero, codes);
            quant_dequant(&q, codes, R, C, scale, zero, deq, 0);
            int bad = 0;
            for (size_t k = 0; k < ng; k++)
                if (!same_bits(scale[k], ref_scale[k]) || !same_bits(zero[k], ref_zero[k])) {
                    if (bad++ < 3)
                        print_error("g%d %s group %zu: scale %a zero %a, torch %a %a\n", q.group, tag, k,
                                    (double)scale[k], (double)zero[k], (double)ref_scale[k], (double)ref_zero[k]);
                }
            for (int64_t i = 0; i < R * C; i++)
                if (codes[i] != ref_codes[i] || !same_bits(deq[i], ref_deq[i])) {
                    if (bad++ < 6)
                        print_error("g%d %s element %lld: code %d deq %a, torch %d %a\n", q.group, tag,
                                    (long long)i, codes[i], (double)deq[i], ref_codes[i], (double)ref_deq[i]);
                }
            assert_int_equal(bad, 0);
            // The codes of symmetric grids never use 0.
            if (sym)
                for (int64_t i = 0; i < R * C; i++) assert_true(codes[i] >= 1);
            free(ref_scale);
            free(ref_zero);
            free(ref_deq);
            free(scale);
            free(zero);
            free(codes);
            free(deq);
        }
    }
    printf("  RTN scale/zero/codes/dequant == torch for groups 32/64/128, asym and sym (%lld weights)\n",
           (long long)(R * C));
    free(w);
    st_close(&f);
}

// An example worked out by hand: 2x128, asym, block 64.
static void test_mnn_worked_example(void **state) {
    (void)state;
    float w[256];
    for (int i = 0; i < 128; i++) {
        w[i] = (float)(i - 64) / 64.0f;
        w[128 + i] = (float)(i % 16) * 0.1f - 0.7f;
    }
    QuantSpec q = {64, 0};
    float scale[4], zero[4];
    PtError e;
    assert_int_equal(quant_init_rtn(&q, w, 2, 128, scale, zero, "example", &e), 0);
    const uint16_t want_scale[4] = {0x2C33, 0x2C33, 0x2E66, 0x2E66}, want_zero[4] = {0xB79A, 0x3833, 0x2E66, 0x2E66};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(f32_to_f16(scale[k]), want_scale[k]);
        assert_int_equal(f32_to_f16(zero[k]), want_zero[k]);
    }
    uint8_t codes[256], packed[128];
    quant_codes(&q, w, 2, 128, scale, zero, codes);
    assert_int_equal(quant_pack4(codes, 256, packed), 128);
    const uint8_t row0_head[8] = {0x00, 0x01, 0x11, 0x12, 0x22, 0x23, 0x33, 0x34};
    assert_memory_equal(packed, row0_head, 8);
    assert_int_equal(packed[31], 0xFF);
    assert_memory_equal(packed + 32, row0_head, 8);   // block 1 identical
    const uint8_t row1[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF};
    for (int j = 0; j < 8; j++) assert_memory_equal(packed + 64 + 8 * j, row1, 8);
    // Dequantized values worked out by hand: w = (u - 8) * scale + zero.
    float deq[256];
    quant_dequant(&q, codes, 2, 128, scale, zero, deq, 0);
    assert_true(deq[0] == -1.0f);
    assert_true(fabs(deq[3] - -0.934387) < 1e-6);
    assert_true(fabs(deq[127] - 0.984192) < 1e-6);
    assert_true(fabs(deq[128 + 5] - -0.199951) < 1e-6);
    assert_true(fabs(deq[128 + 15] - 0.799805) < 1e-6);
}

static float *copy_floats(const float *x, size_t n) {
    float *y = xmalloc(n * sizeof(float), "copy");
    memcpy(y, x, n * sizeof(float));
    return y;
}

static float *random_weights(Rng *r, size_t n, double sd) {
    float *w = xmalloc(n * sizeof(float), "weights");
    for (size_t i = 0; i < n; i++) w[i] = (float)(sd * rng_normal(r));
    return w;
}

// (a) fake-quant == codes -> pack -> unpack -> dequant, bit for bit, also with
// moved scales/zeros (so codes clip) and odd lengths for the packer.
static void test_fake_equals_pack_path(void **state) {
    (void)state;
    Rng rng;
    rng_seed(&rng, 7);
    const int64_t R = 192, C = 384;   // above QUANT_PARALLEL_MIN: the OpenMP path
    const size_t n = (size_t)(R * C);
    float *w = random_weights(&rng, n, 0.05);
    w[5] = 1.0f;   // an outlier
    float *fake = xmalloc(n * sizeof(float), "fake"), *deq = xmalloc(n * sizeof(float), "deq");
    uint8_t *codes = xmalloc(n, "codes"), *back = xmalloc(n, "back"), *packed = xmalloc(n / 2 + 1, "packed");
    const int groups[3] = {32, 64, 128};
    for (int gi = 0; gi < 3; gi++) {
        for (int sym = 0; sym < 2; sym++) {
            for (int moved = 0; moved < 2; moved++) {
                QuantSpec q = {groups[gi], sym};
                size_t ng = quant_n_groups(&q, R, C);
                float *scale = xmalloc(ng * sizeof(float), "s"), *zero = xmalloc(ng * sizeof(float), "z");
                PtError e;
                assert_int_equal(quant_init_rtn(&q, w, R, C, scale, zero, "random", &e), 0);
                if (moved)
                    for (size_t k = 0; k < ng; k++) {
                        scale[k] = f16_to_f32(f32_to_f16(scale[k] * (float)(0.5 + 0.7 * rng_uniform(&rng))));
                        if (!sym) zero[k] = f16_to_f32(f32_to_f16(zero[k] + 0.01f * (float)rng_normal(&rng)));
                    }
                quant_fake(&q, w, R, C, scale, zero, fake, 0);
                quant_codes(&q, w, R, C, scale, zero, codes);
                assert_int_equal(quant_pack4(codes, n, packed), n / 2);
                memset(back, 0xAA, n);
                quant_unpack4(packed, n, back);
                assert_memory_equal(back, codes, n);
                quant_dequant(&q, back, R, C, scale, zero, deq, 0);
                assert_memory_equal(fake, deq, n * sizeof(float));
                // The devices' ops (QAT's forward, int4 inference) give the same bits.
                for (int d = 0; d < n_devs; d++) {
                    Device *dev = &devs[d].dev;
                    float *out = xmalloc(n * sizeof(float), "device out");
                    Mirrors mr = mirrors_on(dev);
                    float *out_d = mirror(&mr, out, n * sizeof(float));
                    const float *w_d = mirror(&mr, w, n * sizeof(float));
                    const float *s_d = mirror(&mr, scale, ng * sizeof(float)), *z_d = mirror(&mr, zero, ng * sizeof(float));
                    const uint8_t *c_d = mirror(&mr, codes, n);
                    OP(dev, quant_fake, &q, w_d, R, C, s_d, z_d, out_d);
                    fetch(dev, out, out_d, n * sizeof(float));
                    if (memcmp(out, fake, n * sizeof(float)))
                        fail_msg("%s: quant_fake g%d sym %d moved %d differs from the host's", devs[d].name, q.group,
                                 sym, moved);
                    OP(dev, quant_dequant, &q, c_d, R, C, s_d, z_d, out_d);
                    fetch(dev, out, out_d, n * sizeof(float));
                    if (memcmp(out, deq, n * sizeof(float)))
                        fail_msg("%s: quant_dequant g%d sym %d moved %d differs from the host's", devs[d].name,
                                 q.group, sym, moved);
                    mirrors_free(&mr);
                    free(out);
                }
                // In place (out == w) gives the same values.
                float *copy = xmalloc(n * sizeof(float), "copy");
                memcpy(copy, w, n * sizeof(float));
                quant_fake(&q, copy, R, C, scale, zero, copy, 0);
                assert_memory_equal(copy, fake, n * sizeof(float));
                free(copy);
                for (size_t i = 0; i < n; i++) assert_true(codes[i] >= quant_code_min(&q) && codes[i] <= 15);
                free(scale);
                free(zero);
            }
        }
    }
    // Packing: nibble order and an odd count.
    uint8_t c5[5] = {1, 2, 3, 4, 15}, p3[3], u5[5];
    assert_int_equal(quant_pack4(c5, 5, p3), 3);
    assert_int_equal(p3[0], 0x12);
    assert_int_equal(p3[1], 0x34);
    assert_int_equal(p3[2], 0xF0);
    quant_unpack4(p3, 5, u5);
    assert_memory_equal(u5, c5, 5);
    free(w);
    free(fake);
    free(deq);
    free(codes);
    free(back);
    free(packed);
}

// (d) fp16 exactness of RTN and MSE parameters; MSE never worse than RTN, and
// the dequantized value of RTN is the nearest grid point.
static void test_fp16_exact_and_mse(void **state) {
    (void)state;
    Rng rng;
    rng_seed(&rng, 11);
    const int64_t R = 64, C = 256;
    const size_t n = (size_t)(R * C);
    float *w = random_weights(&rng, n, 0.02);
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec q = {64, sym};
        size_t ng = quant_n_groups(&q, R, C);
        float *s = xmalloc(ng * sizeof(float), "s"), *z = xmalloc(ng * sizeof(float), "z");
        float *s2 = xmalloc(ng * sizeof(float), "s2"), *z2 = xmalloc(ng * sizeof(float), "z2");
        float *fake = xmalloc(n * sizeof(float), "fake");
        PtError e;
        assert_int_equal(quant_init_rtn(&q, w, R, C, s, z, "w", &e), 0);
        double sse_rtn = 0, sse_mse = 0;
        assert_int_equal(quant_init_mse(&q, w, R, C, s2, z2, &sse_rtn, &sse_mse, "w", &e), 0);
        for (size_t k = 0; k < ng; k++) {
            assert_true(f16_exact(s[k]) && f16_exact(z[k]) && f16_exact(s2[k]) && f16_exact(z2[k]));
            assert_true(s[k] > 0.0f && s2[k] > 0.0f);
            if (sym) assert_true(z[k] == 0.0f && z2[k] == 0.0f);
        }
        // sse_rtn is the error of the RTN parameters, computed independently here.
        quant_fake(&q, w, R, C, s, z, fake, 0);
        double check = 0, norm = 0;
        for (size_t i = 0; i < n; i++) {
            check += ((double)fake[i] - w[i]) * ((double)fake[i] - w[i]);
            norm += (double)w[i] * w[i];
        }
        assert_true(fabs(check - sse_rtn) <= 1e-9 * norm);
        quant_fake(&q, w, R, C, s2, z2, fake, 0);
        double check2 = 0;
        for (size_t i = 0; i < n; i++) check2 += ((double)fake[i] - w[i]) * ((double)fake[i] - w[i]);
        assert_true(fabs(check2 - sse_mse) <= 1e-9 * norm);
        assert_true(sse_mse <= sse_rtn);
        printf("  %s g64, N(0, 0.02^2) weights: relative MSE RTN %.4e, MSE-init %.4e (%.1f%% lower)\n",
               sym ? "sym " : "asym", sse_rtn / norm, sse_mse / norm, 100.0 * (1.0 - sse_mse / sse_rtn));
        // Nearest grid point: no other in-range code of the group is closer.
        if (!sym) {
            quant_fake(&q, w, R, C, s, z, fake, 0);
            for (size_t i = 0; i < n; i += 7) {
                size_t k = i / 64;
                double d = fabs((double)fake[i] - w[i]);
                for (int u = 0; u <= 15; u++) {
                    float g = ((float)u - 8.0f) * s[k] + z[k];
                    assert_true(d <= fabs((double)g - w[i]) + 1e-12);
                }
            }
        }
        free(s);
        free(z);
        free(s2);
        free(z2);
        free(fake);
    }
    free(w);
}

// (e) bad shapes and values are refused with one line naming the tensor.
static void test_errors(void **state) {
    (void)state;
    PtError e;
    QuantSpec q = {64, 0};
    assert_int_equal(quant_check(&q, 4, 160, "model.layers.0.mlp.down_proj.weight", &e), -1);
    assert_non_null(strstr(e.msg, "model.layers.0.mlp.down_proj.weight"));
    assert_non_null(strstr(e.msg, "160"));
    assert_non_null(strstr(e.msg, "64"));
    assert_null(strchr(e.msg, '\n'));
    float w[2 * 96] = {0}, s[6], z[6];
    assert_int_equal(quant_init_rtn(&q, w, 2, 96, s, z, "t", &e), -1);
    assert_int_equal(quant_init_mse(&q, w, 2, 96, s, z, NULL, NULL, "t", &e), -1);
    QuantSpec odd = {33, 0};
    assert_int_equal(quant_check(&odd, 2, 66, "t", &e), -1);
    assert_non_null(strstr(e.msg, "33"));
    QuantSpec ok = {32, 0};
    assert_int_equal(quant_check(&ok, 2, 96, "t", &e), 0);
    w[100] = NAN;
    assert_int_equal(quant_init_rtn(&ok, w, 2, 96, s, z, "t", &e), -1);
    assert_non_null(strstr(e.msg, "row 1, group 0"));
    assert_non_null(strstr(e.msg, "non-finite"));
    w[100] = 0.0f;
    w[3] = 1e6f;   // scale 1e6 / 15 is beyond fp16
    assert_int_equal(quant_init_rtn(&ok, w, 2, 96, s, z, "t", &e), -1);
    assert_non_null(strstr(e.msg, "fp16 range"));
}

// (f) A16 rounding == torch's .to(bfloat16) / .to(float16).
static void test_a16_matches_torch(void **state) {
    (void)state;
    StFile f;
    PtError e;
    if (st_open(&f, FIXTURE, &e)) fail_msg("%s", e.msg);
    const StTensor *t = st_find(&f, "a16_in");
    assert_non_null(t);
    size_t n = t->numel;
    float *in = read_f32(&f, "a16_in", n);
    const char *names[2] = {"a16_bf16", "a16_fp16"};
    const int modes[2] = {A16_BF16, A16_FP16};
    for (int m = 0; m < 2; m++) {
        float *want = read_f32(&f, names[m], n), *x = xmalloc(n * sizeof(float), "x");
        for (int d = 0; d < n_devs; d++) {
            const char *who = devs[d].name;
            memcpy(x, in, n * sizeof(float));
            Mirrors mr = mirrors_on(&devs[d].dev);
            float *x_d = mirror(&mr, x, n * sizeof(float));
            OP(&devs[d].dev, a16_round, x_d, n, modes[m]);
            fetch(&devs[d].dev, x, x_d, n * sizeof(float));
            mirrors_free(&mr);
            for (size_t i = 0; i < n; i++) {
                if (isnan(want[i])) {
                    if (!isnan(x[i])) fail_msg("%s %s: input %a -> %a, torch NaN", who, names[m], (double)in[i],
                                               (double)x[i]);
                    continue;
                }
                if (!same_bits(x[i], want[i]))
                    fail_msg("%s %s: input %a -> %a, torch %a", who, names[m], (double)in[i], (double)x[i],
                             (double)want[i]);
            }
        }
        free(want);
        free(x);
    }
    float *x = xmalloc(n * sizeof(float), "x");
    memcpy(x, in, n * sizeof(float));
    for (int d = 0; d < n_devs; d++) {
        Mirrors mr = mirrors_on(&devs[d].dev);
        float *x_d = mirror(&mr, x, n * sizeof(float));
        OP(&devs[d].dev, a16_round, x_d, n, A16_OFF);
        fetch(&devs[d].dev, x, x_d, n * sizeof(float));
        mirrors_free(&mr);
        assert_memory_equal(x, in, n * sizeof(float));
    }
    assert_int_equal(a16_mode_from_name("bf16"), A16_BF16);
    assert_int_equal(a16_mode_from_name("fp16"), A16_FP16);
    assert_int_equal(a16_mode_from_name("off"), A16_OFF);
    assert_int_equal(a16_mode_from_name("fp8"), -1);
    printf("  A16 bf16 and fp16 rounding == torch on %zu values (ties, subnormals, overflow, inf, nan), "
           "%d devices\n", n, n_devs);
    free(x);
    free(in);
    st_close(&f);
}

// Largest |a - b| over n floats, relative to the largest |b| (floored at 1e-30).
static double rel_diff(const float *a, const float *b, size_t n) {
    double diff = 0.0, mag = 1e-30;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        mag = fmax(mag, fabs((double)b[i]));
    }
    return diff / mag;
}

// The QAT ops of every other device against the CPU kernels (called directly, on the
// first device's threads) on one tensor with moved scales (so weights clip), a
// group with scale 0, both grids.
static void test_qat_ops_on_devices(void **state) {
    (void)state;
    if (n_devs < 2) {
        printf("  no device beside the CPU to compare with its kernels\n");
        skip();
    }
    Rng rng;
    rng_seed(&rng, 13);
    const int64_t R = 96, C = 256;
    const size_t n = (size_t)(R * C), nb = n * sizeof(float);
    float *w = random_weights(&rng, n, 0.05), *g0 = random_weights(&rng, n, 1.0);
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec q = {64, sym};
        const size_t ng = quant_n_groups(&q, R, C), gb = ng * sizeof(float);
        float *scale = xmalloc(gb, "s"), *zero = xmalloc(gb, "z");
        PtError e;
        assert_int_equal(quant_init_rtn(&q, w, R, C, scale, zero, "w", &e), 0);
        for (size_t k = 0; k < ng; k++) scale[k] = f16_to_f32(f32_to_f16(scale[k] * (float)(0.6 + 0.6 * rng_uniform(&rng))));
        scale[3] = 0.0f;   // the scale -> 0+ limit
        uint8_t *codes = xmalloc(n, "codes");
        quant_codes(&q, w, R, C, scale, zero, codes);
        // The CPU kernels' results.
        Device *cpu = &devs[0].dev;
        float *g_ste = copy_floats(g0, n), *g_lsq = copy_floats(g0, n), *g_frz = copy_floats(g0, n);
        float *gs = xcalloc(ng, sizeof(float), "gs"), *gz = xcalloc(ng, sizeof(float), "gz");
        float *gs_f = xcalloc(ng, sizeof(float), "gs frozen"), *gz_f = xcalloc(ng, sizeof(float), "gz frozen");
        quant_backward(cpu, &q, w, g_ste, R, C, scale, zero, NULL, NULL);
        quant_backward(cpu, &q, w, g_lsq, R, C, scale, zero, gs, gz);
        quant_backward_frozen(cpu, &q, codes, g_frz, R, C, gs_f, gz_f);
        float *p = copy_floats(scale, ng), *m = xcalloc(ng, sizeof(float), "m"), *v = xcalloc(ng, sizeof(float), "v");
        const AdamWConfig ac = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f};
        for (long step = 1; step <= 3; step++) quant_adam(cpu, p, gs, m, v, ng, &ac, 1e-3f, step, 1e-6f, 1.0f);
        // Every other device against them (the CPU kernels themselves: test_qat, against finite differences).
        for (int d = 1; d < n_devs; d++) {
            Device *dev = &devs[d].dev;
            float *a = copy_floats(g0, n), *b = copy_floats(g0, n), *c = copy_floats(g0, n);
            float *ds = xcalloc(ng, sizeof(float), "ds"), *dz = xcalloc(ng, sizeof(float), "dz");
            float *ds_f = xcalloc(ng, sizeof(float), "ds frozen"), *dz_f = xcalloc(ng, sizeof(float), "dz frozen");
            float *pd = copy_floats(scale, ng), *md = xcalloc(ng, sizeof(float), "m"), *vd = xcalloc(ng, sizeof(float), "v");
            Mirrors mr = mirrors_on(dev);
            const float *w_d = mirror(&mr, w, nb), *s_d = mirror(&mr, scale, gb), *z_d = mirror(&mr, zero, gb);
            const uint8_t *c_d = mirror(&mr, codes, n);
            float *a_d = mirror(&mr, a, nb), *b_d = mirror(&mr, b, nb), *cc_d = mirror(&mr, c, nb);
            float *ds_d = mirror(&mr, ds, gb), *dz_d = mirror(&mr, dz, gb), *dsf_d = mirror(&mr, ds_f, gb);
            float *dzf_d = mirror(&mr, dz_f, gb), *p_d = mirror(&mr, pd, gb), *m_d = mirror(&mr, md, gb);
            float *v_d = mirror(&mr, vd, gb);
            // The Adam takes the CPU kernel's scale gradient, so only the update itself is compared.
            const float *gs_d = mirror(&mr, gs, gb);
            OP(dev, quant_backward, &q, w_d, a_d, R, C, s_d, z_d, NULL, NULL);
            OP(dev, quant_backward, &q, w_d, b_d, R, C, s_d, z_d, ds_d, dz_d);
            OP(dev, quant_backward_frozen, &q, c_d, cc_d, R, C, dsf_d, dzf_d);
            for (long step = 1; step <= 3; step++) OP(dev, quant_adam, p_d, gs_d, m_d, v_d, ng, &ac, 1e-3f, step, 1e-6f, 1.0f);
            fetch(dev, a, a_d, nb);
            fetch(dev, b, b_d, nb);
            fetch(dev, c, cc_d, nb);
            fetch(dev, ds, ds_d, gb);
            fetch(dev, dz, dz_d, gb);
            fetch(dev, ds_f, dsf_d, gb);
            fetch(dev, dz_f, dzf_d, gb);
            fetch(dev, pd, p_d, gb);
            mirrors_free(&mr);
            if (memcmp(a, g_ste, nb) || memcmp(b, g_lsq, nb) || memcmp(c, g_frz, nb))
                fail_msg("%s: sym %d: the STE / frozen gradient differs from the CPU kernel's", devs[d].name, sym);
            if (memcmp(pd, p, gb)) fail_msg("%s: sym %d: quant_adam differs from the CPU kernel's", devs[d].name, sym);
            // Sums of 64 float products: a few ulp of the largest term.
            const double e[4] = {rel_diff(ds, gs, ng), rel_diff(dz, gz, ng), rel_diff(ds_f, gs_f, ng),
                                 rel_diff(dz_f, gz_f, ng)};
            printf("  %-26s sym %d: STE mask, frozen zeroing, Adam bit-equal; group sums rel %.1e %.1e %.1e %.1e\n",
                   devs[d].name, sym, e[0], e[1], e[2], e[3]);
            for (int i = 0; i < 4; i++)
                if (!(e[i] <= 1e-5)) fail_msg("%s: sym %d: group sum %d off the CPU kernel's by %.3g", devs[d].name, sym, i, e[i]);
            free(a); free(b); free(c); free(ds); free(dz); free(ds_f); free(dz_f); free(pd); free(md); free(vd);
        }
        free(scale); free(zero); free(codes); free(g_ste); free(g_lsq); free(g_frz); free(gs); free(gz);
        free(gs_f); free(gz_f); free(p); free(m); free(v);
    }
    free(w);
    free(g0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_rtn_matches_torch),     cmocka_unit_test(test_mnn_worked_example),
        cmocka_unit_test(test_fake_equals_pack_path), cmocka_unit_test(test_fp16_exact_and_mse),
        cmocka_unit_test(test_errors),                cmocka_unit_test(test_a16_matches_torch),
        cmocka_unit_test(test_qat_ops_on_devices),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}
