// MNN package writer against references that do not come from our code:
// - the FlatBuffers bytes of a one-op Net worked out by hand from the
//   FlatBuffers binary format and MNN's schema (schema/default/MNN.fbs), and
//   checked with a verifier generated from that schema;
// - the llm.mnn.weight blob of a 2 x 128 matrix worked out by hand (IDST
//   header, nibble order, fp16 [zero, scale] pairs);
// - a decoder written here from that layout, run over a whole exported
//   package: every code and fp16 alpha equals the quantizer's for the
//   checkpoint, and the LayerNorm blobs hold the norm weights.
// Bad input (a vocabulary the format cannot hold, a tokenizer with more ids
// than the model has rows, a damaged weight file) fails with one message and
// leaves no directory. The runtime itself judges the packages in
// tests/interop/test_mnn_runtime.py.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>
#include "../export/flatbuf.h"
#include "../export/mnn_inspect.h"
#include "../export/mnn_export.h"
#include "../export/mnn_graph.h"
#include "../export/mnn_weights.h"

static void flatbuffer_matches_spec_example(void **state) {
    (void)state;
    // Net { oplists: [Op { main: Input { dims [1], dtype 1, dformat 0 }, name "x",
    //       outputIndexes [0], type 34, main_type 21, defaultDimentionFormat 1 }],
    //       tensorName: ["x"] }
    static const uint8_t want[152] = {
        0x18, 0, 0, 0, 0x14, 0, 0x0c, 0, 0, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0, 0, 0, 0x08, 0,
        0x14, 0, 0, 0, 0x08, 0, 0, 0, 0x68, 0, 0, 0, 0x01, 0, 0, 0, 0x18, 0, 0, 0,
        0x12, 0, 0x16, 0, 0, 0, 0x14, 0, 0x04, 0, 0x08, 0, 0x0c, 0, 0x10, 0, 0x15, 0, 0, 0,
        0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0x30, 0, 0, 0, 0x34, 0, 0, 0, 0x22, 0, 0, 0, 0x15, 0x01,
        0x0a, 0, 0x0d, 0, 0x04, 0, 0x08, 0, 0x0c, 0,
        0x0a, 0, 0, 0, 0x0c, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0,
        0x01, 0, 0, 0, 0x01, 0, 0, 0, 0x01, 0, 0, 0, 0x78, 0, 0, 0,
        0x01, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0x04, 0, 0, 0, 0x01, 0, 0, 0, 0x78, 0, 0, 0};
    FbBuilder b;
    fb_init(&b);
    int32_t one = 1, zero = 0;
    FbNode *input = fb_table(&b);
    fb_ref(input, 0, fb_vec_i32(&b, &one, 1));
    fb_i32(input, 1, 1);
    fb_i8(input, 2, 0);
    FbNode *op = fb_table(&b);
    fb_u8(op, 1, 21);
    fb_ref(op, 2, input);
    fb_ref(op, 3, fb_string(&b, "x"));
    fb_ref(op, 4, fb_vec_i32(&b, &zero, 1));
    fb_i32(op, 5, 34);
    fb_i8(op, 6, 1);
    FbNode *ops = fb_vec_refs(&b), *names = fb_vec_refs(&b);
    fb_vec_push(ops, op);
    fb_vec_push(names, fb_string(&b, "x"));
    FbNode *net = fb_table(&b);
    fb_ref(net, 3, ops);
    fb_ref(net, 7, names);
    size_t len;
    uint8_t *got = fb_serialize(net, &len);
    assert_int_equal(len, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    free(got);
    fb_free(&b);
}

static void weight_blob_matches_spec_example(void **state) {
    (void)state;
    enum { ROWS = 2, COLS = 128 };
    float w[ROWS * COLS], scale[4], zero[4];
    for (int i = 0; i < COLS; i++) {
        w[i] = (float)(i - 64) / 64.0f;
        w[COLS + i] = (float)(i % 16) * 0.1f - 0.7f;
    }
    QuantSpec spec = {64, 0};
    PtError e;
    assert_int_equal(quant_init_rtn(&spec, w, ROWS, COLS, scale, zero, "example", &e), 0);
    char path[64];
    snprintf(path, sizeof path, "/tmp/pt-mnn-%ld.weight", (long)getpid());
    FILE *f = fopen(path, "w+b");
    assert_non_null(f);
    uint8_t pad[7] = {0};
    fwrite(pad, 1, sizeof pad, f);   // the blob need not start at 0: offsets are absolute
    MnnWeightFile wf = {.f = f, .path = path, .offset = sizeof pad};
    MnnExternal ext;
    assert_int_equal(mnn_write_linear(&wf, &spec, w, ROWS, COLS, scale, zero, &ext, &e), 0);
    assert_int_equal(ext.n_ext, 5);
    assert_int_equal(ext.ext[0], 7);
    assert_int_equal(ext.ext[1], 150);
    assert_int_equal(ext.ext[2], 16);
    assert_int_equal(ext.ext[3], 0);
    uint8_t got[7 + 166];
    rewind(f);
    assert_int_equal(fread(got, 1, sizeof got, f), sizeof got);
    fclose(f);
    unlink(path);
    const uint8_t *blob = got + 7;
    static const uint8_t header[22] = {0x02, 0x02, 0x00, 0x80, 0x00, 0x10, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC,
                                       0xFD, 0xFE, 0xFF, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
    assert_memory_equal(blob, header, 22);
    // Row 0, each block: u = round(i * 15 / 63) -> 0,0,0,1,1,1,1,2,... packed high nibble first.
    static const uint8_t row0_start[8] = {0x00, 0x01, 0x11, 0x12, 0x22, 0x23, 0x33, 0x34};
    assert_memory_equal(blob + 22, row0_start, 8);
    assert_int_equal(blob[53], 0xFF);
    assert_memory_equal(blob + 54, row0_start, 8);
    static const uint8_t row1[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF};
    for (int k = 0; k < 8; k++) assert_memory_equal(blob + 86 + 8 * k, row1, 8);
    static const uint8_t alpha[16] = {0x9A, 0xB7, 0x33, 0x2C, 0x33, 0x38, 0x33, 0x2C,
                                      0x66, 0x2E, 0x66, 0x2E, 0x66, 0x2E, 0x66, 0x2E};
    assert_memory_equal(blob + 150, alpha, 16);
}


// A tiny tied model with the fixture tokenizer (1505 ids) and its RTN int4 state.
static const char TINY[] =
    "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 128, \"vocab_size\": %d, "
    "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
    "\"tie_word_embeddings\": true}";

static void tiny_model(ModelBundle *b, QatState *q, int vocab) {
    char json[512];
    snprintf(json, sizeof json, TINY, vocab);
    ModelConfig cfg;
    PtError e;
    if (config_from_hf_json(&cfg, json, "test config", &e)) fail_msg("%s", e.msg);
    bundle_alloc(b, &cfg);
    bundle_init_random(b, 5);
    uint8_t *tok;
    if (read_whole_file("tests/fixtures/tok/tokenizer.json", &tok, &b->tokenizer_json_len, &e)) fail_msg("%s", e.msg);
    b->tokenizer_json = (char *)tok;
    QuantSpec spec = {64, 0};
    if (qat_init(q, &b->tt, &spec, 1, 0, "test", &e) ||
        qat_init_from_weights(q, &b->tt, b->params, QAT_INIT_RTN, NULL, NULL, "test", &e))
        fail_msg("%s", e.msg);
}

static char *tmp_dir(const char *name) {
    char buf[128];
    snprintf(buf, sizeof buf, "/tmp/pt-mnn-%ld-%s", (long)getpid(), name);
    return xstrdup(buf);
}

static void export_then_inspect_and_detect_damage(void **state) {
    (void)state;
    ModelBundle b;
    QatState q;
    tiny_model(&b, &q, 1536);
    char *dir = tmp_dir("ok");
    MnnExportOptions o = {.fused = 1, .memory = "normal", .force = 1};
    MnnExportStats st;
    PtError e;
    if (mnn_export(&b, &q, dir, &o, &st, &e)) fail_msg("%s", e.msg);
    assert_int_equal(st.n_linears, 2 * 7 + 1);
    FILE *devnull = fopen("/dev/null", "w");
    if (mnn_inspect(dir, devnull, &e)) fail_msg("%s", e.msg);
    // A weight reference whose offset and sizes overflow 64 bits together (found by fuzz_mnn_inspect; the sum
    // was a signed overflow): layer 0's q_proj refers to [offset, 22 + 64 * 64 / 2 code bytes, 64 * 4 alpha
    // bytes], here with the offset made 2^63 - 1.
    char *graph_path = path_join(dir, "llm.mnn");
    uint8_t *graph;
    size_t graph_len;
    if (read_whole_file(graph_path, &graph, &graph_len, &e)) fail_msg("%s", e.msg);
    const int64_t sizes[2] = {22 + 64 * 64 / 2, 64 * 4}, huge = INT64_MAX;
    uint8_t *ref = memmem(graph + 8, graph_len - 8, sizes, sizeof sizes);
    assert_non_null(ref);
    memcpy(ref - 8, &huge, 8);
    FILE *f = fopen(graph_path, "wb");
    assert_int_equal(fwrite(graph, 1, graph_len, f), graph_len);
    fclose(f);
    assert_int_equal(mnn_inspect(dir, devnull, &e), -1);
    assert_non_null(strstr(e.msg, "references 9223372036854775807 + 2070 + 256 bytes, the file has"));
    free(graph);
    free(graph_path);
    if (mnn_export(&b, &q, dir, &o, &st, &e)) fail_msg("%s", e.msg);
    // One byte short: the lm_head's alpha now runs past the end.
    char *weight = path_join(dir, "llm.mnn.weight");
    assert_int_equal(truncate(weight, st.weight_bytes - 1), 0);
    assert_int_equal(mnn_inspect(dir, devnull, &e), -1);
    assert_non_null(strstr(e.msg, "llm.mnn.weight"));
    fclose(devnull);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(weight);
    free(dir);
    qat_free(&q);
    bundle_free(&b);
}

static void refuses_what_the_format_cannot_hold(void **state) {
    (void)state;
    ModelBundle b;
    QatState q;
    PtError e;
    MnnExportOptions o = {.fused = 1, .memory = "low"};
    MnnExportStats st;
    // The tokenizer has ids up to 1504; the model only 1024 rows.
    tiny_model(&b, &q, 1024);
    char *dir = tmp_dir("small-vocab");
    assert_int_equal(mnn_export(&b, &q, dir, &o, &st, &e), -1);
    assert_non_null(strstr(e.msg, "1024 embedding rows"));
    assert_false(path_exists(dir));
    char *tmp = temp_path_for(dir);
    assert_false(path_exists(tmp));
    free(tmp);
    // A vocabulary whose lm_head has more elements than an MNN tensor can count
    // (checked before any weight is touched, so no parameters are needed).
    ModelBundle huge = b;
    huge.cfg.vocab_size = 1 << 25;
    assert_int_equal(mnn_export(&huge, &q, dir, &o, &st, &e), -1);
    assert_non_null(strstr(e.msg, "vocabulary 33554432"));
    assert_false(path_exists(dir));
    // A tied model whose int4 state leaves the embedding in float: the message names the command that fixes it
    // and where it goes with a draft
    QatState float_embedding = q;
    float_embedding.quant_embedding = 0;
    assert_int_equal(mnn_export(&b, &float_embedding, dir, &o, &st, &e), -1);
    assert_non_null(strstr(e.msg, "`pocket quantize`"));
    assert_non_null(strstr(e.msg, "before draft-data"));
    assert_false(path_exists(dir));
    free(dir);
    qat_free(&q);
    bundle_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flatbuffer_matches_spec_example),
        cmocka_unit_test(weight_blob_matches_spec_example),
        cmocka_unit_test(export_then_inspect_and_detect_damage),
        cmocka_unit_test(refuses_what_the_format_cannot_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
