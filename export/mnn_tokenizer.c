#include "mnn_tokenizer.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "../util/bytes.h"

static const char SRC[] = "tokenizer.json (stored in the checkpoint)";

typedef Bytes Buf;
static void put(Buf *b, const void *v, size_t n) { bytes_put(b, v, n); }
static void put_u8(Buf *b, unsigned v) { bytes_put_u8(b, v); }
static void put_u16(Buf *b, unsigned v) { bytes_put_u16(b, v); }
static void put_u32(Buf *b, uint32_t v) { bytes_put_u32(b, v); }
static void put_text(Buf *b, const char *s) { bytes_put(b, s, strlen(s)); }
// A u16-length string; longer ones cannot be stored.
static int put_str(Buf *b, const char *s, size_t n, PtError *e) {
    if (n > 65535) return pt_fail(e, "%s: a token of %zu bytes is longer than tokenizer.mtok can store (65535)", SRC, n);
    put_u16(b, (unsigned)n);
    put(b, s, n);
    return 0;
}

static const char *type_of(json_t *o) {
    const char *t = json_string_value(json_object_get(o, "type"));
    return t ? t : "(none)";
}

// NFC as the runtime can run it. Its NFC table normalizer (type 6) also turns
// ZWJ, ZWSP, BOM, bidi marks and control characters into spaces, which breaks
// emoji sequences; so instead a Sequence of literal Replace normalizers:
//   1. every codepoint NFC maps to something else (singletons such as the
//      Kelvin and Angstrom signs, CJK compatibility ideographs) -> its NFC;
//   2. every canonical pair "starter, mark" that NFC composes (e + U+0301 ->
//      U+00E9), pairs whose first half is itself a composite last, so
//      o + U+0308 + U+0304 becomes U+022B in two steps as NFC does.
// Not covered: conjoining Hangul jamo and marks out of canonical order (the
// runtime cannot reorder); text already in NFC, as typed text almost always
// is, tokenizes exactly as HF does.
// Canonical decomposition steps down to the first base codepoint.
static int decomposition_depth(utf8proc_int32_t cp) {
    int depth = 0;
    utf8proc_int32_t d[8];
    while (utf8proc_decompose_char(cp, d, 8, UTF8PROC_DECOMPOSE, NULL) >= 2) cp = d[0], depth++;
    return depth;
}

// NFC of a codepoint sequence as UTF-8 (malloc'd) and its length.
static utf8proc_ssize_t nfc_of(const utf8proc_int32_t *cps, int n, utf8proc_uint8_t *in, utf8proc_uint8_t **out) {
    utf8proc_ssize_t len = 0;
    for (int i = 0; i < n; i++) len += utf8proc_encode_char(cps[i], in + len);
    return utf8proc_map(in, len, out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
}

static void put_replace(Buf *b, const utf8proc_uint8_t *from, size_t from_n, const utf8proc_uint8_t *to, size_t to_n) {
    put_u8(b, 3);
    put_u16(b, (unsigned)from_n);
    put(b, from, from_n);
    put_u16(b, (unsigned)to_n);
    put(b, to, to_n);
}

static void put_nfc_replacements(Buf *b) {
    put_u8(b, 4);   // Sequence
    size_t count_at = b->len;
    put_u32(b, 0);
    uint32_t n = 0;
    // Pass 0: singletons. Pass k > 0: composites whose first half has depth k - 1.
    for (int pass = 0; pass < 4; pass++) {
        for (utf8proc_int32_t cp = 0; cp <= 0x10FFFF; cp++) {
            if (!utf8proc_codepoint_valid(cp) || (cp >= 0xAC00 && cp <= 0xD7A3)) continue;   // Hangul: not covered
            utf8proc_uint8_t in[64], *out = NULL;
            utf8proc_ssize_t in_n = utf8proc_encode_char(cp, in);
            utf8proc_ssize_t out_n = nfc_of(&cp, 1, in + 16, &out);
            int stable = out_n == in_n && memcmp(in, out, (size_t)in_n) == 0;
            free(out);
            if (pass == 0) {
                if (!stable) {
                    nfc_of(&cp, 1, in + 16, &out);
                    put_replace(b, in, (size_t)in_n, out, (size_t)out_n);
                    free(out);
                    n++;
                }
                continue;
            }
            utf8proc_int32_t d[8];
            utf8proc_ssize_t dn = utf8proc_decompose_char(cp, d, 8, UTF8PROC_DECOMPOSE, NULL);
            if (!stable || dn < 2) continue;
            // One canonical step: (NFC of all but the last, the last).
            utf8proc_uint8_t *head = NULL;
            utf8proc_ssize_t hn = nfc_of(d, (int)dn - 1, in + 16, &head);
            utf8proc_int32_t first = -1;
            if (hn > 0 && utf8proc_iterate(head, hn, &first) == hn && decomposition_depth(first) == pass - 1) {
                utf8proc_uint8_t pair[16];
                utf8proc_ssize_t pn = utf8proc_encode_char(first, pair);
                pn += utf8proc_encode_char(d[dn - 1], pair + pn);
                put_replace(b, pair, (size_t)pn, in, (size_t)in_n);
                n++;
            }
            free(head);
        }
    }
    memcpy(b->p + count_at, &n, 4);
}

static int put_normalizer(Buf *b, json_t *root, PtError *e) {
    json_t *norm = json_object_get(root, "normalizer");
    if (!norm || json_is_null(norm)) {
        put_u8(b, 0);
        return 0;
    }
    if (strcmp(type_of(norm), "NFC") != 0)
        return pt_fail(e, "%s: normalizer \"%s\" is not supported for MNN export (NFC or none)", SRC, type_of(norm));
    put_nfc_replacements(b);
    return 0;
}

// One step of the runtime's pre-tokenizer pipeline: ByteLevel (1, use_regex),
// Digits (2, individual), Split (4: regex, invert, behavior 0 = Isolated).
static int put_pre_step(Buf *b, json_t *p, PtError *e) {
    const char *type = type_of(p);
    if (!strcmp(type, "ByteLevel") && !json_is_true(json_object_get(p, "add_prefix_space"))) {
        put_u8(b, 1);
        put_u8(b, !json_is_false(json_object_get(p, "use_regex")));
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        put_u8(b, 2);
        put_u8(b, json_is_true(json_object_get(p, "individual_digits")));
        return 0;
    }
    const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
    const char *behavior = json_string_value(json_object_get(p, "behavior"));
    if (!strcmp(type, "Split") && re && behavior && !strcmp(behavior, "Isolated") &&
        !json_is_true(json_object_get(p, "invert"))) {
        put_u8(b, 4);
        if (put_str(b, re, strlen(re), e)) return -1;
        put_u8(b, 0);
        put_u8(b, 0);
        return 0;
    }
    return pt_fail(e, "%s: pre_tokenizer step \"%s\" is not supported for MNN export (Split(Regex, Isolated), Digits, "
                      "ByteLevel without add_prefix_space)", SRC, type);
}

static int put_pre_tokenizer(Buf *b, json_t *root, PtError *e) {
    json_t *p = json_object_get(root, "pre_tokenizer");
    if (strcmp(type_of(p), "Sequence") != 0) return put_pre_step(b, p, e);
    json_t *list = json_object_get(p, "pretokenizers");
    put_u8(b, 6);
    put_u32(b, (uint32_t)json_array_size(list));
    for (size_t i = 0; i < json_array_size(list); i++)
        if (put_pre_step(b, json_array_get(list, i), e)) return -1;
    return 0;
}

typedef struct {
    const char *s;
    size_t n;
    uint32_t id;
} VocabEntry;
typedef struct {
    uint32_t left, right, rank;
} MergeEntry;

static int cmp_vocab(const void *a, const void *b) {   // by bytes, a prefix first
    const VocabEntry *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}
static int cmp_merge(const void *a, const void *b) {
    const MergeEntry *x = a, *y = b;
    uint64_t kx = (uint64_t)x->left << 32 | x->right, ky = (uint64_t)y->left << 32 | y->right;
    return (kx > ky) - (kx < ky);
}

// "a b" or ["a", "b"].
static int merge_pair(json_t *m, const char **l, size_t *ln, const char **r, size_t *rn) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *l = json_string_value(json_array_get(m, 0)), *ln = json_string_length(json_array_get(m, 0));
        *r = json_string_value(json_array_get(m, 1)), *rn = json_string_length(json_array_get(m, 1));
        return 0;
    }
    const char *s = json_string_value(m);
    const char *sp = s ? strchr(s, ' ') : NULL;
    if (!sp) return -1;
    *l = s, *ln = (size_t)(sp - s), *r = sp + 1, *rn = strlen(sp + 1);
    return 0;
}

static int put_model(Buf *b, json_t *model, int model_vocab, PtError *e) {
    if (strcmp(type_of(model), "BPE") != 0)
        return pt_fail(e, "%s: model \"%s\" is not supported for MNN export (BPE)", SRC, type_of(model));
    if (json_is_true(json_object_get(model, "ignore_merges")))
        return pt_fail(e, "%s: ignore_merges is not implemented by the MNN runtime", SRC);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    size_t nv = json_object_size(vocab), nm = json_array_size(merges);
    VocabEntry *v = xcalloc(nv ? nv : 1, sizeof *v, "mtok vocab");
    // id -> vocab entry, to check the ids are exactly 0..nv-1 (the runtime indexes an array by id).
    const char **by_id = xcalloc(nv ? nv : 1, sizeof *by_id, "mtok vocab index");
    size_t *len_by_id = xcalloc(nv ? nv : 1, sizeof *len_by_id, "mtok vocab index");
    MergeEntry *m = xcalloc(nm ? nm : 1, sizeof *m, "mtok merges");
    int rc = -1;
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (json_is_integer(val) && id >= model_vocab) {
            pt_fail(e, "%s: token \"%s\" has id %lld but the model has only %d embedding rows", SRC, key, (long long)id,
                    model_vocab);
            goto out;
        }
        if (!json_is_integer(val) || id < 0 || (size_t)id >= nv || by_id[id]) {
            pt_fail(e, "%s: vocab ids must be 0..%zu without gaps for MNN export (\"%s\" has id %lld)", SRC,
                    nv - 1, key, (long long)id);
            goto out;
        }
        v[i].s = key, v[i].n = strlen(key), v[i].id = (uint32_t)id;
        by_id[id] = key, len_by_id[id] = v[i].n;
        i++;
    }
    qsort(v, nv, sizeof *v, cmp_vocab);
    // Merge ranks: the line index; the two sides by id (a lookup in the sorted vocab).
    for (size_t k = 0; k < nm; k++) {
        const char *l, *r;
        size_t ln, rn;
        if (merge_pair(json_array_get(merges, k), &l, &ln, &r, &rn)) {
            pt_fail(e, "%s: merge %zu is neither \"a b\" nor [a, b]", SRC, k);
            goto out;
        }
        VocabEntry kl = {l, ln, 0}, kr = {r, rn, 0};
        VocabEntry *fl = bsearch(&kl, v, nv, sizeof *v, cmp_vocab), *fr = bsearch(&kr, v, nv, sizeof *v, cmp_vocab);
        if (!fl || !fr) {
            pt_fail(e, "%s: merge %zu names a token that is not in the vocab", SRC, k);
            goto out;
        }
        m[k].left = fl->id, m[k].right = fr->id, m[k].rank = (uint32_t)k;
    }
    qsort(m, nm, sizeof *m, cmp_merge);
    put_u8(b, 0);   // BPE
    put_u32(b, (uint32_t)nv);
    put_u8(b, json_is_true(json_object_get(model, "byte_fallback")));
    put_u8(b, 0);   // byte_level: the ByteLevel pre-tokenizer already maps the bytes
    put_u32(b, (uint32_t)nm);
    for (i = 0; i < nv; i++) {
        if (put_str(b, v[i].s, v[i].n, e)) goto out;
        put_u32(b, v[i].id);
    }
    for (size_t k = 0; k < nm; k++) {
        put_u32(b, m[k].left);
        put_u32(b, m[k].right);
        put_u32(b, m[k].rank);
    }
    rc = 0;
out:
    free(v), free(by_id), free(len_by_id), free(m);
    return rc;
}

static const char *special_content(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static int added_id(json_t *added, const char *content) {
    size_t i;
    json_t *t;
    if (!content) return -1;
    json_array_foreach(added, i, t) {
        const char *c = json_string_value(json_object_get(t, "content"));
        if (c && strcmp(c, content) == 0) return (int)json_integer_value(json_object_get(t, "id"));
    }
    return -1;
}

static void add_unique(int *ids, int *n, int id) {
    if (id < 0) return;
    for (int i = 0; i < *n; i++)
        if (ids[i] == id) return;
    ids[(*n)++] = id;
}

int mnn_tokenizer_build(const ModelBundle *bundle, uint8_t **out, size_t *out_len, PtError *e) {
    if (!bundle->tokenizer_json) return pt_fail(e, "the checkpoint has no tokenizer.json: an MNN package needs one");
    json_error_t je;
    json_t *root = json_loadb(bundle->tokenizer_json, bundle->tokenizer_json_len, 0, &je);
    if (!root) return pt_fail(e, "%s: line %d: %s", SRC, je.line, je.text);
    json_t *cfg = bundle->tokenizer_config_json
                      ? json_loadb(bundle->tokenizer_config_json, bundle->tokenizer_config_json_len, 0, &je)
                      : NULL;
    json_t *added = json_object_get(root, "added_tokens");
    Buf body = {.what = "tokenizer.mtok"}, b = {.what = "tokenizer.mtok"};
    int rc = -1;
    if (put_normalizer(&body, root, e) || put_pre_tokenizer(&body, root, e) ||
        put_model(&body, json_object_get(root, "model"), bundle->cfg.vocab_size, e))
        goto out;
    json_t *dec = json_object_get(root, "decoder");
    if (strcmp(type_of(dec), "ByteLevel") != 0) {
        pt_fail(e, "%s: decoder \"%s\" is not supported for MNN export (ByteLevel)", SRC, type_of(dec));
        goto out;
    }
    put_u8(&body, 0);   // decoder ByteLevel
    size_t n_added = json_array_size(added), i;
    json_t *t;
    put_u32(&body, (uint32_t)n_added);
    int *special = xcalloc(n_added + 1, sizeof(int), "special ids"), n_special = 0;
    json_array_foreach(added, i, t) {
        const char *c = json_string_value(json_object_get(t, "content"));
        json_int_t id = json_integer_value(json_object_get(t, "id"));
        if (!c || id < 0 || id >= bundle->cfg.vocab_size) {
            free(special);
            if (!c || id < 0) pt_fail(e, "%s: added_tokens[%zu] has no content or id", SRC, i);
            else pt_fail(e, "%s: added token \"%s\" has id %lld but the model has only %d embedding rows", SRC, c,
                         (long long)id, bundle->cfg.vocab_size);
            goto out;
        }
        int is_special = json_is_true(json_object_get(t, "special"));
        put_u32(&body, (uint32_t)id);
        put_u8(&body, (unsigned)is_special);
        put_u8(&body, json_is_true(json_object_get(t, "lstrip")));
        put_u8(&body, json_is_true(json_object_get(t, "rstrip")));
        if (put_str(&body, c, strlen(c), e)) {
            free(special);
            goto out;
        }
        if (is_special) add_unique(special, &n_special, (int)id);
    }
    // Tail: chat template, eos string, flags, bos string.
    const char *tmpl = cfg ? json_string_value(json_object_get(cfg, "chat_template")) : NULL;
    const char *eos = cfg ? special_content(cfg, "eos_token") : NULL;
    const char *bos = cfg ? special_content(cfg, "bos_token") : NULL;
    put_u32(&body, tmpl ? (uint32_t)strlen(tmpl) : 0);
    if (tmpl) put_text(&body, tmpl);
    if (put_str(&body, eos ? eos : "", eos ? strlen(eos) : 0, e)) {
        free(special);
        goto out;
    }
    put_u8(&body, cfg && json_is_true(json_object_get(cfg, "clean_up_tokenization_spaces")));
    if (put_str(&body, bos ? bos : "", bos ? strlen(bos) : 0, e)) {
        free(special);
        goto out;
    }
    // Header: magic and type 4, then the special / stop / prefix id lists.
    int stop[4], n_stop = 0;
    add_unique(stop, &n_stop, added_id(added, eos));
    add_unique(stop, &n_stop, bundle->cfg.eos_id);
    add_unique(stop, &n_stop, added_id(added, "<|im_end|>"));
    char line[64];
    put_text(&b, "430 4\n");
    snprintf(line, sizeof line, "%d %d 0\n", n_special, n_stop);
    put_text(&b, line);
    for (int k = 0; k < n_special + n_stop; k++) {
        snprintf(line, sizeof line, "%s%d", k ? " " : "", k < n_special ? special[k] : stop[k - n_special]);
        put_text(&b, line);
    }
    put_text(&b, "\n");
    free(special);
    put(&b, body.p, body.len);
    *out = b.p;
    *out_len = b.len;
    b.p = NULL;
    rc = 0;
out:
    free(body.p);
    free(b.p);
    json_decref(root);
    json_decref(cfg);
    return rc;
}
