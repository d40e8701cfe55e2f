// tokenizer.c: loads an HF tokenizer.json (byte-level BPE) and drives encoding
// and decoding, as HF tokenizers does (tests/test_tokenizer.c checks it token for token).
//
// Supported: model BPE (vocab, merges in "a b" or ["a","b"] form, unk_token,
// fuse_unk, ignore_merges), added_tokens (no strip/single-word flags),
// normalizers NFC/NFD/NFKC/NFKD (or a Sequence of them, or none), the
// pre-tokenizers of tokenizer_pre.c, decoder ByteLevel. Anything else is
// refused with a message rather than silently tokenized differently.
#include <jansson.h>
#include <string.h>
#include "sha256.h"
#include "tokenizer_internal.h"

enum { MAX_TOKEN_ID = 1 << 24 };

const char *tok_json_type(json_t *obj) {
    const char *type = json_string_value(json_object_get(obj, "type"));
    return type ? type : "(no type)";
}

int tok_json_flag(json_t *obj, const char *key, int dflt, int *out, const char *src, const char *where,
                    PtError *e) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) return pt_fail(e, "%s: %s.%s is not true/false", src, where, key);
    *out = json_is_true(v);
    return 0;
}

static int is_null_or_empty_string(json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

// ---- model ------------------------------------------------------------------

static int resolve(const Tokenizer *t, const char *tok, size_t len, size_t rank, const char *src, PtError *e,
                   int32_t *id) {
    *id = strmap_get(&t->vocab, tok, len);
    if (*id < 0) return pt_fail(e, "%s: model.merges[%zu]: token \"%.*s\" is not in the vocab", src, rank, (int)len, tok);
    return 0;
}

static int parse_merges(Tokenizer *t, json_t *merges, const char *src, PtError *e) {
    size_t count = json_array_size(merges);
    mergemap_init(&t->merges, count);
    t->merge_list = xcalloc(count ? count : 1, sizeof *t->merge_list, "merge list");
    char *joined = NULL;
    size_t joined_cap = 0;
    int32_t rank = 0;
    for (size_t i = 0; i < count; i++) {
        json_t *m = json_array_get(merges, i);
        const char *left, *right;
        size_t left_len, right_len;
        if (json_is_string(m)) {
            // Legacy "left right": exactly one space; "#version" lines are skipped as HF does.
            const char *s = json_string_value(m);
            if (strncmp(s, "#version", 8) == 0) continue;
            const char *space = strchr(s, ' ');
            if (!space || strchr(space + 1, ' '))
                return free(joined), pt_fail(e, "%s: model.merges[%zu] \"%s\" is not two tokens separated by one space",
                                             src, i, s);
            left = s, left_len = (size_t)(space - s);
            right = space + 1, right_len = strlen(right);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            left = json_string_value(json_array_get(m, 0)), left_len = json_string_length(json_array_get(m, 0));
            right = json_string_value(json_array_get(m, 1)), right_len = json_string_length(json_array_get(m, 1));
        } else {
            free(joined);
            return pt_fail(e, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", src, i);
        }
        int32_t a, b, ab;
        tok_grow((void **)&joined, &joined_cap, left_len + right_len + 1, 1, "merge");
        memcpy(joined, left, left_len);
        memcpy(joined + left_len, right, right_len);
        if (resolve(t, left, left_len, i, src, e, &a) || resolve(t, right, right_len, i, src, e, &b) ||
            resolve(t, joined, left_len + right_len, i, src, e, &ab))
            return free(joined), -1;
        mergemap_put(&t->merges, a, b, rank++, ab);
        t->merge_list[t->n_merges][0] = a, t->merge_list[t->n_merges][1] = b, t->merge_list[t->n_merges][2] = ab;
        t->n_merges++;
    }
    free(joined);
    return 0;
}

static int parse_model(Tokenizer *t, json_t *model, const char *src, PtError *e) {
    if (!json_is_object(model)) return pt_fail(e, "%s: no \"model\" object", src);
    json_t *type = json_object_get(model, "type");
    if (type && strcmp(tok_json_type(model), "BPE") != 0)
        return pt_fail(e, "%s: model.type \"%s\" is not supported (only BPE)", src, tok_json_type(model));
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout)) return pt_fail(e, "%s: model.dropout is set (only null is supported)", src);
    if (!is_null_or_empty_string(json_object_get(model, "continuing_subword_prefix")) ||
        !is_null_or_empty_string(json_object_get(model, "end_of_word_suffix")))
        return pt_fail(e, "%s: model has a subword prefix/suffix (not supported for byte-level BPE)", src);
    int byte_fallback = 0;
    if (tok_json_flag(model, "byte_fallback", 0, &byte_fallback, src, "model", e) ||
        tok_json_flag(model, "fuse_unk", 0, &t->fuse_unk, src, "model", e) ||
        tok_json_flag(model, "ignore_merges", 0, &t->ignore_merges, src, "model", e))
        return -1;
    if (byte_fallback) return pt_fail(e, "%s: model.byte_fallback is true (not supported)", src);

    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) return pt_fail(e, "%s: model.vocab is not an object", src);
    if (merges && !json_is_array(merges)) return pt_fail(e, "%s: model.merges is not a list", src);
    strmap_init(&t->vocab, (uint32_t)json_object_size(vocab));
    const char *key;
    json_t *value;
    json_object_foreach(vocab, key, value) {
        if (!json_is_integer(value) || json_integer_value(value) < 0 || json_integer_value(value) >= MAX_TOKEN_ID)
            return pt_fail(e, "%s: model.vocab[\"%s\"] is not an id in [0, %d)", src, key, MAX_TOKEN_ID);
        int32_t id = (int32_t)json_integer_value(value);
        strmap_put(&t->vocab, key, strlen(key), id);
        if (id >= t->n_ids) t->n_ids = id + 1;
    }
    for (int b = 0; b < 256; b++) {
        uint32_t cp = t->byte_cp[b];
        char s[3] = {(char)cp, 0, 0};
        size_t n = 1;
        if (cp >= 0x80) s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
        t->byte_id[b] = strmap_get(&t->vocab, s, n);
    }
    t->unk_id = -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) return pt_fail(e, "%s: model.unk_token is not a string", src);
        t->unk_id = strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0) return pt_fail(e, "%s: model.unk_token \"%s\" is not in the vocab", src, json_string_value(unk));
    }
    return merges ? parse_merges(t, merges, src, e) : (mergemap_init(&t->merges, 0), 0);
}

// ---- added tokens -----------------------------------------------------------

static int parse_added(Tokenizer *t, json_t *list, const char *src, PtError *e) {
    size_t count = json_array_size(list);
    if (list && !json_is_null(list) && !json_is_array(list)) return pt_fail(e, "%s: added_tokens is not a list", src);
    char **raw = xcalloc(count, sizeof *raw, "added tokens"), **norm = xcalloc(count, sizeof *norm, "added tokens");
    int32_t *raw_id = xcalloc(count, sizeof *raw_id, "added tokens"), *norm_id = xcalloc(count, sizeof *norm_id, "added tokens");
    int32_t *special_id = xcalloc(count, sizeof *special_id, "added tokens");
    int n_raw = 0, n_norm = 0, n_special = 0, rc = 0;
    strmap_init(&t->added, (uint32_t)count);
    for (size_t i = 0; i < count && rc == 0; i++) {
        json_t *a = json_array_get(list, i);
        json_t *content = json_object_get(a, "content"), *jid = json_object_get(a, "id");
        if (!json_is_string(content) || !json_is_integer(jid) || json_integer_value(jid) < 0 ||
            json_integer_value(jid) >= MAX_TOKEN_ID) {
            rc = pt_fail(e, "%s: added_tokens[%zu] needs a string content and an id in [0, %d)", src, i, MAX_TOKEN_ID);
            break;
        }
        const char *c = json_string_value(content);
        size_t clen = json_string_length(content);
        if (strlen(c) != clen) {
            rc = pt_fail(e, "%s: added_tokens[%zu] content holds a NUL character", src, i);
            break;
        }
        int special = 0, normalized = 0, single_word = 0, lstrip = 0, rstrip = 0;
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (tok_json_flag(a, "special", 0, &special, src, where, e) ||
            tok_json_flag(a, "normalized", !special, &normalized, src, where, e) ||
            tok_json_flag(a, "single_word", 0, &single_word, src, where, e) ||
            tok_json_flag(a, "lstrip", 0, &lstrip, src, where, e) || tok_json_flag(a, "rstrip", 0, &rstrip, src, where, e)) {
            rc = -1;
            break;
        }
        if (single_word || lstrip || rstrip) {
            rc = pt_fail(e, "%s: %s \"%s\": single_word/lstrip/rstrip are not supported", src, where, c);
            break;
        }
        // As HF: a token the model vocab already has keeps the vocab's id.
        int32_t id = strmap_get(&t->vocab, c, clen);
        if (id < 0) id = (int32_t)json_integer_value(jid);
        if (id >= t->n_ids) t->n_ids = id + 1;
        strmap_put(&t->added, c, clen, id);
        if (special) special_id[n_special++] = id;
        if (normalized) {
            size_t nlen;
            char *nfc = tok_normalize(t, c, clen, &nlen);
            norm[n_norm] = nfc ? nfc : xstrdup(c);
            norm_id[n_norm++] = id;
        } else {
            raw[n_raw] = xstrdup(c);
            raw_id[n_raw++] = id;
        }
    }
    if (rc == 0) {
        added_matcher_build(&t->raw_added, n_raw, raw, raw_id);
        added_matcher_build(&t->norm_added, n_norm, norm, norm_id);
        // The id range is complete now: the model vocab and every added token.
        t->special = xcalloc((size_t)t->n_ids, 1, "special flags");
        for (int i = 0; i < n_special; i++) t->special[special_id[i]] = 1;
        t->is_added = xcalloc((size_t)t->n_ids, 1, "added-token flags");
        for (int i = 0; i < n_raw; i++) t->is_added[raw_id[i]] = 1;
        for (int i = 0; i < n_norm; i++) t->is_added[norm_id[i]] = 1;
    }
    for (int i = 0; i < n_raw; i++) free(raw[i]);
    for (int i = 0; i < n_norm; i++) free(norm[i]);
    free(raw), free(norm), free(raw_id), free(norm_id), free(special_id);
    return rc;
}

// ---- normalizer, pre-tokenizer, decoder ---------------------------------------

static int parse_normalizer(Tokenizer *t, json_t *n, const char *src, PtError *e) {
    if (!n || json_is_null(n)) return 0;
    const char *type = tok_json_type(n);
    static const char *const FORMS[] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int k = 0; k < 4; k++)
        if (strcmp(type, FORMS[k]) == 0) {
            if (t->n_norm == MAX_NORM_STEPS) return pt_fail(e, "%s: more than %d normalizers", src, MAX_NORM_STEPS);
            t->norm[t->n_norm++] = (NormKind)k;
            return 0;
        }
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        for (size_t i = 0; i < json_array_size(list); i++)
            if (parse_normalizer(t, json_array_get(list, i), src, e)) return -1;
        return 0;
    }
    return pt_fail(e, "%s: normalizer \"%s\" is not supported (NFC, NFD, NFKC, NFKD, a Sequence of them, or none)",
                   src, type);
}

// The ByteLevel decoder maps each character of a token back to its byte; a
// token with any character outside the byte table decodes to its own UTF-8.
static void append_decode_bytes(Tokenizer *t, const int16_t *cp_byte, const char *s, size_t len, size_t *used,
                                size_t *cap) {
    tok_grow((void **)&t->decode_bytes, cap, *used + len, 1, "decode table");
    size_t o = *used;
    for (size_t i = 0; i < len;) {
        const uint8_t *u = (const uint8_t *)s + i;
        uint32_t cp;
        int n;
        if (u[0] < 0x80) cp = u[0], n = 1;
        else if (u[0] < 0xE0 && i + 1 < len) cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F), n = 2;
        else cp = UINT32_MAX, n = 1;   // three bytes and up: outside the table
        if (cp >= 0x144 || cp_byte[cp] < 0) {
            memcpy(t->decode_bytes + *used, s, len);
            *used += len;
            return;
        }
        t->decode_bytes[o++] = (uint8_t)cp_byte[cp];
        i += (size_t)n;
    }
    *used = o;
}

static void build_decode_table(Tokenizer *t) {
    int16_t cp_byte[0x144];
    for (int c = 0; c < 0x144; c++) cp_byte[c] = (int16_t)tok_cp_to_byte((uint32_t)c);
    // Token strings per id: the model vocab, overridden by added tokens as HF looks those up first.
    const char **str = xcalloc((size_t)t->n_ids, sizeof *str, "decode table");
    size_t *len = xcalloc((size_t)t->n_ids, sizeof *len, "decode table");
    t->vocab_entry = xcalloc((size_t)t->n_ids, sizeof *t->vocab_entry, "vocab index");
    for (uint32_t i = 0; i < t->vocab.n; i++) {
        const struct StrEntry *en = &t->vocab.entry[i];
        str[en->id] = t->vocab.arena + en->off, len[en->id] = en->len;
        t->vocab_entry[en->id] = i + 1;
    }
    for (uint32_t i = 0; i < t->added.n; i++) {
        const struct StrEntry *en = &t->added.entry[i];
        str[en->id] = t->added.arena + en->off, len[en->id] = en->len;
    }
    t->decode_off = xcalloc((size_t)t->n_ids + 1, sizeof *t->decode_off, "decode table");
    size_t used = 0, cap = 0;
    for (int id = 0; id < t->n_ids; id++) {
        t->decode_off[id] = used;
        if (!str[id]) continue;
        append_decode_bytes(t, cp_byte, str[id], len[id], &used, &cap);
    }
    t->decode_off[t->n_ids] = used;
    free(str);
    free(len);
}

// ---- public API ---------------------------------------------------------------

int tokenizer_load(Tokenizer **out, const char *json, size_t len, const char *src, PtError *e) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) return pt_fail(e, "%s: invalid JSON at line %d column %d: %s", src, je.line, je.column, je.text);
    Tokenizer *t = xcalloc(1, sizeof *t, "tokenizer");
    for (int b = 0; b < 256; b++) t->byte_cp[b] = (uint16_t)tok_byte_to_cp((uint8_t)b);
    int rc = 0;
    json_t *trunc = json_object_get(root, "truncation"), *pad = json_object_get(root, "padding");
    json_t *decoder = json_object_get(root, "decoder"), *post = json_object_get(root, "post_processor");
    if (!json_is_object(root)) rc = pt_fail(e, "%s: not a JSON object", src);
    else if ((trunc && !json_is_null(trunc)) || (pad && !json_is_null(pad)))
        rc = pt_fail(e, "%s: truncation/padding are set (not supported; they must be null)", src);
    else if (parse_normalizer(t, json_object_get(root, "normalizer"), src, e) ||
             parse_model(t, json_object_get(root, "model"), src, e) ||
             parse_added(t, json_object_get(root, "added_tokens"), src, e) ||
             tok_parse_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), src, e))
        rc = -1;
    else if (!decoder || strcmp(tok_json_type(decoder), "ByteLevel") != 0)
        rc = pt_fail(e, "%s: decoder \"%s\" is not supported (only ByteLevel)", src,
                     decoder && !json_is_null(decoder) ? tok_json_type(decoder) : "none");
    else if (post && !json_is_null(post) && strcmp(tok_json_type(post), "ByteLevel") != 0)
        rc = pt_fail(e, "%s: post_processor \"%s\" adds tokens (not supported; only ByteLevel or none)", src,
                     tok_json_type(post));
    json_decref(root);
    if (rc) {
        tokenizer_free(t);
        return -1;
    }
    build_decode_table(t);
    sha256_hex(json, len, t->hash);
    *out = t;
    return 0;
}

int tokenizer_load_file(Tokenizer **out, const char *path, PtError *e) {
    uint8_t *data;
    size_t len;
    *out = NULL;
    if (read_whole_file(path, &data, &len, e)) return -1;
    int rc = tokenizer_load(out, (const char *)data, len, path, e);
    free(data);
    return rc;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->decode_bytes);
    free(t->decode_off);
    free(t->special);
    free(t->is_added);
    free(t->merge_list);
    free(t->vocab_entry);
    strmap_free(&t->vocab);
    strmap_free(&t->added);
    mergemap_free(&t->merges);
    added_matcher_free(&t->raw_added);
    added_matcher_free(&t->norm_added);
    tok_pre_free(t);
    free(t);
}

static void push_id(int **ids, size_t *n, size_t *cap, int id) {
    tok_grow((void **)ids, cap, *n + 1, sizeof **ids, "token ids");
    (*ids)[(*n)++] = id;
}

// A piece between raw added tokens: NFC, then the normalized added tokens,
// then pre-tokens and BPE for what lies between those.
static int encode_piece(const Tokenizer *t, const char *piece, size_t len, EncodeScratch *s, int **ids, size_t *n,
                        size_t *cap, PtError *e) {
    if (len == 0) return 0;
    size_t norm_len = 0;
    char *norm = tok_normalize(t, piece, len, &norm_len);
    if (norm) piece = norm, len = norm_len;
    int rc = 0;
    for (size_t pos = 0; rc == 0;) {
        int which;
        size_t at = added_matcher_find(&t->norm_added, piece, pos, len, &which);
        rc = tok_encode_plain(t, piece + pos, at - pos, s, ids, n, cap, e);
        if (at == len || rc) break;
        push_id(ids, n, cap, t->norm_added.id[which]);
        pos = at + t->norm_added.len[which];
    }
    free(norm);
    return rc;
}

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int **ids, size_t *n, size_t *cap,
                     PtError *e) {
    size_t valid = tok_utf8_valid_prefix((const uint8_t *)text, len);
    if (valid < len) return pt_fail(e, "invalid UTF-8 at byte offset %zu (byte 0x%02X)", valid, (uint8_t)text[valid]);
    EncodeScratch s;
    tok_scratch_init(t, &s);
    int rc = 0;
    for (size_t pos = 0; rc == 0;) {
        int which;
        size_t at = added_matcher_find(&t->raw_added, text, pos, len, &which);
        rc = encode_piece(t, text + pos, at - pos, &s, ids, n, cap, e);
        if (at == len || rc) break;
        push_id(ids, n, cap, t->raw_added.id[which]);
        pos = at + t->raw_added.len[which];
    }
    tok_scratch_free(&s);
    return rc;
}

char *tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, int skip_special) {
    // Unknown ids are skipped, as HF's id_to_token lookup drops them.
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_ids && !(skip_special && t->special[ids[i]]))
            total += t->decode_off[ids[i] + 1] - t->decode_off[ids[i]];
    uint8_t *bytes = xmalloc(total + 1, "decoded bytes");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || (skip_special && t->special[ids[i]])) continue;
        size_t a = t->decode_off[ids[i]], b = t->decode_off[ids[i] + 1];
        memcpy(bytes + o, t->decode_bytes + a, b - a);
        o += b - a;
    }
    char *text = tok_utf8_lossy(bytes, o);
    free(bytes);
    return text;
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->n_ids; }

int tokenizer_token_id(const Tokenizer *t, const char *content) {
    size_t len = strlen(content);
    int32_t id = strmap_get(&t->added, content, len);
    return id >= 0 ? id : strmap_get(&t->vocab, content, len);
}

const char *tokenizer_hash(const Tokenizer *t) { return t->hash; }

const char *tokenizer_token_bytes(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_ids) {
        *len = 0;
        return "";
    }
    *len = t->decode_off[id + 1] - t->decode_off[id];
    return (const char *)t->decode_bytes + t->decode_off[id];
}

size_t tokenizer_special_prefix(const Tokenizer *t, const char *s, size_t len) {
    size_t best = 0;
    const AddedMatcher *ms[2] = {&t->raw_added, &t->norm_added};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ms[k]->n; i++) {
            size_t n = ms[k]->len[i];
            if (n > best && n <= len && t->special[ms[k]->id[i]] && !memcmp(s, ms[k]->content[i], n)) best = n;
        }
    return best;
}

int tokenizer_n_merges(const Tokenizer *t) { return t->n_merges; }

void tokenizer_merge(const Tokenizer *t, int i, int *left, int *right, int *merged) {
    *left = t->merge_list[i][0], *right = t->merge_list[i][1], *merged = t->merge_list[i][2];
}

const char *tokenizer_vocab_string(const Tokenizer *t, int id, size_t *len) {
    uint32_t k = id >= 0 && id < t->n_ids ? t->vocab_entry[id] : 0;
    if (!k) {
        *len = 0;
        return NULL;
    }
    const struct StrEntry *en = &t->vocab.entry[k - 1];
    *len = en->len;
    return t->vocab.arena + en->off;
}

int tokenizer_is_added(const Tokenizer *t, int id) { return id >= 0 && id < t->n_ids && t->is_added[id]; }

int tokenizer_is_token(const Tokenizer *t, int id) {
    return id >= 0 && id < t->n_ids && (t->vocab_entry[id] || t->is_added[id]);
}

int tokenizer_byte_id(const Tokenizer *t, int byte) { return t->byte_id[(uint8_t)byte]; }

int tokenizer_unk_id(const Tokenizer *t) { return t->unk_id; }
