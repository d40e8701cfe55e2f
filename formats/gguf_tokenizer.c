// gguf_tokenizer.c: tokenizer.json <-> tokenizer.ggml.* keys; see
// gguf_tokenizer.h.
#include "gguf_tokenizer.h"
#include <jansson.h>
#include <string.h>
#include "../data/tokenizer.h"

// The pre-tokenizers of llama.cpp's byte-level BPE models as tokenizer.json
// spells them (what the models' own tokenizer.json files hold); the first
// name of each family is the one export writes.
static const char QWEN2_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char DEEPSEEK3_SPLIT[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+"
    "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char *names[20];
    int nfc;
    const char *splits[4];   // Split(Regex, Isolated) steps before ByteLevel
    int digits;              // a Digits(individual_digits) step first
    int use_regex;           // ByteLevel(use_regex): GPT-2's split
} PreFamily;

static const PreFamily FAMILIES[] = {
    {{"gpt-2", "default", "phi-2", "mpt", "olmo", "jais", "roberta-bpe", "jina-es", "jina-de", "jina-v1-en",
      "jina-v2-es", "jina-v2-de", "jina-v2-code", "gigachat", "exaone4", "trillion", "mellum", "a.x-4.0"},
     0, {NULL}, 0, 1},
    {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}, 0, {NULL}, 1, 1},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "grok-2"}, 1, {QWEN2_SPLIT}, 0, 0},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx", "smaug-bpe",
      "glm4", "chatglm-bpe"},
     0, {LLAMA3_SPLIT}, 0, 0},
    {{"deepseek-v3", "hunyuan-dense"},
     0, {"\\p{N}{1,3}", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+", DEEPSEEK3_SPLIT},
     0, 0},
};
enum { N_FAMILIES = sizeof FAMILIES / sizeof FAMILIES[0] };

static json_t *byte_level(int add_prefix_space, int trim_offsets, int use_regex) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", add_prefix_space,
                     "trim_offsets", trim_offsets, "use_regex", use_regex);
}

static json_t *family_pre_tokenizer(const PreFamily *f) {
    json_t *steps = json_array();
    if (f->digits) json_array_append_new(steps, json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", 1));
    for (int i = 0; i < 4 && f->splits[i]; i++)
        json_array_append_new(steps, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
                                               f->splits[i], "behavior", "Isolated", "invert", 0));
    json_array_append_new(steps, byte_level(0, !f->use_regex ? 0 : 1, f->use_regex));
    return json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", steps);
}

// What a pre_tokenizer does, as comparable text: the steps (nested
// sequences flattened) with the fields that change the split.
static void signature_steps(json_t *p, json_t *out) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        for (size_t i = 0; i < json_array_size(list); i++) signature_steps(json_array_get(list, i), out);
        return;
    }
    json_t *step = json_pack("{s:s}", "type", type);
    if (!strcmp(type, "ByteLevel")) {
        json_object_set_new(step, "prefix", json_boolean(json_is_true(json_object_get(p, "add_prefix_space"))));
        json_object_set_new(step, "regex", json_boolean(!json_is_false(json_object_get(p, "use_regex"))));
    } else if (!strcmp(type, "Split")) {
        json_object_set(step, "pattern", json_object_get(p, "pattern"));
        json_object_set(step, "behavior", json_object_get(p, "behavior"));
        json_object_set_new(step, "invert", json_boolean(json_is_true(json_object_get(p, "invert"))));
    } else if (!strcmp(type, "Digits")) {
        json_object_set_new(step, "individual", json_boolean(json_is_true(json_object_get(p, "individual_digits"))));
    } else {
        json_object_set_new(step, "other", json_deep_copy(p));
    }
    json_array_append_new(out, step);
}

static char *signature(json_t *p) {
    json_t *steps = json_array();
    signature_steps(p, steps);
    char *s = json_dumps(steps, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(steps);
    return s;
}

static const char SRC[] = "tokenizer.json (stored in the checkpoint)";

static const char *type_of(json_t *obj) {
    const char *t = json_string_value(json_object_get(obj, "type"));
    return t ? t : "(none)";
}

// The pre-tokenizer and normalizer pair as llama.cpp's pre-tokenizer name.
static int pre_name(json_t *root, const char **pre, PtError *e) {
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm) && strcmp(type_of(norm), "Sequence") == 0 &&
        json_array_size(json_object_get(norm, "normalizers")) == 1)
        norm = json_array_get(json_object_get(norm, "normalizers"), 0);
    int nfc = norm && !json_is_null(norm) && strcmp(type_of(norm), "NFC") == 0;
    if (norm && !json_is_null(norm) && !nfc)
        return pt_fail(e, "%s: normalizer \"%s\" has no llama.cpp equivalent (NFC or none)", SRC, type_of(norm));
    char *have = signature(json_object_get(root, "pre_tokenizer"));
    int found = -1;
    for (int k = 0; k < N_FAMILIES && found < 0; k++) {
        json_t *p = family_pre_tokenizer(&FAMILIES[k]);
        char *want = signature(p);
        if (have && want && !strcmp(have, want)) found = k;
        free(want);
        json_decref(p);
    }
    free(have);
    if (found < 0)
        return pt_fail(e, "%s: this pre_tokenizer has no llama.cpp equivalent (supported: GPT-2's ByteLevel split, "
                          "Digits + ByteLevel (smollm), the Qwen2, Llama 3 and DeepSeek-V3 splits + ByteLevel)", SRC);
    if (FAMILIES[found].nfc != nfc)
        return pt_fail(e, "%s: the %s split %s the NFC normalizer has no llama.cpp equivalent", SRC,
                       FAMILIES[found].names[0], nfc ? "with" : "without");
    *pre = FAMILIES[found].names[0];
    return 0;
}

// "<|im_end|>" or {"content": "<|im_end|>"} in tokenizer_config.json.
static const char *special_content(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static int find_token(char **tokens, const size_t *lens, int n, const char *s) {
    if (!s) return -1;
    size_t len = strlen(s);
    for (int i = 0; i < n; i++)
        if (tokens[i] && lens[i] == len && memcmp(tokens[i], s, len) == 0) return i;
    return -1;
}

// Tokens, types and merges of a parsed tokenizer.json, as llama.cpp lists them.
typedef struct {
    int n;                  // the model's vocab_size
    char **tok;             // n strings (malloc'd copies)
    size_t *len;
    int32_t *type;
    char **merge;           // "a b"
    size_t n_merges;
} Vocab;

static void vocab_free(Vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
    free(v->tok), free(v->len), free(v->type), free(v->merge);
}

static int set_token(Vocab *v, int64_t id, const char *s, size_t len, int32_t type, const char *what, PtError *e) {
    if (id < 0 || id >= v->n)
        return pt_fail(e, "%s: %s \"%s\" has id %lld, outside the model's vocab_size %d", SRC, what, s, (long long)id, v->n);
    if (v->tok[id] && (v->len[id] != len || memcmp(v->tok[id], s, len) != 0))
        return pt_fail(e, "%s: id %lld is both \"%s\" and \"%s\"", SRC, (long long)id, v->tok[id], s);
    if (!v->tok[id]) {
        v->tok[id] = xmalloc(len + 1, "token");
        memcpy(v->tok[id], s, len + 1);
        v->len[id] = len;
    }
    v->type[id] = type;
    return 0;
}

static int collect_vocab(json_t *root, int vocab_size, Vocab *v, PtError *e) {
    memset(v, 0, sizeof *v);
    v->n = vocab_size;
    v->tok = xcalloc((size_t)vocab_size, sizeof *v->tok, "tokens");
    v->len = xcalloc((size_t)vocab_size, sizeof *v->len, "token lengths");
    v->type = xcalloc((size_t)vocab_size, sizeof *v->type, "token types");
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"), *added = json_object_get(root, "added_tokens");
    if (strcmp(type_of(model), "BPE") != 0 || !json_is_object(vocab))
        return pt_fail(e, "%s: model is not a byte-level BPE with a vocab (type \"%s\")", SRC, type_of(model));
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val)) return pt_fail(e, "%s: model.vocab[\"%s\"] is not an id", SRC, key);
        if (set_token(v, json_integer_value(val), key, strlen(key), GGUF_TOKEN_NORMAL, "model.vocab token", e))
            return -1;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        const char *content = json_string_value(json_object_get(a, "content"));
        json_t *jid = json_object_get(a, "id");
        if (!content || !json_is_integer(jid)) return pt_fail(e, "%s: added_tokens[%zu] lacks content or id", SRC, i);
        // As HF: content the vocab already has keeps the vocab's id.
        json_t *in_vocab = json_object_get(vocab, content);
        int64_t id = json_is_integer(in_vocab) ? json_integer_value(in_vocab) : json_integer_value(jid);
        int32_t type = json_is_true(json_object_get(a, "special")) ? GGUF_TOKEN_CONTROL : GGUF_TOKEN_USER_DEFINED;
        if (set_token(v, id, content, strlen(content), type, "added token", e)) return -1;
    }
    for (int i = 0; i < vocab_size; i++)
        if (!v->tok[i]) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%d]", i);
            set_token(v, i, pad, strlen(pad), GGUF_TOKEN_UNUSED, "padding token", e);
        }
    v->merge = xcalloc(json_array_size(merges) + 1, sizeof *v->merge, "merges");
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *space = strchr(s, ' ');
            if (strncmp(s, "#version", 8) == 0) continue;
            if (!space) return pt_fail(e, "%s: model.merges[%zu] \"%s\" has no space", SRC, i, s);
            a = s, al = (size_t)(space - s), b = space + 1, bl = strlen(b);
        } else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), bl = json_string_length(json_array_get(m, 1));
        } else {
            return pt_fail(e, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", SRC, i);
        }
        // llama.cpp splits "a b" at the first space after the first byte.
        if (al == 0 || memchr(a + 1, ' ', al - 1))
            return pt_fail(e, "%s: model.merges[%zu]: left part \"%.*s\" holds a space; llama.cpp would split it "
                              "elsewhere", SRC, i, (int)al, a);
        char *joined = xmalloc(al + bl + 2, "merge");
        memcpy(joined, a, al);
        joined[al] = ' ';
        memcpy(joined + al + 1, b, bl);
        joined[al + bl + 1] = 0;
        v->merge[v->n_merges++] = joined;
    }
    if (v->n_merges == 0) return pt_fail(e, "%s: the BPE model has no merges (llama.cpp requires them)", SRC);
    return 0;
}

int gguf_tokenizer_put(GgufWriter *w, const ModelBundle *b, PtError *e) {
    if (!b->tokenizer_json) {
        gguf_kv_str(w, "tokenizer.ggml.model", "none");
        return 0;
    }
    json_error_t je;
    json_t *root = json_loadb(b->tokenizer_json, b->tokenizer_json_len, 0, &je), *cfg = NULL;
    if (!root) return pt_fail(e, "%s:%d:%d: invalid JSON: %s", SRC, je.line, je.column, je.text);
    if (b->tokenizer_config_json) {
        cfg = json_loadb(b->tokenizer_config_json, b->tokenizer_config_json_len, 0, &je);
        if (!cfg) {
            json_decref(root);
            return pt_fail(e, "tokenizer_config.json (stored in the checkpoint):%d:%d: invalid JSON: %s", je.line,
                           je.column, je.text);
        }
    }
    const char *pre = NULL;
    Vocab v;
    int rc = pre_name(root, &pre, e);
    if (rc == 0) rc = collect_vocab(root, b->cfg.vocab_size, &v, e);
    else memset(&v, 0, sizeof v);
    if (rc == 0) {
        gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_kv_str(w, "tokenizer.ggml.pre", pre);
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.len, (uint64_t)v.n);
        gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", v.type, (uint64_t)v.n);
        gguf_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merge, NULL, v.n_merges);
        // tokenizer_config.json names the special tokens; config.json's ids fill the gaps.
        int eos = find_token(v.tok, v.len, v.n, special_content(cfg, "eos_token"));
        int pad = find_token(v.tok, v.len, v.n, special_content(cfg, "pad_token"));
        int bos = find_token(v.tok, v.len, v.n, special_content(cfg, "bos_token"));
        if (eos < 0) eos = b->cfg.eos_id;
        if (pad < 0) pad = b->cfg.pad_id;
        if (bos < 0) bos = b->cfg.bos_id;
        if (bos >= 0) gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        if (eos >= 0) gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        if (pad >= 0) gguf_kv_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
        gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", json_is_true(json_object_get(cfg, "add_bos_token")));
        if (json_is_boolean(json_object_get(cfg, "add_eos_token")))
            gguf_kv_bool(w, "tokenizer.ggml.add_eos_token", json_is_true(json_object_get(cfg, "add_eos_token")));
        const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
        if (tmpl && *tmpl) gguf_kv_str(w, "tokenizer.chat_template", tmpl);
    }
    vocab_free(&v);
    json_decref(root);
    json_decref(cfg);
    return rc;
}

// ---- import: tokenizer.json from the keys --------------------------------------------

// A token's text as a JSON string; GGUF strings need not be UTF-8, JSON's must.
static json_t *token_string(const GgufFile *f, const char *s, size_t len, uint64_t id, PtError *e) {
    json_t *j = json_stringn(s, len);
    if (!j) pt_fail(e, "%s: tokenizer.ggml.tokens[%llu] is not valid UTF-8", f->path, (unsigned long long)id);
    return j;
}

static int get_array(const GgufFile *f, const char *key, int string, const GgufKV **out, PtError *e) {
    const GgufKV *kv = gguf_find_kv(f, key);
    *out = kv;
    if (!kv) return 0;
    int ok = kv->type == GGUF_TYPE_ARRAY &&
             (string ? kv->arr_type == GGUF_TYPE_STRING
                     : kv->arr_type != GGUF_TYPE_STRING && kv->arr_type != GGUF_TYPE_FLOAT32 &&
                           kv->arr_type != GGUF_TYPE_FLOAT64 && kv->arr_type != GGUF_TYPE_BOOL);
    if (!ok)
        return pt_fail(e, "%s: offset %llu: %s has type %s%s%s, expected an array of %s", f->path,
                       (unsigned long long)kv->at, key, gguf_value_type_name(kv->type),
                       kv->type == GGUF_TYPE_ARRAY ? " of " : "",
                       kv->type == GGUF_TYPE_ARRAY ? gguf_value_type_name(kv->arr_type) : "",
                       string ? "STRING" : "INT32");
    return 0;
}

static json_t *special_token(const GgufFile *f, const GgufKV *tokens, const char *key, PtError *e, int *bad) {
    int64_t id;
    int found = gguf_get_int(f, key, &id, e);
    if (found < 0) return *bad = 1, NULL;
    if (!found) return json_null();
    if (id < 0 || (uint64_t)id >= tokens->arr_n) {
        *bad = 1;
        pt_fail(e, "%s: %s = %lld is outside the %llu tokens", f->path, key, (long long)id,
                (unsigned long long)tokens->arr_n);
        return NULL;
    }
    const char *s;
    size_t len;
    gguf_arr_str(tokens, (uint64_t)id, &s, &len);
    json_t *j = token_string(f, s, len, (uint64_t)id, e);
    if (!j) *bad = 1;
    return j;
}

static int build_config(const GgufFile *f, const GgufKV *tokens, char **out, size_t *out_len, PtError *e) {
    int bad = 0, add_bos = 0, add_eos = 0;
    json_t *cfg = json_object();
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, e) < 0) bad = 1;
    json_object_set_new(cfg, "add_bos_token", json_boolean(add_bos));
    int has_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &add_eos, e);
    if (has_eos < 0) bad = 1;
    if (has_eos > 0) json_object_set_new(cfg, "add_eos_token", json_boolean(add_eos));
    static const char *const KEYS[3][2] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                           {"eos_token", "tokenizer.ggml.eos_token_id"},
                                           {"pad_token", "tokenizer.ggml.padding_token_id"}};
    for (int k = 0; k < 3 && !bad; k++) {
        json_t *t = special_token(f, tokens, KEYS[k][1], e, &bad);
        if (t) json_object_set_new(cfg, KEYS[k][0], t);
    }
    const char *tmpl;
    size_t tlen;
    int has_tmpl = bad ? 0 : gguf_get_str(f, "tokenizer.chat_template", &tmpl, &tlen, e);
    if (has_tmpl < 0) bad = 1;
    if (has_tmpl > 0) {
        json_t *t = json_stringn(tmpl, tlen);
        if (!t) bad = 1, pt_fail(e, "%s: tokenizer.chat_template is not valid UTF-8", f->path);
        else json_object_set_new(cfg, "chat_template", t);
    }
    if (!bad) {
        *out = json_dumps(cfg, JSON_INDENT(2));
        *out_len = strlen(*out);
    }
    json_decref(cfg);
    return bad ? -1 : 0;
}

static json_t *build_model(const GgufFile *f, const GgufKV *tokens, const GgufKV *types, const GgufKV *merges,
                           json_t *added, PtError *e) {
    json_t *vocab = json_object(), *merge_list = json_array();
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0,
                              "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merge_list);
    for (uint64_t id = 0; id < tokens->arr_n; id++) {
        int64_t type = types ? gguf_arr_int(types, id) : GGUF_TOKEN_NORMAL;
        if (type == GGUF_TOKEN_UNUSED) continue;
        const char *s;
        size_t len;
        gguf_arr_str(tokens, id, &s, &len);
        json_t *text = token_string(f, s, len, id, e);
        if (!text) goto fail;
        if (type == GGUF_TOKEN_CONTROL || type == GGUF_TOKEN_USER_DEFINED) {
            // Kept in the vocabulary too, as HF's files of these models hold
            // them: the ids stay 0..n-1 without gaps (the MNN tokenizer needs that).
            json_array_append_new(added, json_pack("{s:I, s:O, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)id,
                                                   "content", text, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                   "normalized", 0, "special", type == GGUF_TOKEN_CONTROL));
        } else if (type != GGUF_TOKEN_NORMAL && type != GGUF_TOKEN_BYTE && type != GGUF_TOKEN_UNKNOWN) {
            json_decref(text);
            pt_fail(e, "%s: tokenizer.ggml.token_type[%llu] = %lld is not a known token type", f->path,
                    (unsigned long long)id, (long long)type);
            goto fail;
        }
        const char *key = json_string_value(text);
        if (strlen(key) != len || json_object_get(vocab, key)) {
            pt_fail(e, "%s: tokenizer.ggml.tokens[%llu] \"%s\" is %s", f->path, (unsigned long long)id, key,
                    strlen(key) != len ? "a string with a NUL byte" : "listed twice");
            json_decref(text);
            goto fail;
        }
        json_object_set_new(vocab, key, json_integer((json_int_t)id));
        json_decref(text);
    }
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        const char *s;
        size_t len;
        gguf_arr_str(merges, i, &s, &len);
        // Split as llama.cpp does: at the first space after the first byte.
        const char *space = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!space) {
            pt_fail(e, "%s: tokenizer.ggml.merges[%llu] \"%.*s\" is not two tokens separated by a space", f->path,
                    (unsigned long long)i, (int)(len > 80 ? 80 : len), s);
            goto fail;
        }
        json_t *a = json_stringn(s, (size_t)(space - s)), *b = json_stringn(space + 1, len - (size_t)(space - s) - 1);
        if (!a || !b) {
            json_decref(a), json_decref(b);
            pt_fail(e, "%s: tokenizer.ggml.merges[%llu] is not valid UTF-8", f->path, (unsigned long long)i);
            goto fail;
        }
        json_array_append_new(merge_list, json_pack("[o, o]", a, b));
    }
    return model;
fail:
    json_decref(model);
    return NULL;
}

int gguf_tokenizer_rebuild(const GgufFile *f, int vocab_size, char **json, size_t *json_len, char **config,
                           size_t *config_len, PtError *e) {
    *json = *config = NULL;
    *json_len = *config_len = 0;
    const char *model_name = "none", *pre = "default";
    size_t n;
    int has = gguf_get_str(f, "tokenizer.ggml.model", &model_name, &n, e);
    if (has < 0) return -1;
    if (!has || (n == 4 && memcmp(model_name, "none", 4) == 0) || (n == 8 && memcmp(model_name, "no_vocab", 8) == 0))
        return 0;
    if (n != 4 || memcmp(model_name, "gpt2", 4) != 0)
        return pt_fail(e, "%s: tokenizer.ggml.model \"%.*s\" is not supported (only gpt2, byte-level BPE)", f->path,
                       (int)(n > 40 ? 40 : n), model_name);
    size_t pre_len = 7;
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, &pre_len, e) < 0) return -1;
    const PreFamily *family = NULL;
    for (int k = 0; k < N_FAMILIES && !family; k++)
        for (int i = 0; FAMILIES[k].names[i] && !family; i++)
            if (strlen(FAMILIES[k].names[i]) == pre_len && !memcmp(FAMILIES[k].names[i], pre, pre_len))
                family = &FAMILIES[k];
    if (!family)
        return pt_fail(e, "%s: tokenizer.ggml.pre \"%.*s\" is not supported (the byte-level BPE splits of gpt-2, "
                          "smollm/starcoder, qwen2, llama-bpe and deepseek-v3, and the names llama.cpp gives them)",
                       f->path, (int)(pre_len > 40 ? 40 : pre_len), pre);
    const GgufKV *tokens, *types, *merges;
    if (get_array(f, "tokenizer.ggml.tokens", 1, &tokens, e) || get_array(f, "tokenizer.ggml.token_type", 0, &types, e) ||
        get_array(f, "tokenizer.ggml.merges", 1, &merges, e))
        return -1;
    if (!tokens || !merges)
        return pt_fail(e, "%s: a gpt2 tokenizer needs tokenizer.ggml.tokens and tokenizer.ggml.merges", f->path);
    if (tokens->arr_n > (uint64_t)vocab_size)
        return pt_fail(e, "%s: tokenizer.ggml.tokens has %llu entries, more than the model's vocab_size %d", f->path,
                       (unsigned long long)tokens->arr_n, vocab_size);
    if (types && types->arr_n != tokens->arr_n)
        return pt_fail(e, "%s: tokenizer.ggml.token_type has %llu entries, tokenizer.ggml.tokens %llu", f->path,
                       (unsigned long long)types->arr_n, (unsigned long long)tokens->arr_n);
    json_t *added = json_array();
    json_t *model = build_model(f, tokens, types, merges, added, e);
    if (!model) {
        json_decref(added);
        return -1;
    }
    json_t *root = json_pack("{s:s, s:n, s:n, s:o}", "version", "1.0", "truncation", "padding", "added_tokens", added);
    json_object_set_new(root, "normalizer", family->nfc ? json_pack("{s:s}", "type", "NFC") : json_null());
    json_object_set_new(root, "pre_tokenizer", family_pre_tokenizer(family));
    json_object_set_new(root, "post_processor", byte_level(0, 0, 0));
    json_object_set_new(root, "decoder", byte_level(1, 1, 1));
    json_object_set_new(root, "model", model);
    *json = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!*json) return pt_fail(e, "%s: could not serialize the rebuilt tokenizer.json", f->path);
    *json_len = strlen(*json);
    if (build_config(f, tokens, config, config_len, e)) {
        free(*json);
        *json = NULL;
        return -1;
    }
    return 0;
}
