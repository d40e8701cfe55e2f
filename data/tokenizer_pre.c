// tokenizer_pre.c: tokenizer.json's pre-tokenizers as HF tokenizers applies
// them: a Sequence of steps, each cutting every piece of the step before.
// Split (a regex or a string, with its behaviour and invert), Digits
// (individual or runs), Punctuation, and ByteLevel (add_prefix_space, and
// use_regex: GPT-2's split); the last step's pieces are BPE-encoded.
#include <string.h>
#include <utf8proc.h>
#include "tokenizer_internal.h"

// The split a ByteLevel pre-tokenizer with use_regex true applies itself (GPT-2's).
static const char GPT2_SPLIT_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// HF compiles the pattern with Oniguruma, whose \s is the Unicode White_Space
// property. PCRE2's \s in UCP mode also takes U+180E (as horizontal space),
// so \s and \S are spelled out as the property, inside classes too.
static char *oniguruma_spaces(const char *pattern, size_t len, size_t *out_len) {
    char *out = xmalloc(16 * len + 1, "regex");
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (pattern[i] == '\\' && i + 1 < len && (pattern[i + 1] == 's' || pattern[i + 1] == 'S')) {
            const char *prop = pattern[i + 1] == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
            memcpy(out + o, prop, strlen(prop));
            o += strlen(prop);
            i++;
        } else if (pattern[i] == '\\' && i + 1 < len) {   // any other escape, \\ included, stays as it is
            out[o++] = pattern[i++];
            out[o++] = pattern[i];
        } else {
            out[o++] = pattern[i];
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

static int compile(pcre2_code **re, const char *pattern, size_t len, int literal, const char *src, PtError *e) {
    int err;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    size_t plen = len;
    char *p = literal ? NULL : oniguruma_spaces(pattern, len, &plen);
    *re = pcre2_compile((PCRE2_SPTR)(p ? p : pattern), plen, options, &err, &at, NULL);
    free(p);
    if (!*re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return pt_fail(e, "%s: pre_tokenizer regex does not compile near offset %zu: %s", src, (size_t)at, (char *)msg);
    }
    pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE);   // without JIT the interpreter is used
    return 0;
}

static int parse_behavior(json_t *p, SplitBehavior *out, const char *src, const char *what, PtError *e) {
    static const char *const NAMES[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const char *b = json_string_value(json_object_get(p, "behavior"));
    if (!b) b = "Isolated";
    for (int k = 0; k < 5; k++)
        if (!strcmp(b, NAMES[k])) {
            *out = (SplitBehavior)k;
            return 0;
        }
    return pt_fail(e, "%s: pre_tokenizer %s: unknown behavior \"%s\"", src, what, b);
}

static int parse_step(Tokenizer *t, json_t *p, const char *src, PtError *e) {
    if (t->n_pre == MAX_PRE_STEPS) return pt_fail(e, "%s: more than %d pre-tokenizer steps", src, MAX_PRE_STEPS);
    PreStep *st = &t->pre[t->n_pre];
    memset(st, 0, sizeof *st);
    const char *type = tok_json_type(p);
    int rc = 0;
    if (!strcmp(type, "ByteLevel")) {
        int use_regex = 0;
        st->kind = PRE_BYTELEVEL;
        rc = tok_json_flag(p, "add_prefix_space", 1, &st->add_prefix_space, src, "pre_tokenizer ByteLevel", e) ||
             tok_json_flag(p, "use_regex", 1, &use_regex, src, "pre_tokenizer ByteLevel", e);
        if (!rc && use_regex) rc = compile(&st->re, GPT2_SPLIT_REGEX, strlen(GPT2_SPLIT_REGEX), 0, src, e);
    } else if (!strcmp(type, "Split")) {
        json_t *pattern = json_object_get(p, "pattern");
        json_t *regex = json_object_get(pattern, "Regex"), *string = json_object_get(pattern, "String");
        st->kind = PRE_SPLIT;
        rc = tok_json_flag(p, "invert", 0, &st->invert, src, "pre_tokenizer Split", e) ||
             parse_behavior(p, &st->behavior, src, "Split", e);
        if (!rc && json_is_string(regex)) rc = compile(&st->re, json_string_value(regex), json_string_length(regex), 0, src, e);
        else if (!rc && json_is_string(string))
            rc = compile(&st->re, json_string_value(string), json_string_length(string), 1, src, e);
        else if (!rc) rc = pt_fail(e, "%s: pre_tokenizer Split.pattern has neither \"Regex\" nor \"String\"", src);
    } else if (!strcmp(type, "Digits")) {
        int individual = 0;
        st->kind = PRE_DIGITS;
        rc = tok_json_flag(p, "individual_digits", 0, &individual, src, "pre_tokenizer Digits", e);
        st->behavior = individual ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
    } else if (!strcmp(type, "Punctuation")) {
        st->kind = PRE_PUNCT;
        rc = parse_behavior(p, &st->behavior, src, "Punctuation", e);
    } else {
        return pt_fail(e, "%s: pre_tokenizer \"%s\" is not supported (Sequence of Split, Digits, Punctuation, ByteLevel)",
                       src, type);
    }
    t->n_pre++;
    return rc;
}

static int parse_sequence(Tokenizer *t, json_t *p, const char *src, PtError *e) {
    if (strcmp(tok_json_type(p), "Sequence") != 0) return parse_step(t, p, src, e);
    json_t *list = json_object_get(p, "pretokenizers");
    if (!json_is_array(list)) return pt_fail(e, "%s: pre_tokenizer Sequence has no \"pretokenizers\" list", src);
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *step = json_array_get(list, i);
        if (parse_sequence(t, step, src, e)) return -1;
    }
    return 0;
}

// Byte-level BPE maps bytes to its alphabet in the ByteLevel step; the steps
// here run on the text before that mapping, so ByteLevel must come last.
int tok_parse_pre_tokenizer(Tokenizer *t, json_t *p, const char *src, PtError *e) {
    if (!p || json_is_null(p) || parse_sequence(t, p, src, e)) {
        if (!p || json_is_null(p)) pt_fail(e, "%s: no pre_tokenizer (byte-level BPE needs a ByteLevel step)", src);
        return -1;
    }
    for (int i = 0; i < t->n_pre; i++)
        if ((t->pre[i].kind == PRE_BYTELEVEL) != (i == t->n_pre - 1))
            return pt_fail(e, "%s: pre_tokenizer: ByteLevel must be the last step (and present) for byte-level BPE",
                           src);
    return 0;
}

void tok_pre_free(Tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    t->n_pre = 0;
}

void tok_scratch_init(const Tokenizer *t, EncodeScratch *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].re) s->match[i] = pcre2_match_data_create_from_pattern(t->pre[i].re, NULL);
}

void tok_scratch_free(EncodeScratch *s) {
    free(s->sym);
    free(s->heap);
    free(s->text);
    for (int i = 0; i < MAX_PRE_STEPS; i++) pcre2_match_data_free(s->match[i]);
}

// ---- running the steps ----------------------------------------------------------------

typedef struct {
    size_t a, b;
    int match;
} Span;

typedef struct {
    Span *v;
    size_t n, cap;
} Spans;

static void span_push(Spans *l, size_t a, size_t b, int match) {
    if (a == b) return;
    tok_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, "pre-tokens");
    l->v[l->n++] = (Span){a, b, match};
}

static int char_len(const char *p, size_t i, size_t len, int32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(len - i), &c);
    *cp = n > 0 ? c : -1;
    return n > 0 ? (int)n : 1;
}

// Rust's char::is_numeric: general categories Nd, Nl, No.
static int is_numeric(int32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

// HF's is_punc: ASCII punctuation, or a Unicode punctuation category.
static int is_punct(int32_t c) {
    if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                         (c >= 0x7B && c <= 0x7E);
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

// The matches and gaps of step st over p[0..len), in order (HF's find_matches).
static int find_spans(const PreStep *st, const char *p, size_t len, pcre2_match_data *md, Spans *out, PtError *e) {
    out->n = 0;
    size_t prev = 0;
    if (st->kind == PRE_DIGITS || st->kind == PRE_PUNCT) {
        for (size_t i = 0; i < len;) {
            int32_t c;
            int n = char_len(p, i, len, &c);
            if (st->kind == PRE_DIGITS ? is_numeric(c) : is_punct(c)) {
                span_push(out, prev, i, 0);
                span_push(out, i, i + (size_t)n, 1);
                prev = i + (size_t)n;
            }
            i += (size_t)n;
        }
    } else {
        size_t search = 0;
        while (search < len) {
            int rc = pcre2_match(st->re, (PCRE2_SPTR)p, len, search, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   // a huge backtrack: the interpreter has room
                rc = pcre2_match(st->re, (PCRE2_SPTR)p, len, search, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return pt_fail(e, "pre-tokenizer regex failed at byte %zu of a text piece: %s", search, (char *)msg);
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] > ov[0]) {
                span_push(out, prev, ov[0], 0);
                span_push(out, ov[0], ov[1], 1);
                prev = search = ov[1];
            } else {   // an empty match splits nothing; step over one character
                int32_t c;
                search = ov[0] + (size_t)char_len(p, ov[0], len, &c);
            }
        }
    }
    span_push(out, prev, len, 0);
    if (st->invert)
        for (size_t i = 0; i < out->n; i++) out->v[i].match = !out->v[i].match;
    return 0;
}

// The pieces a behaviour makes of the spans (HF's NormalizedString::split), in place.
static void apply_behavior(SplitBehavior b, Spans *l) {
    size_t o = 0;
    int prev_match = 0;
    if (b == SPLIT_MERGED_NEXT) {   // walked backwards: a match joins the piece after it
        Span *v = l->v;
        size_t n = l->n, w = n;
        for (size_t i = n; i-- > 0;) {
            Span cur = v[i];
            if (cur.match && !prev_match && w < n) v[w].a = cur.a;
            else v[--w] = (Span){cur.a, cur.b, 0};
            prev_match = cur.match;
        }
        memmove(v, v + w, (n - w) * sizeof *v);
        l->n = n - w;
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        Span s = l->v[i];
        if (b == SPLIT_REMOVED) {
            if (!s.match) l->v[o++] = s;
        } else if (b == SPLIT_MERGED_PREV && s.match && !prev_match && o > 0) {
            l->v[o - 1].b = s.b;
        } else if (b == SPLIT_CONTIGUOUS && s.match == prev_match && o > 0) {
            l->v[o - 1].b = s.b;
        } else {
            l->v[o++] = s;
        }
        prev_match = s.match;
    }
    l->n = o;
}

static int run_step(const Tokenizer *t, int k, const char *p, size_t len, EncodeScratch *s, int **ids, size_t *n,
                    size_t *cap, PtError *e) {
    if (len == 0) return 0;
    if (k == t->n_pre) {
        tok_bpe_word(t, (const uint8_t *)p, len, s, ids, n, cap);
        return 0;
    }
    const PreStep *st = &t->pre[k];
    char *prefixed = NULL;
    if (st->kind == PRE_BYTELEVEL) {
        if (st->add_prefix_space && p[0] != ' ') {
            prefixed = xmalloc(len + 1, "prefixed text");
            prefixed[0] = ' ';
            memcpy(prefixed + 1, p, len);
            p = prefixed, len++;
        }
        if (!st->re) {
            int rc = run_step(t, k + 1, p, len, s, ids, n, cap, e);
            free(prefixed);
            return rc;
        }
    }
    Spans l = {0};
    int rc = find_spans(st, p, len, s->match[k], &l, e);
    if (!rc) {
        apply_behavior(st->kind == PRE_BYTELEVEL ? SPLIT_ISOLATED : st->behavior, &l);
        for (size_t i = 0; i < l.n && !rc; i++) rc = run_step(t, k + 1, p + l.v[i].a, l.v[i].b - l.v[i].a, s, ids, n, cap, e);
    }
    free(l.v);
    free(prefixed);
    return rc;
}

int tok_encode_plain(const Tokenizer *t, const char *text, size_t len, EncodeScratch *s, int **ids, size_t *n,
                     size_t *cap, PtError *e) {
    return run_step(t, 0, text, len, s, ids, n, cap, e);
}
