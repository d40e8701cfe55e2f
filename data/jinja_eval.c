// jinja_eval.c: renders the tree of jinja_parse.c. Scopes follow jinja2: a
// for loop's body has its own scope per iteration (a `set` there does not
// leak out, hence namespace()), `if` has none, a macro sees the template's
// top level and its arguments. Undefined values print as "" and are false,
// empty when iterated; most other uses of them are errors, as in jinja2.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "jinja_internal.h"


_Noreturn void jr_fail(Render *r, const JNode *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) pt_fail(r->err, "%s:%d:%d: %s", r->tpl->name, at->line, at->col, msg);
    else pt_fail(r->err, "%s: %s", r->tpl->name, msg);
    longjmp(r->fail, 1);
}

_Noreturn void jr_overflow(Render *r, const JNode *at) {
    jr_fail(r, at, "integer overflow: the result does not fit in 64 bits");
}

void jr_work(Render *r, const JNode *at, uint64_t n) {
    r->work.used += n;
    if (r->work.used > r->work.limit)
        jr_fail(r, at, "the template takes more than %llu steps (a loop or recursion without end?)",
                (unsigned long long)r->work.limit);
}

int jr_equal(Render *r, const JNode *at, JVal a, JVal b) {
    int eq = jv_equal(a, b, &r->work);
    jr_work(r, at, 0);
    if (eq < 0) jr_fail(r, at, "values compared are nested deeper than %d levels (namespaces holding each other?)",
                        JINJA_MAX_NESTING);
    return eq;
}

// The arena's limit, passed.
_Noreturn static void out_of_memory(void *ctx) {
    Render *r = ctx;
    jr_fail(r, r->at, "the template uses more than %zu MB of memory", r->arena.limit >> 20);
}

// ---- scopes -------------------------------------------------------------------------------

static Scope *scope_new(Render *r, Scope *parent) {
    Scope *s = arena_alloc(&r->arena, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(Render *r, Scope *s, const char *name, JVal v) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) {
            s->val[i] = v;
            return;
        }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        const char **names = arena_alloc(&r->arena, (size_t)cap * sizeof *names);
        JVal *vals = arena_alloc(&r->arena, (size_t)cap * sizeof *vals);
        if (s->n) memcpy(names, s->name, (size_t)s->n * sizeof *names), memcpy(vals, s->val, (size_t)s->n * sizeof *vals);
        s->name = names, s->val = vals, s->cap = cap;
    }
    s->name[s->n] = name;
    s->val[s->n++] = v;
}

static JVal lookup(Render *r, Scope *s, const char *name) {
    for (; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (!strcmp(s->name[i], name)) return s->val[i];
    const JVal *g = jv_dict_get_str(r->globals, name, &r->work);
    if (g) return *g;
    JFunc fn = jb_global(name);
    if (fn) return (JVal){.t = JV_FUNC, .fn = fn};
    return jv_undef(name);
}

// ---- expressions ------------------------------------------------------------------------------

static JVal eval(Render *r, Scope *s, const JNode *n);
static void exec_body(Render *r, Scope *s, const JNode *body, JBuf *out);

static int is_num(JVal v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num(JVal v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : (double)v.b; }
static int is_int(JVal v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t int_of(JVal v) { return v.t == JV_INT ? v.i : v.b; }

_Noreturn static void undefined_use(Render *r, const JNode *at, JVal v) {
    jr_fail(r, at, "'%s' is undefined", v.undef_name ? v.undef_name : "value");
}

static JVal concat_str(Render *r, JVal a, JVal b) {
    JBuf buf = {.arena = &r->arena};
    jbuf_put(&buf, a.s->s, a.s->len, a.s->tag);
    jbuf_put(&buf, b.s->s, b.s->len, b.s->tag);
    if (!buf.s) jbuf_put(&buf, "", 0, NULL);
    return jbuf_value(&buf);
}

static int compare(Render *r, const JNode *at, JVal a, JVal b) {
    if (is_num(a) && is_num(b)) return (num(a) > num(b)) - (num(a) < num(b));
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        jr_work(r, at, n / 64);
        int c = memcmp(a.s->s, b.s->s, n);
        return c ? (c > 0) - (c < 0) : (a.s->len > b.s->len) - (a.s->len < b.s->len);
    }
    jr_fail(r, at, "cannot compare %s with %s", jv_type_name(a.t), jv_type_name(b.t));
}

static int contains(Render *r, const JNode *at, JVal item, JVal in) {
    if (in.t == JV_UNDEF) return 0;
    if (in.t == JV_STR) {
        if (item.t != JV_STR) jr_fail(r, at, "'in <string>' needs a string on the left, not %s", jv_type_name(item.t));
        jr_work(r, at, (in.s->len + item.s->len) / 64);
        return item.s->len == 0 || memmem(in.s->s, in.s->len, item.s->s, item.s->len) != NULL;
    }
    if (in.t == JV_LIST) {
        for (int i = 0; i < in.l->n; i++)
            if (jr_equal(r, at, in.l->v[i], item)) return 1;
        return 0;
    }
    if (in.t == JV_DICT) {
        const JVal *v = jv_dict_get(in.d, item, &r->work);
        jr_work(r, at, 0);
        return v != NULL;
    }
    jr_fail(r, at, "argument of type %s is not iterable", jv_type_name(in.t));
}

static JVal arith(Render *r, const JNode *at, BinOp op, JVal a, JVal b) {
    if (a.t == JV_UNDEF) undefined_use(r, at, a);
    if (b.t == JV_UNDEF) undefined_use(r, at, b);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) return concat_str(r, a, b);
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        JList *l = jv_list_new(&r->arena);
        for (int i = 0; i < a.l->n; i++) jv_list_push(&r->arena, l, a.l->v[i]);
        for (int i = 0; i < b.l->n; i++) jv_list_push(&r->arena, l, b.l->v[i]);
        return (JVal){.t = JV_LIST, .l = l};
    }
    if (op == OP_MUL && (a.t == JV_STR || b.t == JV_STR) && (is_int(a) || is_int(b))) {
        JVal str = a.t == JV_STR ? a : b;
        int64_t times = int_of(a.t == JV_STR ? b : a);
        if (times > 100000 || (int64_t)str.s->len * times > 10000000) jr_fail(r, at, "string repetition too large");
        JBuf buf = {.arena = &r->arena};
        jbuf_put(&buf, "", 0, NULL);
        for (int64_t i = 0; i < times; i++) jbuf_put(&buf, str.s->s, str.s->len, str.s->tag);
        return jbuf_value(&buf);
    }
    if (!is_num(a) || !is_num(b))
        jr_fail(r, at, "unsupported operand types for an arithmetic operator: %s and %s", jv_type_name(a.t),
                jv_type_name(b.t));
    int ints = is_int(a) && is_int(b);
    int64_t x = int_of(a), y = int_of(b), z;
    double fx = num(a), fy = num(b);
    switch (op) {
    case OP_ADD:
        if (ints && __builtin_add_overflow(x, y, &z)) jr_overflow(r, at);
        return ints ? jv_int(z) : jv_float(fx + fy);
    case OP_SUB:
        if (ints && __builtin_sub_overflow(x, y, &z)) jr_overflow(r, at);
        return ints ? jv_int(z) : jv_float(fx - fy);
    case OP_MUL:
        if (ints && __builtin_mul_overflow(x, y, &z)) jr_overflow(r, at);
        return ints ? jv_int(z) : jv_float(fx * fy);
    case OP_DIV:
        if (fy == 0) jr_fail(r, at, "division by zero");
        return jv_float(fx / fy);
    case OP_FLOORDIV: case OP_MOD:
        if (fy == 0) jr_fail(r, at, "division by zero");
        if (ints) {   // Python rounds toward negative infinity
            if (x == INT64_MIN && y == -1) {   // the one quotient past 64 bits; its remainder is 0
                if (op == OP_FLOORDIV) jr_overflow(r, at);
                return jv_int(0);
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
            return jv_int(op == OP_MOD ? m : q);
        } else {
            double q = floor(fx / fy);
            return jv_float(op == OP_MOD ? fx - q * fy : q);
        }
    case OP_POW:
        if (ints && y >= 0) {   // by squaring; only 0, 1 and -1 stay in range for any exponent
            int64_t p = 1;
            for (;;) {
                if ((y & 1) && __builtin_mul_overflow(p, x, &p)) jr_overflow(r, at);
                y >>= 1;
                if (!y) break;
                if (__builtin_mul_overflow(x, x, &x)) jr_overflow(r, at);
            }
            return jv_int(p);
        }
        return jv_float(pow(fx, fy));
    default: jr_fail(r, at, "bad operator");
    }
}

static JVal binop(Render *r, const JNode *n, JVal a, JVal b) {
    switch (n->op) {
    case OP_EQ: return jv_bool(jr_equal(r, n, a, b));
    case OP_NE: return jv_bool(!jr_equal(r, n, a, b));
    case OP_LT: return jv_bool(compare(r, n, a, b) < 0);
    case OP_LE: return jv_bool(compare(r, n, a, b) <= 0);
    case OP_GT: return jv_bool(compare(r, n, a, b) > 0);
    case OP_GE: return jv_bool(compare(r, n, a, b) >= 0);
    case OP_IN: return jv_bool(contains(r, n, a, b));
    case OP_NOT_IN: return jv_bool(!contains(r, n, a, b));
    case OP_CONCAT: return concat_str(r, jv_to_str(&r->arena, a), jv_to_str(&r->arena, b));
    default: return arith(r, n, n->op, a, b);
    }
}

// Byte offsets of the code points of s (n + 1 entries), for Python's character indexing.
static size_t *char_offsets(Render *r, const JStr *s, int64_t *n) {
    jr_work(r, r->at, s->len / 16);
    size_t *off = arena_alloc(&r->arena, (s->len + 1) * sizeof *off);
    int64_t k = 0;
    for (size_t i = 0; i < s->len; i++)
        if (((unsigned char)s->s[i] & 0xC0) != 0x80) off[k++] = i;
    off[k] = s->len;
    *n = k;
    return off;
}

JVal jr_substr(Render *r, const JStr *s, size_t from, size_t to) {
    return jv_str(&r->arena, s->s + from, to - from, s->tag ? s->tag + from : NULL);
}

static JVal index_value(Render *r, const JNode *at, JVal obj, JVal key) {
    if (obj.t == JV_UNDEF) undefined_use(r, at, obj);
    if (obj.t == JV_DICT) {
        const JVal *v = jv_dict_get(obj.d, key, &r->work);
        jr_work(r, at, 0);
        return v ? *v : jv_undef(key.t == JV_STR ? key.s->s : "item");
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && is_int(key)) {
        int64_t n, i = int_of(key);
        size_t *off = NULL;
        if (obj.t == JV_LIST) n = obj.l->n;
        else off = char_offsets(r, obj.s, &n);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return jv_undef("index");
        return obj.t == JV_LIST ? obj.l->v[i] : jr_substr(r, obj.s, off[i], off[i + 1]);
    }
    if (obj.t == JV_NONE) return jv_undef("item of None");
    return jv_undef("item");
}

static JVal slice_value(Render *r, const JNode *n, JVal obj, Scope *s) {
    if (obj.t != JV_LIST && obj.t != JV_STR) jr_fail(r, n, "cannot slice %s", jv_type_name(obj.t));
    int64_t len;
    size_t *off = NULL;
    if (obj.t == JV_LIST) len = obj.l->n;
    else off = char_offsets(r, obj.s, &len);
    int64_t bound[3], has[3];
    const JNode *parts[3] = {n->b, n->c, n->d};
    for (int k = 0; k < 3; k++) {
        JVal v = parts[k] ? eval(r, s, parts[k]) : jv_none();
        has[k] = v.t != JV_NONE && v.t != JV_UNDEF;
        if (has[k] && !is_int(v)) jr_fail(r, n, "slice indices must be integers");
        bound[k] = has[k] ? int_of(v) : 0;
    }
    int64_t step = has[2] ? bound[2] : 1;
    if (step == 0) jr_fail(r, n, "slice step cannot be zero");
    // Python's slice.indices().
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? len - 1 : len, start, stop;
    start = has[0] ? (bound[0] < 0 ? bound[0] + len : bound[0]) : (step < 0 ? hi : lo);
    stop = has[1] ? (bound[1] < 0 ? bound[1] + len : bound[1]) : (step < 0 ? lo : hi);
    start = start < lo ? lo : start > hi ? hi : start;
    stop = stop < lo ? lo : stop > hi ? hi : stop;
    if (obj.t == JV_STR && step == 1) return jr_substr(r, obj.s, off[start], off[stop > start ? stop : start]);
    JList *l = obj.t == JV_LIST ? jv_list_new(&r->arena) : NULL;
    JBuf b = {.arena = &r->arena};
    jbuf_put(&b, "", 0, NULL);
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (l) jv_list_push(&r->arena, l, obj.l->v[i]);
        else jbuf_put(&b, obj.s->s + off[i], off[i + 1] - off[i], obj.s->tag ? obj.s->tag + off[i] : NULL);
        if (__builtin_add_overflow(i, step, &i)) break;   // past the end either way
    }
    return l ? (JVal){.t = JV_LIST, .l = l} : jbuf_value(&b);
}

static void eval_args(Render *r, Scope *s, const JNode *n, JVal **args, JVal **kw) {
    *args = arena_alloc(&r->arena, (size_t)(n->n_args + 1) * sizeof **args);
    *kw = arena_alloc(&r->arena, (size_t)(n->n_kw + 1) * sizeof **kw);
    for (int i = 0; i < n->n_args; i++) (*args)[i] = eval(r, s, n->args[i]);
    for (int i = 0; i < n->n_kw; i++) (*kw)[i] = eval(r, s, n->kw[i]);
}

static JVal call_macro(Render *r, const JNode *at, const JNode *m, const JVal *args, int n, const char **kw_names,
                       const JVal *kw, int n_kw) {
    if (++r->depth > 100) jr_fail(r, at, "macro calls nested too deeply");
    if (n > m->n_kw) jr_fail(r, at, "macro '%s' takes %d arguments, %d given", m->name, m->n_kw, n);
    Scope *s = scope_new(r, r->root);
    for (int i = 0; i < m->n_kw; i++) {
        JVal v = jv_undef(m->kw_names[i]);
        int given = 0;
        if (i < n) v = args[i], given = 1;
        for (int k = 0; k < n_kw; k++)
            if (!strcmp(kw_names[k], m->kw_names[i])) v = kw[k], given = 1;
        if (!given && m->kw[i]) v = eval(r, s, m->kw[i]);
        scope_set(r, s, m->kw_names[i], v);
    }
    JBuf out = {.arena = &r->arena};
    jbuf_put(&out, "", 0, NULL);
    exec_body(r, s, m->body, &out);
    r->depth--;
    return jbuf_value(&out);
}

static JVal eval_call(Render *r, Scope *s, const JNode *n) {
    JVal *args, *kw;
    if (n->a->kind == N_ATTR) {   // obj.method(...)
        JVal obj = eval(r, s, n->a->a);
        if (obj.t == JV_STR || obj.t == JV_DICT || obj.t == JV_LIST) {
            eval_args(r, s, n, &args, &kw);
            int found;
            JVal v = jb_method(r, n, obj, n->a->name, args, n->n_args, &found);
            if (found) return v;
        }
    }
    JVal fn = eval(r, s, n->a);
    eval_args(r, s, n, &args, &kw);
    if (fn.t == JV_FUNC) return fn.fn(r, args, n->n_args, n->kw_names, kw, n->n_kw);
    if (fn.t == JV_MACRO) return call_macro(r, n, fn.macro, args, n->n_args, n->kw_names, kw, n->n_kw);
    if (fn.t == JV_UNDEF) undefined_use(r, n, fn);
    jr_fail(r, n, "%s is not callable", jv_type_name(fn.t));
}

static JVal eval_node(Render *r, Scope *s, const JNode *n);

// Every evaluation is a step, and a level of C recursion.
static JVal eval(Render *r, Scope *s, const JNode *n) {
    if (++r->nesting > JINJA_MAX_RENDER_NESTING)
        jr_fail(r, n, "the template nests deeper than %d levels as it renders (a macro calling itself?)",
                JINJA_MAX_RENDER_NESTING);
    r->at = n;
    jr_work(r, n, 1);
    JVal v = eval_node(r, s, n);
    r->nesting--;
    return v;
}

static JVal eval_node(Render *r, Scope *s, const JNode *n) {
    switch (n->kind) {
    case N_LIT: return n->lit;
    case N_VAR: return lookup(r, s, n->name);
    case N_ATTR: {
        JVal obj = eval(r, s, n->a);
        if (obj.t == JV_UNDEF) undefined_use(r, n, obj);
        if (obj.t == JV_DICT) {
            const JVal *v = jv_dict_get_str(obj.d, n->name, &r->work);
            return v ? *v : jv_undef(n->name);
        }
        return jv_undef(n->name);
    }
    case N_INDEX: {  // left before right, as jinja2 does (C leaves argument order open): errors name one place
        JVal obj = eval(r, s, n->a);
        return index_value(r, n, obj, eval(r, s, n->b));
    }
    case N_SLICE: return slice_value(r, n, eval(r, s, n->a), s);
    case N_CALL: return eval_call(r, s, n);
    case N_FILTER: {
        JVal v = eval(r, s, n->a), *args, *kw;
        eval_args(r, s, n, &args, &kw);
        return jb_filter(r, n, n->name, v, args, n->n_args, n->kw_names, kw, n->n_kw);
    }
    case N_TEST: {
        JVal v = eval(r, s, n->a), *args, *kw;
        eval_args(r, s, n, &args, &kw);
        return jv_bool(jb_test(r, n, n->name, v, args, n->n_args) != n->negate);
    }
    case N_NOT: return jv_bool(!jv_truthy(eval(r, s, n->a)));
    case N_NEG: {
        JVal v = eval(r, s, n->a);
        if (v.t == JV_INT && v.i == INT64_MIN) jr_overflow(r, n);
        if (v.t == JV_INT || v.t == JV_BOOL) return jv_int(-int_of(v));
        if (v.t == JV_FLOAT) return jv_float(-v.f);
        jr_fail(r, n, "bad operand type for unary -: %s", jv_type_name(v.t));
    }
    case N_BIN: {
        JVal a = eval(r, s, n->a);
        return binop(r, n, a, eval(r, s, n->b));
    }
    case N_AND: {
        JVal a = eval(r, s, n->a);
        return jv_truthy(a) ? eval(r, s, n->b) : a;
    }
    case N_OR: {
        JVal a = eval(r, s, n->a);
        return jv_truthy(a) ? a : eval(r, s, n->b);
    }
    case N_COND:
        if (jv_truthy(eval(r, s, n->a))) return eval(r, s, n->b);
        return n->c ? eval(r, s, n->c) : jv_undef("else branch");
    case N_LIST: {
        JList *l = jv_list_new(&r->arena);
        for (int i = 0; i < n->n_args; i++) jv_list_push(&r->arena, l, eval(r, s, n->args[i]));
        return (JVal){.t = JV_LIST, .l = l};
    }
    case N_DICT: {
        JDict *d = jv_dict_new(&r->arena);
        for (int i = 0; i < n->n_args; i++) {
            JVal key = eval(r, s, n->args[i]);
            if (key.t == JV_LIST || key.t == JV_DICT) jr_fail(r, n->args[i], "unhashable type: '%s'", jv_type_name(key.t));
            jv_dict_set(&r->arena, d, key, eval(r, s, n->kw[i]));
            jr_work(r, n, 0);   // the keys compared
        }
        return (JVal){.t = JV_DICT, .d = d};
    }
    default: jr_fail(r, n, "not an expression");
    }
}

// ---- statements ----------------------------------------------------------------------------------

JList *jr_items(Render *r, const JNode *at, JVal v) {
    if (v.t == JV_LIST) return v.l;
    JList *l = jv_list_new(&r->arena);
    if (v.t == JV_UNDEF) return l;
    if (v.t == JV_DICT) {
        for (int i = 0; i < v.d->n; i++) jv_list_push(&r->arena, l, v.d->key[i]);
        return l;
    }
    if (v.t == JV_STR) {
        int64_t n;
        size_t *off = char_offsets(r, v.s, &n);
        for (int64_t i = 0; i < n; i++) jv_list_push(&r->arena, l, jr_substr(r, v.s, off[i], off[i + 1]));
        return l;
    }
    jr_fail(r, at, "%s object is not iterable", jv_type_name(v.t));
}

static void bind_targets(Render *r, Scope *s, const JNode *n, JVal item) {
    if (!n->name2) {
        scope_set(r, s, n->name, item);
        return;
    }
    if (item.t != JV_LIST || item.l->n != 2) jr_fail(r, n, "cannot unpack %s into two loop variables", jv_type_name(item.t));
    scope_set(r, s, n->name, item.l->v[0]);
    scope_set(r, s, n->name2, item.l->v[1]);
}

static void exec_for(Render *r, Scope *s, const JNode *n, JBuf *out) {
    JList *all = jr_items(r, n, eval(r, s, n->a)), *items = all;
    if (n->b) {   // the loop filter runs first: loop.* counts the kept items
        items = jv_list_new(&r->arena);
        for (int i = 0; i < all->n; i++) {
            jr_work(r, n, 1);
            Scope *f = scope_new(r, s);
            bind_targets(r, f, n, all->v[i]);
            if (jv_truthy(eval(r, f, n->b))) jv_list_push(&r->arena, items, all->v[i]);
        }
    }
    int len = items->n;
    // One `loop` for the whole statement whose values each turn updates, as
    // jinja2's LoopContext is one object (and a turn then allocates only its scope).
    static const char *const LOOP_KEYS[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                            "previtem", "nextitem"};
    Arena *a = &r->arena;
    JDict *loop = jv_dict_new(a);
    for (int k = 0; k < 9; k++) jv_dict_add(a, loop, jv_cstr(a, LOOP_KEYS[k]), jv_none());
    for (int i = 0; i < len; i++) {
        jr_work(r, n, 1);
        Scope *it = scope_new(r, s);
        bind_targets(r, it, n, items->v[i]);
        const JVal values[9] = {jv_int(i + 1), jv_int(i), jv_int(len - i), jv_int(len - i - 1), jv_bool(i == 0),
                                jv_bool(i == len - 1), jv_int(len),
                                i > 0 ? items->v[i - 1] : jv_undef("loop.previtem"),
                                i + 1 < len ? items->v[i + 1] : jv_undef("loop.nextitem")};
        memcpy(loop->val, values, sizeof values);
        scope_set(r, it, "loop", (JVal){.t = JV_DICT, .d = loop});
        exec_body(r, it, n->body, out);
        int signal = r->loop_signal;
        r->loop_signal = 0;
        if (signal == 1) break;
    }
    if (len == 0 && n->else_body) exec_body(r, s, n->else_body, out);
}

static void exec_set(Render *r, Scope *s, const JNode *n) {
    JVal v;
    if (n->body) {
        JBuf b = {.arena = &r->arena};
        jbuf_put(&b, "", 0, NULL);
        exec_body(r, s, n->body, &b);
        v = jbuf_value(&b);
    } else {
        v = eval(r, s, n->a);
    }
    if (!n->name2) {
        scope_set(r, s, n->name, v);
        return;
    }
    JVal target = lookup(r, s, n->name);
    if (target.t != JV_DICT || !target.d->ns)
        jr_fail(r, n, "cannot assign attribute '%s' on '%s': not a namespace()", n->name2, n->name);
    jv_dict_set(&r->arena, target.d, jv_cstr(&r->arena, n->name2), v);
    jr_work(r, n, 0);
}

static void exec_body(Render *r, Scope *s, const JNode *body, JBuf *out) {
    if (++r->nesting > JINJA_MAX_RENDER_NESTING)
        jr_fail(r, body, "the template nests deeper than %d levels as it renders (a macro calling itself?)",
                JINJA_MAX_RENDER_NESTING);
    for (int i = 0; i < body->n_args && !r->loop_signal; i++) {
        const JNode *n = body->args[i];
        r->at = n;
        jr_work(r, n, 1);
        switch (n->kind) {
        case N_TEXT: jbuf_put(out, n->lit.s->s, n->lit.s->len, NULL); break;
        case N_OUT: jv_write_str(out, eval(r, s, n->a)); break;
        case N_IF: {
            int k = 0;
            while (k < n->n_args && !jv_truthy(eval(r, s, n->args[k]))) k++;
            if (k < n->n_args) exec_body(r, s, n->kw[k], out);
            else if (n->else_body) exec_body(r, s, n->else_body, out);
            break;
        }
        case N_FOR: exec_for(r, s, n, out); break;
        case N_SET: exec_set(r, s, n); break;
        case N_MACRO: scope_set(r, s, n->name, (JVal){.t = JV_MACRO, .macro = n}); break;
        case N_BREAK: r->loop_signal = 1; break;
        case N_CONTINUE: r->loop_signal = 2; break;
        case N_BODY: exec_body(r, s, n, out); break;
        default: jr_fail(r, n, "not a statement");
        }
    }
    r->nesting--;
}

// ---- the API ---------------------------------------------------------------------------------------

int jinja_parse(JinjaTemplate **out, const char *src, size_t len, const char *name, PtError *e) {
    JinjaTemplate *t = xcalloc(1, sizeof *t, "template");
    t->name = xstrdup(name);
    if (jinja_compile(t, src, len, e)) {
        jinja_free(t);
        *out = NULL;
        return -1;
    }
    *out = t;
    return 0;
}

void jinja_free(JinjaTemplate *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t->name);
    free(t);
}

int jinja_render(const JinjaTemplate *t, const JinjaVars *vars, char **text, size_t *len, uint16_t **tags,
                 PtError *e) {
    Render *r = xcalloc(1, sizeof *r, "render");
    r->tpl = t;
    r->globals = jinja_vars_dict(vars);
    r->err = e;
    jinja_vars_limits(vars, &r->work.limit, &r->arena.limit);
    r->arena.over = out_of_memory;
    r->arena.ctx = r;
    r->arena.work = &r->work;
    *text = NULL, *tags = NULL, *len = 0;
    if (setjmp(r->fail)) {
        arena_free(&r->arena);
        free(r);
        return -1;
    }
    r->root = scope_new(r, NULL);
    JBuf out = {.arena = &r->arena};
    jbuf_put(&out, "", 0, NULL);
    exec_body(r, r->root, t->root, &out);
    *len = out.len;
    *text = xmalloc(out.len + 1, "rendered text");
    memcpy(*text, out.s, out.len + 1);
    *tags = xcalloc(out.len + 1, sizeof **tags, "rendered tags");
    if (out.tag) memcpy(*tags, out.tag, out.len * sizeof **tags);
    arena_free(&r->arena);
    free(r);
    return 0;
}
