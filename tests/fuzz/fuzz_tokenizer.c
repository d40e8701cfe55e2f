// libFuzzer target: tokenizer.json, as every command reads it
// (tokenizer_load: the JSON walk, normalizers, pre-tokenizers, the BPE
// vocab and merges, added tokens), then, when it loads, the encode and decode
// of a few fixed texts (ASCII, Chinese, emoji, special tokens, whitespace
// runs, digits) and of ids it may not have; and the exporters' readers of
// the same bytes (the MNN .mtok builder and the GGUF tokenizer keys), which
// `pocket export` runs on a checkpoint's stored tokenizer.json whether or not
// it ever loaded. Errors are fine; a crash, a sanitizer report, a leak, a
// timeout or an allocation over the limit is a bug.
#include <jansson.h>
#include <string.h>
#include "../../data/tokenizer.h"
#include "../../export/mnn_tokenizer.h"
#include "../../formats/gguf_tokenizer.h"
#include "fuzz_util.h"

static const char *const TEXTS[] = {
    "Hello, world! It's 2024; don't panic.",
    "中文分词：你好，世界。混合 text 和 数字 12345。",
    "emoji 👩‍👩‍👧 and e\xcc\x81 combining, \t tabs\n\n\nnewlines   spaces",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><think>\n</think>",
    "",
};

static void encode_decode(const Tokenizer *tok) {
    int *ids = NULL;
    size_t cap = 0;
    for (size_t k = 0; k < sizeof TEXTS / sizeof TEXTS[0]; k++) {
        size_t n = 0;
        PtError e;
        if (tokenizer_encode(tok, TEXTS[k], strlen(TEXTS[k]), &ids, &n, &cap, &e)) continue;
        for (size_t i = 0; i < n; i++) {
            size_t len;
            tokenizer_token_bytes(tok, ids[i], &len);
        }
        free(tokenizer_decode(tok, ids, n, 0));
        free(tokenizer_decode(tok, ids, n, 1));
    }
    // Ids the vocabulary may not have: decode must take any int.
    const int odd[] = {-1, 0, 1, tokenizer_vocab_size(tok) - 1, tokenizer_vocab_size(tok), 1 << 30};
    free(tokenizer_decode(tok, odd, sizeof odd / sizeof odd[0], 0));
    free(ids);
    tokenizer_token_id(tok, "<|endoftext|>");
    tokenizer_special_prefix(tok, "<|im_end|>x", 11);
}

// The exporters' readers of the stored bytes (no tokenizer_config.json), for
// a model of 65536 embedding rows (pocket-0.3b's): the exporters take the
// vocabulary size from the model, whose embedding exists, not from the
// tokenizer (a tokenizer.json with one id of 2^24 - 1 would otherwise have the
// GGUF writer pad 16 million tokens). The
// MNN builder gets the file with an NFC normalizer replaced by none: for NFC
// it writes a table over every code point (seconds under ASan, the same for
// every input: the MNN interop tests check its encoding), and the rest of what it reads is
// the input's.
static void export_readers(const char *json, size_t len) {
    ModelBundle b = {0};
    b.cfg.vocab_size = 65536;
    b.tokenizer_json = (char *)json;
    b.tokenizer_json_len = len;
    PtError e;
    GgufWriter *w = gguf_writer_new();
    gguf_tokenizer_put(w, &b, &e);
    gguf_writer_free(w);
    json_t *root = json_loadb(json, len, 0, NULL);
    char *without_nfc = NULL;
    json_t *norm = json_object_get(root, "normalizer");
    if (json_is_string(json_object_get(norm, "type")) && !strcmp(json_string_value(json_object_get(norm, "type")), "NFC")) {
        json_object_set_new(root, "normalizer", json_null());
        without_nfc = json_dumps(root, JSON_COMPACT);
        b.tokenizer_json = without_nfc;
        b.tokenizer_json_len = strlen(without_nfc);
    }
    json_decref(root);
    uint8_t *mtok;
    size_t mtok_len;
    if (mnn_tokenizer_build(&b, &mtok, &mtok_len, &e) == 0) free(mtok);
    free(without_nfc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // NUL-terminated, as checkpoints and read_whole_file hand it over.
    char *json = malloc(size + 1);
    memcpy(json, data, size);
    json[size] = 0;
    Tokenizer *tok;
    PtError e;
    if (tokenizer_load(&tok, json, size, "fuzz/tokenizer.json", &e) == 0) {
        encode_decode(tok);
        tokenizer_free(tok);
    }
    export_readers(json, size);
    free(json);
    return 0;
}
