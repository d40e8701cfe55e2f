// GGUF Q4_0/Q4_1 from the int4 quantizer (model/int4_grid.h) and back:
// - blocks worked out by hand from the Q4 layouts (ggml's src/ggml-common.h:
//   fp16 d, Q4_1 also fp16 m, byte j = code j | code j+16 << 4): two Q4_1
//   examples (an exact and an inexact offset m) and a Q4_0 block, and the
//   count of blocks whose offset fp16 cannot hold;
// - the weights llama.cpp's formula (d*q + m, our decoder, checked against
//   gguf-py in test_gguf.c) gives from an export equal the weights `--int4`
//   runs, up to that offset rounding;
// - `pocket export q4_1|q4_0 -> pocket import -> pocket export` is byte-
//   identical, from a float checkpoint (RTN) and from checkpoints with a QAT
//   state, and the import restores the original scales, zero points and codes;
// - a file without our metadata (group size and zero points removed): the
//   group is found from the blocks and the zero points from the offsets;
// - clear errors for a group that is not a multiple of 32 and for q4_0 from an
//   asymmetric state.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../formats/gguf_export.h"
#include "../formats/gguf_import.h"
#include "../formats/gguf_names.h"
#include "../qat/qat.h"
#include "../formats/checkpoint.h"
#include "../cli/open_model.h"

static const char *pocket(void) { return getenv("POCKET") ? getenv("POCKET") : "./pocket"; }

static char *tmp_dir(void) {
    char tmpl[] = "/tmp/pt-gguf-q4-XXXXXX";
    if (!mkdtemp(tmpl)) fail_msg("mkdtemp failed");
    return xstrdup(tmpl);
}

static char *in_dir(const char *dir, const char *name) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return xstrdup(buf);
}

// Removes a test folder (its files are unlinked by the tests; run_ok's log here).
static void remove_dir(const char *dir) {
    char *log = in_dir(dir, "log.txt");
    unlink(log);
    free(log);
    rmdir(dir);
}

static void run_ok(const char *dir, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/log.txt' 2>&1", pocket(), args, dir);
    if (system(cmd) != 0) {
        size_t n;
        uint8_t *log = NULL;
        PtError e;
        char *path = in_dir(dir, "log.txt");
        read_whole_file(path, &log, &n, &e);
        fail_msg("`pocket %s` failed:\n%s", args, log ? (char *)log : "");
    }
}

static uint8_t *slurp(const char *path, size_t *len) {
    uint8_t *d;
    PtError e;
    if (read_whole_file(path, &d, len, &e)) fail_msg("%s", e.msg);
    return d;
}

static void same_file(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);
    if (na != nb) fail_msg("%s has %zu bytes, %s %zu", a, na, b, nb);
    for (size_t i = 0; i < na; i++)
        if (x[i] != y[i]) fail_msg("%s and %s differ at byte %zu", a, b, i);
    free(x), free(y);
}

// The tiny presets with sizes that int4 groups of 32 and 64 divide.
static void make_model(ModelBundle *b, const char *preset, uint64_t seed) {
    ModelConfig c;
    PtError e;
    if (config_preset(&c, preset, &e)) fail_msg("%s", e.msg);
    c.d_ff = 128;
    bundle_alloc(b, &c);
    bundle_init_random(b, seed);
}

static const float *scale_of(const QatState *q, const QatTensor *t) { return q->scale + t->offset; }
static const float *zero_of(const QatState *q, const QatTensor *t) { return q->zero + t->offset; }

// ---- blocks by hand -------------------------------------------------------------------------

// Weights on the grid: w = (code - 8)*scale + zero, so quant_codes gives the codes back.
static void grid_weights(const uint8_t *codes, int n, float scale, float zero, float *w) {
    for (int i = 0; i < n; i++) w[i] = ((float)codes[i] - 8.0f) * scale + zero;
}

static void test_q4_1_blocks_by_hand(void **s) {
    (void)s;
    PtError e;
    // Example 1: s = 0x211F, integer zero point 8, i.e. our zero
    // (the value at code 8) = 0, m = -8s = 0xAD1F exactly. Codes 0..15 then
    // 15..0 (block A); block B of the same group all 8.
    static const uint8_t EX1[20] = {0x1f, 0x21, 0x1f, 0xad, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5,
                                    0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    uint8_t codes[64], got[80];
    float w[64];
    for (int j = 0; j < 16; j++) codes[j] = (uint8_t)j, codes[16 + j] = (uint8_t)(15 - j);
    for (int j = 32; j < 64; j++) codes[j] = 8;
    float scale = f16_to_f32(0x211F), zero = 0.0f;
    grid_weights(codes, 64, scale, zero, w);
    QuantSpec g64 = {.group = 64, .symmetric = 0};
    uint64_t inexact = 0;
    assert_int_equal(gguf_encode_int4(GGML_TYPE_Q4_1, &g64, w, 1, 64, &scale, &zero, got, &inexact, "ex1", &e), 0);
    assert_memory_equal(got, EX1, 20);
    static const uint8_t B[20] = {0x1f, 0x21, 0x1f, 0xad, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
                                  0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
    assert_memory_equal(got + 20, B, 20);   // same d and m in both blocks of the group
    assert_int_equal(inexact, 0);

    // Example 2: s = 0x224C, integer zero point 7, i.e. zero = s.
    // -7s = -0.086090087890625 is not an fp16 value: m = 0xAD82, inexact, and
    // both blocks of the group count. Codes j % 16 -> byte j = j | j << 4.
    uint8_t ex2[20] = {0x4c, 0x22, 0x82, 0xad};
    for (int j = 0; j < 16; j++) ex2[4 + j] = (uint8_t)(j * 0x11);
    for (int j = 0; j < 64; j++) codes[j] = (uint8_t)(j % 16);
    scale = zero = f16_to_f32(0x224C);
    grid_weights(codes, 64, scale, zero, w);
    assert_int_equal(gguf_encode_int4(GGML_TYPE_Q4_1, &g64, w, 1, 64, &scale, &zero, got, &inexact, "ex2", &e), 0);
    assert_memory_equal(got, ex2, 20);
    assert_memory_equal(got + 20, ex2, 20);
    assert_int_equal(inexact, 2);
    // Group 128: one inexact group is 4 blocks. Two rows, one exact (zero 0), one not.
    QuantSpec g128 = {.group = 128, .symmetric = 0};
    float w2[256], sc[2] = {scale, scale}, zr[2] = {0.0f, scale};
    uint8_t c2[256], got2[160];
    for (int j = 0; j < 256; j++) c2[j] = (uint8_t)((j * 7) % 16);
    grid_weights(c2, 128, sc[0], zr[0], w2);
    grid_weights(c2 + 128, 128, sc[1], zr[1], w2 + 128);
    inexact = 0;
    assert_int_equal(gguf_encode_int4(GGML_TYPE_Q4_1, &g128, w2, 2, 128, sc, zr, got2, &inexact, "g128", &e), 0);
    assert_int_equal(inexact, 4);
}

static void test_q4_0_block_by_hand(void **s) {
    (void)s;
    PtError e;
    // Symmetric, scale 1 (0x3C00): codes 1..15, 8 then 15..1, 8; byte j =
    // code j (low) | code j+16 (high): 1|15<<4 = F1, 2|14<<4 = E2, ..., 8|8<<4 = 88.
    static const uint8_t WANT[18] = {0x00, 0x3c, 0xf1, 0xe2, 0xd3, 0xc4, 0xb5, 0xa6, 0x97,
                                     0x88, 0x79, 0x6a, 0x5b, 0x4c, 0x3d, 0x2e, 0x1f, 0x88};
    uint8_t codes[32], got[18];
    float w[32], scale = 1.0f, zero = 0.0f;
    for (int j = 0; j < 15; j++) codes[j] = (uint8_t)(j + 1), codes[16 + j] = (uint8_t)(15 - j);
    codes[15] = codes[31] = 8;
    grid_weights(codes, 32, scale, zero, w);
    QuantSpec sym = {.group = 32, .symmetric = 1};
    uint64_t inexact = 0;
    assert_int_equal(gguf_encode_int4(GGML_TYPE_Q4_0, &sym, w, 1, 32, &scale, &zero, got, &inexact, "q4_0", &e), 0);
    assert_memory_equal(got, WANT, 18);
    assert_int_equal(inexact, 0);
    // Q4_0 has no offset: an asymmetric group with zero != 0 is refused.
    QuantSpec asym = {.group = 32, .symmetric = 0};
    zero = 0.5f;
    assert_int_equal(gguf_encode_int4(GGML_TYPE_Q4_0, &asym, w, 1, 32, &scale, &zero, got, NULL, "t", &e), -1);
    assert_non_null(strstr(e.msg, "q4_1"));
    // A group that is not a multiple of 32 cannot be split into blocks.
    QuantSpec g48 = {.group = 48, .symmetric = 0};
    float w96[96] = {0}, s2[2] = {1, 1}, z2[2] = {0, 0};
    uint8_t out[60];
    assert_int_equal(gguf_encode_int4(GGML_TYPE_Q4_1, &g48, w96, 1, 96, s2, z2, out, NULL, "t48", &e), -1);
    assert_non_null(strstr(e.msg, "not a multiple of 32"));
}

// ---- whole models ---------------------------------------------------------------------------

// The state `pocket forward --int4` uses for a float checkpoint (symmetric for q4_0).
static void rtn_state(const ModelBundle *b, int symmetric, QatState *q) {
    QuantSpec spec;
    int qe;
    PtError e;
    int4_default_spec(&b->cfg, &spec, &qe);
    spec.symmetric = symmetric;
    if (qat_init(q, &b->tt, &spec, qe, 0, "rtn", &e) ||
        qat_init_from_weights(q, &b->tt, b->params, QAT_INIT_RTN, NULL, NULL, "rtn", &e))
        fail_msg("%s", e.msg);
}

static void load_state(const char *ckpt, const TensorTable *tt, QatState *q) {
    QuantSpec spec;
    int qe;
    PtError e;
    if (checkpoint_read_qat_spec(ckpt, &spec, &qe, &e) != 0) fail_msg("%s: no /qat (%s)", ckpt, e.msg);
    if (qat_init(q, tt, &spec, qe, 0, ckpt, &e) || checkpoint_load_qat(ckpt, q, tt, &e) != 0) fail_msg("%s", e.msg);
}

// The restored state has the original's spec, scales, codes and (for every
// group whose offset is exact, or with the zero points in the metadata) zero
// points; every restored zero point gives the original offset. Returns the
// zero points that differ.
static size_t same_state(const ModelBundle *a, const QatState *qa, const ModelBundle *b, const QatState *qb,
                         int need_same_zero) {
    assert_int_equal(qa->spec.group, qb->spec.group);
    assert_int_equal(qa->spec.symmetric, qb->spec.symmetric);
    assert_int_equal(qa->quant_embedding, qb->quant_embedding);
    assert_int_equal(qa->n, qb->n);
    size_t zero_differs = 0;
    for (int i = 0; i < qa->n; i++) {
        const QatTensor *ta = &qa->t[i], *tb = &qb->t[i];
        const TensorInfo *ti = &a->tt.t[ta->tensor];
        assert_int_equal(ta->tensor, tb->tensor);
        assert_memory_equal(scale_of(qa, ta), scale_of(qb, tb), ta->n_groups * sizeof(float));
        for (size_t g = 0; g < ta->n_groups; g++) {
            float s = scale_of(qa, ta)[g], za = zero_of(qa, ta)[g], zb = zero_of(qb, tb)[g];
            int ea, eb;
            uint16_t ma = ggml_q4_1_offset(s, za, &ea), mb = ggml_q4_1_offset(s, zb, &eb);
            if (ma != mb) fail_msg("%s group %zu: offset %04X restored as %04X", ti->name, g, ma, mb);
            if (za != zb) {
                zero_differs++;
                if (need_same_zero || ea) fail_msg("%s group %zu: zero %g restored as %g", ti->name, g, za, zb);
            }
        }
        size_t n = ti->numel;
        uint8_t *ca = xmalloc(n, "codes"), *cb = xmalloc(n, "codes");
        quant_codes(&qa->spec, a->params + ti->offset, ta->rows, ta->cols, scale_of(qa, ta), zero_of(qa, ta), ca);
        quant_codes(&qb->spec, b->params + ti->offset, tb->rows, tb->cols, scale_of(qb, tb), zero_of(qb, tb), cb);
        for (size_t k = 0; k < n; k++)
            if (ca[k] != cb[k]) fail_msg("%s[%zu]: code %d restored as %d", ti->name, k, ca[k], cb[k]);
        free(ca), free(cb);
    }
    return zero_differs;
}

// What llama.cpp computes from the file (d*q + m by our decoder) equals the
// int4 weights (quant_fake) up to the offset's fp16 rounding; the tensors the
// state leaves out are F32 (an untied embedding BF16) as int4 mode runs them.
static void file_holds_int4_weights(const char *path, const ModelBundle *b, const QatState *q, uint32_t type) {
    GgufFile f;
    PtError e;
    if (gguf_open(&f, path, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < b->tt.n; i++) {
        const TensorInfo *ti = &b->tt.t[i];
        char name[GGUF_MAX_NAME];
        gguf_tensor_name(ti, name);
        const GgufTensor *t = gguf_find_tensor(&f, name);
        assert_non_null(t);
        const QatTensor *qt = qat_find(q, i);
        // int4 mode (cli/open_model.c) runs an unquantized untied embedding at bf16, other matrices at fp32.
        int bf16 = !qt && ti->kind == T_EMBED && !b->cfg.tied_embeddings;
        assert_int_equal(t->type, qt ? type : bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32);
        float *x = xmalloc(ti->numel * sizeof(float), "file weights"), *want = xmalloc(ti->numel * sizeof(float), "int4");
        if (gguf_read_f32(&f, t, x, &e)) fail_msg("%s", e.msg);
        if (!b->cfg.qk_norm && (ti->kind == T_WQ || ti->kind == T_WK)) {   // llama: rows stored permuted
            memcpy(want, x, ti->numel * sizeof(float));
            gguf_llama_permute(want, x, ti->kind == T_WQ ? b->cfg.n_head : b->cfg.n_kv_head, b->cfg.head_dim,
                               ti->shape[1], 0);
        }
        if (!qt) {
            for (size_t k = 0; k < ti->numel; k++) {
                float v = b->params[ti->offset + k];
                want[k] = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
            }
            assert_memory_equal(x, want, ti->numel * sizeof(float));
        } else {
            quant_fake(&q->spec, b->params + ti->offset, qt->rows, qt->cols, scale_of(q, qt), zero_of(q, qt), want, 0);
            int64_t ng = qt->cols / q->spec.group;
            for (size_t k = 0; k < ti->numel; k++) {
                size_t g = k / (size_t)qt->cols * (size_t)ng + (k % (size_t)qt->cols) / (size_t)q->spec.group;
                float s = scale_of(q, qt)[g], z = zero_of(q, qt)[g];
                int exact;
                float m = f16_to_f32(ggml_q4_1_offset(s, z, &exact));
                float bound = type == GGML_TYPE_Q4_1 ? fabsf(m - (z - 8.0f * s)) : 0.0f;
                bound += 0x1p-22f * (fabsf(want[k]) + fabsf(z) + 16.0f * s);
                if (fabsf(x[k] - want[k]) > bound)
                    fail_msg("%s[%zu]: llama.cpp's formula gives %.9g, --int4 %.9g", name, k, x[k], want[k]);
            }
        }
        free(x), free(want);
    }
    gguf_close(&f);
}

// export -> import -> export through the CLI; the second file must equal the
// first and the imported /qat the state the first was made from.
static void roundtrip(const char *dir, const ModelBundle *b, const QatState *q, const char *quant, int from_qat) {
    PtError e;
    char *ckpt = in_dir(dir, "a.h5"), *g1 = in_dir(dir, "a.gguf"), *back = in_dir(dir, "b.h5"),
         *g2 = in_dir(dir, "b.gguf"), args[1024];
    if ((from_qat ? checkpoint_save_qat(ckpt, b, q, &e) : checkpoint_save(ckpt, b, &e))) fail_msg("%s", e.msg);
    snprintf(args, sizeof args, "export --ckpt '%s' --format gguf --quant %s --out '%s'", ckpt, quant, g1);
    run_ok(dir, args);
    uint32_t type = (uint32_t)gguf_quant_type(quant);
    file_holds_int4_weights(g1, b, q, type);
    snprintf(args, sizeof args, "import '%s' --out '%s'", g1, back);
    run_ok(dir, args);
    snprintf(args, sizeof args, "export --ckpt '%s' --format gguf --quant %s --out '%s'", back, quant, g2);
    run_ok(dir, args);
    same_file(g1, g2);
    ModelBundle r;
    QatState qr;
    if (checkpoint_load(back, &r, &e)) fail_msg("%s", e.msg);
    load_state(back, &r.tt, &qr);
    same_state(b, q, &r, &qr, 1);
    qat_free(&qr);
    bundle_free(&r);
    unlink(ckpt), unlink(g1), unlink(back), unlink(g2);
    free(ckpt), free(g1), free(back), free(g2);
}

static void test_roundtrip_from_float_checkpoints(void **s) {
    (void)s;
    char *dir = tmp_dir();
    static const char *const PRESETS[] = {"tiny", "tiny-llama"};   // tied qwen3; untied llama (q/k permuted)
    for (int p = 0; p < 2; p++)
        for (int sym = 0; sym < 2; sym++) {
            ModelBundle b;
            QatState q;
            make_model(&b, PRESETS[p], 21 + p);
            rtn_state(&b, sym, &q);
            roundtrip(dir, &b, &q, sym ? "q4_0" : "q4_1", 0);
            qat_free(&q);
            bundle_free(&b);
        }
    remove_dir(dir);
    free(dir);
}

static void test_roundtrip_from_qat_checkpoints(void **s) {
    (void)s;
    char *dir = tmp_dir();
    PtError e;
    // MSE-initialised scales (not what RTN would give), groups 32 and 64, the
    // embedding quantized or not; q4_1 from a symmetric state; q4_0.
    static const struct { const char *preset; int group, sym, quant_embedding; const char *quant; } CASES[] = {
        {"tiny", 32, 0, 1, "q4_1"}, {"tiny-llama", 64, 0, 1, "q4_1"}, {"tiny-llama", 32, 0, 0, "q4_1"},
        {"tiny", 64, 1, 1, "q4_1"}, {"tiny", 64, 1, 1, "q4_0"},       {"tiny-llama", 32, 1, 0, "q4_0"},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        ModelBundle b;
        QatState q;
        make_model(&b, CASES[k].preset, 40 + k);
        QuantSpec spec = {.group = CASES[k].group, .symmetric = CASES[k].sym};
        if (qat_init(&q, &b.tt, &spec, CASES[k].quant_embedding, 0, "qat", &e) ||
            qat_init_from_weights(&q, &b.tt, b.params, QAT_INIT_MSE, NULL, NULL, "qat", &e))
            fail_msg("%s", e.msg);
        roundtrip(dir, &b, &q, CASES[k].quant, 1);
        qat_free(&q);
        bundle_free(&b);
    }
    remove_dir(dir);
    free(dir);
}

// Replaces every occurrence of `from` with `to` (same length) in a file.
static void patch_file(const char *path, const char *from, const char *to) {
    size_t n, k = strlen(from), hits = 0;
    uint8_t *d = slurp(path, &n);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(d + i, from, k)) memcpy(d + i, to, k), hits++;
    assert_true(hits > 0);
    FILE *f = fopen(path, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
    free(d);
}

// A file without pocket.quantization.group_size and .zero (as another tool
// would write our blocks): the group comes from the blocks, the zero points
// from the offsets; scales and codes are the originals and a re-export has
// the same tensor bytes.
static void test_import_without_metadata(void **s) {
    (void)s;
    char *dir = tmp_dir(), *g1 = in_dir(dir, "m.gguf"), *g2 = in_dir(dir, "m2.gguf");
    PtError e;
    ModelBundle a, b;
    QatState qa;
    GgufInt4Import imp;
    make_model(&a, "tiny", 77);
    rtn_state(&a, 0, &qa);
    GgufExportStats st;
    if (gguf_export(&a, g1, "q4_1", &qa, &st, &e)) fail_msg("%s", e.msg);
    assert_true(st.inexact_offset_blocks > 0);   // else the zero points need no metadata
    patch_file(g1, "pocket.quantization.group_size", "pocket.quantization.group_sizX");
    patch_file(g1, "pocket.quantization.zero", "pocket.quantization.zerX");
    if (gguf_import_int4(g1, &b, &imp, &e)) fail_msg("%s", e.msg);
    assert_true(imp.restored);
    assert_int_equal(imp.group_from_metadata, 0);
    assert_int_equal(imp.q.spec.group, 64);
    assert_int_equal(imp.inexact_groups, 0);
    size_t differ = same_state(&a, &qa, &b, &imp.q, 0);
    print_message("without the zero points: %zu of %zu zero points come back different (same offsets, scales, codes)\n",
                  differ, qa.total);
    if (gguf_export(&b, g2, "q4_1", &imp.q, NULL, &e)) fail_msg("%s", e.msg);
    GgufFile f1, f2;
    if (gguf_open(&f1, g1, &e) || gguf_open(&f2, g2, &e)) fail_msg("%s", e.msg);
    assert_int_equal(f1.n_tensors, f2.n_tensors);
    for (int64_t i = 0; i < f1.n_tensors; i++)
        assert_memory_equal(f1.data + f1.data_offset + f1.t[i].offset, f2.data + f2.data_offset + f2.t[i].offset,
                            f1.t[i].nbytes);
    gguf_close(&f1), gguf_close(&f2);
    qat_free(&imp.q), qat_free(&qa);
    bundle_free(&a), bundle_free(&b);
    unlink(g1), unlink(g2), remove_dir(dir);
    free(g1), free(g2), free(dir);
}

static void test_export_errors(void **s) {
    (void)s;
    char *dir = tmp_dir(), *path = in_dir(dir, "x.gguf");
    PtError e;
    ModelBundle b;
    QatState q;
    make_model(&b, "tiny", 3);
    // No quantizer state.
    assert_int_equal(gguf_export(&b, path, "q4_1", NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "quantizer state"));
    // Group 16: Q4 blocks hold 32 weights of one group.
    QuantSpec g16 = {.group = 16, .symmetric = 0};
    if (qat_init(&q, &b.tt, &g16, 1, 0, "g16", &e) ||
        qat_init_from_weights(&q, &b.tt, b.params, QAT_INIT_RTN, NULL, NULL, "g16", &e))
        fail_msg("%s", e.msg);
    assert_int_equal(gguf_export(&b, path, "q4_1", &q, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "group size 16 is not a multiple of 32"));
    qat_free(&q);
    // q4_0 from an asymmetric state: no offset to carry the zero points.
    rtn_state(&b, 0, &q);
    assert_int_equal(gguf_export(&b, path, "q4_0", &q, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "export q4_1 instead"));
    assert_int_equal(access(path, F_OK), -1);   // no output file
    qat_free(&q);
    bundle_free(&b);
    remove_dir(dir);
    free(path), free(dir);
}

// `pocket export` prints and `pocket inspect` shows the group size and the
// count of blocks with an inexact offset, equal to the exporter's count.
static void test_cli_reports(void **s) {
    (void)s;
    char *dir = tmp_dir(), *ckpt = in_dir(dir, "c.h5"), *g = in_dir(dir, "c.gguf"), *log = in_dir(dir, "log.txt");
    char args[1024], want[128];
    PtError e;
    ModelBundle b;
    QatState q;
    make_model(&b, "tiny", 9);
    rtn_state(&b, 0, &q);
    GgufExportStats st;
    if (checkpoint_save(ckpt, &b, &e) || gguf_export(&b, g, "q4_1", &q, &st, &e)) fail_msg("%s", e.msg);
    snprintf(args, sizeof args, "export --ckpt '%s' --format gguf --quant q4_1 --out '%s'", ckpt, g);
    run_ok(dir, args);
    size_t n;
    char *out = (char *)slurp(log, &n);
    snprintf(want, sizeof want, "%llu q4_1 blocks; %llu (", (unsigned long long)st.int4_blocks,
             (unsigned long long)st.inexact_offset_blocks);
    if (!strstr(out, want) || !strstr(out, "RTN") || !strstr(out, "group 64")) fail_msg("export said:\n%s", out);
    free(out);
    snprintf(args, sizeof args, "inspect '%s'", g);
    run_ok(dir, args);
    out = (char *)slurp(log, &n);
    snprintf(want, sizeof want, "group 64, asymmetric; 0 Q4_0 and %llu Q4_1 blocks; %llu Q4_1 blocks",
             (unsigned long long)st.int4_blocks, (unsigned long long)st.inexact_offset_blocks);
    if (!strstr(out, want) || !strstr(out, "pocket.quantization.inexact_offset_blocks"))
        fail_msg("inspect said:\n%s", out);
    free(out);
    qat_free(&q);
    bundle_free(&b);
    unlink(ckpt), unlink(g), remove_dir(dir);
    free(ckpt), free(g), free(log), free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_1_blocks_by_hand),
        cmocka_unit_test(test_q4_0_block_by_hand),
        cmocka_unit_test(test_roundtrip_from_float_checkpoints),
        cmocka_unit_test(test_roundtrip_from_qat_checkpoints),
        cmocka_unit_test(test_import_without_metadata),
        cmocka_unit_test(test_export_errors),
        cmocka_unit_test(test_cli_reports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
