// test_cuda_math: the per-element arithmetic of the CUDA kernels
// (cuda/kernel_math.h), compiled here for the host, against the CPU backend's
// own functions, bit for bit: util's bf16/fp16 converters, matmul_bf16_round,
// A16 rounding, a RoPE rotation, int4_grid.h's code rule, fake-quant, dequant and
// quant_adam, and adamw.c's AdamW update. The kernels apply these functions
// element by element (with the device's uncontracted intrinsics where the
// host uses plain operators), so these checks carry over to the GPU's bits;
// the GPU check (tests/cuda/check.sh) then confirms them on the device. Runs
// in every build: it needs no GPU and no CUDA.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include "../cuda/kernel_math.h"
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#include "../util/util.h"

static int same_bits(float a, float b) { return km_bits(a) == km_bits(b); }

// Floats of every kind: random bit patterns (all exponents, subnormals, NaNs,
// infinities), normal values near 1, exact ties of both 16-bit formats.
static float sample(Rng *r, int i) {
    switch (i % 4) {
        case 0: return km_float((uint32_t)rng_next(r));
        case 1: return (float)rng_normal(r);
        case 2: return km_float(((uint32_t)rng_next(r) & 0xffff0000u) | 0x8000u);   // bf16 tie
        default: return km_float(((uint32_t)rng_next(r) & 0xffffe000u) | 0x1000u);  // fp16 tie (normal range)
    }
}

static void test_16bit_conversions(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 101);
    for (int i = 0; i < 2000000; i++) {
        const float x = sample(&r, i);
        if (km_bf16_bits(x) != f32_to_bf16(x)) fail_msg("bf16 of %a: %04x, util %04x", (double)x, km_bf16_bits(x), f32_to_bf16(x));
        if (km_bf16_bits_matmul(x) != matmul_bf16_round(x))
            fail_msg("matmul bf16 of %a: %04x, CPU %04x", (double)x, km_bf16_bits_matmul(x), matmul_bf16_round(x));
        if (km_f16_bits(x) != f32_to_f16(x)) fail_msg("fp16 of %a: %04x, util %04x", (double)x, km_f16_bits(x), f32_to_f16(x));
    }
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = km_f16_value((uint16_t)h), b = f16_to_f32((uint16_t)h);
        if (!same_bits(a, b) && !(isnan(a) && isnan(b))) fail_msg("fp16 %04x: %a, util %a", h, (double)a, (double)b);
        if (!same_bits(km_bf16_value((uint16_t)h), bf16_to_f32((uint16_t)h))) fail_msg("bf16 %04x", h);
    }
    // A16 through the CPU op on a batch.
    enum { N = 4096 };
    float x[N], y[N];
    Device d;
    cpu_device_init(&d, 1, NULL);
    for (int mode = A16_OFF; mode <= A16_FP16; mode++) {
        for (int i = 0; i < N; i++) x[i] = y[i] = sample(&r, i);
        a16_round(&d, y, N, mode);
        for (int i = 0; i < N; i++) {
            const float k = km_a16(x[i], mode);
            if (!same_bits(k, y[i]) && !(isnan(k) && isnan(y[i])))
                fail_msg("a16 mode %d of %a: %a, CPU %a", mode, (double)x[i], (double)k, (double)y[i]);
        }
    }
    dev_free(&d);
    printf("  bf16 (both roundings), fp16 both ways, A16: 2e6 samples and all 65536 16-bit values equal the CPU's\n");
}

static void test_rope_pair(void **state) {
    (void)state;
    Device d;
    cpu_device_init(&d, 1, NULL);
    RopeTable rt;
    rope_table_init(&rt, &d, 300, 18, 1e4f);
    enum { N = 7, H = 3, HD = 18 };
    int pos[N] = {0, 1, 17, 63, 64, 200, 299};
    Rng r;
    rng_seed(&r, 102);
    float x[N * H * HD], y[N * H * HD];
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < N * H * HD; i++) x[i] = y[i] = (float)rng_normal(&r);
        if (dir == 0) rope_forward(&d, y, &rt, pos, N, H, HD);
        else rope_backward(&d, y, &rt, pos, N, H, HD);
        for (int n = 0; n < N; n++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < HD / 2; i++) {
                    const size_t o = ((size_t)n * H + h) * HD;
                    const float c = rt.cos[pos[n] * 9 + i], s = (dir ? -1.0f : 1.0f) * rt.sin[pos[n] * 9 + i];
                    float y0, y1;
                    km_rope_pair(x[o + i], x[o + i + 9], c, s, &y0, &y1);
                    if (!same_bits(y0, y[o + i]) || !same_bits(y1, y[o + i + 9]))
                        fail_msg("rope dir %d row %d head %d pair %d differs from the CPU's", dir, n, h, i);
                }
    }
    rope_table_free(&rt, &d);
    dev_free(&d);
}

// Two tensors (one with decay) updated by adamw_step and by km_adamw: the same bits.
static void test_adamw(void **state) {
    (void)state;
    enum { A = 100, B = 37 };
    TensorInfo t[2];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, sizeof t[0].name, "w");
    t[0].numel = A;
    t[0].flags = TF_DECAY;
    snprintf(t[1].name, sizeof t[1].name, "norm");
    t[1].numel = B;
    t[1].offset = 112;
    t[1].flags = TF_NORM;
    TensorTable tt = {t, 2, 160, 0};
    float p[160] = {0}, g[160] = {0}, m[160] = {0}, v[160] = {0};
    float kp[160], km[160], kv[160];
    Rng r;
    rng_seed(&r, 103);
    for (int i = 0; i < 160; i++)
        if (i < A || (i >= 112 && i < 112 + B)) p[i] = (float)rng_normal(&r);
    memcpy(kp, p, sizeof p);
    memset(km, 0, sizeof km);
    memset(kv, 0, sizeof kv);
    Device d;
    cpu_device_init(&d, 1, NULL);
    const float betas[3][2] = {{0.9f, 0.95f}, {0.3f, 0.999f}, {0.6f, 0.9f}};   // lerp's two forms
    for (int c = 0; c < 3; c++) {
        AdamWConfig cfg = {.lr = 1.0f, .beta1 = betas[c][0], .beta2 = betas[c][1], .eps = 1e-8f, .weight_decay = 0.1f};
        for (long step = 1; step <= 4; step++) {
            for (int i = 0; i < 160; i++)
                if (i < A || (i >= 112 && i < 112 + B)) g[i] = (float)(rng_normal(&r) * pow(10.0, -(double)(i % 7)));
            const float lr = 3e-3f * (float)step;
            adamw_step(&d, p, g, m, v, &tt, &cfg, lr, step);
            for (int k = 0; k < 2; k++) {
                const KmAdamW s = km_adamw_scalars(lr, cfg.weight_decay, cfg.beta1, cfg.beta2, cfg.eps, step,
                                                   (t[k].flags & TF_DECAY) != 0);
                for (size_t i = t[k].offset; i < t[k].offset + t[k].numel; i++) km_adamw(&kp[i], g[i], &km[i], &kv[i], &s);
            }
            for (int i = 0; i < 160; i++)
                if (!same_bits(kp[i], p[i]) || !same_bits(km[i], m[i]) || !same_bits(kv[i], v[i]))
                    fail_msg("adamw betas %g/%g step %ld element %d: %a %a %a, CPU %a %a %a", (double)cfg.beta1,
                             (double)cfg.beta2, step, i, (double)kp[i], (double)km[i], (double)kv[i], (double)p[i],
                             (double)m[i], (double)v[i]);
        }
    }
    dev_free(&d);
}

static void test_quant_math(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 104);
    // The code rule, element by element, including clipped weights and NaN.
    for (int i = 0; i < 1000000; i++) {
        const float x = (float)(rng_normal(&r) * 0.1), s = f16_to_f32(f32_to_f16((float)(0.001 + 0.02 * rng_uniform(&r))));
        const float z = f16_to_f32(f32_to_f16((float)(0.02 * rng_normal(&r))));
        const float xv = i % 1000 == 0 ? NAN : x;
        for (int lo = 0; lo <= 1; lo++) {
            const float a = km_quant_rounded(xv, s, z), b = quant_rounded(xv, s, z);
            if (!same_bits(a, b) && !(isnan(a) && isnan(b))) fail_msg("rounded %a: %a vs %a", (double)xv, (double)a, (double)b);
            if (!same_bits(km_quant_clamp(a, lo), quant_clamp(b, lo))) fail_msg("clamp");
            if (km_quant_inside(a, lo) != quant_inside(b, lo)) fail_msg("inside");
        }
    }
    // fake-quant and dequant over tensors, against quant_fake / quant_dequant.
    enum { R = 16, C = 128, G = 32, NG = R * C / G };
    float w[R * C], sc[NG], ze[NG], out[R * C];
    uint8_t codes[R * C];
    for (int sym = 0; sym < 2; sym++) {
        QuantSpec q = {G, sym};
        for (int i = 0; i < R * C; i++) w[i] = (float)(rng_normal(&r) * 0.05);
        PtError e;
        assert_int_equal(quant_init_rtn(&q, w, R, C, sc, ze, "w", &e), 0);
        for (int k = 0; k < NG; k++) sc[k] = f16_to_f32(f32_to_f16(sc[k] * (float)(0.5 + rng_uniform(&r))));
        sc[2] = 0.0f;
        quant_fake(&q, w, R, C, sc, ze, out, 0);
        for (int i = 0; i < R * C; i++) {
            const float k = km_quant_fake(w[i], sc[i / G], sym ? 0.0f : ze[i / G], quant_code_min(&q), sym);
            if (!same_bits(k, out[i])) fail_msg("fake sym %d element %d: %a vs %a", sym, i, (double)k, (double)out[i]);
        }
        quant_codes(&q, w, R, C, sc, ze, codes);
        quant_dequant(&q, codes, R, C, sc, ze, out, 0);
        for (int i = 0; i < R * C; i++)
            if (!same_bits(km_quant_dequant(codes[i], sc[i / G], sym ? 0.0f : ze[i / G], sym), out[i]))
                fail_msg("dequant sym %d element %d", sym, i);
    }
    // quant_adam: three steps on fp16 values.
    enum { NA = 500 };
    float p[NA], g[NA], m[NA] = {0}, v[NA] = {0}, kp[NA], km[NA] = {0}, kv[NA] = {0};
    for (int i = 0; i < NA; i++) p[i] = kp[i] = f16_to_f32(f32_to_f16((float)(0.01 + 0.01 * rng_uniform(&r))));
    const AdamWConfig adam = {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f};
    Device d;
    cpu_device_init(&d, 1, NULL);
    for (long step = 1; step <= 3; step++) {
        for (int i = 0; i < NA; i++) g[i] = (float)rng_normal(&r);
        quant_adam(&d, p, g, m, v, NA, &adam, 1e-3f, step, 1e-4f, 1.0f);
        const double bc1 = 1.0 - pow(0.9f, (double)step), bc2 = 1.0 - pow(0.99f, (double)step);
        const float step_size = (float)(1e-3f / bc1), bc2_sqrt = (float)sqrt(bc2);
        for (int i = 0; i < NA; i++) km_quant_adam(&kp[i], g[i], &km[i], &kv[i], 0.9f, 0.99f, 1e-8f, step_size, bc2_sqrt, 1e-4f, 1.0f);
        for (int i = 0; i < NA; i++)
            if (!same_bits(kp[i], p[i]) || !same_bits(km[i], m[i]) || !same_bits(kv[i], v[i]))
                fail_msg("quant_adam step %ld element %d differs", step, i);
    }
    dev_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_16bit_conversions),
        cmocka_unit_test(test_rope_pair),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_quant_math),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
