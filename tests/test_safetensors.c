// test_safetensors.c: safetensors writer/reader round trips, half-precision
// values derived by hand from the IEEE 754 / bfloat16 definitions, a file
// assembled byte by byte (not by our writer), and every validation rule of
// the reference reader on hand-made bad headers.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "../formats/safetensors.h"

typedef struct { char dir[64]; } Ctx;

static int setup(void **state) {
    Ctx *c = xcalloc(1, sizeof *c, "ctx");
    snprintf(c->dir, sizeof c->dir, "/tmp/pt-st-XXXXXX");
    if (!mkdtemp(c->dir)) return -1;
    *state = c;
    return 0;
}

static int teardown(void **state) {
    Ctx *c = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0) return -1;
    free(c);
    return 0;
}

static char *tmp_file(void **state, const char *name) { return path_join(((Ctx *)*state)->dir, name); }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// A file from a header string and raw data bytes, exactly as given.
static void write_raw(const char *path, uint64_t header_len, const char *header, const void *data, size_t data_len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 8; i++) fputc((int)(header_len >> (8 * i)) & 0xff, f);
    fwrite(header, 1, strlen(header), f);
    if (data_len) fwrite(data, 1, data_len, f);
    fclose(f);
}

// ------------------------------------------------------------ round trips

static void test_roundtrip_f32(void **state) {
    char *path = tmp_file(state, "f32.safetensors");
    // Every value is an fp32 bit pattern; the round trip must keep the bits.
    const uint32_t bits[6] = {0x3f800000u /* 1 */, 0x80000000u /* -0 */, 0x00000001u /* min subnormal */,
                              0x7f7fffffu /* max */, 0xff800000u /* -inf */, 0x7fc00001u /* NaN payload */};
    float a[6];
    for (int i = 0; i < 6; i++) a[i] = bits_f32(bits[i]);
    float scalar = 42.5f;
    StWriteTensor w[3] = {
        {.name = "a", .dtype = "F32", .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "scalar", .dtype = "F32", .ndim = 0, .data = &scalar},
        {.name = "empty", .dtype = "F32", .ndim = 2, .shape = {0, 4}, .data = NULL},
    };
    PtError e;
    assert_int_equal(st_write(path, w, 3, &e), 0);
    StFile f;
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(f.n, 3);
    assert_string_equal(st_metadata(&f, "format"), "pt");
    const StTensor *t = st_find(&f, "a");
    assert_non_null(t);
    assert_string_equal(t->dtype, "F32");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->numel, 6);
    float got[6];
    assert_int_equal(st_read_f32(&f, t, got, &e), 0);
    for (int i = 0; i < 6; i++) assert_int_equal(f32_bits(got[i]), bits[i]);
    t = st_find(&f, "scalar");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_int_equal(st_read_f32(&f, t, got, &e), 0);
    assert_true(got[0] == 42.5f);
    t = st_find(&f, "empty");
    assert_non_null(t);
    assert_int_equal(t->numel, 0);
    assert_int_equal(t->end - t->begin, 0);
    assert_null(st_find(&f, "missing"));
    st_close(&f);
    free(path);
}

typedef struct { uint16_t word; float value; } HalfCase;

// bf16 is the top half of an fp32: sign, 8 exponent bits (bias 127), 7
// mantissa bits. Values below follow from that definition.
static const HalfCase BF16_CASES[] = {
    {0x3f80, 1.0f},
    {0xc040, -3.0f},                 // -1.5 * 2^1
    {0x3f81, 1.0078125f},            // 1 + 2^-7
    {0x4049, 3.140625f},             // (1 + 73/128) * 2
    {0x0001, 0x1p-133f},             // smallest subnormal: 2^-126 * 2^-7
    {0x0080, 0x1p-126f},             // smallest normal
    {0x7f7f, 0x1.fep127f},           // largest finite
    {0x8000, -0.0f},
    {0x7f80, INFINITY},
};

// fp16: 5 exponent bits (bias 15), 10 mantissa bits.
static const HalfCase F16_CASES[] = {
    {0x3c00, 1.0f},
    {0xc000, -2.0f},
    {0x3555, 0.333251953125f},       // (1 + 341/1024) / 4
    {0x0001, 0x1p-24f},              // smallest subnormal
    {0x03ff, 1023 * 0x1p-24f},       // largest subnormal
    {0x0400, 0x1p-14f},              // smallest normal
    {0x7bff, 65504.0f},              // largest finite
    {0xfc00, -INFINITY},
    {0x8000, -0.0f},
};

static void check_half_file(void **state, const char *dtype, const HalfCase *cases, int n) {
    char name[64];
    snprintf(name, sizeof name, "%s.safetensors", dtype);
    char *path = tmp_file(state, name);
    uint16_t words[16];
    for (int i = 0; i < n; i++) words[i] = cases[i].word;
    StWriteTensor w = {.name = "x", .dtype = dtype, .ndim = 1, .shape = {n}, .data = words};
    PtError e;
    assert_int_equal(st_write(path, &w, 1, &e), 0);
    StFile f;
    assert_int_equal(st_open(&f, path, &e), 0);
    const StTensor *t = st_find(&f, "x");
    assert_non_null(t);
    assert_string_equal(t->dtype, dtype);
    assert_int_equal(t->end - t->begin, 2 * n);
    float got[16];
    assert_int_equal(st_read_f32(&f, t, got, &e), 0);
    for (int i = 0; i < n; i++) {
        if (f32_bits(got[i]) != f32_bits(cases[i].value))
            fail_msg("%s word 0x%04x: got %a, want %a", dtype, cases[i].word, got[i], cases[i].value);
    }
    // The words are stored little-endian in the file.
    const uint8_t *raw = st_data(&f, t);
    for (int i = 0; i < n; i++) assert_int_equal(raw[2 * i] | raw[2 * i + 1] << 8, cases[i].word);
    st_close(&f);
    free(path);
}

static void test_bf16_values(void **state) {
    check_half_file(state, "BF16", BF16_CASES, sizeof BF16_CASES / sizeof BF16_CASES[0]);
}

static void test_f16_values(void **state) {
    check_half_file(state, "F16", F16_CASES, sizeof F16_CASES / sizeof F16_CASES[0]);
}

// Round to nearest, ties to even, when fp32 is narrowed (the BF16/F16 export
// path). Each input sits at or next to a midpoint between two neighbours.
static void test_round_to_nearest_even(void **state) {
    (void)state;
    // bf16 spacing near 1 is 2^-7.
    assert_int_equal(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);            // tie, 0x3f80 is even
    assert_int_equal(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);        // tie between 0x3f81 and 0x3f82
    assert_int_equal(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); // just above the tie
    assert_int_equal(f32_to_bf16(1.0f + 0x1p-8f - 0x1p-23f), 0x3f80); // just below
    assert_int_equal(f32_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
    assert_int_equal(f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);     // max fp32 rounds up to inf
    // fp16 spacing near 1 is 2^-10; above 32768 it is 32.
    assert_int_equal(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(f32_to_f16(65519.0f), 0x7bff);                   // below the 65520 midpoint
    assert_int_equal(f32_to_f16(65520.0f), 0x7c00);                   // tie to even = 65536 = overflow
    assert_int_equal(f32_to_f16(0x1p-25f), 0x0000);                   // half the smallest subnormal, tie to 0
    assert_int_equal(f32_to_f16(3 * 0x1p-25f), 0x0002);               // 1.5 units, tie to 2
    assert_int_equal(f32_to_f16(0x1p-25f + 0x1p-35f), 0x0001);        // above the tie
    assert_int_equal(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);        // largest subnormal + half unit, tie to even
}

// The header: 8-byte little-endian length, JSON padded with spaces so the
// data starts at a multiple of 8, tensors back to back in the given order.
static void test_header_layout(void **state) {
    char *path = tmp_file(state, "layout.safetensors");
    uint16_t h[3] = {1, 2, 3};
    float x[2] = {1, 2};
    StWriteTensor w[2] = {
        {.name = "z.first", .dtype = "BF16", .ndim = 1, .shape = {3}, .data = h},
        {.name = "a.second", .dtype = "F32", .ndim = 2, .shape = {1, 2}, .data = x},
    };
    PtError e;
    assert_int_equal(st_write(path, w, 2, &e), 0);
    uint8_t *raw;
    size_t len;
    assert_int_equal(read_whole_file(path, &raw, &len, &e), 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | raw[i];
    assert_int_equal(n % 8, 0);
    assert_int_equal(len, 8 + n + 6 + 8);
    assert_int_equal(raw[8], '{');
    size_t end = 8 + n;
    while (raw[end - 1] == ' ') end--;
    assert_int_equal(raw[end - 1], '}');
    assert_true(8 + n - end < 8);
    char *header = strndup((const char *)raw + 8, n);
    assert_non_null(strstr(header, "\"__metadata__\":{\"format\":\"pt\"}"));
    assert_non_null(strstr(header, "\"z.first\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}"));
    assert_non_null(strstr(header, "\"a.second\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[6,14]}"));
    free(header);
    free(raw);
    free(path);
}

// A file assembled by hand: entries out of data order, no metadata, extra
// whitespace, an F32 tensor at an unaligned offset after an F16 one.
static void test_handmade_file(void **state) {
    char *path = tmp_file(state, "hand.safetensors");
    const char *header = "{ \"w\" : {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},\n"
                         "  \"h\": {\"shape\": [2], \"dtype\": \"F16\", \"data_offsets\": [0, 4]} }   ";
    // F16 0.5 = 0x3800, -65504 = 0xfbff; F32 1.0 = 0x3f800000, -2.5 = 0xc0200000.
    const uint8_t data[12] = {0x00, 0x38, 0xff, 0xfb, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0};
    write_raw(path, strlen(header), header, data, sizeof data);
    StFile f;
    PtError e;
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.n_meta, 0);
    assert_string_equal(f.t[0].name, "h");   // sorted by offset
    float v[2];
    assert_int_equal(st_read_f32(&f, st_find(&f, "h"), v, &e), 0);
    assert_true(v[0] == 0.5f && v[1] == -65504.0f);
    assert_int_equal(st_read_f32(&f, st_find(&f, "w"), v, &e), 0);
    assert_true(v[0] == 1.0f && v[1] == -2.5f);
    st_close(&f);
    // An empty file with only "{}" is legal.
    write_raw(path, 8, "{}      ", NULL, 0);
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(f.n, 0);
    st_close(&f);
    free(path);
}

// ------------------------------------------------------------ validation

typedef struct {
    const char *what;
    const char *header;      // NULL: use header_len and no header text
    uint64_t header_len;     // 0: strlen(header)
    size_t data_len;         // zero bytes of data after the header
    const char *must_say;    // substring the error must contain (beyond the path)
} BadCase;

static const BadCase BAD[] = {
    {"header length past the end", "{}", 64, 0, "runs past the end"},
    {"header too large", "{}", 200000000ull, 0, "limit"},
    {"not JSON", "{\"a\": {\"dtype\": ", 0, 0, "not valid JSON"},
    {"not an object", "[1, 2]", 0, 0, "not a JSON object"},
    {"duplicate name", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8, "duplicate"},
    {"unknown dtype", "{\"t1\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4, "\"t1\": unknown dtype \"F12\""},
    {"negative dim", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, 4, "\"t1\": shape entry 0"},
    {"missing offsets", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, 4, "\"t1\": \"data_offsets\""},
    {"three offsets", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 0, 4, "\"t1\": \"data_offsets\""},
    {"size mismatch", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8, "\"t1\": data_offsets [0, 8] hold 8 bytes but shape [3] of F32 needs 12"},
    {"gap at start", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8, "\"t1\": data_offsets [4, 8] leave a gap"},
    {"gap between", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"t2\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 0, 12, "\"t2\": data_offsets [8, 12] leave a gap"},
    {"overlap", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"t2\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 0, 12, "\"t2\": data_offsets [4, 12] overlap tensor \"t1\""},
    {"end before begin", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                         "\"t2\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"t3\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 0, 4, "\"t3\": data_offsets [4, 0] end before"},
    {"truncated data", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 10, "\"t1\": data_offsets end at data byte 16 but the data buffer has only 10"},
    {"trailing bytes", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 6, "2 bytes after the last tensor"},
    {"metadata not strings", "{\"__metadata__\":{\"format\":1}}", 0, 0, "\"__metadata__\" value of \"format\""},
    {"metadata not object", "{\"__metadata__\":[\"pt\"]}", 0, 0, "\"__metadata__\" is not"},
    {"shape overflow", "{\"t1\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 0, 4, "\"t1\": shape overflows"},
};

static void test_bad_headers(void **state) {
    char *path = tmp_file(state, "bad.safetensors");
    uint8_t zeros[64] = {0};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const BadCase *c = &BAD[i];
        write_raw(path, c->header_len ? c->header_len : strlen(c->header), c->header, zeros, c->data_len);
        StFile f;
        PtError e = {{0}};
        if (st_open(&f, path, &e) == 0) fail_msg("%s: st_open accepted the file", c->what);
        if (!strstr(e.msg, path)) fail_msg("%s: error does not name the file: %s", c->what, e.msg);
        if (!strstr(e.msg, c->must_say)) fail_msg("%s: error lacks \"%s\": %s", c->what, c->must_say, e.msg);
        if (strchr(e.msg, '\n')) fail_msg("%s: error is not one line: %s", c->what, e.msg);
        assert_null(f.t);   // left closed
    }
    // Shorter than the 8-byte length field.
    FILE *fp = fopen(path, "wb");
    fputs("abc", fp);
    fclose(fp);
    StFile f;
    PtError e;
    assert_int_equal(st_open(&f, path, &e), -1);
    assert_non_null(strstr(e.msg, "too short"));
    // Missing file.
    assert_int_equal(st_open(&f, "/nonexistent/x.safetensors", &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/x.safetensors"));
    free(path);
}

static void test_non_float_dtype(void **state) {
    char *path = tmp_file(state, "i64.safetensors");
    int64_t ids[3] = {1, 2, 3};
    StWriteTensor w = {.name = "ids", .dtype = "I64", .ndim = 1, .shape = {3}, .data = ids};
    PtError e;
    assert_int_equal(st_write(path, &w, 1, &e), 0);
    StFile f;
    assert_int_equal(st_open(&f, path, &e), 0);
    float out[3];
    assert_int_equal(st_read_f32(&f, st_find(&f, "ids"), out, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "\"ids\": dtype I64 cannot be read"));
    assert_int_equal(memcmp(st_data(&f, st_find(&f, "ids")), ids, sizeof ids), 0);
    st_close(&f);
    free(path);
}

static void test_writer_errors(void **state) {
    char *path = tmp_file(state, "werr.safetensors");
    float x[1] = {0};
    PtError e;
    StWriteTensor dup[2] = {{.name = "a", .dtype = "F32", .ndim = 1, .shape = {1}, .data = x},
                            {.name = "a", .dtype = "F32", .ndim = 1, .shape = {1}, .data = x}};
    assert_int_equal(st_write(path, dup, 2, &e), -1);
    assert_non_null(strstr(e.msg, "\"a\" is listed twice"));
    StWriteTensor bad = {.name = "b", .dtype = "float", .ndim = 1, .shape = {1}, .data = x};
    assert_int_equal(st_write(path, &bad, 1, &e), -1);
    assert_non_null(strstr(e.msg, "unknown dtype"));
    assert_false(path_exists(path));
    StWriteTensor ok = {.name = "c", .dtype = "F32", .ndim = 1, .shape = {1}, .data = x};
    assert_int_equal(st_write("/nonexistent-dir/x.safetensors", &ok, 1, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent-dir/x.safetensors"));
    free(path);
}

static void test_inspect(void **state) {
    char *path = tmp_file(state, "insp.safetensors");
    float x[6] = {0};
    uint16_t h[4] = {0};
    StWriteTensor w[2] = {{.name = "model.norm.weight", .dtype = "F32", .ndim = 2, .shape = {2, 3}, .data = x},
                          {.name = "half", .dtype = "BF16", .ndim = 1, .shape = {4}, .data = h}};
    PtError e;
    assert_int_equal(st_write(path, w, 2, &e), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(st_inspect(path, out, &e), 0);
    fclose(out);
    assert_non_null(strstr(text, "model.norm.weight"));
    assert_non_null(strstr(text, "[2, 3]"));
    assert_non_null(strstr(text, "total: 2 tensors, 10 elements, 32 bytes"));
    assert_non_null(strstr(text, "BF16: 1 tensors, 8 bytes"));
    free(text);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_f32),
        cmocka_unit_test(test_bf16_values),
        cmocka_unit_test(test_f16_values),
        cmocka_unit_test(test_round_to_nearest_even),
        cmocka_unit_test(test_header_layout),
        cmocka_unit_test(test_handmade_file),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_non_float_dtype),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_inspect),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
