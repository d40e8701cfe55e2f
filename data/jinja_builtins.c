// jinja_builtins.c: the filters, tests, string/dict methods and global
// functions chat templates call, with jinja2's (and Python's) behaviour;
// tojson as transformers defines it (non-ASCII kept, json.dumps separators).
// Operations that keep a string's bytes keep their tags.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>
#include "jinja_internal.h"

static int named(const char *name, const char *a) { return !strcmp(name, a); }

static const JVal *kwarg(const char **names, const JVal *kw, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return &kw[i];
    return NULL;
}

static JStr *need_str(Render *r, const JNode *at, JVal v, const char *what) {
    if (v.t != JV_STR) jr_fail(r, at, "%s needs a string, not %s", what, jv_type_name(v.t));
    return v.s;
}

static JVal list_val(JList *l) { return (JVal){.t = JV_LIST, .l = l}; }

// One code point at s[i] (valid UTF-8 from the tokenizer's checks; stray bytes count as one).
static int32_t cp_at(const JStr *s, size_t i, int *n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s->s + i, (utf8proc_ssize_t)(s->len - i), &cp);
    if (k <= 0) {
        *n = 1;
        return (unsigned char)s->s[i];
    }
    *n = (int)k;
    return cp;
}

// Python's str.isspace for one code point.
static int py_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int in_chars(const JStr *chars, const JStr *s, size_t i, int n) {
    for (size_t k = 0; k + (size_t)n <= chars->len;) {
        int m;
        cp_at(chars, k, &m);
        if (m == n && !memcmp(chars->s + k, s->s + i, (size_t)n)) return 1;
        k += (size_t)m;
    }
    return 0;
}

JVal jb_strip(Render *r, JVal v, const JStr *chars, int which) {
    const JStr *s = v.s;
    size_t a = 0, b = s->len;
    const uint64_t per_char = 1 + (chars ? chars->len / 16 : 0);   // in_chars scans chars
    while ((which & 1) && a < b) {
        jr_work(r, r->at, per_char);
        int n;
        int32_t c = cp_at(s, a, &n);
        if (chars ? !in_chars(chars, s, a, n) : !py_space(c)) break;
        a += (size_t)n;
    }
    while ((which & 2) && b > a) {
        jr_work(r, r->at, per_char);
        size_t k = b - 1;
        while (k > a && ((unsigned char)s->s[k] & 0xC0) == 0x80) k--;
        int n;
        int32_t c = cp_at(s, k, &n);
        if (chars ? !in_chars(chars, s, k, n) : !py_space(c)) break;
        b = k;
    }
    return jr_substr(r, s, a, b);
}

static int64_t char_count(const JStr *s) {
    int64_t n = 0;
    for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    return n;
}

// Case mapping per code point (upper 1, lower 2, title-case words 3, capitalize 4);
// a character keeps the tag of its first byte.
static JVal map_case(Render *r, const JStr *s, int how) {
    jr_work(r, r->at, s->len / 4);
    JBuf b = {.arena = &r->arena};
    jbuf_put(&b, "", 0, NULL);
    int word_start = 1;
    for (size_t i = 0; i < s->len;) {
        int n;
        int32_t c = cp_at(s, i, &n), m;
        int upper = how == 1 || (how == 3 && word_start) || (how == 4 && i == 0);
        m = upper ? utf8proc_toupper(c) : utf8proc_tolower(c);
        if (how == 3) {
            const utf8proc_property_t *p = utf8proc_get_property(c);
            word_start = !(p->category >= UTF8PROC_CATEGORY_LU && p->category <= UTF8PROC_CATEGORY_LO);
        }
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = utf8proc_encode_char(m, enc);
        uint16_t tags[4] = {0};
        for (int t = 0; t < k; t++) tags[t] = s->tag ? s->tag[i] : 0;
        jbuf_put(&b, (const char *)enc, (size_t)k, s->tag ? tags : NULL);
        i += (size_t)n;
    }
    return jbuf_value(&b);
}

static JVal split(Render *r, const JNode *at, const JStr *s, const JVal *sep_v, int64_t maxsplit) {
    JList *l = jv_list_new(&r->arena);
    if (!sep_v || sep_v->t == JV_NONE) {   // runs of whitespace, no empty pieces
        jr_work(r, at, s->len / 4);
        size_t i = 0;
        while (i < s->len) {
            int n;
            while (i < s->len && py_space(cp_at(s, i, &n))) i += (size_t)n;
            if (i >= s->len) break;
            size_t start = i;
            if (maxsplit >= 0 && l->n == maxsplit) {
                size_t end = s->len;
                while (end > start) {
                    size_t k = end - 1;
                    while (k > start && ((unsigned char)s->s[k] & 0xC0) == 0x80) k--;
                    if (!py_space(cp_at(s, k, &n))) break;
                    end = k;
                }
                jv_list_push(&r->arena, l, jr_substr(r, s, start, end));
                break;
            }
            while (i < s->len && !py_space(cp_at(s, i, &n))) i += (size_t)n;
            jv_list_push(&r->arena, l, jr_substr(r, s, start, i));
        }
        return list_val(l);
    }
    const JStr *sep = need_str(r, at, *sep_v, "split");
    if (sep->len == 0) jr_fail(r, at, "split: empty separator");
    jr_work(r, at, (s->len + sep->len) / 64);
    size_t start = 0;
    for (const char *hit; (maxsplit < 0 || l->n < maxsplit) &&
                          (hit = memmem(s->s + start, s->len - start, sep->s, sep->len));) {
        jv_list_push(&r->arena, l, jr_substr(r, s, start, (size_t)(hit - s->s)));
        start = (size_t)(hit - s->s) + sep->len;
    }
    jv_list_push(&r->arena, l, jr_substr(r, s, start, s->len));
    return list_val(l);
}

static JVal replace(Render *r, const JNode *at, const JStr *s, JVal old_v, JVal new_v, int64_t count) {
    const JStr *old = need_str(r, at, old_v, "replace"), *new = need_str(r, at, new_v, "replace");
    JBuf b = {.arena = &r->arena};
    jbuf_put(&b, "", 0, NULL);
    size_t i = 0;
    int64_t done = 0;
    if (old->len) {   // each occurrence found by memmem, the text between copied whole
        jr_work(r, at, (s->len + old->len) / 64);
        for (const char *hit; (count < 0 || done < count) && (hit = memmem(s->s + i, s->len - i, old->s, old->len));
             done++) {
            size_t k = (size_t)(hit - s->s);
            jbuf_put(&b, s->s + i, k - i, s->tag ? s->tag + i : NULL);
            jbuf_put(&b, new->s, new->len, new->tag);
            i = k + old->len;
        }
        jbuf_put(&b, s->s + i, s->len - i, s->tag ? s->tag + i : NULL);
        return jbuf_value(&b);
    }
    while (i <= s->len) {   // an empty `old`: new before every character and at the end, as Python does
        jr_work(r, at, 1);
        if (count < 0 || done < count) {
            jbuf_put(&b, new->s, new->len, new->tag);
            done++;
        }
        if (i == s->len) break;
        int n;
        cp_at(s, i, &n);
        jbuf_put(&b, s->s + i, (size_t)n, s->tag ? s->tag + i : NULL);
        i += (size_t)n;
    }
    return jbuf_value(&b);
}

static int starts_or_ends(Render *r, const JNode *at, const JStr *s, JVal what, int ends) {
    if (what.t == JV_LIST) {
        for (int i = 0; i < what.l->n; i++)
            if (starts_or_ends(r, at, s, what.l->v[i], ends)) return 1;
        return 0;
    }
    const JStr *p = need_str(r, at, what, ends ? "endswith" : "startswith");
    jr_work(r, at, 1 + p->len / 64);
    if (p->len > s->len) return 0;
    return !memcmp(s->s + (ends ? s->len - p->len : 0), p->s, p->len);
}

static int64_t int_arg(Render *r, const JNode *at, JVal v, const char *what) {
    if (v.t == JV_INT) return v.i;
    if (v.t == JV_BOOL) return v.b;
    jr_fail(r, at, "%s needs an integer", what);
}

JVal jb_method(Render *r, const JNode *at, JVal obj, const char *name, const JVal *args, int n, int *found) {
    *found = 1;
    if (obj.t == JV_STR) {
        const JStr *s = obj.s;
        int strip = named(name, "strip") ? 3 : named(name, "lstrip") ? 1 : named(name, "rstrip") ? 2 : 0;
        if (strip) return jb_strip(r, obj, n > 0 && args[0].t != JV_NONE ? need_str(r, at, args[0], name) : NULL, strip);
        if (named(name, "split")) return split(r, at, s, n > 0 ? &args[0] : NULL, n > 1 ? int_arg(r, at, args[1], "split") : -1);
        if (named(name, "startswith") || named(name, "endswith")) {
            if (n < 1) jr_fail(r, at, "%s needs an argument", name);
            return jv_bool(starts_or_ends(r, at, s, args[0], name[0] == 'e'));
        }
        if (named(name, "upper")) return map_case(r, s, 1);
        if (named(name, "lower")) return map_case(r, s, 2);
        if (named(name, "title")) return map_case(r, s, 3);
        if (named(name, "capitalize")) return map_case(r, s, 4);
        if (named(name, "replace")) {
            if (n < 2) jr_fail(r, at, "replace needs two arguments");
            return replace(r, at, s, args[0], args[1], n > 2 ? int_arg(r, at, args[2], "replace") : -1);
        }
        if (named(name, "find") || named(name, "count")) {
            if (n < 1) jr_fail(r, at, "%s needs an argument", name);
            const JStr *p = need_str(r, at, args[0], name);
            jr_work(r, at, (s->len + p->len) / 64);
            if (name[0] == 'f') {
                const char *hit = memmem(s->s, s->len, p->s, p->len);
                JStr head = {hit ? (size_t)(hit - s->s) : 0, s->s, NULL};
                return jv_int(hit ? char_count(&head) : -1);
            }
            if (p->len == 0) return jv_int(char_count(s) + 1);   // Python: between every two characters
            int64_t hits = 0;
            for (const char *from = s->s, *hit; (hit = memmem(from, s->len - (size_t)(from - s->s), p->s, p->len));
                 hits++)
                from = hit + p->len;
            return jv_int(hits);
        }
    } else if (obj.t == JV_DICT) {
        const JDict *d = obj.d;
        if (named(name, "items") || named(name, "keys") || named(name, "values")) {
            JList *l = jv_list_new(&r->arena);
            for (int i = 0; i < d->n; i++) {
                if (name[0] == 'k') jv_list_push(&r->arena, l, d->key[i]);
                else if (name[0] == 'v') jv_list_push(&r->arena, l, d->val[i]);
                else {
                    JList *pair = jv_list_new(&r->arena);
                    jv_list_push(&r->arena, pair, d->key[i]);
                    jv_list_push(&r->arena, pair, d->val[i]);
                    jv_list_push(&r->arena, l, list_val(pair));
                }
            }
            return list_val(l);
        }
        if (named(name, "get")) {
            if (n < 1) jr_fail(r, at, "get needs a key");
            const JVal *v = jv_dict_get(d, args[0], &r->work);
            jr_work(r, at, 0);
            return v ? *v : n > 1 ? args[1] : jv_none();
        }
    }
    *found = 0;
    return jv_none();
}

// ---- tests ---------------------------------------------------------------------------------

int jb_test(Render *r, const JNode *at, const char *name, JVal v, const JVal *args, int n) {
    if (named(name, "defined")) return v.t != JV_UNDEF;
    if (named(name, "undefined")) return v.t == JV_UNDEF;
    if (named(name, "none")) return v.t == JV_NONE;
    if (named(name, "string")) return v.t == JV_STR;
    if (named(name, "number")) return v.t == JV_INT || v.t == JV_FLOAT;
    if (named(name, "integer")) return v.t == JV_INT;
    if (named(name, "float")) return v.t == JV_FLOAT;
    if (named(name, "boolean")) return v.t == JV_BOOL;
    if (named(name, "true")) return v.t == JV_BOOL && v.b;
    if (named(name, "false")) return v.t == JV_BOOL && !v.b;
    if (named(name, "mapping")) return v.t == JV_DICT;
    if (named(name, "iterable")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR;
    if (named(name, "sequence")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR;
    if (named(name, "callable")) return v.t == JV_FUNC || v.t == JV_MACRO;
    if (named(name, "odd") || named(name, "even")) {
        int64_t x = int_arg(r, at, v, name);
        return (x % 2 != 0) == (name[0] == 'o');
    }
    if (named(name, "lower") || named(name, "upper")) {
        if (v.t != JV_STR) return 0;
        JVal m = map_case(r, v.s, name[0] == 'l' ? 2 : 1);
        return jr_equal(r, at, m, v);
    }
    if (n < 1) jr_fail(r, at, "unknown test '%s' (or it needs an argument)", name);
    if (named(name, "equalto") || named(name, "eq") || named(name, "sameas")) return jr_equal(r, at, v, args[0]);
    if (named(name, "ne")) return !jr_equal(r, at, v, args[0]);
    if (named(name, "in")) {
        JVal in = args[0];
        if (in.t == JV_LIST) {
            for (int i = 0; i < in.l->n; i++)
                if (jr_equal(r, at, in.l->v[i], v)) return 1;
            return 0;
        }
        if (in.t == JV_DICT) {
            const JVal *found = jv_dict_get(in.d, v, &r->work);
            jr_work(r, at, 0);
            return found != NULL;
        }
        if (in.t == JV_STR && v.t == JV_STR) {
            jr_work(r, at, (in.s->len + v.s->len) / 64);
            return v.s->len == 0 || memmem(in.s->s, in.s->len, v.s->s, v.s->len) != NULL;
        }
        return 0;
    }
    if (named(name, "divisibleby")) {
        int64_t d = int_arg(r, at, args[0], name);
        return d == -1 || (d != 0 && int_arg(r, at, v, name) % d == 0);   // INT64_MIN % -1 is undefined in C
    }
    jr_fail(r, at, "unknown test '%s'", name);
}

// ---- filters -------------------------------------------------------------------------------------

static JVal attr_of(Render *r, const JNode *at, JVal item, JVal name) {
    if (item.t == JV_DICT && name.t == JV_STR) {
        const JVal *v = jv_dict_get(item.d, name, &r->work);
        jr_work(r, at, 0);
        if (v) return *v;
    }
    return jv_undef("attribute");
}

// select/reject(test, args...) and selectattr/rejectattr(attr, test, args...).
static JVal select_items(Render *r, const JNode *at, JVal v, const JVal *args, int n, int by_attr, int keep) {
    JList *in = jr_items(r, at, v), *out = jv_list_new(&r->arena);
    int t0 = by_attr ? 1 : 0;
    if (by_attr && n < 1) jr_fail(r, at, "selectattr/rejectattr need an attribute name");
    const char *test = n > t0 ? need_str(r, at, args[t0], "a test name")->s : NULL;
    for (int i = 0; i < in->n; i++) {
        jr_work(r, at, 1);
        JVal x = by_attr ? attr_of(r, at, in->v[i], args[0]) : in->v[i];
        int pass = test ? jb_test(r, at, test, x, args + t0 + 1, n - t0 - 1) : jv_truthy(x);
        if (pass == keep) jv_list_push(&r->arena, out, in->v[i]);
    }
    return list_val(out);
}

JVal jb_filter(Render *r, const JNode *at, const char *name, JVal v, const JVal *args, int n, const char **kw_names,
               const JVal *kw, int n_kw) {
    if (named(name, "default") || named(name, "d")) {
        int boolean = n > 1 ? jv_truthy(args[1]) : 0;
        const JVal *b = kwarg(kw_names, kw, n_kw, "boolean");
        if (b) boolean = jv_truthy(*b);
        if (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) return n > 0 ? args[0] : jv_cstr(&r->arena, "");
        return v;
    }
    if (named(name, "length") || named(name, "count")) {
        if (v.t == JV_STR) {
            jr_work(r, at, v.s->len / 64);
            return jv_int(char_count(v.s));
        }
        if (v.t == JV_LIST) return jv_int(v.l->n);
        if (v.t == JV_DICT) return jv_int(v.d->n);
        if (v.t == JV_UNDEF) return jv_int(0);
        jr_fail(r, at, "object of type %s has no length", jv_type_name(v.t));
    }
    if (named(name, "list")) return list_val(jr_items(r, at, v));
    if (named(name, "safe")) return v;
    if (named(name, "string")) return jv_to_str(&r->arena, v);
    if (named(name, "tojson")) {
        const JVal *ind = kwarg(kw_names, kw, n_kw, "indent"), *sort = kwarg(kw_names, kw, n_kw, "sort_keys");
        JBuf b = {.arena = &r->arena};
        jbuf_put(&b, "", 0, NULL);
        // Python takes any indent; past a million spaces a line only runs the memory limit out.
        int indent = ind && ind->t == JV_INT ? (int)(ind->i > 1000000 ? 1000000 : ind->i < -1 ? -1 : ind->i) : -1;
        if (jv_write_json(&b, v, indent, sort && jv_truthy(*sort), 0))
            jr_fail(r, at, "tojson: a %s is not JSON serializable, or it nests deeper than 100 levels",
                    jv_type_name(v.t));
        return jbuf_value(&b);
    }
    if (named(name, "items")) {
        if (v.t == JV_UNDEF) return list_val(jv_list_new(&r->arena));
        if (v.t != JV_DICT) jr_fail(r, at, "items needs a mapping");
        int found;
        return jb_method(r, at, v, "items", NULL, 0, &found);
    }
    if (named(name, "first") || named(name, "last")) {
        JList *l = jr_items(r, at, v);
        if (l->n == 0) return jv_undef(name);
        return l->v[name[0] == 'f' ? 0 : l->n - 1];
    }
    if (named(name, "reverse")) {
        if (v.t == JV_STR) {
            JBuf b = {.arena = &r->arena};
            jbuf_put(&b, "", 0, NULL);
            JList *chars = jr_items(r, at, v);
            for (int i = chars->n - 1; i >= 0; i--) jbuf_put(&b, chars->v[i].s->s, chars->v[i].s->len, chars->v[i].s->tag);
            return jbuf_value(&b);
        }
        JList *l = jr_items(r, at, v), *out = jv_list_new(&r->arena);
        for (int i = l->n - 1; i >= 0; i--) jv_list_push(&r->arena, out, l->v[i]);
        return list_val(out);
    }
    if (named(name, "join")) {
        JList *l = jr_items(r, at, v);
        const JStr *sep = n > 0 ? need_str(r, at, args[0], "join") : NULL;
        JBuf b = {.arena = &r->arena};
        jbuf_put(&b, "", 0, NULL);
        for (int i = 0; i < l->n; i++) {
            jr_work(r, at, 1);
            if (i && sep) jbuf_put(&b, sep->s, sep->len, sep->tag);
            jv_write_str(&b, l->v[i]);
        }
        return jbuf_value(&b);
    }
    if (named(name, "select") || named(name, "reject")) return select_items(r, at, v, args, n, 0, name[0] == 's');
    if (named(name, "selectattr") || named(name, "rejectattr")) return select_items(r, at, v, args, n, 1, name[0] == 's');
    if (named(name, "map")) {
        JList *in = jr_items(r, at, v), *out = jv_list_new(&r->arena);
        const JVal *attr = kwarg(kw_names, kw, n_kw, "attribute"), *dflt = kwarg(kw_names, kw, n_kw, "default");
        for (int i = 0; i < in->n; i++) {
            jr_work(r, at, 1);
            JVal x;
            if (attr) {
                x = attr_of(r, at, in->v[i], *attr);
                if (x.t == JV_UNDEF && dflt) x = *dflt;
            } else if (n > 0) {
                x = jb_filter(r, at, need_str(r, at, args[0], "map")->s, in->v[i], args + 1, n - 1, NULL, NULL, 0);
            } else {
                jr_fail(r, at, "map needs a filter name or attribute=");
            }
            jv_list_push(&r->arena, out, x);
        }
        return list_val(out);
    }
    if (named(name, "abs")) {
        if (v.t == JV_INT && v.i == INT64_MIN) jr_overflow(r, at);
        if (v.t == JV_INT) return jv_int(v.i < 0 ? -v.i : v.i);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.f));
        jr_fail(r, at, "abs needs a number");
    }
    if (named(name, "int")) {   // jinja2: int(value), else int(float(value)), else the default
        const int64_t dflt = n > 0 ? int_arg(r, at, args[0], "int") : 0;
        double f = v.t == JV_FLOAT ? v.f : NAN;
        if (v.t == JV_INT) return v;
        if (v.t == JV_BOOL) return jv_int(v.b);
        if (v.t == JV_STR) {
            char *end;
            errno = 0;
            long long x = strtoll(v.s->s, &end, 10);
            if (!*end && end != v.s->s) {
                if (errno == ERANGE) jr_overflow(r, at);
                return jv_int(x);
            }
            f = strtod(v.s->s, &end);
            if (*end || end == v.s->s) return jv_int(dflt);
        }
        if (isnan(f)) return jv_int(dflt);   // Python: ValueError, so the default
        if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) jr_overflow(r, at);
        return jv_int((int64_t)f);
    }
    if (named(name, "float")) {
        if (v.t == JV_INT) return jv_float((double)v.i);
        if (v.t == JV_FLOAT) return v;
        if (v.t == JV_STR) return jv_float(strtod(v.s->s, NULL));
        return jv_float(0);
    }
    if (v.t == JV_UNDEF && (named(name, "trim") || named(name, "upper") || named(name, "lower") ||
                            named(name, "capitalize") || named(name, "title") || named(name, "replace") ||
                            named(name, "indent")))
        v = jv_cstr(&r->arena, "");
    if (v.t != JV_STR && (named(name, "trim") || named(name, "upper") || named(name, "lower") || named(name, "capitalize") ||
                          named(name, "title") || named(name, "replace") || named(name, "indent")))
        v = jv_to_str(&r->arena, v);
    if (named(name, "trim")) return jb_strip(r, v, n > 0 && args[0].t == JV_STR ? args[0].s : NULL, 3);
    if (named(name, "upper")) return map_case(r, v.s, 1);
    if (named(name, "lower")) return map_case(r, v.s, 2);
    if (named(name, "title")) return map_case(r, v.s, 3);
    if (named(name, "capitalize")) {   // jinja2: first character upper, the rest lower
        JVal low = map_case(r, v.s, 2);
        return map_case(r, low.s, 4);
    }
    if (named(name, "replace")) {
        if (n < 2) jr_fail(r, at, "replace needs two arguments");
        return replace(r, at, v.s, args[0], args[1], n > 2 ? int_arg(r, at, args[2], "replace") : -1);
    }
    if (named(name, "indent")) {
        const JVal *w = kwarg(kw_names, kw, n_kw, "width"), *f = kwarg(kw_names, kw, n_kw, "first");
        int64_t width = n > 0 ? int_arg(r, at, args[0], "indent") : w ? int_arg(r, at, *w, "indent") : 4;
        int first = n > 1 ? jv_truthy(args[1]) : f ? jv_truthy(*f) : 0;
        JBuf b = {.arena = &r->arena};
        jbuf_put(&b, "", 0, NULL);
        jr_work(r, at, v.s->len / 4);
        for (size_t i = 0; i < v.s->len; i++) {
            int line_start = i == 0 ? first : v.s->s[i - 1] == '\n';
            if (line_start && v.s->s[i] != '\n' && width > 0) jbuf_spaces(&b, (uint64_t)width);
            jbuf_put(&b, v.s->s + i, 1, v.s->tag ? v.s->tag + i : NULL);
        }
        return jbuf_value(&b);
    }
    jr_fail(r, at, "unknown filter '%s'", name);
}

// ---- global functions ------------------------------------------------------------------------------

static JVal fn_raise_exception(Render *r, const JVal *args, int n, const char **kw_names, const JVal *kw, int n_kw) {
    (void)kw_names, (void)kw, (void)n_kw;
    JVal msg = n > 0 ? jv_to_str(&r->arena, args[0]) : jv_cstr(&r->arena, "");
    jr_fail(r, NULL, "the template raised an error: %s", msg.s->s);
}

static JVal fn_namespace(Render *r, const JVal *args, int n, const char **kw_names, const JVal *kw, int n_kw) {
    JDict *d = jv_dict_new(&r->arena);
    d->ns = 1;
    for (int i = 0; i < n; i++)
        if (args[i].t == JV_DICT)
            for (int k = 0; k < args[i].d->n; k++) jv_dict_set(&r->arena, d, args[i].d->key[k], args[i].d->val[k]);
    for (int i = 0; i < n_kw; i++) jv_dict_set(&r->arena, d, jv_cstr(&r->arena, kw_names[i]), kw[i]);
    jr_work(r, r->at, 0);   // the keys compared
    return (JVal){.t = JV_DICT, .d = d};
}

static JVal fn_dict(Render *r, const JVal *args, int n, const char **kw_names, const JVal *kw, int n_kw) {
    JVal v = fn_namespace(r, args, n, kw_names, kw, n_kw);
    v.d->ns = 0;
    return v;
}

static JVal fn_range(Render *r, const JVal *args, int n, const char **kw_names, const JVal *kw, int n_kw) {
    (void)kw_names, (void)kw, (void)n_kw;
    int64_t a = 0, b = 0, step = 1;
    for (int i = 0; i < n; i++)
        if (args[i].t != JV_INT) jr_fail(r, NULL, "range() needs integers");
    if (n == 1) b = args[0].i;
    else if (n >= 2) a = args[0].i, b = args[1].i;
    if (n >= 3) step = args[2].i;
    if (n < 1 || n > 3 || step == 0) jr_fail(r, NULL, "range() takes 1 to 3 integers, the step not 0");
    JList *l = jv_list_new(&r->arena);
    for (int64_t i = a; step > 0 ? i < b : i > b;) {
        jr_work(r, r->at, 1);
        if (l->n >= 1000000) jr_fail(r, NULL, "range() too long");
        jv_list_push(&r->arena, l, jv_int(i));
        if (__builtin_add_overflow(i, step, &i)) break;   // past b either way
    }
    return list_val(l);
}

static JVal fn_strftime_now(Render *r, const JVal *args, int n, const char **kw_names, const JVal *kw, int n_kw) {
    (void)kw_names, (void)kw, (void)n_kw;
    if (n < 1 || args[0].t != JV_STR) jr_fail(r, NULL, "strftime_now() needs a format string");
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char out[256];
    size_t len = strftime(out, sizeof out, args[0].s->s, &tm);
    return jv_str(&r->arena, out, len, NULL);
}

JFunc jb_global(const char *name) {
    if (named(name, "raise_exception")) return fn_raise_exception;
    if (named(name, "namespace")) return fn_namespace;
    if (named(name, "dict")) return fn_dict;
    if (named(name, "range")) return fn_range;
    if (named(name, "strftime_now")) return fn_strftime_now;
    return NULL;
}
