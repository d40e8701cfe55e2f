// test_matmul_int4: the packed int4 weights (backend.h's pack_int4 and
// matmul_forward_packed) against the fp32 product on the dequantized
// weights, bit for bit, on every CPU kernel set this CPU runs and 1 and 2
// threads: the packed path reads the codes and sums as the fp32 driver does
// (matmul_int4.c), so any difference is a bug, not rounding. Shapes cover one
// and several k blocks, blocks and groups that start at an odd k, groups that
// straddle blocks, ragged strips and 1 to PACKED_MAX_ROWS rows; grids asymmetric and
// symmetric, with groups of scale 0. The fp32 product itself is held to the
// double-precision reference here too (test_matmul does it on every shape).
// Then a model: decoding with the int4 model's packed projections and lm_head
// (qat_pack) gives the bits of decoding on its float int4 weights, for one
// sequence, short chunks and a rows plan of 8 sequences.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#include "../qat/qat.h"
#include "../util/util.h"
#include "test_backends.h"
#include "test_model_util.h"

typedef struct {
    int N, C, OC, G, symmetric;
} Shape;

static const Shape SHAPES[] = {
    {1, 896, 128, 64, 0},    // one k block (pocket-0.3b's k/v projections)
    {1, 2560, 80, 64, 0},    // 5 blocks of 512; a strip of 16 rows past the first
    {2, 1280, 200, 128, 1},  // 3 blocks of 427: odd starts, groups across blocks
    {3, 1034, 64, 22, 0},    // 3 blocks of 345, groups of 22: odd everywhere; rows 2 + 1
    {4, 48, 16, 4, 1},       // 4 rows against 16 outputs
    {1, 64, 16, 2, 0},       // groups of 2
    {8, 896, 128, 64, 0},    // PACKED_MAX_ROWS rows, a kernel's at once
    {7, 1280, 64, 32, 1},    // 7 rows, odd block starts
    {5, 2560, 128, 64, 0},   // 5 rows, 5 blocks
};

typedef struct {
    QuantSpec q;
    float *W, *Wq, *scale, *zero, *inp;
    uint8_t *codes;
} Case;

static void case_init(Case *c, Shape s, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    c->q = (QuantSpec){s.G, s.symmetric};
    const size_t n = (size_t)s.OC * s.C, groups = n / s.G;
    c->W = xmalloc(n * sizeof(float), "W");
    for (size_t i = 0; i < n; i++) c->W[i] = 0.05f * (float)rng_normal(&r) + (s.symmetric ? 0.0f : 0.01f);
    // A constant group in each of a few rows: scale 0 (every code decodes to the zero point).
    for (int row = 0; row < s.OC; row += 7)
        for (int k = 0; k < s.G; k++) c->W[(size_t)row * s.C + k] = 0.03f;
    c->scale = xmalloc(groups * sizeof(float), "scale");
    c->zero = xmalloc(groups * sizeof(float), "zero");
    c->codes = xmalloc(n, "codes");
    c->Wq = xmalloc(n * sizeof(float), "dequantized W");
    PtError e;
    if (quant_init_rtn(&c->q, c->W, s.OC, s.C, c->scale, c->zero, "W", &e)) fail_msg("%s", e.msg);
    quant_codes(&c->q, c->W, s.OC, s.C, c->scale, c->zero, c->codes);
    quant_dequant(&c->q, c->codes, s.OC, s.C, c->scale, c->zero, c->Wq, 1);
    c->inp = xmalloc((size_t)s.N * s.C * sizeof(float), "inp");
    for (size_t i = 0; i < (size_t)s.N * s.C; i++) c->inp[i] = i % 11 == 3 ? 0.0f : (float)rng_normal(&r);
}

static void case_free(Case *c) {
    free(c->W);
    free(c->Wq);
    free(c->scale);
    free(c->zero);
    free(c->codes);
    free(c->inp);
}

static void test_packed_bits(void **state) {
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        TestDevice devs[MAX_TEST_DEVICES];
        const int nd = test_devices(devs, threads);
        for (int di = 0; di < nd; di++) {
            Device *d = &devs[di].dev;
            if (!d->be->pack_int4) continue;   // a backend without packed weights reads the float ones
            for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
                const Shape s = SHAPES[si];
                Case c;
                case_init(&c, s, 100 + si);
                const size_t out_n = (size_t)s.N * s.OC;
                float *want = xmalloc(out_n * sizeof(float), "want"), *got = xmalloc(out_n * sizeof(float), "got");
                OP(d, matmul_forward, want, c.inp, c.Wq, s.N, s.C, s.OC, MATMUL_FP32);
                PackedWeight *pw = OP(d, pack_int4, &c.q, c.codes, s.OC, s.C, c.scale, c.zero);
                memset(got, 0xff, out_n * sizeof(float));
                OP(d, matmul_forward_packed, got, c.inp, pw, s.N);
                for (size_t i = 0; i < out_n; i++)
                    if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
                        fail_msg("%s, %d threads, shape %zu (N %d, C %d, OC %d, G %d): out[%zu] = %.9g, the fp32 "
                                 "product on the dequantized weights %.9g", devs[di].name, threads, si, s.N, s.C, s.OC,
                                 s.G, i, got[i], want[i]);
                // The fp32 product is the reference's, within fp32 rounding.
                double *wd = xmalloc((size_t)s.OC * s.C * sizeof(double), "W double");
                double *xd = xmalloc((size_t)s.N * s.C * sizeof(double), "inp double");
                double *ref = xmalloc(out_n * sizeof(double), "reference");
                for (size_t i = 0; i < (size_t)s.OC * s.C; i++) wd[i] = c.Wq[i];
                for (size_t i = 0; i < (size_t)s.N * s.C; i++) xd[i] = c.inp[i];
                matmul_forward_ref(ref, xd, wd, s.N, s.C, s.OC);
                double err = 0, scale = 0;
                for (size_t i = 0; i < out_n; i++) {
                    err = fmax(err, fabs(got[i] - ref[i]));
                    scale = fmax(scale, fabs(ref[i]));
                }
                assert_true(err <= 1e-6 * sqrt((double)s.C) * scale);
                free(wd);
                free(xd);
                free(ref);
                OP(d, packed_release, pw);
                free(want);
                free(got);
                case_free(&c);
            }
        }
        for (int di = 0; di < nd; di++) dev_free(&devs[di].dev);
    }
}

// The plain C strip with fused sums (the NEON tiles' path, which this CPU may
// not run) gives the x86 strips' bits; unfused, it does not always.
static void test_plain_strip_fused(void **state) {
    (void)state;
    const MatmulKernel *x86 = matmul_kernel_avx512() ? matmul_kernel_avx512() : matmul_kernel_avx2();
    if (!x86) skip();
    const Shape s = {2, 1034, 64, 22, 0};
    Case c;
    case_init(&c, s, 7);
    Device d;
    cpu_device_init(&d, 1, NULL);
    PackedWeight *pw = matmul_int4_pack(&d, &c.q, c.codes, s.OC, s.C, c.scale, c.zero);
    float a[2 * INT4_STRIP_ROWS], b[2 * INT4_STRIP_ROWS], u[2 * INT4_STRIP_ROWS];
    int differ = 0;
    for (int k0 = 0; k0 < 5; k0++) {
        x86->int4(pw, 0, k0, s.C - k0, c.inp, s.C, 2, a);
        matmul_int4_strip_c(pw, 0, k0, s.C - k0, c.inp, s.C, 2, b, 1);
        matmul_int4_strip_c(pw, 0, k0, s.C - k0, c.inp, s.C, 2, u, 0);
        assert_memory_equal(a, b, sizeof a);
        differ |= memcmp(a, u, sizeof a) != 0;
    }
    assert_true(differ);   // the test can tell fused sums from unfused ones
    matmul_int4_release(&d, pw);
    dev_free(&d);
    case_free(&c);
}

// Logits of a decode on tm's int4 weights, with and without the packed views.
typedef struct {
    float *one;   // one sequence: a 5-token prompt, chunks of 3 and 2, then 6 tokens one at a time
    float *rows;  // a rows plan of 8 sequences, 4 passes
} Decode;

static void decode(Model *m, Decode *out) {
    PtError e;
    const int V = m->cfg.vocab_size;
    int *tok = random_tokens(32, V, 5);
    Model one;
    model_init_like(&one, m);
    if (model_plan_cache(&one, 32, &e)) fail_msg("%s", e.msg);
    float *logits = xmalloc((size_t)5 * V * sizeof(float), "logits");
    size_t at = 0;
    const int chunks[] = {5, 3, 2, 1, 1, 1, 1, 1, 1};
    int p = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        model_feed(&one, tok + p, chunks[i], logits);
        memcpy(out->one + at, logits, (size_t)chunks[i] * V * sizeof(float));
        at += (size_t)chunks[i] * V;
        p += chunks[i];
    }
    model_free(&one);
    Model rows;
    model_init_like(&rows, m);
    if (model_plan_cache_rows(&rows, 8, 16, &e)) fail_msg("%s", e.msg);
    for (int r = 0; r < 8; r++) model_set_row_pos(&rows, r, 0);
    for (int pass = 0; pass < 4; pass++) model_feed_rows(&rows, tok + 8 * pass, 8, out->rows + (size_t)pass * 8 * V);
    model_free(&rows);
    free(logits);
    free(tok);
}

static void check_model(const char *preset, int group) {
    TestModel tm;
    load_preset(preset, 11, &tm);
    QatState q;
    PtError e;
    const QuantSpec spec = {group, 0};
    if (qat_init(&q, &tm.b.tt, &spec, 1, 0, preset, &e) ||
        qat_init_from_weights(&q, &tm.b.tt, tm.b.params, QAT_INIT_RTN, NULL, NULL, preset, &e))
        fail_msg("%s", e.msg);
    float *int4 = xaligned(tm.b.tt.total * sizeof(float), "int4 weights");
    qat_host_weights(&q, &tm.b.tt, tm.b.params, int4, 1);
    model_use_weights(&tm.m, int4);
    const int V = tm.b.cfg.vocab_size;
    Decode plain = {xmalloc((size_t)16 * V * sizeof(float), "logits"), xmalloc((size_t)32 * V * sizeof(float), "l")};
    Decode packed = {xmalloc((size_t)16 * V * sizeof(float), "logits"), xmalloc((size_t)32 * V * sizeof(float), "l")};
    decode(&tm.m, &plain);
    PackedViews *pv = xcalloc(1, sizeof *pv, "packed views");
    qat_pack(&tm.dev, &q, &tm.b.tt, tm.b.params, pv);
    assert_non_null(pv->layer[0].wq);
    assert_non_null(pv->layer[tm.b.cfg.n_layer - 1].wdown);
    assert_non_null(pv->lm_head);
    model_use_packed(&tm.m, pv);
    decode(&tm.m, &packed);
    assert_memory_equal(plain.one, packed.one, (size_t)16 * V * sizeof(float));
    assert_memory_equal(plain.rows, packed.rows, (size_t)32 * V * sizeof(float));
    qat_pack_free(&tm.dev, pv);
    free(pv);
    free(plain.one);
    free(plain.rows);
    free(packed.one);
    free(packed.rows);
    free(int4);
    qat_free(&q);
    test_model_free(&tm);
}

static void test_model_decode_bits(void **state) {
    (void)state;
    check_model("tiny", 32);          // tied: the embedding is the packed lm_head
    check_model("tiny-untied", 4);    // 48 and 100 columns: groups of 4
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_bits),
        cmocka_unit_test(test_plain_strip_fused),
        cmocka_unit_test(test_model_decode_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
