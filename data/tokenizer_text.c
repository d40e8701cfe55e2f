// tokenizer_text.c: text-level steps of encoding: UTF-8 checks, added-token
// search, and tokenizer.json's normalizers (NFC with a fast path for text
// that is already NFC; NFD, NFKC, NFKD).
#include <string.h>
#include <utf8proc.h>
#include "tokenizer_internal.h"

// ---- UTF-8 ------------------------------------------------------------------

// At s[0..avail): the length of a valid sequence (> 0), or -k where k is the
// length of the maximal invalid subpart (the lead byte plus the continuation
// bytes that could still have completed it; Unicode 3.9, table 3-7).
static int utf8_step(const uint8_t *s, size_t avail) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;   // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;           // no overlongs
    else if (b == 0xED) need = 2, hi = 0x9F;           // no surrogates
    else if (b >= 0xE1 && b <= 0xEF) need = 2;
    else if (b == 0xF0) need = 3, lo = 0x90;           // no overlongs
    else if (b == 0xF4) need = 3, hi = 0x8F;           // nothing past U+10FFFF
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= avail) return -k;
        uint8_t c = s[k];
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return -k;
    }
    return need + 1;
}

size_t tok_utf8_valid_prefix(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int step = utf8_step(s + i, len - i);
        if (step < 0) return i;
        i += (size_t)step;
    }
    return len;
}

char *tok_utf8_lossy(const uint8_t *bytes, size_t len) {
    // Each invalid byte grows to at most 3 bytes (U+FFFD).
    char *out = xmalloc(3 * len + 1, "decoded text");
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int step = utf8_step(bytes + i, len - i);
        if (step > 0) {
            memcpy(out + o, bytes + i, (size_t)step);
            o += (size_t)step;
            i += (size_t)step;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += (size_t)-step;
        }
    }
    out[o] = 0;
    return out;
}

// Decodes the valid sequence at s (length already checked).
static uint32_t utf8_decode(const uint8_t *s, int *len) {
    if (s[0] < 0x80) return *len = 1, s[0];
    if (s[0] < 0xE0) return *len = 2, (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    if (s[0] < 0xF0) return *len = 3, (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    *len = 4;
    return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

// ---- added tokens -----------------------------------------------------------

static int order_cmp(const void *a, const void *b, void *ctx) {
    const AddedMatcher *m = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    uint8_t bi = (uint8_t)m->content[i][0], bj = (uint8_t)m->content[j][0];
    if (bi != bj) return bi < bj ? -1 : 1;
    if (m->len[i] != m->len[j]) return m->len[i] > m->len[j] ? -1 : 1;   // longest first
    return i < j ? -1 : i > j;
}

void added_matcher_build(AddedMatcher *m, int n, char **content, const int32_t *id) {
    memset(m, 0, sizeof *m);
    m->content = xcalloc((size_t)n, sizeof *m->content, "added tokens");
    m->len = xcalloc((size_t)n, sizeof *m->len, "added tokens");
    m->id = xcalloc((size_t)n, sizeof *m->id, "added tokens");
    m->order = xcalloc((size_t)n, sizeof *m->order, "added tokens");
    for (int i = 0; i < n; i++) {
        if (!content[i][0]) continue;   // an empty token never matches
        m->content[m->n] = xstrdup(content[i]);
        m->len[m->n] = strlen(content[i]);
        m->id[m->n] = id[i];
        m->order[m->n] = m->n;
        m->n++;
    }
    qsort_r(m->order, (size_t)m->n, sizeof *m->order, order_cmp, m);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < m->n && (uint8_t)m->content[m->order[k]][0] < b) k++;
        m->bucket_start[b] = k;
    }
}

void added_matcher_free(AddedMatcher *m) {
    for (int i = 0; i < m->n; i++) free(m->content[i]);
    free(m->content);
    free(m->len);
    free(m->id);
    free(m->order);
    memset(m, 0, sizeof *m);
}

size_t added_matcher_find(const AddedMatcher *m, const char *text, size_t from, size_t len, int *which) {
    if (m->n == 0) return len;
    for (size_t i = from; i < len; i++) {
        uint8_t b = (uint8_t)text[i];
        // Within a bucket the longest token comes first: the first hit is the longest.
        for (int k = m->bucket_start[b]; k < m->bucket_start[b + 1]; k++) {
            int t = m->order[k];
            if (m->len[t] <= len - i && memcmp(text + i, m->content[t], m->len[t]) == 0) {
                *which = t;
                return i;
            }
        }
    }
    return len;
}

// ---- NFC --------------------------------------------------------------------

// A code point NFC can neither change nor combine with its neighbour: no
// canonical decomposition, combining class 0, not a mark (every second
// character of a canonical composition is a mark or a Hangul jamo).
static int nfc_inert(uint32_t cp) {
    if (cp < 0x300) return 1;
    if (cp >= 0x1100 && cp <= 0x11FF) return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0) return 0;
    if (p->category == UTF8PROC_CATEGORY_MN || p->category == UTF8PROC_CATEGORY_MC ||
        p->category == UTF8PROC_CATEGORY_ME)
        return 0;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return 0;
    return 1;
}

static char *tok_nfc(const char *text, size_t len, size_t *out_len) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    for (; i < len; i++) {
        if (s[i] >= 0xCC) break;   // the first byte of U+0300 and above
    }
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int n;
        uint32_t cp = utf8_decode(s + i, &n);
        if (!nfc_inert(cp)) break;
        i += (size_t)n;
    }
    if (i == len) return NULL;
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map(s, (utf8proc_ssize_t)len, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) die("utf8proc NFC failed on valid UTF-8: %s", utf8proc_errmsg(r));
    *out_len = (size_t)r;
    return (char *)out;
}

char *tok_normalize(const Tokenizer *t, const char *text, size_t len, size_t *out_len) {
    char *cur = NULL;
    for (int k = 0; k < t->n_norm; k++) {
        const char *in = cur ? cur : text;
        size_t in_len = cur ? *out_len : len;
        char *next = NULL;
        if (t->norm[k] == NORM_NFC) {
            next = tok_nfc(in, in_len, out_len);
        } else {
            static const int FLAGS[] = {0, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                        UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
            utf8proc_uint8_t *o = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)in_len, &o,
                                              (utf8proc_option_t)(UTF8PROC_STABLE | FLAGS[t->norm[k]]));
            if (r < 0) die("utf8proc normalization failed on valid UTF-8: %s", utf8proc_errmsg(r));
            if ((size_t)r == in_len && !memcmp(o, in, in_len)) {
                free(o);
            } else {
                next = (char *)o;
                *out_len = (size_t)r;
            }
        }
        if (next) {
            free(cur);
            cur = next;
        } else if (cur) {
            *out_len = in_len;
        }
    }
    return cur;
}
