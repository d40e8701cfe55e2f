// The adapter writers' structure, on a tiny model with random A and B (the
// runtimes themselves judge the files in tests/interop/test_lora_runtimes.py):
// - the llama.cpp GGUF adapter read back by our GGUF reader: the keys
//   llama.cpp's loader demands (general.type, adapter.type, adapter.lora.alpha
//   as FLOAT32), one lora_a/lora_b pair per adapted projection named after the
//   base tensor, ne = [in, r] and [r, out], the values of A and B (f32 exact,
//   f16 as fp16 rounds them), and for the llama architecture lora_B's q/k rows
//   in llama.cpp's interleaved order, worked out here from its definition;
// - lora.mnn read back with the flatbuffer reader: the base graph's ops in
//   order with three more after each adapted projection (lora_A, lora_B,
//   ADD), their inline weights A and B x alpha/r;
// - --merge with B = 0 gives the base package byte for byte; with an update
//   the codes of the adapted projections move and no other byte does;
// - bad input: no package, a package of another checkpoint, a damaged weight
//   file, an adapter of the wrong shape or layer count, an existing lora.mnn:
//   one message, nothing written.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../export/flatbuf_read.h"
#include "../export/mnn_lora.h"
#include "../formats/gguf_lora.h"
#include "../formats/gguf_reader.h"

static const char TINY[] =
    "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 128, \"vocab_size\": 1536, "
    "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
    "\"tie_word_embeddings\": true}";

typedef struct {
    ModelBundle b;
    QatState q;
    LoraWeightsView v;
    float *ab;   // every A and B, one after another
} Fixture;

// A tiny model (seeded), its RTN int4 state, and an adapter of rank 4 on the
// targets in mask with N(0, std) weights.
static void fixture(Fixture *f, const char *model_type, uint64_t seed, unsigned mask, float std) {
    memset(f, 0, sizeof *f);
    char json[512];
    snprintf(json, sizeof json, TINY, model_type);
    ModelConfig cfg;
    PtError e;
    if (config_from_hf_json(&cfg, json, "test config", &e)) fail_msg("%s", e.msg);
    bundle_alloc(&f->b, &cfg);
    bundle_init_random(&f->b, seed);
    uint8_t *tok;
    if (read_whole_file("tests/fixtures/tok/tokenizer.json", &tok, &f->b.tokenizer_json_len, &e)) fail_msg("%s", e.msg);
    f->b.tokenizer_json = (char *)tok;
    QuantSpec spec = {64, 0};
    if (qat_init(&f->q, &f->b.tt, &spec, 1, 0, "test", &e) ||
        qat_init_from_weights(&f->q, &f->b.tt, f->b.params, QAT_INIT_RTN, NULL, NULL, "test", &e))
        fail_msg("%s", e.msg);
    LoraWeightsView *v = &f->v;
    v->rank = 4;
    v->alpha = 8.0f;
    v->targets = mask;
    v->n_layer = cfg.n_layer;
    v->int4_base = 1;
    f->ab = xmalloc(cfg.n_layer * 7 * 2 * 4 * 128 * sizeof(float), "adapter");
    Rng rng;
    rng_seed(&rng, seed + 100);
    float *p = f->ab;
    for (int l = 0; l < cfg.n_layer; l++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!((mask >> t) & 1)) continue;
            const TensorInfo *ti = &f->b.tt.t[lora_view_row(&f->b.tt, l, t)];
            v->out[t] = ti->shape[0];
            v->in[t] = ti->shape[1];
            v->a[l][t] = p;
            for (int64_t i = 0; i < 4 * v->in[t]; i++) *p++ = std * (float)rng_normal(&rng);
            v->b[l][t] = p;
            for (int64_t i = 0; i < 4 * v->out[t]; i++) *p++ = std * (float)rng_normal(&rng);
        }
}

static void fixture_free(Fixture *f) {
    free(f->ab);
    qat_free(&f->q);
    bundle_free(&f->b);
}

static char *tmp_path(const char *name) {
    char buf[128];
    snprintf(buf, sizeof buf, "/tmp/pt-lora-%ld-%s", (long)getpid(), name);
    return xstrdup(buf);
}

static void rm_rf(const char *path) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", path);
    assert_int_equal(system(cmd), 0);
}

static const char *const GGUF_PROJ[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

static void gguf_adapter(const char *arch, const char *type) {
    Fixture f;
    fixture(&f, arch, 3, 0x7f, 0.5f);
    char *path = tmp_path("adapter.gguf");
    GgufLoraStats st;
    PtError e;
    if (gguf_lora_export(&f.b, &f.v, "test adapter", path, type, &st, &e)) fail_msg("%s", e.msg);
    assert_int_equal(st.n_tensors, 2 * 7 * 2);
    GgufFile g;
    if (gguf_open(&g, path, &e)) fail_msg("%s", e.msg);
    const char *s;
    size_t n;
    assert_int_equal(gguf_get_str(&g, "general.type", &s, &n, &e), 1);
    assert_true(n == 7 && !memcmp(s, "adapter", 7));
    assert_int_equal(gguf_get_str(&g, "adapter.type", &s, &n, &e), 1);
    assert_true(n == 4 && !memcmp(s, "lora", 4));
    assert_int_equal(gguf_get_str(&g, "general.architecture", &s, &n, &e), 1);
    assert_true(n == strlen(arch) && !memcmp(s, arch, n));
    const GgufKV *alpha = gguf_find_kv(&g, "adapter.lora.alpha");
    assert_non_null(alpha);
    assert_int_equal(alpha->type, GGUF_TYPE_FLOAT32);   // llama.cpp reads it with gguf_get_val_f32
    assert_true(alpha->num.f == 8.0);
    assert_int_equal(g.n_tensors, 28);
    int f16 = !strcmp(type, "f16"), llama = !strcmp(arch, "llama");
    float *got = xmalloc(128 * 4 * sizeof(float), "tensor");
    for (int l = 0; l < 2; l++)
        for (int t = 0; t < 7; t++) {
            char name[64];
            int64_t in = f.v.in[t], out = f.v.out[t];
            for (int ab = 0; ab < 2; ab++) {
                snprintf(name, sizeof name, "blk.%d.%s.weight.lora_%c", l, GGUF_PROJ[t], ab ? 'b' : 'a');
                const GgufTensor *gt = gguf_find_tensor(&g, name);
                assert_non_null(gt);
                assert_int_equal(gt->type, f16 ? GGML_TYPE_F16 : GGML_TYPE_F32);
                assert_int_equal(gt->n_dims, 2);
                assert_int_equal(gt->ne[0], ab ? 4 : in);
                assert_int_equal(gt->ne[1], ab ? out : 4);
                if (gguf_read_f32(&g, gt, got, &e)) fail_msg("%s", e.msg);
                const float *want = ab ? f.v.b[l][t] : f.v.a[l][t];
                int permuted = llama && ab && t <= 1;
                for (int64_t i = 0; i < 4 * (ab ? out : in); i++) {
                    // llama: GGUF row h*16 + 2i + j holds row h*16 + j*8 + i.
                    int64_t row = i / 4, k = i % 4, src = row;
                    if (permuted) src = row / 16 * 16 + (row % 2) * 8 + row % 16 / 2;
                    float w = want[permuted ? src * 4 + k : i];
                    assert_true(got[i] == (f16 ? f16_to_f32(f32_to_f16(w)) : w));
                }
            }
        }
    free(got);
    gguf_close(&g);
    unlink(path);
    free(path);
    fixture_free(&f);
}

static void gguf_adapter_qwen3_f32(void **state) {
    (void)state;
    gguf_adapter("qwen3", "f32");
}
static void gguf_adapter_qwen3_f16(void **state) {
    (void)state;
    gguf_adapter("qwen3", "f16");
}
static void gguf_adapter_llama_f32(void **state) {
    (void)state;
    gguf_adapter("llama", "f32");
}

// Op names of a serialized graph, in order.
static int op_names(const uint8_t *buf, size_t len, char names[][96], int cap) {
    FbReader r = {buf, len, 0, ""};
    size_t net = fbr_root(&r);
    size_t ops = fbr_ref(&r, net, 3);
    int n = (int)fbr_vec_len(&r, ops, 4);
    assert_true(n <= cap);
    for (int i = 0; i < n; i++) {
        uint32_t sl;
        const char *s = fbr_str(&r, fbr_ref(&r, fbr_vec_ref(&r, ops, (uint32_t)i), 3), &sl);
        snprintf(names[i], 96, "%.*s", (int)sl, s);
    }
    assert_false(r.bad);
    return n;
}

// The inline weights (Convolution2D.weight) of op i.
static const float *op_weights(const uint8_t *buf, size_t len, int i, uint32_t *n) {
    FbReader r = {buf, len, 0, ""};
    size_t op = fbr_vec_ref(&r, fbr_ref(&r, fbr_root(&r), 3), (uint32_t)i);
    size_t conv = fbr_ref(&r, op, 2), w = fbr_ref(&r, conv, 1);
    *n = fbr_vec_len(&r, w, 4);
    assert_false(r.bad);
    return (const float *)(buf + w + 4);
}

static uint8_t *slurp(const char *dir, const char *name, size_t *len) {
    char *p = path_join(dir, name);
    uint8_t *d;
    PtError e;
    if (read_whole_file(p, &d, len, &e)) fail_msg("%s", e.msg);
    free(p);
    return d;
}

static void mnn_package(const Fixture *f, const char *dir, int fused) {
    MnnExportOptions o = {.fused = fused, .memory = "normal", .force = 1};
    MnnExportStats st;
    PtError e;
    if (mnn_export(&f->b, &f->q, dir, &o, &st, &e)) fail_msg("%s", e.msg);
}

static void lora_graph_is_the_base_plus_adapter_ops(void **state) {
    (void)state;
    Fixture f;
    unsigned mask = 1u << 0 | 1u << 2 | 1u << 6;   // q, v, down
    fixture(&f, "qwen3", 3, mask, 0.5f);
    char *dir = tmp_path("pkg");
    for (int fused = 0; fused < 2; fused++) {
        mnn_package(&f, dir, fused);
        MnnLoraStats st;
        PtError e;
        if (mnn_lora_export(&f.b, &f.q, &f.v, "test adapter", dir, 0, &st, &e)) fail_msg("%s", e.msg);
        assert_int_equal(st.fused, fused);
        assert_int_equal(st.n_adapted, 6);
        size_t blen, llen;
        uint8_t *base = slurp(dir, "llm.mnn", &blen), *lora = slurp(dir, "lora.mnn", &llen);
        static char bn[2048][96], ln[2048][96];
        int nb = op_names(base, blen, bn, 2048), nl = op_names(lora, llen, ln, 2048);
        assert_int_equal(nl, nb + 3 * 6);
        int j = 0, seen = 0;
        for (int i = 0; i < nb; i++, j++) {
            assert_string_equal(bn[i], ln[j]);
            // An adapted projection's convolution: "/layers.L/<part>/<x>_proj/Linear".
            const char *lin = strstr(bn[i], "/Linear");
            int layer, t = -1;
            if (!lin || lin[7] || sscanf(bn[i], "/layers.%d/", &layer) != 1) continue;
            for (int k = 0; k < 7; k++) {
                char want[96];
                snprintf(want, sizeof want, "/%s_proj/Linear", lora_target_name(k));
                size_t n = strlen(bn[i]), m = strlen(want);
                if (n > m && !strcmp(bn[i] + n - m, want) && (mask >> k) & 1) t = k;
            }
            if (t < 0) continue;
            char stem[96];
            snprintf(stem, sizeof stem, "%.*s", (int)(lin - bn[i]), bn[i]);
            const char *suffix[3] = {"/lora_A", "/lora_B", "/lora_add"};
            for (int k = 0; k < 3; k++) {
                char want[128];
                snprintf(want, sizeof want, "%s%s", stem, suffix[k]);
                assert_string_equal(ln[j + 1 + k], want);
            }
            uint32_t na, nbw;
            const float *wa = op_weights(lora, llen, j + 1, &na), *wb = op_weights(lora, llen, j + 2, &nbw);
            assert_int_equal(na, 4 * f.v.in[t]);
            assert_int_equal(nbw, 4 * f.v.out[t]);
            assert_memory_equal(wa, f.v.a[layer][t], na * sizeof(float));
            for (uint32_t k = 0; k < nbw; k++) assert_true(wb[k] == f.v.b[layer][t][k] * 2.0f);   // alpha / r = 2
            j += 3;
            seen++;
        }
        assert_int_equal(seen, 6);
        // Asked again: refused without force, nothing changed.
        assert_int_equal(mnn_lora_export(&f.b, &f.q, &f.v, "test adapter", dir, 0, &st, &e), -1);
        assert_non_null(strstr(e.msg, "--force"));
        free(base);
        free(lora);
    }
    rm_rf(dir);
    free(dir);
    fixture_free(&f);
}

static void expect_refusal(const Fixture *f, const LoraWeightsView *v, const char *dir, const char *says) {
    MnnLoraStats st;
    PtError e;
    assert_int_equal(mnn_lora_export(&f->b, &f->q, v, "test adapter", dir, 1, &st, &e), -1);
    if (!strstr(e.msg, says)) fail_msg("expected '%s' in: %s", says, e.msg);
    assert_null(strchr(e.msg, '\n'));
    char *file = path_join(dir, "lora.mnn"), *tmp = temp_path_for(file);
    assert_false(path_exists(file));
    assert_false(path_exists(tmp));
    free(file);
    free(tmp);
}

static void refuses_what_does_not_fit(void **state) {
    (void)state;
    Fixture f, other;
    fixture(&f, "qwen3", 3, 0x7f, 0.5f);
    fixture(&other, "qwen3", 4, 0x7f, 0.5f);
    char *dir = tmp_path("bad"), *empty = tmp_path("empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    expect_refusal(&f, &f.v, empty, "no MNN base package");
    // The package of another checkpoint: same graph, other weights.
    mnn_package(&other, dir, 1);
    expect_refusal(&f, &f.v, dir, "llm.mnn.weight: differs at byte");
    // Our package, one weight byte flipped.
    mnn_package(&f, dir, 1);
    char *wpath = path_join(dir, "llm.mnn.weight");
    FILE *w = fopen(wpath, "r+b");
    assert_non_null(w);
    fseek(w, 1000, SEEK_SET);
    int c = fgetc(w);
    fseek(w, 1000, SEEK_SET);
    fputc(c ^ 1, w);
    fclose(w);
    expect_refusal(&f, &f.v, dir, "differs at byte 1000");
    // Adapters that do not fit this base.
    mnn_package(&f, dir, 1);
    LoraWeightsView *v = xmalloc(sizeof *v, "view");
    *v = f.v;
    v->in[5] = 96;
    expect_refusal(&f, v, dir, "up_proj adapter is [128, 96]");
    *v = f.v;
    v->n_layer = 3;
    expect_refusal(&f, v, dir, "3 layers, the base has 2");
    *v = f.v;
    v->b[1][2] = NULL;
    expect_refusal(&f, v, dir, "layer 1 v_proj lacks its lora_B");
    *v = f.v;
    float nan_a[4 * 64];
    memcpy(nan_a, v->a[0][0], sizeof nan_a);
    nan_a[7] = NAN;
    v->a[0][0] = nan_a;
    expect_refusal(&f, v, dir, "lora_A value 7 is not finite");
    free(v);
    free(wpath);
    rm_rf(dir);
    rm_rf(empty);
    free(dir);
    free(empty);
    fixture_free(&other);
    fixture_free(&f);
}

static void merge_changes_only_the_adapted_codes(void **state) {
    (void)state;
    Fixture f;
    fixture(&f, "qwen3", 3, 1u << 1 | 1u << 4, 0.5f);   // k, gate
    char *base = tmp_path("mbase"), *merged = tmp_path("merged");
    mnn_package(&f, base, 1);
    MnnExportOptions o = {.fused = 1, .memory = "normal", .force = 1};
    MnnExportStats st;
    MnnMergeStats ms;
    PtError e;
    // B = 0: the merged package is the base package.
    float *zeros = xcalloc(128 * 4, sizeof(float), "zero B");
    LoraWeightsView *z = xmalloc(sizeof *z, "view");
    *z = f.v;
    z->int4_base = 0;
    for (int l = 0; l < 2; l++) z->b[l][1] = z->b[l][4] = zeros;
    if (mnn_lora_merge(&f.b, &f.q, NULL, z, merged, &o, &st, &ms, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms.changed, 0);
    assert_int_equal(ms.regridded, 0);
    const char *files[2] = {"llm.mnn", "llm.mnn.weight"};
    for (int i = 0; i < 2; i++) {
        size_t na, nb;
        uint8_t *a = slurp(base, files[i], &na), *b = slurp(merged, files[i], &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        free(a);
        free(b);
    }
    // A real update: the adapted projections' codes move, and at most their
    // codes and scales change in the weight file; the graph is the same bytes
    // (offsets depend on shapes only).
    *z = f.v;
    z->int4_base = 0;
    if (mnn_lora_merge(&f.b, &f.q, NULL, z, merged, &o, &st, &ms, &e)) fail_msg("%s", e.msg);
    assert_true(ms.changed > ms.total / 10);
    assert_int_equal(ms.total, 2 * (32 * 64 + 128 * 64));
    size_t na, nb;
    uint8_t *a = slurp(base, "llm.mnn.weight", &na), *b = slurp(merged, "llm.mnn.weight", &nb);
    assert_int_equal(na, nb);
    size_t differ = 0;
    for (size_t i = 0; i < na; i++) differ += a[i] != b[i];
    assert_true(differ > 0 && differ <= (size_t)(ms.total / 2 + ms.groups * 4));
    free(a);
    free(b);
    a = slurp(base, "llm.mnn", &na);
    b = slurp(merged, "llm.mnn", &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    free(z);
    free(zeros);
    rm_rf(base);
    rm_rf(merged);
    free(base);
    free(merged);
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gguf_adapter_qwen3_f32),
        cmocka_unit_test(gguf_adapter_qwen3_f16),
        cmocka_unit_test(gguf_adapter_llama_f32),
        cmocka_unit_test(lora_graph_is_the_base_plus_adapter_ops),
        cmocka_unit_test(refuses_what_does_not_fit),
        cmocka_unit_test(merge_changes_only_the_adapted_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
