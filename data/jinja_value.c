// jinja_value.c: the arena, values, their conversions to text (Python's str()
// and repr(), json.dumps) and comparisons; the variables API of jinja.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jinja_internal.h"

// ---- arena ----------------------------------------------------------------------

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

void *arena_alloc(Arena *a, size_t bytes) {
    if (bytes > SIZE_MAX / 2) die("template memory: %zu bytes asked", bytes);
    bytes = (bytes + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->used + bytes > b->size) {
        size_t size = bytes > 60000 ? bytes : 60000;
        a->bytes += sizeof *b + size;
        if (a->limit && a->bytes > a->limit) a->over(a->ctx);
        b = xmalloc(sizeof *b + size, "template memory");
        b->next = a->head, b->used = 0, b->size = size;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t len) {
    char *p = arena_alloc(a, len + 1);
    memcpy(p, s, len);
    return p;
}

void arena_free(Arena *a) {
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
}

// ---- constructors -------------------------------------------------------------------

JVal jv_undef(const char *name) { return (JVal){.t = JV_UNDEF, .undef_name = name}; }
JVal jv_none(void) { return (JVal){.t = JV_NONE}; }
JVal jv_bool(int b) { return (JVal){.t = JV_BOOL, .b = !!b}; }
JVal jv_int(int64_t i) { return (JVal){.t = JV_INT, .i = i}; }
JVal jv_float(double f) { return (JVal){.t = JV_FLOAT, .f = f}; }

JVal jv_str(Arena *a, const char *s, size_t len, const uint16_t *tag) {
    JStr *str = arena_alloc(a, sizeof *str);
    str->len = len;
    str->s = arena_strndup(a, s, len);
    if (tag) {
        size_t i = 0;
        while (i < len && !tag[i]) i++;
        if (i < len) {
            uint16_t *t = arena_alloc(a, len * sizeof *t);
            memcpy(t, tag, len * sizeof *t);
            str->tag = t;
        }
    }
    return (JVal){.t = JV_STR, .s = str};
}

JVal jv_cstr(Arena *a, const char *s) { return jv_str(a, s, strlen(s), NULL); }

JList *jv_list_new(Arena *a) { return arena_alloc(a, sizeof(JList)); }

void jv_list_push(Arena *a, JList *l, JVal v) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        JVal *grown = arena_alloc(a, (size_t)cap * sizeof *grown);
        if (l->n) memcpy(grown, l->v, (size_t)l->n * sizeof *grown);
        l->v = grown, l->cap = cap;
    }
    l->v[l->n++] = v;
}

JDict *jv_dict_new(Arena *a) { return arena_alloc(a, sizeof(JDict)); }

const JVal *jv_dict_get(const JDict *d, JVal key, JWork *w) {
    for (int i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key, w) == 1) return &d->val[i];   // scalar keys: never -1
    return NULL;
}

const JVal *jv_dict_get_str(const JDict *d, const char *key, JWork *w) {
    size_t len = strlen(key);
    if (w) w->used += (uint64_t)d->n;
    for (int i = 0; i < d->n; i++)
        if (d->key[i].t == JV_STR && d->key[i].s->len == len && !memcmp(d->key[i].s->s, key, len)) return &d->val[i];
    return NULL;
}

void jv_dict_set(Arena *a, JDict *d, JVal key, JVal val) {
    const JVal *old = jv_dict_get(d, key, a->work);
    if (old) {
        d->val[old - d->val] = val;
        return;
    }
    jv_dict_add(a, d, key, val);
}

void jv_dict_add(Arena *a, JDict *d, JVal key, JVal val) {
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        JVal *k = arena_alloc(a, (size_t)cap * sizeof *k), *v = arena_alloc(a, (size_t)cap * sizeof *v);
        if (d->n) memcpy(k, d->key, (size_t)d->n * sizeof *k), memcpy(v, d->val, (size_t)d->n * sizeof *v);
        d->key = k, d->val = v, d->cap = cap;
    }
    d->key[d->n] = key;
    d->val[d->n++] = val;
}

// ---- truth, equality --------------------------------------------------------------------

int jv_truthy(JVal v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s->len > 0;
    case JV_LIST: return v.l->n > 0;
    case JV_DICT: return v.d->n > 0;
    default: return 1;
    }
}

static int is_number(JVal v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double as_double(JVal v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : (double)v.b; }

static int equal_at(JVal a, JVal b, int depth, JWork *w) {
    if (w && ++w->used > w->limit) return -1;
    if (is_number(a) && is_number(b)) return as_double(a) == as_double(b);
    if (a.t != b.t) return 0;
    if (depth > JINJA_MAX_NESTING) return -1;
    int eq;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR:
        if (a.s->len != b.s->len) return 0;
        if (w) w->used += a.s->len / 64;
        return !memcmp(a.s->s, b.s->s, a.s->len);
    case JV_LIST:
        if (a.l == b.l) return 1;
        if (a.l->n != b.l->n) return 0;
        for (int i = 0; i < a.l->n; i++)
            if ((eq = equal_at(a.l->v[i], b.l->v[i], depth + 1, w)) != 1) return eq;
        return 1;
    case JV_DICT:
        if (a.d == b.d) return 1;
        if (a.d->n != b.d->n) return 0;
        for (int i = 0; i < a.d->n; i++) {
            const JVal *o = jv_dict_get(b.d, a.d->key[i], w);   // keys are scalars (jv_dict_set)
            if (!o) return 0;
            if ((eq = equal_at(a.d->val[i], *o, depth + 1, w)) != 1) return eq;
        }
        return 1;
    case JV_FUNC: return a.fn == b.fn;
    case JV_MACRO: return a.macro == b.macro;
    default: return 0;
    }
}

int jv_equal(JVal a, JVal b, JWork *w) { return equal_at(a, b, 0, w); }

const char *jv_type_name(JvType t) {
    static const char *const NAMES[] = {"undefined", "none", "bool", "int", "float", "str", "list", "dict",
                                        "function", "macro"};
    return NAMES[t];
}

// ---- the buffer ---------------------------------------------------------------------------

void jbuf_put(JBuf *b, const char *s, size_t len, const uint16_t *tag) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->len + len + 1) cap *= 2;
        char *ns = arena_alloc(b->arena, cap);
        if (b->len) memcpy(ns, b->s, b->len);
        b->s = ns;
        if (b->tag) {
            uint16_t *nt = arena_alloc(b->arena, cap * sizeof *nt);
            memcpy(nt, b->tag, b->len * sizeof *nt);
            b->tag = nt;
        }
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, len);
    if (tag && !b->tag) b->tag = arena_alloc(b->arena, b->cap * sizeof *b->tag);
    if (b->tag) {
        if (tag) memcpy(b->tag + b->len, tag, len * sizeof *tag);
        else memset(b->tag + b->len, 0, len * sizeof *b->tag);
    }
    b->len += len;
    b->s[b->len] = 0;
}

void jbuf_puts(JBuf *b, const char *s) { jbuf_put(b, s, strlen(s), NULL); }

JVal jbuf_value(JBuf *b) {
    JStr *str = arena_alloc(b->arena, sizeof *str);
    str->s = b->s ? b->s : "";
    str->len = b->len;
    str->tag = b->tag;
    return (JVal){.t = JV_STR, .s = str};
}

// ---- to text ------------------------------------------------------------------------------

// Python's repr of a float: the shortest digits that read back the same.
static void write_float(JBuf *b, double f) {
    char s[96];
    if (isnan(f)) snprintf(s, sizeof s, "nan");
    else if (isinf(f)) snprintf(s, sizeof s, f > 0 ? "inf" : "-inf");
    else {
        for (int p = 1; p <= 17; p++) {
            snprintf(s, sizeof s, "%.*g", p, f);
            if (strtod(s, NULL) == f) break;
        }
        // Python writes exponents with at least two digits and keeps ".0" on integral values.
        char *e = strchr(s, 'e');
        if (e) {
            char mant[40], *x = e + 1, sign = '+';
            memcpy(mant, s, (size_t)(e - s));
            mant[e - s] = 0;
            if (*x == '+' || *x == '-') sign = *x++;
            int exp = atoi(x);
            snprintf(s, sizeof s, "%se%c%02d", mant, sign, exp);
        } else if (!strchr(s, '.')) {
            strcat(s, ".0");
        }
    }
    jbuf_puts(b, s);
}

static void write_repr_str(JBuf *b, const JStr *s) {
    // Python picks single quotes unless the text has one and no double quote.
    int has_single = memchr(s->s, '\'', s->len) != NULL, has_double = memchr(s->s, '"', s->len) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    jbuf_put(b, &q, 1, NULL);
    size_t plain = 0;   // start of the run of bytes written as they are
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c);
        else continue;
        jbuf_put(b, s->s + plain, i - plain, NULL);
        jbuf_puts(b, esc);
        plain = i + 1;
    }
    jbuf_put(b, s->s + plain, s->len - plain, NULL);
    jbuf_put(b, &q, 1, NULL);
}

static void write_repr(JBuf *b, JVal v) {
    if (v.t == JV_STR) write_repr_str(b, v.s);
    else jv_write_str(b, v);
}

void jv_write_str(JBuf *b, JVal v) {
    char num[32];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jbuf_puts(b, "None"); return;
    case JV_BOOL: jbuf_puts(b, v.b ? "True" : "False"); return;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.i); jbuf_puts(b, num); return;
    case JV_FLOAT: write_float(b, v.f); return;
    case JV_STR: jbuf_put(b, v.s->s, v.s->len, v.s->tag); return;
    case JV_LIST:
        jbuf_puts(b, "[");
        for (int i = 0; i < v.l->n; i++) {
            if (i) jbuf_puts(b, ", ");
            write_repr(b, v.l->v[i]);
        }
        jbuf_puts(b, "]");
        return;
    case JV_DICT:
        if (v.d->ns) {
            jbuf_puts(b, "<Namespace>");
            return;
        }
        jbuf_puts(b, "{");
        for (int i = 0; i < v.d->n; i++) {
            if (i) jbuf_puts(b, ", ");
            write_repr(b, v.d->key[i]);
            jbuf_puts(b, ": ");
            write_repr(b, v.d->val[i]);
        }
        jbuf_puts(b, "}");
        return;
    default: jbuf_puts(b, "<function>"); return;
    }
}

JVal jv_to_str(Arena *a, JVal v) {
    if (v.t == JV_STR) return v;
    JBuf b = {.arena = a};
    jv_write_str(&b, v);
    return jbuf_value(&b);
}

// ---- JSON -----------------------------------------------------------------------------------

static void json_string(JBuf *b, const char *s, size_t len) {
    jbuf_puts(b, "\"");
    size_t plain = 0;   // start of the run of bytes written as they are
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"') strcpy(esc, "\\\"");
        else if (c == '\\') strcpy(esc, "\\\\");
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\b') strcpy(esc, "\\b");
        else if (c == '\f') strcpy(esc, "\\f");
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\u%04x", c);
        else continue;
        jbuf_put(b, s + plain, i - plain, NULL);
        jbuf_puts(b, esc);
        plain = i + 1;
    }
    jbuf_put(b, s + plain, len - plain, NULL);
    jbuf_puts(b, "\"");
}

void jbuf_spaces(JBuf *b, uint64_t n) {
    static const char SPACES[] = "                                                                ";
    for (; n > 0; n -= n < 64 ? n : 64) jbuf_put(b, SPACES, n < 64 ? n : 64, NULL);
}

static void newline_indent(JBuf *b, int indent, int depth) {
    jbuf_puts(b, "\n");
    jbuf_spaces(b, (uint64_t)indent * (uint64_t)depth);
}

static int key_cmp(const void *x, const void *y, void *ctx) {
    const JDict *d = ctx;
    const JStr *a = d->key[*(const int *)x].s, *b = d->key[*(const int *)y].s;
    int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

int jv_write_json(JBuf *b, JVal v, int indent, int sort_keys, int depth) {
    if (depth > 100) return -1;
    // json.dumps' separators: ", " and ": " without indent, "," and ": " with it.
    const char *comma = indent > 0 ? "," : ", ";
    switch (v.t) {
    case JV_NONE: jbuf_puts(b, "null"); return 0;
    case JV_BOOL: jbuf_puts(b, v.b ? "true" : "false"); return 0;
    case JV_INT: case JV_FLOAT:
        if (v.t == JV_FLOAT && (isnan(v.f) || isinf(v.f))) jbuf_puts(b, isnan(v.f) ? "NaN" : v.f > 0 ? "Infinity" : "-Infinity");
        else jv_write_str(b, v);
        return 0;
    case JV_STR: json_string(b, v.s->s, v.s->len); return 0;
    case JV_LIST:
        if (v.l->n == 0) {
            jbuf_puts(b, "[]");
            return 0;
        }
        jbuf_puts(b, "[");
        for (int i = 0; i < v.l->n; i++) {
            if (i) jbuf_puts(b, comma);
            if (indent > 0) newline_indent(b, indent, depth + 1);
            if (jv_write_json(b, v.l->v[i], indent, sort_keys, depth + 1)) return -1;
        }
        if (indent > 0) newline_indent(b, indent, depth);
        jbuf_puts(b, "]");
        return 0;
    case JV_DICT: {
        if (v.d->n == 0) {
            jbuf_puts(b, "{}");
            return 0;
        }
        int *order = arena_alloc(b->arena, (size_t)v.d->n * sizeof *order);
        for (int i = 0; i < v.d->n; i++) {
            order[i] = i;
            if (v.d->key[i].t != JV_STR) return -1;
        }
        if (sort_keys) qsort_r(order, (size_t)v.d->n, sizeof *order, key_cmp, v.d);
        jbuf_puts(b, "{");
        for (int k = 0; k < v.d->n; k++) {
            int i = order[k];
            if (k) jbuf_puts(b, comma);
            if (indent > 0) newline_indent(b, indent, depth + 1);
            json_string(b, v.d->key[i].s->s, v.d->key[i].s->len);
            jbuf_puts(b, ": ");
            if (jv_write_json(b, v.d->val[i], indent, sort_keys, depth + 1)) return -1;
        }
        if (indent > 0) newline_indent(b, indent, depth);
        jbuf_puts(b, "}");
        return 0;
    }
    default: return -1;
    }
}

// ---- the variables of a render -----------------------------------------------------------------

struct JinjaVars {
    Arena arena;
    JDict *d;
    JList *messages;
    size_t bytes;   // of the strings given: the render's limits grow with them
};

JinjaVars *jinja_vars_new(void) {
    JinjaVars *v = xcalloc(1, sizeof *v, "template variables");
    v->d = jv_dict_new(&v->arena);
    return v;
}

void jinja_vars_free(JinjaVars *v) {
    if (!v) return;
    arena_free(&v->arena);
    free(v);
}

void jinja_vars_set_str(JinjaVars *v, const char *name, const char *s) {
    jv_dict_set(&v->arena, v->d, jv_cstr(&v->arena, name), jv_cstr(&v->arena, s));
    v->bytes += strlen(s);
}

void jinja_vars_set_bool(JinjaVars *v, const char *name, int b) {
    jv_dict_set(&v->arena, v->d, jv_cstr(&v->arena, name), jv_bool(b));
}

void jinja_vars_add_message(JinjaVars *v, const char *role, const char *content, uint16_t tag) {
    Arena *a = &v->arena;
    if (!v->messages) {
        v->messages = jv_list_new(a);
        jv_dict_set(a, v->d, jv_cstr(a, "messages"), (JVal){.t = JV_LIST, .l = v->messages});
    }
    JDict *m = jv_dict_new(a);
    jv_dict_set(a, m, jv_cstr(a, "role"), jv_cstr(a, role));
    size_t len = strlen(content);
    uint16_t *tags = NULL;
    if (tag && len) {
        tags = arena_alloc(a, len * sizeof *tags);
        for (size_t i = 0; i < len; i++) tags[i] = tag;
    }
    jv_dict_set(a, m, jv_cstr(a, "content"), jv_str(a, content, len, tags));
    jv_list_push(a, v->messages, (JVal){.t = JV_DICT, .d = m});
    v->bytes += strlen(role) + len;
}

const JDict *jinja_vars_dict(const JinjaVars *v) { return v->d; }

void jinja_vars_limits(const JinjaVars *v, uint64_t *steps, size_t *bytes) {
    size_t messages = v->messages ? (size_t)v->messages->n : 0;
    *steps = JINJA_BASE_STEPS + 4 * (uint64_t)v->bytes + 1000 * (uint64_t)messages;
    *bytes = JINJA_BASE_BYTES + 64 * v->bytes;
}
