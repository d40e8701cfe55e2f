// jinja_parse.c: tokens -> the tree of jinja_internal.h, with jinja2's
// operator precedence (lowest first): `x if c else y`, or, and, not, the
// comparisons and `in`, + -, ~, * / // %, **, unary minus, then postfix
// (.attr, [index], [a:b:c], calls) and filters / `is` tests, which bind
// tighter than every binary operator.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "jinja_internal.h"
#include "jinja_lex.h"

typedef struct {
    const JTokens *t;
    int i;
    Arena *a;
    const char *name;
    PtError *e;
    jmp_buf fail;
    int depth;              // open nested expressions and blocks (enter/leave)
} Parser;

static const JToken *cur(Parser *p) { return &p->t->tok[p->i]; }

_Noreturn static void fail(Parser *p, const JToken *at, const char *msg, const char *detail) {
    pt_fail(p->e, "%s:%d:%d: %s%s%s", p->name, at->line, at->col, msg, detail ? " " : "", detail ? detail : "");
    longjmp(p->fail, 1);
}

// The parser recurses once per nesting level (brackets, unary operators,
// blocks inside blocks): deeper than JINJA_MAX_NESTING is an error rather
// than a stack overflow. Real templates nest a few levels.
static void enter(Parser *p) {
    if (++p->depth > JINJA_MAX_NESTING) {
        char limit[64];
        snprintf(limit, sizeof limit, "(more than %d levels)", JINJA_MAX_NESTING);
        fail(p, cur(p), "expressions or blocks nested too deeply", limit);
    }
}
static void leave(Parser *p) { p->depth--; }

static int is_op(const JToken *t, const char *op) {
    return t->kind == TK_OP && t->len == strlen(op) && !memcmp(t->start, op, t->len);
}
static int is_name(const JToken *t, const char *name) {
    return t->kind == TK_NAME && t->len == strlen(name) && !memcmp(t->start, name, t->len);
}
static int accept_op(Parser *p, const char *op) { return is_op(cur(p), op) ? (p->i++, 1) : 0; }
static int accept_name(Parser *p, const char *name) { return is_name(cur(p), name) ? (p->i++, 1) : 0; }

static void expect_op(Parser *p, const char *op) {
    if (!accept_op(p, op)) {
        char want[16];
        snprintf(want, sizeof want, "'%s'", op);
        fail(p, cur(p), "expected", want);
    }
}

static const char *take_name(Parser *p) {
    const JToken *t = cur(p);
    if (t->kind != TK_NAME) fail(p, t, "expected a name", NULL);
    p->i++;
    return arena_strndup(p->a, t->start, t->len);
}

static JNode *node(Parser *p, NodeKind kind, const JToken *at) {
    JNode *n = arena_alloc(p->a, sizeof *n);
    n->kind = kind, n->line = at->line, n->col = at->col;
    return n;
}

// Growable node lists (args, bodies), kept in the arena.
typedef struct {
    JNode **v;
    const char **names;
    int n, cap;
} NodeList;

static void list_push(Parser *p, NodeList *l, JNode *n, const char *name) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        JNode **v = arena_alloc(p->a, (size_t)cap * sizeof *v);
        const char **names = arena_alloc(p->a, (size_t)cap * sizeof *names);
        if (l->n) memcpy(v, l->v, (size_t)l->n * sizeof *v), memcpy(names, l->names, (size_t)l->n * sizeof *names);
        l->v = v, l->names = names, l->cap = cap;
    }
    l->names[l->n] = name;
    l->v[l->n++] = n;
}

// A string literal's value: Python's escapes.
static JVal string_value(Parser *p, const JToken *t) {
    JBuf b = {.arena = p->a};
    const char *s = t->start + 1, *end = t->start + t->len - 1;
    while (s < end) {
        if (*s != '\\' || s + 1 >= end) {
            jbuf_put(&b, s++, 1, NULL);
            continue;
        }
        char c = s[1];
        s += 2;
        const char *simple = c == 'n' ? "\n" : c == 't' ? "\t" : c == 'r' ? "\r" : c == '\\' ? "\\" : c == '\'' ? "'"
                           : c == '"' ? "\"" : c == '0' ? "" : c == 'a' ? "\a" : c == 'b' ? "\b" : c == 'f' ? "\f"
                           : c == 'v' ? "\v" : c == '\n' ? "" : NULL;
        if (simple) {
            jbuf_put(&b, simple, c == '0' ? 1 : strlen(simple), NULL);
            continue;
        }
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (!digits || end - s < digits) {   // unknown escapes stay as they are, as in Python
            char raw[2] = {'\\', c};
            jbuf_put(&b, raw, 2, NULL);
            continue;
        }
        char hex[9] = {0};
        memcpy(hex, s, (size_t)digits);
        char *bad;
        unsigned long cp = strtoul(hex, &bad, 16);
        if (*bad || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(p, t, "bad escape in string", NULL);
        s += digits;
        char u[4];
        int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (n == 1) u[0] = (char)cp;
        else if (n == 2) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        else if (n == 3) u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F));
        else u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F));
        jbuf_put(&b, u, (size_t)n, NULL);
    }
    if (!b.s) jbuf_put(&b, "", 0, NULL);
    return jbuf_value(&b);
}

static JNode *parse_expr(Parser *p);
static JNode *parse_or(Parser *p);
static JNode *parse_unary(Parser *p, int with_filter);

// (args) after the "(": positional and name=value.
static void parse_call_args(Parser *p, NodeList *pos, NodeList *kw) {
    while (!accept_op(p, ")")) {
        if (pos->n + kw->n > 0) expect_op(p, ",");
        if (accept_op(p, ")")) break;   // a trailing comma
        if (cur(p)->kind == TK_NAME && is_op(&p->t->tok[p->i + 1], "=")) {
            const char *name = take_name(p);
            p->i++;
            list_push(p, kw, parse_expr(p), name);
        } else {
            if (kw->n) fail(p, cur(p), "a positional argument follows a keyword argument", NULL);
            list_push(p, pos, parse_expr(p), NULL);
        }
    }
}

static void set_args(JNode *n, NodeList *pos, NodeList *kw) {
    n->args = pos->v, n->n_args = pos->n;
    n->kw = kw->v, n->kw_names = kw->names, n->n_kw = kw->n;
}

static JNode *parse_primary(Parser *p) {
    const JToken *t = cur(p);
    JNode *n;
    if (t->kind == TK_NAME) {
        p->i++;
        n = node(p, N_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else n->kind = N_VAR, n->name = arena_strndup(p->a, t->start, t->len);
        return n;
    }
    if (t->kind == TK_STRING) {
        // Adjacent literals join, as in Python.
        JBuf b = {.arena = p->a};
        while (cur(p)->kind == TK_STRING) {
            JVal v = string_value(p, cur(p));
            jbuf_put(&b, v.s->s, v.s->len, NULL);
            p->i++;
        }
        if (!b.s) jbuf_put(&b, "", 0, NULL);
        n = node(p, N_LIT, t);
        n->lit = jbuf_value(&b);
        return n;
    }
    if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        p->i++;
        char num[64];
        size_t k = 0;
        for (size_t i = 0; i < t->len && k + 1 < sizeof num; i++)
            if (t->start[i] != '_') num[k++] = t->start[i];
        num[k] = 0;
        n = node(p, N_LIT, t);
        errno = 0;
        n->lit = t->kind == TK_INT ? jv_int(strtoll(num, NULL, 10)) : jv_float(strtod(num, NULL));
        if (t->kind == TK_INT && errno == ERANGE) fail(p, t, "integer literal out of the 64-bit range", NULL);
        return n;
    }
    if (accept_op(p, "(")) {
        JNode *first = parse_expr(p);
        if (accept_op(p, ")")) return first;
        NodeList items = {0};   // a tuple: held as a list
        list_push(p, &items, first, NULL);
        while (accept_op(p, ",")) {
            if (is_op(cur(p), ")")) break;
            list_push(p, &items, parse_expr(p), NULL);
        }
        expect_op(p, ")");
        n = node(p, N_LIST, t);
        n->args = items.v, n->n_args = items.n;
        return n;
    }
    if (accept_op(p, "[")) {
        NodeList items = {0};
        while (!accept_op(p, "]")) {
            if (items.n) expect_op(p, ",");
            if (accept_op(p, "]")) break;
            list_push(p, &items, parse_expr(p), NULL);
        }
        n = node(p, N_LIST, t);
        n->args = items.v, n->n_args = items.n;
        return n;
    }
    if (accept_op(p, "{")) {
        NodeList keys = {0}, vals = {0};
        while (!accept_op(p, "}")) {
            if (keys.n) expect_op(p, ",");
            if (accept_op(p, "}")) break;
            list_push(p, &keys, parse_expr(p), NULL);
            expect_op(p, ":");
            list_push(p, &vals, parse_expr(p), NULL);
        }
        n = node(p, N_DICT, t);
        n->args = keys.v, n->kw = vals.v, n->n_args = keys.n;
        return n;
    }
    fail(p, t, "expected an expression", NULL);
}

static JNode *parse_postfix(Parser *p, JNode *n) {
    for (;;) {
        const JToken *t = cur(p);
        if (accept_op(p, ".")) {
            JNode *a = node(p, N_ATTR, t);
            a->a = n;
            if (cur(p)->kind == TK_INT) {   // x.0 is x[0]
                a->kind = N_INDEX;
                a->b = parse_primary(p);
            } else {
                a->name = take_name(p);
            }
            n = a;
        } else if (accept_op(p, "[")) {
            JNode *parts[3] = {NULL, NULL, NULL};
            int k = 0, slice = 0;
            for (;;) {
                if (!is_op(cur(p), ":") && !is_op(cur(p), "]")) parts[k] = parse_expr(p);
                if (accept_op(p, ":")) {
                    slice = 1;
                    if (++k > 2) fail(p, cur(p), "too many ':' in a slice", NULL);
                    continue;
                }
                expect_op(p, "]");
                break;
            }
            JNode *s = node(p, slice ? N_SLICE : N_INDEX, t);
            s->a = n, s->b = parts[0], s->c = parts[1], s->d = parts[2];
            if (!slice && !parts[0]) fail(p, t, "empty subscript", NULL);
            n = s;
        } else if (accept_op(p, "(")) {
            NodeList pos = {0}, kw = {0};
            parse_call_args(p, &pos, &kw);
            JNode *c = node(p, N_CALL, t);
            c->a = n;
            set_args(c, &pos, &kw);
            n = c;
        } else {
            return n;
        }
    }
}

static JNode *parse_filter_expr(Parser *p, JNode *n) {
    for (;;) {
        const JToken *t = cur(p);
        if (accept_op(p, "|")) {
            JNode *f = node(p, N_FILTER, t);
            f->a = n;
            f->name = take_name(p);
            NodeList pos = {0}, kw = {0};
            if (accept_op(p, "(")) parse_call_args(p, &pos, &kw);
            set_args(f, &pos, &kw);
            n = f;
        } else if (accept_name(p, "is")) {
            JNode *f = node(p, N_TEST, t);
            f->a = n;
            f->negate = accept_name(p, "not");
            f->name = take_name(p);
            NodeList pos = {0}, kw = {0};
            const JToken *c = cur(p);
            if (accept_op(p, "(")) {
                parse_call_args(p, &pos, &kw);
            } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT || c->kind == TK_FLOAT ||
                        is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and") && !is_name(c, "is")) {
                list_push(p, &pos, parse_postfix(p, parse_primary(p)), NULL);
            }
            set_args(f, &pos, &kw);
            n = f;
        } else if (accept_op(p, "(")) {
            NodeList pos = {0}, kw = {0};
            parse_call_args(p, &pos, &kw);
            JNode *c = node(p, N_CALL, t);
            c->a = n;
            set_args(c, &pos, &kw);
            n = c;
        } else {
            return n;
        }
    }
}

static JNode *parse_unary(Parser *p, int with_filter) {
    const JToken *t = cur(p);
    JNode *n;
    enter(p);
    if (accept_op(p, "-")) {
        n = node(p, N_NEG, t);
        n->a = parse_unary(p, 0);
    } else if (accept_op(p, "+")) {
        n = parse_unary(p, 0);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    leave(p);
    return with_filter ? parse_filter_expr(p, n) : n;
}

static JNode *binary(Parser *p, const JToken *at, BinOp op, JNode *a, JNode *b) {
    JNode *n = node(p, N_BIN, at);
    n->op = op, n->a = a, n->b = b;
    return n;
}

static JNode *parse_pow(Parser *p) {
    JNode *n = parse_unary(p, 1);
    for (const JToken *t = cur(p); accept_op(p, "**"); t = cur(p)) n = binary(p, t, OP_POW, n, parse_unary(p, 1));
    return n;
}

static JNode *parse_math2(Parser *p) {
    JNode *n = parse_pow(p);
    for (;;) {
        const JToken *t = cur(p);
        BinOp op;
        if (accept_op(p, "*")) op = OP_MUL;
        else if (accept_op(p, "//")) op = OP_FLOORDIV;
        else if (accept_op(p, "/")) op = OP_DIV;
        else if (accept_op(p, "%")) op = OP_MOD;
        else return n;
        n = binary(p, t, op, n, parse_pow(p));
    }
}

static JNode *parse_concat(Parser *p) {
    JNode *n = parse_math2(p);
    for (const JToken *t = cur(p); accept_op(p, "~"); t = cur(p)) n = binary(p, t, OP_CONCAT, n, parse_math2(p));
    return n;
}

static JNode *parse_math1(Parser *p) {
    JNode *n = parse_concat(p);
    for (;;) {
        const JToken *t = cur(p);
        if (accept_op(p, "+")) n = binary(p, t, OP_ADD, n, parse_concat(p));
        else if (accept_op(p, "-")) n = binary(p, t, OP_SUB, n, parse_concat(p));
        else return n;
    }
}

static JNode *parse_compare(Parser *p) {
    JNode *n = parse_math1(p);
    for (;;) {
        const JToken *t = cur(p);
        BinOp op;
        if (accept_op(p, "==")) op = OP_EQ;
        else if (accept_op(p, "!=")) op = OP_NE;
        else if (accept_op(p, "<=")) op = OP_LE;
        else if (accept_op(p, ">=")) op = OP_GE;
        else if (accept_op(p, "<")) op = OP_LT;
        else if (accept_op(p, ">")) op = OP_GT;
        else if (accept_name(p, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(&p->t->tok[p->i + 1], "in")) p->i += 2, op = OP_NOT_IN;
        else return n;
        n = binary(p, t, op, n, parse_math1(p));
    }
}

static JNode *parse_not(Parser *p) {
    const JToken *t = cur(p);
    if (accept_name(p, "not")) {
        JNode *n = node(p, N_NOT, t);
        enter(p);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static JNode *parse_and(Parser *p) {
    JNode *n = parse_not(p);
    for (const JToken *t = cur(p); accept_name(p, "and"); t = cur(p)) {
        JNode *a = node(p, N_AND, t);
        a->a = n, a->b = parse_not(p);
        n = a;
    }
    return n;
}

static JNode *parse_or(Parser *p) {
    JNode *n = parse_and(p);
    for (const JToken *t = cur(p); accept_name(p, "or"); t = cur(p)) {
        JNode *o = node(p, N_OR, t);
        o->a = n, o->b = parse_and(p);
        n = o;
    }
    return n;
}

static JNode *parse_expr(Parser *p) {
    enter(p);
    JNode *n = parse_or(p);
    const JToken *t = cur(p);
    if (accept_name(p, "if")) {
        JNode *c = node(p, N_COND, t);
        c->b = n;
        c->a = parse_or(p);
        if (accept_name(p, "else")) c->c = parse_expr(p);
        n = c;
    }
    leave(p);
    return n;
}

// ---- statements -------------------------------------------------------------------------

static void expect_block_end(Parser *p) {
    if (cur(p)->kind != TK_BLOCK_END) fail(p, cur(p), "expected the end of the tag", "%}");
    p->i++;
}

// Statements up to a block tag whose keyword is one of ends (NULL-terminated);
// the cursor is then on that keyword.
static JNode *parse_body(Parser *p, const char *const *ends, const JToken *opened);

static JNode *parse_if(Parser *p, const JToken *at) {
    static const char *const ENDS[] = {"elif", "else", "endif", NULL};
    JNode *n = node(p, N_IF, at);
    NodeList conds = {0}, bodies = {0};
    for (;;) {
        list_push(p, &conds, parse_expr(p), NULL);
        expect_block_end(p);
        list_push(p, &bodies, parse_body(p, ENDS, at), NULL);
        if (accept_name(p, "elif")) continue;
        if (accept_name(p, "else")) {
            expect_block_end(p);
            static const char *const END[] = {"endif", NULL};
            n->else_body = parse_body(p, END, at);
        }
        accept_name(p, "endif");
        expect_block_end(p);
        break;
    }
    n->args = conds.v, n->kw = bodies.v, n->n_args = conds.n;
    return n;
}

static JNode *parse_for(Parser *p, const JToken *at) {
    JNode *n = node(p, N_FOR, at);
    n->name = take_name(p);
    if (accept_op(p, ",")) n->name2 = take_name(p);
    if (!accept_name(p, "in")) fail(p, cur(p), "expected 'in' in a for loop", NULL);
    n->a = parse_or(p);   // jinja2: the iterable is not a conditional expression (its `if` filters)
    if (accept_name(p, "if")) n->b = parse_or(p);
    if (accept_name(p, "recursive")) fail(p, at, "recursive loops are not supported", NULL);
    expect_block_end(p);
    static const char *const ENDS[] = {"else", "endfor", NULL};
    n->body = parse_body(p, ENDS, at);
    if (accept_name(p, "else")) {
        expect_block_end(p);
        static const char *const END[] = {"endfor", NULL};
        n->else_body = parse_body(p, END, at);
    }
    accept_name(p, "endfor");
    expect_block_end(p);
    return n;
}

static JNode *parse_set(Parser *p, const JToken *at) {
    JNode *n = node(p, N_SET, at);
    n->name = take_name(p);
    if (accept_op(p, ".")) n->name2 = take_name(p);
    if (accept_op(p, "=")) {
        n->a = parse_expr(p);
        expect_block_end(p);
        return n;
    }
    if (n->name2) fail(p, cur(p), "expected '='", NULL);
    expect_block_end(p);   // {% set x %}...{% endset %}: the body's output
    static const char *const END[] = {"endset", NULL};
    n->body = parse_body(p, END, at);
    accept_name(p, "endset");
    expect_block_end(p);
    return n;
}

static JNode *parse_macro(Parser *p, const JToken *at) {
    JNode *n = node(p, N_MACRO, at);
    n->name = take_name(p);
    expect_op(p, "(");
    NodeList params = {0};
    while (!accept_op(p, ")")) {
        if (params.n) expect_op(p, ",");
        const char *name = take_name(p);
        list_push(p, &params, accept_op(p, "=") ? parse_expr(p) : NULL, name);
    }
    n->kw = params.v, n->kw_names = params.names, n->n_kw = params.n;
    expect_block_end(p);
    static const char *const END[] = {"endmacro", NULL};
    n->body = parse_body(p, END, at);
    accept_name(p, "endmacro");
    expect_block_end(p);
    return n;
}

static JNode *parse_statement(Parser *p) {
    const JToken *at = cur(p);   // the name after "{%"
    if (accept_name(p, "if")) return parse_if(p, at);
    if (accept_name(p, "for")) return parse_for(p, at);
    if (accept_name(p, "set")) return parse_set(p, at);
    if (accept_name(p, "macro")) return parse_macro(p, at);
    if (accept_name(p, "break") || accept_name(p, "continue")) {
        JNode *n = node(p, is_name(at, "break") ? N_BREAK : N_CONTINUE, at);
        expect_block_end(p);
        return n;
    }
    if (accept_name(p, "generation")) {   // transformers' assistant-mask block: its body as it is
        expect_block_end(p);
        static const char *const END[] = {"endgeneration", NULL};
        JNode *body = parse_body(p, END, at);
        accept_name(p, "endgeneration");
        expect_block_end(p);
        return body;
    }
    char word[48];
    snprintf(word, sizeof word, "'%.*s'", (int)(at->len < 40 ? at->len : 40), at->start);
    fail(p, at, "unknown or unsupported tag", word);
}

static JNode *parse_body(Parser *p, const char *const *ends, const JToken *opened) {
    JNode *body = node(p, N_BODY, cur(p));
    NodeList items = {0};
    enter(p);
    for (;;) {
        const JToken *t = cur(p);
        if (t->kind == TK_EOF) {
            if (ends) fail(p, opened, "this tag is never closed", NULL);
            break;
        }
        if (t->kind == TK_TEXT) {
            JNode *n = node(p, N_TEXT, t);
            n->lit = jv_str(p->a, t->start, t->len, NULL);
            list_push(p, &items, n, NULL);
            p->i++;
        } else if (t->kind == TK_VAR_BEGIN) {
            p->i++;
            JNode *n = node(p, N_OUT, t);
            n->a = parse_expr(p);
            if (cur(p)->kind != TK_VAR_END) fail(p, cur(p), "expected the end of the expression", "}}");
            p->i++;
            list_push(p, &items, n, NULL);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            const JToken *kw = &p->t->tok[p->i + 1];
            int is_end = 0;
            for (int k = 0; ends && ends[k]; k++) is_end |= is_name(kw, ends[k]);
            if (is_end) {
                p->i++;
                break;
            }
            p->i++;
            list_push(p, &items, parse_statement(p), NULL);
        } else {
            fail(p, t, "unexpected token", NULL);
        }
    }
    body->args = items.v, body->n_args = items.n;
    leave(p);
    return body;
}

int jinja_compile(JinjaTemplate *tpl, const char *src, size_t len, PtError *e) {
    JTokens toks;
    if (jinja_lex(&toks, src, len, tpl->name, e)) {
        jinja_tokens_free(&toks);
        return -1;
    }
    Parser p = {.t = &toks, .a = &tpl->arena, .name = tpl->name, .e = e};
    if (setjmp(p.fail)) {
        jinja_tokens_free(&toks);
        return -1;
    }
    tpl->root = parse_body(&p, NULL, NULL);
    jinja_tokens_free(&toks);
    return 0;
}
