// Bad GGUF input: every damaged file gives one error naming the file and the
// byte offset or key at fault, never a crash or a huge allocation (run under
// ASan with SAN=1). Files are built byte by byte here, so each case holds
// exactly one defect. Also: every truncation of a valid file, files that parse
// but do not describe a model we can import, and the CLI's behaviour (one
// line on stderr, non-zero exit, no output file).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../formats/gguf_writer.h"
#include "../formats/gguf_import.h"
#include "../formats/gguf_names.h"

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

static void raw(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void u32(Buf *b, uint32_t v) { raw(b, &v, 4); }
static void u64(Buf *b, uint64_t v) { raw(b, &v, 8); }
static void str(Buf *b, const char *s) {
    u64(b, strlen(s));
    raw(b, s, strlen(s));
}
static void header(Buf *b, uint64_t n_tensors, uint64_t n_kv) {
    raw(b, "GGUF", 4);
    u32(b, 3);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_u32(Buf *b, const char *key, uint32_t v) {
    str(b, key);
    u32(b, GGUF_TYPE_UINT32);
    u32(b, v);
}
// A 1-D tensor info: name, n_dims 1, ne[0], type, offset.
static void tinfo(Buf *b, const char *name, uint64_t ne0, uint32_t type, uint64_t offset) {
    str(b, name);
    u32(b, 1);
    u64(b, ne0);
    u32(b, type);
    u64(b, offset);
}
static void pad_data(Buf *b, size_t data_bytes) {
    while (b->len % 32) raw(b, "", 1);
    for (size_t i = 0; i < data_bytes; i++) raw(b, "\x11", 1);
}

// gguf_parse must fail, naming the file and saying `must_say`.
static void expect_fail(Buf *b, const char *must_say) {
    GgufFile f;
    PtError e;
    int rc = gguf_parse(&f, b->p ? b->p : (const uint8_t *)"", b->len, "bad.gguf", &e);
    if (rc == 0) {
        gguf_close(&f);
        fail_msg("parsed, expected an error saying \"%s\"", must_say);
    }
    if (strncmp(e.msg, "bad.gguf: ", 10) != 0) fail_msg("message does not start with the file: %s", e.msg);
    if (!strstr(e.msg, must_say)) fail_msg("message lacks \"%s\": %s", must_say, e.msg);
    if (strchr(e.msg, '\n')) fail_msg("message is not one line: %s", e.msg);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void test_header_errors(void **s) {
    (void)s;
    Buf b = {0};
    expect_fail(&b, "truncated");                        // empty file
    raw(&b, "GGUX", 4), u32(&b, 3), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "offset 0: bad magic");
    raw(&b, "GGUF", 4), u32(&b, 1), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "version 1");
    raw(&b, "GGUF", 4), u32(&b, 0x03000000), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "big-endian");
    raw(&b, "GGUF", 4), u32(&b, 3), u32(&b, 0);
    expect_fail(&b, "truncated");
    header(&b, 0, 1ull << 60);
    expect_fail(&b, "metadata count");
    header(&b, 1ull << 62, 0);
    expect_fail(&b, "tensor count");
}

static void test_metadata_errors(void **s) {
    (void)s;
    Buf b = {0};
    // A string length past the end of the file.
    header(&b, 0, 1), u64(&b, 1000), raw(&b, "abcdefghijklmnopqrstuvwxyz", 26);
    expect_fail(&b, "offset 24: metadata key has length 1000, past the end");
    header(&b, 0, 1), str(&b, "k"), u32(&b, GGUF_TYPE_STRING), u64(&b, 1ull << 40), raw(&b, "xy", 2);
    expect_fail(&b, "metadata key \"k\" has length 1099511627776");
    // An array claiming 2^62 elements: refused before any allocation.
    header(&b, 0, 1), str(&b, "tokenizer.ggml.tokens"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, GGUF_TYPE_STRING),
        u64(&b, 1ull << 62);
    expect_fail(&b, "\"tokenizer.ggml.tokens\" claims 4611686018427387904 STRING elements");
    header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, GGUF_TYPE_UINT8), u64(&b, 100), raw(&b, "12", 2);
    expect_fail(&b, "claims 100 UINT8 elements");
    // One string element of an array running past the end.
    header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, GGUF_TYPE_STRING), u64(&b, 2), str(&b, "x"),
        u64(&b, 99);
    expect_fail(&b, "\"a\" element 1 has length 99");
    header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, GGUF_TYPE_ARRAY), u64(&b, 0);
    expect_fail(&b, "array of arrays");
    header(&b, 0, 1), str(&b, "a"), u32(&b, 13), u32(&b, 0);
    expect_fail(&b, "offset 33: metadata key \"a\" has unknown value type 13");
    header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, 77), u64(&b, 0);
    expect_fail(&b, "unknown type 77");
    header(&b, 0, 1), str(&b, ""), u32(&b, GGUF_TYPE_UINT32), u32(&b, 1);
    expect_fail(&b, "metadata key is empty");
    header(&b, 0, 1), u64(&b, 3), raw(&b, "a\0b", 3), u32(&b, GGUF_TYPE_UINT32), u32(&b, 1);
    expect_fail(&b, "NUL");
    header(&b, 0, 2), kv_u32(&b, "x.y", 1), kv_u32(&b, "x.y", 2);
    expect_fail(&b, "metadata key \"x.y\" appears twice");
    header(&b, 0, 1), kv_u32(&b, "general.alignment", 48);
    expect_fail(&b, "general.alignment = 48 is not a power of two");
    header(&b, 0, 1), str(&b, "general.alignment"), u32(&b, GGUF_TYPE_UINT64), u64(&b, 32);
    expect_fail(&b, "general.alignment has type UINT64, expected UINT32");
    header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_TYPE_UINT64), u32(&b, 1);   // 4 of 8 bytes
    expect_fail(&b, "truncated");
}

static void test_tensor_info_errors(void **s) {
    (void)s;
    Buf b = {0};
    header(&b, 1, 0), tinfo(&b, "w", 32, 99, 0), pad_data(&b, 128);
    expect_fail(&b, "offset 45: tensor \"w\" has unknown ggml type 99");
    // Data past the end of the file: 32 F32 values need 128 bytes, 64 are there.
    header(&b, 1, 0), tinfo(&b, "w", 32, GGML_TYPE_F32, 0), pad_data(&b, 64);
    expect_fail(&b, "tensor \"w\" data [0, +128) runs past the end of the file");
    header(&b, 2, 0), tinfo(&b, "a", 8, GGML_TYPE_F32, 0), tinfo(&b, "b", 8, GGML_TYPE_F32, 1ull << 62),
        pad_data(&b, 64);
    expect_fail(&b, "tensor \"b\" data [4611686018427387904, +32) runs past the end");
    header(&b, 1, 0), tinfo(&b, "w", 8, GGML_TYPE_F32, 16), pad_data(&b, 64);
    expect_fail(&b, "offset 16 is not a multiple of the alignment 32");
    header(&b, 1, 0), tinfo(&b, "w", 48, GGML_TYPE_Q8_0, 0), pad_data(&b, 64);
    expect_fail(&b, "ne[0] = 48 is not a multiple of Q8_0's block size 32");
    header(&b, 1, 0), str(&b, "w"), u32(&b, 5), u64(&b, 0), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, "has 5 dimensions");
    header(&b, 1, 0), str(&b, "w"), u32(&b, 3), u64(&b, 1ull << 40), u64(&b, 1ull << 40), u64(&b, 1ull << 40);
    expect_fail(&b, "overflows");
    char long_name[80];
    memset(long_name, 'n', 64);
    long_name[64] = 0;
    header(&b, 1, 0), tinfo(&b, long_name, 8, GGML_TYPE_F32, 0), pad_data(&b, 32);
    expect_fail(&b, "ggml allows at most 63");
    header(&b, 2, 0), tinfo(&b, "w", 8, GGML_TYPE_F32, 0), tinfo(&b, "w", 8, GGML_TYPE_F32, 32), pad_data(&b, 64);
    expect_fail(&b, "tensor \"w\" appears twice");
    header(&b, 1, 0), tinfo(&b, "w", 8, GGML_TYPE_F32, 0);   // no data section at all
    expect_fail(&b, "truncated");
}

// Every prefix of a valid file that cuts into its header or tensor data fails cleanly.
static void test_every_truncation(void **s) {
    (void)s;
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file("tests/fixtures/gguf/quant_ref.gguf", &data, &len, &e)) fail_msg("%s", e.msg);
    GgufFile f;
    assert_int_equal(gguf_parse(&f, data, len, "whole.gguf", &e), 0);
    uint64_t end = 0;
    for (int64_t i = 0; i < f.n_tensors; i++)
        if (f.data_offset + f.t[i].offset + f.t[i].nbytes > end) end = f.data_offset + f.t[i].offset + f.t[i].nbytes;
    gguf_close(&f);
    for (size_t n = 0; n < end; n++) {
        // A fresh allocation of exactly n bytes, so ASan sees any read past the end.
        uint8_t *cut = xmalloc(n, "prefix");
        memcpy(cut, data, n);
        if (gguf_parse(&f, cut, n, "cut.gguf", &e) == 0) fail_msg("a %zu-byte prefix of %zu parsed", n, len);
        if (strncmp(e.msg, "cut.gguf: offset ", 17) != 0) fail_msg("prefix %zu: %s", n, e.msg);
        free(cut);
    }
    free(data);
}

// ---- files that parse but are not a model we import ------------------------------------

typedef enum { OK, NO_EPS, HEADS_AS_STRING, ARCH_GPT2, MISSING_TENSOR, WRONG_SHAPE, EXTRA_TENSOR, QK_TYPE,
               BAD_MERGE, TOKEN_ID_RANGE } Defect;

// The tiny preset written key by key, with one defect.
static void write_model(const char *path, Defect d) {
    ModelConfig c;
    PtError e;
    assert_int_equal(config_preset(&c, "tiny", &e), 0);
    ModelBundle b;
    bundle_alloc(&b, &c);
    bundle_init_random(&b, 1);
    GgufWriter *w = gguf_writer_new();
    gguf_kv_str(w, "general.architecture", d == ARCH_GPT2 ? "gpt2" : "qwen3");
    gguf_kv_u32(w, "qwen3.block_count", 2);
    gguf_kv_u32(w, "qwen3.embedding_length", 64);
    gguf_kv_u32(w, "qwen3.feed_forward_length", 160);
    if (d == HEADS_AS_STRING) gguf_kv_str(w, "qwen3.attention.head_count", "4");
    else gguf_kv_u32(w, "qwen3.attention.head_count", 4);
    gguf_kv_u32(w, "qwen3.attention.head_count_kv", 2);
    gguf_kv_u32(w, "qwen3.attention.key_length", 16);
    if (d != NO_EPS) gguf_kv_f32(w, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_kv_u32(w, "qwen3.vocab_size", 512);
    if (d == BAD_MERGE || d == TOKEN_ID_RANGE) {
        const char *tokens[3] = {"a", "b", "ab"}, *merges[1] = {"ab"};
        gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_kv_str(w, "tokenizer.ggml.pre", "qwen2");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, 3);
        if (d == BAD_MERGE) gguf_kv_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 1);
        else gguf_kv_arr_str(w, "tokenizer.ggml.merges", (const char *[]){"a b"}, NULL, 1);
        if (d == TOKEN_ID_RANGE) gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", 7);
    }
    for (int i = 0; i < b.tt.n; i++) {
        const TensorInfo *ti = &b.tt.t[i];
        char name[GGUF_MAX_NAME];
        gguf_tensor_name(ti, name);
        if (d == MISSING_TENSOR && ti->kind == T_KNORM && ti->layer == 1) continue;
        int64_t ne[2] = {ti->ndim == 2 ? ti->shape[1] : ti->shape[0], ti->shape[0]};
        if (d == WRONG_SHAPE && ti->kind == T_WUP && ti->layer == 0) ne[1] -= 32;
        if (d == QK_TYPE && ti->kind == T_WQ) {   // Q5_0 (type 6): a block type import does not convert
            assert_int_equal(gguf_add_tensor_bytes(w, name, 2, ne, 6, b.params + ti->offset, ti->numel / 32 * 22, &e), 0);
            continue;
        }
        assert_int_equal(gguf_add_tensor(w, name, ti->ndim, ne, GGML_TYPE_F32, b.params + ti->offset, &e), 0);
    }
    if (d == EXTRA_TENSOR) assert_int_equal(gguf_add_tensor(w, "rope_freqs.weight", 1, (int64_t[]){8}, 0, b.params, &e), 0);
    if (gguf_writer_save(w, path, &e)) fail_msg("%s", e.msg);
    gguf_writer_free(w);
    bundle_free(&b);
}

static void test_import_errors(void **s) {
    (void)s;
    static const struct { Defect d; const char *must_say; } CASES[] = {
        {NO_EPS, "qwen3.attention.layer_norm_rms_epsilon is missing"},
        {HEADS_AS_STRING, "\"qwen3.attention.head_count\" has type STRING, expected an integer"},
        {ARCH_GPT2, "general.architecture \"gpt2\" is not supported"},
        {MISSING_TENSOR, "tensor \"blk.1.attn_k_norm.weight\" (model.layers.1.self_attn.k_norm.weight) is missing"},
        {WRONG_SHAPE, "tensor \"blk.0.ffn_up.weight\" has ne [64, 128, 1, 1], the metadata implies [64, 160]"},
        {EXTRA_TENSOR, "unexpected tensor \"rope_freqs.weight\""},
        {QK_TYPE, "tensor \"blk.0.attn_q.weight\" has type Q5_0; import supports"},
        {BAD_MERGE, "tokenizer.ggml.merges[0] \"ab\" is not two tokens"},
        {TOKEN_ID_RANGE, "tokenizer.ggml.eos_token_id = 7 is outside the 3 tokens"},
    };
    char path[64];
    snprintf(path, sizeof path, "/tmp/pt-gguf-err-%ld.gguf", (long)getpid());
    ModelBundle b;
    PtError e;
    write_model(path, OK);
    if (gguf_import(path, &b, &e)) fail_msg("the defect-free file: %s", e.msg);
    bundle_free(&b);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        write_model(path, CASES[k].d);
        if (gguf_import(path, &b, &e) == 0) fail_msg("case %zu imported", k);
        if (!strstr(e.msg, path) || !strstr(e.msg, CASES[k].must_say))
            fail_msg("case %zu: message lacks the file or \"%s\": %s", k, CASES[k].must_say, e.msg);
        assert_null(b.params);
    }
    unlink(path);
}

// ---- the CLI ---------------------------------------------------------------------------

static void test_cli(void **s) {
    (void)s;
    const char *pocket = getenv("POCKET") ? getenv("POCKET") : "./pocket";
    char dir[] = "/tmp/pt-gguf-cli-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char bad[128], out[128], errf[128], cmd[1024];
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    snprintf(out, sizeof out, "%s/out.h5", dir);
    snprintf(errf, sizeof errf, "%s/err.txt", dir);
    Buf b = {0};
    header(&b, 0, 1), str(&b, "tokenizer.ggml.merges"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, GGUF_TYPE_STRING),
        u64(&b, 1ull << 61);
    FILE *f = fopen(bad, "wb");
    fwrite(b.p, 1, b.len, f);
    fclose(f);
    free(b.p);
    static const char *const RUNS[][2] = {{"import", "pocket import: "}, {"inspect", "pocket inspect: "}};
    for (int r = 0; r < 2; r++) {
        if (r == 0) snprintf(cmd, sizeof cmd, "'%s' import '%s' --out '%s' >/dev/null 2>'%s'", pocket, bad, out, errf);
        else snprintf(cmd, sizeof cmd, "'%s' inspect '%s' >/dev/null 2>'%s'", pocket, bad, errf);
        int status = system(cmd);
        assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 0);
        uint8_t *msg;
        size_t len;
        PtError e;
        assert_int_equal(read_whole_file(errf, &msg, &len, &e), 0);
        char want[256];
        snprintf(want, sizeof want, "%s%s: offset 57: metadata key \"tokenizer.ggml.merges\" claims", RUNS[r][1], bad);
        if (strncmp((char *)msg, want, strlen(want)) != 0 || strchr((char *)msg, '\n') != (char *)msg + len - 1)
            fail_msg("%s: stderr is not the one expected line: %s", RUNS[r][0], msg);
        free(msg);
    }
    assert_int_equal(access(out, F_OK), -1);
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q out.h5", dir);
    assert_true(system(cmd) != 0);   // no temporary file left either
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_metadata_errors),
        cmocka_unit_test(test_tensor_info_errors),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_import_errors),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
