// GGUF writer and reader against independent references:
// - llama.cpp's gguf-py (tests/ref/make_gguf_fixtures.py) quantized an awkward
//   matrix to F16/BF16/Q8_0/Q4_0/Q4_1: our encoders give the same bytes (F16,
//   BF16, Q8_0; Q4 codes come from the int4 quantizer instead, test_gguf_q4.c)
//   and our decoders the same floats; it also wrote the HF fixture models as GGUF the
//   way llama.cpp's converter does: our import equals our HF import bit for
//   bit and our export has the same tensor bytes;
// - blocks worked out by hand from the block layouts (ggml's src/ggml-common.h);
// - C's _Float16 (or F16C) and the bf16 rounding rule for the F16/BF16 round trips;
// - HF tokenizers' ids (tests/fixtures/tok/expected.json) for the tokenizer
//   rebuilt from GGUF metadata.
// Bad inputs are in test_gguf_errors.c.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#if !defined(__FLT16_MAX__) && defined(__F16C__)
#include <immintrin.h>
#endif
#include "../data/tokenizer.h"
#include "../formats/gguf_tokenizer.h"
#include "../formats/gguf_export.h"
#include "../formats/gguf_import.h"
#include "../formats/gguf_names.h"
#include "../formats/hf_import.h"

// x rounded to IEEE half and back, by the compiler's _Float16 or else the
// CPU's F16C conversion (clang 14 has no _Float16 on x86): the reference for
// our own converter.
static float half_round_ref(float x) {
#if defined(__FLT16_MAX__)
    return (float)(_Float16)x;
#elif defined(__F16C__)
    return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
#else
#error "no independent fp16 conversion here: a compiler with _Float16 or a CPU with F16C is needed"
#endif
}

#define GG "tests/fixtures/gguf/"
#define TOK "tests/fixtures/tok/"

static char *tmp_path(const char *name) {
    static const char *const dir = "/tmp";
    char buf[256];
    snprintf(buf, sizeof buf, "%s/pt-gguf-%ld-%s", dir, (long)getpid(), name);
    return xstrdup(buf);
}

static void open_ok(GgufFile *f, const char *path) {
    PtError e;
    if (gguf_open(f, path, &e)) fail_msg("%s", e.msg);
}

static const GgufTensor *tensor(const GgufFile *f, const char *name) {
    const GgufTensor *t = gguf_find_tensor(f, name);
    if (!t) fail_msg("%s: no tensor %s", f->path, name);
    return t;
}

static const uint8_t *bytes_of(const GgufFile *f, const GgufTensor *t) { return f->data + f->data_offset + t->offset; }

static float *read_all(const GgufFile *f, const char *name) {
    const GgufTensor *t = tensor(f, name);
    float *x = xmalloc(t->numel * sizeof(float), name);
    PtError e;
    if (gguf_read_f32(f, t, x, &e)) fail_msg("%s", e.msg);
    return x;
}

// ---- encoders and decoders vs gguf-py ----------------------------------------------------

static void test_quant_matches_gguf_py(void **s) {
    (void)s;
    GgufFile f;
    open_ok(&f, GG "quant_ref.gguf");
    const GgufTensor *xt = tensor(&f, "x");
    float *x = read_all(&f, "x");
    static const struct { const char *name; uint32_t type; } TYPES[] = {
        {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0},
        {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1}};
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) {
        char qname[32], dname[32];
        snprintf(qname, sizeof qname, "x.%s", TYPES[k].name);
        snprintf(dname, sizeof dname, "deq.%s", TYPES[k].name);
        const GgufTensor *qt = tensor(&f, qname);
        assert_int_equal(qt->type, TYPES[k].type);
        uint8_t *ours = xmalloc(qt->nbytes, "encoded");
        uint64_t bad;
        int is_q4 = TYPES[k].type == GGML_TYPE_Q4_0 || TYPES[k].type == GGML_TYPE_Q4_1;
        // Q4 blocks are not rounded from floats here (their codes come from the int4 quantizer).
        assert_int_equal(ggml_quant_row(TYPES[k].type, x, ours, xt->numel, &bad), is_q4 ? -1 : 0);
        const uint8_t *ref = bytes_of(&f, qt);
        for (uint64_t i = 0; i < qt->nbytes && !is_q4; i++)
            if (ours[i] != ref[i]) fail_msg("%s: byte %llu is %02X, gguf-py wrote %02X", qname, (unsigned long long)i, ours[i], ref[i]);
        float *deq = read_all(&f, qname), *want = read_all(&f, dname);
        for (uint64_t i = 0; i < xt->numel; i++)
            if (memcmp(&deq[i], &want[i], 4) != 0) fail_msg("%s[%llu] = %.9g, gguf-py: %.9g", qname, (unsigned long long)i, deq[i], want[i]);
        free(ours), free(deq), free(want);
    }
    free(x);
    gguf_close(&f);
}

static void test_metadata_of_every_type(void **s) {
    (void)s;
    GgufFile f;
    open_ok(&f, GG "quant_ref.gguf");
    PtError e;
    int64_t i;
    double d;
    int b;
    const char *str;
    size_t len;
    assert_int_equal(f.alignment, 64);
    assert_int_equal(f.data_offset % 64, 0);
    static const struct { const char *key; int64_t v; } INTS[] = {
        {"test.u8", 200}, {"test.i8", -100}, {"test.u16", 60000}, {"test.i16", -30000},
        {"test.u32", 4000000000LL}, {"test.i32", -2000000000LL}, {"test.u64", 1LL << 40}, {"test.i64", -(1LL << 40)}};
    for (size_t k = 0; k < sizeof INTS / sizeof INTS[0]; k++) {
        assert_int_equal(gguf_get_int(&f, INTS[k].key, &i, &e), 1);
        assert_true(i == INTS[k].v);
    }
    assert_int_equal(gguf_get_float(&f, "test.f32", &d, &e), 1);
    assert_true(d == 0.15625);
    assert_int_equal(gguf_get_float(&f, "test.f64", &d, &e), 1);
    assert_true(d == -2.5e-300);
    assert_int_equal(gguf_get_bool(&f, "test.bool", &b, &e), 1);
    assert_true(b);
    assert_int_equal(gguf_get_str(&f, "test.str", &str, &len, &e), 1);
    assert_true(len == strlen("h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac") && !memcmp(str, "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac", len));
    const GgufKV *a = gguf_find_kv(&f, "test.arr_i32");
    assert_true(a && a->arr_n == 3 && gguf_arr_int(a, 1) == -2);
    a = gguf_find_kv(&f, "test.arr_str");
    assert_true(a && a->arr_type == GGUF_TYPE_STRING && a->arr_n == 3);
    gguf_arr_str(a, 1, &str, &len);
    assert_true(len == 2 && !memcmp(str, "bc", 2));
    // Wrong types and absent keys.
    assert_int_equal(gguf_get_str(&f, "test.u8", &str, &len, &e), -1);
    assert_non_null(strstr(e.msg, "test.u8"));
    assert_non_null(strstr(e.msg, "UINT8"));
    assert_int_equal(gguf_get_int(&f, "test.str", &i, &e), -1);
    assert_int_equal(gguf_get_int(&f, "no.such.key", &i, &e), 0);
    gguf_close(&f);
}

// ---- blocks worked out by hand --------------------------------------------------------

static void test_q8_0_block_by_hand(void **s) {
    (void)s;
    // x[0] = -63.5 is the largest magnitude: d = 63.5/127 = 0.5 (fp16 0x3800),
    // id = 2, code = round(2x); x[j] = (j-16)/2 gives code j-16... doubled: 2x = j-16.
    float x[32];
    uint8_t want[34] = {0x00, 0x38, (uint8_t)-127};
    x[0] = -63.5f;
    for (int j = 1; j < 32; j++) x[j] = (float)(j - 16) * 0.5f, want[2 + j] = (uint8_t)(int8_t)(j - 16);
    uint8_t got[34];
    assert_int_equal(ggml_quant_q8_0(x, got), 0);
    assert_memory_equal(got, want, 34);
    // Half-way rounds away from zero: with d = 1 (amax 127), 2.5 -> 3 and -2.5 -> -3.
    x[0] = 127.0f, x[1] = 2.5f, x[2] = -2.5f;
    assert_int_equal(ggml_quant_q8_0(x, got), 0);
    assert_int_equal(got[0] | got[1] << 8, 0x3C00);
    assert_int_equal((int8_t)got[3], 3);
    assert_int_equal((int8_t)got[4], -3);
    float back[32];
    ggml_dequant_q8_0(want, back);
    assert_true(back[0] == -63.5f && back[17] == 0.5f);
}

// Decoders by hand; the encoders (the int4 quantizer's codes) are in test_gguf_q4.c.
static void test_q4_decoders_by_hand(void **s) {
    (void)s;
    // Q4_0: d = 1 (0x3C00); byte j = element j (low nibble) | element j+16 (high): x = code - 8.
    uint8_t q4_0[18] = {0x00, 0x3C};
    for (int j = 0; j < 16; j++) q4_0[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float back[32];
    ggml_dequant_q4_0(q4_0, back);
    for (int j = 0; j < 16; j++) assert_true(back[j] == (float)(j - 8) && back[16 + j] == (float)(7 - j));
    // Q4_1 by hand: d = 0x211F, m = 0xAD1F, codes 0..15 then 15..0 (test_gguf_q4.c's example 1).
    static const uint8_t spec[20] = {0x1f, 0x21, 0x1f, 0xad, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5,
                                     0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    ggml_dequant_q4_1(spec, back);
    assert_true(back[0] == -0.08001708984375f && back[31] == -0.08001708984375f);
    assert_true(fabsf(back[15] - 0.0700150f) < 1e-7f && back[16] == back[15]);
}

// ---- writer -> reader ------------------------------------------------------------------------

static uint16_t bf16_by_rule(float v) {   // the top half of the fp32 bits, rounded to nearest even
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

static void test_writer_reader_roundtrip(void **s) {
    (void)s;
    char *path = tmp_path("rt.gguf");
    enum { ROWS = 3, COLS = 96 };
    float *x = xmalloc(ROWS * COLS * sizeof(float), "x");
    Rng rng;
    rng_seed(&rng, 7);
    for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)(rng_normal(&rng) * (i % 7 == 0 ? 30.0 : 0.3));
    GgufWriter *w = gguf_writer_new();
    gguf_kv_str(w, "general.architecture", "test");
    gguf_kv_u32(w, "a.u32", 7);
    gguf_kv_i32(w, "a.i32", -7);
    gguf_kv_f32(w, "a.f32", 1.5f);
    gguf_kv_bool(w, "a.bool", 1);
    gguf_kv_strn(w, "a.str", "x\0y", 3);
    const char *strs[] = {"\xc4\xa0the", "", "z"};
    gguf_kv_arr_str(w, "a.strs", strs, NULL, 3);
    int32_t ints[] = {5, -6};
    gguf_kv_arr_i32(w, "a.ints", ints, 2);
    int64_t ne[2] = {COLS, ROWS};
    static const uint32_t TYPES[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
    PtError e;
    for (int k = 0; k < 4; k++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        assert_int_equal(gguf_add_tensor(w, name, 2, ne, TYPES[k], x, &e), 0);
    }
    int64_t one = 5;
    assert_int_equal(gguf_add_tensor(w, "v", 1, &one, GGML_TYPE_F32, x, &e), 0);
    assert_int_equal(gguf_add_tensor(w, "v", 1, &one, GGML_TYPE_F32, x, &e), -1);      // twice
    int64_t odd[2] = {48, 2};
    assert_int_equal(gguf_add_tensor(w, "odd", 2, odd, GGML_TYPE_Q8_0, x, &e), -1);   // 48 % 32
    assert_non_null(strstr(e.msg, "block size"));
    assert_int_equal(gguf_add_tensor(w, "q4", 2, ne, GGML_TYPE_Q4_1, x, &e), -1);     // codes come from the quantizer
    assert_non_null(strstr(e.msg, "int4 quantizer"));
    if (gguf_writer_save(w, path, &e)) fail_msg("%s", e.msg);
    gguf_writer_free(w);

    GgufFile f;
    open_ok(&f, path);
    assert_int_equal(f.version, 3);
    assert_int_equal(f.n_tensors, 5);
    assert_int_equal(f.data_offset % 32, 0);
    // ggml's loader wants tensor data packed in info order, each padded to 32, the last one too.
    uint64_t expect = 0;
    for (int64_t i = 0; i < f.n_tensors; i++) {
        assert_int_equal(f.t[i].offset, expect);
        expect += (f.t[i].nbytes + 31) / 32 * 32;
    }
    assert_int_equal(f.len, f.data_offset + expect);
    const char *str;
    size_t len;
    int64_t iv;
    assert_int_equal(gguf_get_str(&f, "a.str", &str, &len, &e), 1);
    assert_true(len == 3 && !memcmp(str, "x\0y", 3));
    assert_int_equal(gguf_get_int(&f, "a.i32", &iv, &e), 1);
    assert_true(iv == -7);
    const GgufKV *kv = gguf_find_kv(&f, "a.strs");
    gguf_arr_str(kv, 1, &str, &len);
    assert_int_equal(len, 0);
    gguf_arr_str(kv, 0, &str, &len);
    assert_true(len == 5 && !memcmp(str, "\xc4\xa0the", 5));
    float *t0 = read_all(&f, "t0"), *t1 = read_all(&f, "t1"), *t2 = read_all(&f, "t2");
    assert_memory_equal(t0, x, sizeof(float) * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) {
        float half = half_round_ref(x[i]);
        uint32_t bits = (uint32_t)bf16_by_rule(x[i]) << 16;
        float bf;
        memcpy(&bf, &bits, 4);
        if (t1[i] != half || t2[i] != bf) fail_msg("value %d: f16 %g (want %g), bf16 %g (want %g)", i, t1[i], half, t2[i], bf);
    }
    // Q8_0: the values decode within the error its formula allows.
    for (int k = 3; k < 4; k++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        float *q = read_all(&f, name);
        for (int b = 0; b < ROWS * COLS / 32; b++) {
            float lo = x[b * 32], hi = x[b * 32], amax = 0;
            for (int j = 0; j < 32; j++)
                lo = fminf(lo, x[b * 32 + j]), hi = fmaxf(hi, x[b * 32 + j]), amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            // half a step, plus the fp16 rounding of the scale (and offset) times the largest code
            (void)lo, (void)hi;
            float bound = amax / 127 * (0.5f + 127 * 0x1p-11f);
            for (int j = 0; j < 32; j++)
                if (fabsf(q[b * 32 + j] - x[b * 32 + j]) > bound * 1.0001f)
                    fail_msg("%s value %d: %g decodes to %g (bound %g)", name, b * 32 + j, x[b * 32 + j], q[b * 32 + j], bound);
        }
        free(q);
    }
    free(t0), free(t1), free(t2), free(x);
    gguf_close(&f);
    unlink(path);
    free(path);
}

// ---- whole models --------------------------------------------------------------------------

static void make_model(ModelBundle *b, const char *preset, uint64_t seed) {
    ModelConfig c;
    PtError e;
    if (config_preset(&c, preset, &e)) fail_msg("%s", e.msg);
    bundle_alloc(b, &c);
    bundle_init_random(b, seed);
}

static void same_config(const ModelConfig *a, const ModelConfig *b) {
    assert_string_equal(a->model_type, b->model_type);
    assert_int_equal(a->n_layer, b->n_layer);
    assert_int_equal(a->d_model, b->d_model);
    assert_int_equal(a->n_head, b->n_head);
    assert_int_equal(a->n_kv_head, b->n_kv_head);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->d_ff, b->d_ff);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->max_seq, b->max_seq);
    assert_true(a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps);
    assert_int_equal(a->tied_embeddings, b->tied_embeddings);
    assert_int_equal(a->qk_norm, b->qk_norm);
}

static void test_model_f32_roundtrip_is_exact(void **s) {
    (void)s;
    static const char *const PRESETS[] = {"tiny", "tiny-untied", "tiny-llama"};
    char *path = tmp_path("m.gguf");
    for (int p = 0; p < 3; p++) {
        ModelBundle a, b;
        PtError e;
        make_model(&a, PRESETS[p], 11 + p);
        if (gguf_export(&a, path, "f32", NULL, NULL, &e) || gguf_import(path, &b, &e)) fail_msg("%s: %s", PRESETS[p], e.msg);
        same_config(&a.cfg, &b.cfg);
        assert_int_equal(a.tt.total, b.tt.total);
        for (int i = 0; i < a.tt.n; i++)
            if (memcmp(a.params + a.tt.t[i].offset, b.params + b.tt.t[i].offset, a.tt.t[i].numel * 4))
                fail_msg("%s: %s changed in the f32 round trip", PRESETS[p], a.tt.t[i].name);
        GgufFile f;
        open_ok(&f, path);
        assert_int_equal(!!gguf_find_tensor(&f, "output.weight"), !a.cfg.tied_embeddings);
        const char *arch;
        size_t len;
        assert_int_equal(gguf_get_str(&f, "general.architecture", &arch, &len, &e), 1);
        assert_true(!memcmp(arch, a.cfg.qk_norm ? "qwen3" : "llama", len));
        gguf_close(&f);
        bundle_free(&a), bundle_free(&b);
    }
    unlink(path);
    free(path);
}

// Quantized exports: norms F32, matrices in the type (or F16 when ne[0] % 32),
// values back within the type's error. (q4_0/q4_1: test_gguf_q4.c.)
static void test_model_quant_exports(void **s) {
    (void)s;
    static const char *const QUANTS[] = {"f16", "bf16", "q8_0"};
    static const float REL[] = {0x1p-11f, 0x1p-8f, 1.0f / 127};
    char *path = tmp_path("q.gguf");
    for (int p = 0; p < 2; p++) {
        ModelBundle a;
        make_model(&a, p ? "tiny-untied" : "tiny", 5);
        for (int q = 0; q < 3; q++) {
            ModelBundle b;
            PtError e;
            GgufExportStats st;
            if (gguf_export(&a, path, QUANTS[q], NULL, &st, &e) || gguf_import(path, &b, &e)) fail_msg("%s", e.msg);
            GgufFile f;
            open_ok(&f, path);
            for (int i = 0; i < a.tt.n; i++) {
                const TensorInfo *ti = &a.tt.t[i];
                char name[GGUF_MAX_NAME];
                gguf_tensor_name(ti, name);
                const GgufTensor *t = tensor(&f, name);
                uint32_t want = ti->ndim == 1 ? GGML_TYPE_F32 : (uint32_t)gguf_quant_type(QUANTS[q]);
                if (ti->ndim == 2 && q >= 2 && ti->shape[1] % 32) want = GGML_TYPE_F16;
                assert_int_equal(t->type, want);
                float amax = 0;
                for (size_t j = 0; j < ti->numel; j++) amax = fmaxf(amax, fabsf(a.params[ti->offset + j]));
                float bound = ti->ndim == 1 ? 0 : (want == GGML_TYPE_F16 ? 0x1p-11f : REL[q] * 1.01f) * amax;
                for (size_t j = 0; j < ti->numel; j++)
                    if (fabsf(b.params[ti->offset + j] - a.params[ti->offset + j]) > bound)
                        fail_msg("%s %s[%zu]: %g -> %g", QUANTS[q], ti->name, j, a.params[ti->offset + j],
                                 b.params[ti->offset + j]);
            }
            assert_int_equal(st.n_tensors, a.tt.n);
            gguf_close(&f);
            bundle_free(&b);
        }
        bundle_free(&a);
    }
    unlink(path);
    free(path);
}

// gguf-py wrote the HF fixtures as llama.cpp's converter would (llama q/k
// permuted in numpy): import equals the HF import, and our export of the same
// weights has the same bytes in every tensor.
static void test_converter_files(void **s) {
    (void)s;
    static const char *const MODELS[] = {"qwen3-tied", "llama-noqk"};
    char *path = tmp_path("c.gguf");
    for (int m = 0; m < 2; m++) {
        char hf_dir[128], gg[128];
        snprintf(hf_dir, sizeof hf_dir, "tests/fixtures/hf/%s", MODELS[m]);
        snprintf(gg, sizeof gg, GG "%s.gguf", MODELS[m]);
        ModelBundle h, g;
        PtError e;
        if (hf_import(hf_dir, &h, &e) || gguf_import(gg, &g, &e)) fail_msg("%s", e.msg);
        same_config(&h.cfg, &g.cfg);
        assert_memory_equal(h.params, g.params, h.tt.total * sizeof(float));
        // bf16 (qwen3-tied) and fp16 (llama-noqk) weights export losslessly in their own type.
        if (gguf_export(&h, path, m == 0 ? "bf16" : "f16", NULL, NULL, &e)) fail_msg("%s", e.msg);
        GgufFile ours, ref;
        open_ok(&ours, path);
        open_ok(&ref, gg);
        assert_int_equal(ours.n_tensors, ref.n_tensors);
        for (int64_t i = 0; i < ref.n_tensors; i++) {
            const GgufTensor *r = &ref.t[i], *o = tensor(&ours, r->name);
            assert_int_equal(o->type, r->type);
            assert_memory_equal(o->ne, r->ne, sizeof o->ne);
            if (memcmp(bytes_of(&ours, o), bytes_of(&ref, r), r->nbytes)) fail_msg("%s: %s bytes differ", MODELS[m], r->name);
        }
        gguf_close(&ours), gguf_close(&ref);
        bundle_free(&h), bundle_free(&g);
    }
    unlink(path);
    free(path);
}

// ---- tokenizer metadata ---------------------------------------------------------------------

static char *slurp(const char *path, size_t *len) {
    uint8_t *d;
    PtError e;
    if (read_whole_file(path, &d, len, &e)) fail_msg("%s", e.msg);
    return (char *)d;
}

// A tiny model whose vocab covers the fixture tokenizer (1505 ids) plus filler.
static void model_with_tokenizer(ModelBundle *b, const char *tok_file, int with_config) {
    ModelConfig c;
    PtError e;
    if (config_preset(&c, "tiny", &e)) fail_msg("%s", e.msg);
    c.vocab_size = 1536, c.eos_id = -1, c.pad_id = -1;
    bundle_alloc(b, &c);
    bundle_init_random(b, 3);
    b->tokenizer_json = slurp(tok_file, &b->tokenizer_json_len);
    if (!with_config) return;
    size_t tlen;
    char *tmpl = slurp(TOK "qwen3_chat_template.jinja", &tlen);
    json_t *cfg = json_pack("{s:s, s:s, s:b, s:s}", "eos_token", "<|im_end|>", "pad_token", "<|endoftext|>",
                            "add_bos_token", 0, "chat_template", tmpl);
    b->tokenizer_config_json = json_dumps(cfg, 0);
    b->tokenizer_config_json_len = strlen(b->tokenizer_config_json);
    json_decref(cfg);
    free(tmpl);
}

static void encode_all(const Tokenizer *t, const char *text, size_t len, json_t *want, const char *what) {
    int *ids = NULL;
    size_t n = 0, cap = 0;
    PtError e;
    if (tokenizer_encode(t, text, len, &ids, &n, &cap, &e)) fail_msg("%s: %s", what, e.msg);
    if (n != json_array_size(want)) fail_msg("%s: %zu ids, HF tokenizers gave %zu", what, n, json_array_size(want));
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(want, i)))
            fail_msg("%s: id %zu is %d, HF tokenizers gave %lld", what, i, ids[i],
                     (long long)json_integer_value(json_array_get(want, i)));
    free(ids);
}

static void check_rebuilt_tokenizer(const char *tok_file) {
    ModelBundle a, b;
    PtError e;
    model_with_tokenizer(&a, tok_file, 1);
    char *path = tmp_path("tok.gguf");
    if (gguf_export(&a, path, "f32", NULL, NULL, &e) || gguf_import(path, &b, &e)) fail_msg("%s: %s", tok_file, e.msg);
    GgufFile f;
    open_ok(&f, path);
    const GgufKV *types = gguf_find_kv(&f, "tokenizer.ggml.token_type"), *tokens = gguf_find_kv(&f, "tokenizer.ggml.tokens");
    assert_true(types && tokens && tokens->arr_n == 1536 && types->arr_n == 1536);
    assert_int_equal(gguf_arr_int(types, 0), GGUF_TOKEN_NORMAL);
    assert_int_equal(gguf_arr_int(types, 1500), GGUF_TOKEN_CONTROL);        // <|endoftext|>, special
    assert_int_equal(gguf_arr_int(types, 1503), GGUF_TOKEN_USER_DEFINED);   // <think>, not special
    assert_int_equal(gguf_arr_int(types, 1505), GGUF_TOKEN_UNUSED);
    const char *str;
    size_t len;
    gguf_arr_str(tokens, 1505, &str, &len);
    assert_true(len == 9 && !memcmp(str, "[PAD1505]", 9));
    assert_int_equal(gguf_find_kv(&f, "tokenizer.ggml.merges")->arr_n, 1244);
    int64_t id;
    assert_int_equal(gguf_get_int(&f, "tokenizer.ggml.eos_token_id", &id, &e), 1);
    assert_int_equal(id, 1502);
    assert_int_equal(gguf_get_int(&f, "tokenizer.ggml.padding_token_id", &id, &e), 1);
    assert_int_equal(id, 1500);
    assert_int_equal(gguf_get_str(&f, "tokenizer.ggml.pre", &str, &len, &e), 1);
    assert_true(len == 5 && !memcmp(str, "qwen2", 5));
    size_t tlen;
    char *tmpl = slurp(TOK "qwen3_chat_template.jinja", &tlen);
    assert_int_equal(gguf_get_str(&f, "tokenizer.chat_template", &str, &len, &e), 1);
    assert_true(len == tlen && !memcmp(str, tmpl, tlen));
    gguf_close(&f);
    // The rebuilt tokenizer.json encodes as HF tokenizers did on the original.
    assert_non_null(b.tokenizer_json);
    Tokenizer *t;
    if (tokenizer_load(&t, b.tokenizer_json, b.tokenizer_json_len, "rebuilt", &e)) fail_msg("%s", e.msg);
    json_error_t je;
    json_t *want = json_load_file(TOK "expected.json", 0, &je);
    assert_non_null(want);
    size_t clen;
    char *corpus = slurp(TOK "corpus.txt", &clen);
    encode_all(t, corpus, clen, json_object_get(want, "whole"), "whole corpus");
    json_t *lines = json_object_get(want, "lines");
    char *p = corpus;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        char *nl = strchr(p, '\n');
        char what[48];
        snprintf(what, sizeof what, "corpus line %zu", i + 1);
        encode_all(t, p, (size_t)(nl - p), json_array_get(lines, i), what);
        p = nl + 1;
    }
    assert_int_equal(tokenizer_token_id(t, "<think>"), 1503);
    tokenizer_free(t);
    // tokenizer_config.json comes back with the template and special tokens.
    json_t *cfg = json_loadb(b.tokenizer_config_json, b.tokenizer_config_json_len, 0, &je);
    assert_non_null(cfg);
    assert_string_equal(json_string_value(json_object_get(cfg, "eos_token")), "<|im_end|>");
    assert_string_equal(json_string_value(json_object_get(cfg, "pad_token")), "<|endoftext|>");
    assert_string_equal(json_string_value(json_object_get(cfg, "chat_template")), tmpl);
    assert_int_equal(b.cfg.eos_id, 1502);
    assert_int_equal(b.cfg.pad_id, 1500);
    json_decref(cfg), json_decref(want);
    free(corpus), free(tmpl);
    bundle_free(&a), bundle_free(&b);
    unlink(path);
    free(path);
}

static void test_tokenizer_roundtrip(void **s) {
    (void)s;
    check_rebuilt_tokenizer(TOK "tokenizer.json");          // merges as pairs
    check_rebuilt_tokenizer(TOK "tokenizer_legacy.json");   // merges as "a b"
}

// Other released models' pre-tokenizers (tests/fixtures/tok/pretok.json) get
// llama.cpp's names on export (SmolLM2's Digits + ByteLevel is "smollm") and
// come back from them on import encoding as HF tokenizers does; the special
// tokens stay in the vocabulary, so its ids have no gaps.
static void test_tokenizer_pre_families(void **s) {
    (void)s;
    static const char *const CASES[][2] = {{"smollm", "smollm"}, {"llama3", "llama-bpe"}, {"deepseek_v3", "deepseek-v3"}};
    json_error_t je;
    json_t *variants = json_load_file(TOK "pretok.json", 0, &je), *base = json_load_file(TOK "tokenizer.json", 0, &je);
    assert_true(variants && base);
    size_t clen;
    char *corpus = slurp(TOK "corpus.txt", &clen);
    for (size_t k = 0; k < 3; k++) {
        json_t *var = NULL;
        for (size_t v = 0; v < json_array_size(variants); v++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(variants, v), "name")), CASES[k][0]))
                var = json_array_get(variants, v);
        assert_non_null(var);
        json_object_set(base, "pre_tokenizer", json_object_get(var, "pre_tokenizer"));
        json_object_set(base, "normalizer", json_object_get(var, "normalizer"));
        char *tok_path = tmp_path("variant.json"), *path = tmp_path("variant.gguf");
        assert_int_equal(json_dump_file(base, tok_path, 0), 0);
        ModelBundle a, b;
        PtError e;
        model_with_tokenizer(&a, tok_path, 1);
        if (gguf_export(&a, path, "f32", NULL, NULL, &e) || gguf_import(path, &b, &e)) fail_msg("%s: %s", CASES[k][0], e.msg);
        GgufFile f;
        open_ok(&f, path);
        const char *str;
        size_t len;
        assert_int_equal(gguf_get_str(&f, "tokenizer.ggml.pre", &str, &len, &e), 1);
        if (len != strlen(CASES[k][1]) || memcmp(str, CASES[k][1], len)) fail_msg("%s: pre \"%.*s\"", CASES[k][0], (int)len, str);
        gguf_close(&f);
        Tokenizer *t;
        if (tokenizer_load(&t, b.tokenizer_json, b.tokenizer_json_len, "rebuilt", &e)) fail_msg("%s", e.msg);
        encode_all(t, corpus, clen, json_object_get(var, "whole"), CASES[k][0]);
        json_t *lines = json_object_get(var, "lines");
        char *p = corpus;
        for (size_t i = 0; i < json_array_size(lines); i++) {
            char *nl = strchr(p, '\n');
            encode_all(t, p, (size_t)(nl - p), json_array_get(lines, i), CASES[k][0]);
            p = nl + 1;
        }
        tokenizer_free(t);
        json_t *rebuilt = json_loadb(b.tokenizer_json, b.tokenizer_json_len, 0, &je);
        assert_int_equal(json_object_size(json_object_get(json_object_get(rebuilt, "model"), "vocab")), 1505);
        json_decref(rebuilt);
        bundle_free(&a), bundle_free(&b);
        unlink(path), unlink(tok_path);
        free(path), free(tok_path);
    }
    free(corpus);
    json_decref(variants), json_decref(base);
}

// A pre-tokenizer llama.cpp cannot reproduce is refused, not silently mapped.
static void test_tokenizer_refused(void **s) {
    (void)s;
    ModelBundle a;
    PtError e;
    model_with_tokenizer(&a, TOK "tokenizer_gpt2ish.json", 0);
    char *path = tmp_path("bad-tok.gguf");
    assert_int_equal(gguf_export(&a, path, "f32", NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "llama.cpp"));
    assert_int_equal(access(path, F_OK), -1);   // no output file
    bundle_free(&a);
    // A tokenizer larger than the model's vocabulary is refused too.
    model_with_tokenizer(&a, TOK "tokenizer.json", 0);
    a.cfg.vocab_size = 1000;
    assert_int_equal(gguf_export(&a, path, "f32", NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "vocab_size"));
    bundle_free(&a);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_matches_gguf_py),
        cmocka_unit_test(test_metadata_of_every_type),
        cmocka_unit_test(test_q8_0_block_by_hand),
        cmocka_unit_test(test_q4_decoders_by_hand),
        cmocka_unit_test(test_writer_reader_roundtrip),
        cmocka_unit_test(test_model_f32_roundtrip_is_exact),
        cmocka_unit_test(test_model_quant_exports),
        cmocka_unit_test(test_converter_files),
        cmocka_unit_test(test_tokenizer_roundtrip),
        cmocka_unit_test(test_tokenizer_pre_families),
        cmocka_unit_test(test_tokenizer_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
