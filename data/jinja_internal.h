// jinja_internal.h: the pieces of the Jinja subset shared by its source files
// (jinja_value.c: values and the arena; jinja_lex.c and jinja_parse.c: template
// text to a tree; jinja_eval.c: rendering; jinja_builtins.c: filters, tests,
// methods and global functions). Not a public API: data/jinja.h is.
#pragma once
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include "jinja.h"

// How deep a template's syntax and the values it builds may nest; real
// templates stay within a few levels. Deeper is an error, not a stack overflow.
enum { JINJA_MAX_NESTING = 200 };

// ---- work and memory: what a render may spend --------------------------------

// Steps: an expression evaluated, a statement run, a loop turn, a dict key
// compared, 64 bytes compared or searched, a few characters case-mapped or
// split. A render fails once it has taken more than `limit` (jinja_render
// sets it from the variables' size), so no template runs without end.
typedef struct {
    uint64_t used, limit;
} JWork;

// ---- arena: everything a parse or a render allocates, freed at once ----------

typedef struct ArenaBlock ArenaBlock;
typedef struct {
    ArenaBlock *head;
    size_t bytes;             // allocated so far
    size_t limit;             // 0: none; an allocation past it calls over(ctx), which does not return
    void (*over)(void *ctx);
    void *ctx;
    JWork *work;              // NULL, or what dict updates in this arena count against
} Arena;

void *arena_alloc(Arena *a, size_t bytes);   // zeroed, 16-byte aligned
char *arena_strndup(Arena *a, const char *s, size_t len);
void arena_free(Arena *a);

// ---- values -------------------------------------------------------------------

typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC, JV_MACRO } JvType;

typedef struct JStr JStr;
typedef struct JList JList;
typedef struct JDict JDict;
typedef struct JNode JNode;
typedef struct Render Render;
typedef struct JVal JVal;

// A builtin callable: a global function (range, namespace, raise_exception, strftime_now).
typedef JVal (*JFunc)(Render *r, const JVal *args, int n, const char **kw_names, const JVal *kw, int n_kw);

struct JVal {
    JvType t;
    union {
        int b;
        int64_t i;
        double f;
        JStr *s;
        JList *l;
        JDict *d;
        JFunc fn;
        const JNode *macro;
        const char *undef_name;   // JV_UNDEF: what was looked up, for error messages
    };
};

// Strings are immutable. tag: one entry per byte, the provenance the chat
// renderer follows (0 = template text); NULL when every byte is 0.
struct JStr {
    size_t len;
    const char *s;
    const uint16_t *tag;
};

struct JList {
    int n, cap;
    JVal *v;
};

// Insertion-ordered. ns: a namespace() object, the one kind `set x.y = ...` may change.
struct JDict {
    int n, cap, ns;
    JVal *key, *val;
};

JVal jv_undef(const char *name);
JVal jv_none(void);
JVal jv_bool(int b);
JVal jv_int(int64_t i);
JVal jv_float(double f);
JVal jv_str(Arena *a, const char *s, size_t len, const uint16_t *tag);   // copies s and tag
JVal jv_cstr(Arena *a, const char *s);
JList *jv_list_new(Arena *a);
void jv_list_push(Arena *a, JList *l, JVal v);
JDict *jv_dict_new(Arena *a);
// Keys are scalars (string, number, bool, none: what Python can hash, tuples
// aside); the renderer refuses a list or dict as a key.
void jv_dict_set(Arena *a, JDict *d, JVal key, JVal val);
void jv_dict_add(Arena *a, JDict *d, JVal key, JVal val);   // key known to be new: no lookup
// The lookups count the keys they compare in *w (NULL: not counted).
const JVal *jv_dict_get(const JDict *d, JVal key, JWork *w);
const JVal *jv_dict_get_str(const JDict *d, const char *key, JWork *w);

int jv_truthy(JVal v);
// ==, as Python compares: numbers by value, strings by bytes, lists and dicts
// item by item, a list or dict equal to itself without a look inside (so a
// namespace holding itself compares). 1 equal, 0 not, -1 when the values nest
// deeper than JINJA_MAX_NESTING (two namespaces holding each other) or *w
// (counting what is compared; NULL: not counted) passes its limit.
int jv_equal(JVal a, JVal b, JWork *w);
const char *jv_type_name(JvType t);

// A growable byte buffer with a parallel tag array (tags allocated on the first nonzero one).
typedef struct {
    Arena *arena;
    char *s;
    uint16_t *tag;
    size_t len, cap;
} JBuf;

void jbuf_put(JBuf *b, const char *s, size_t len, const uint16_t *tag);
void jbuf_puts(JBuf *b, const char *s);
void jbuf_spaces(JBuf *b, uint64_t n);   // n spaces
JVal jbuf_value(JBuf *b);   // the buffer's bytes as a string value (no copy)

// str(v) as Python/Jinja prints it: None, True, 1.5, ['a', 1], {'k': 'v'}; undefined is "".
void jv_write_str(JBuf *b, JVal v);
JVal jv_to_str(Arena *a, JVal v);
// json.dumps(v, ensure_ascii=False, indent, sort_keys) with Python's separators. Returns 0, or
// -1 for a value JSON cannot hold (the caller reports it).
int jv_write_json(JBuf *b, JVal v, int indent, int sort_keys, int depth);

// ---- the tree -------------------------------------------------------------------

typedef enum {
    // expressions
    N_LIT, N_VAR, N_ATTR, N_INDEX, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG, N_BIN, N_AND, N_OR, N_COND,
    N_LIST, N_DICT,
    // statements
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_BODY
} NodeKind;

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE, OP_LT, OP_LE,
               OP_GT, OP_GE, OP_IN, OP_NOT_IN } BinOp;

struct JNode {
    NodeKind kind;
    int line, col;          // where it starts in the template, for error messages
    JVal lit;               // N_LIT; N_TEXT keeps its text here
    const char *name;       // N_VAR, N_ATTR, N_FILTER, N_TEST, N_SET (variable), N_MACRO; N_FOR first target
    const char *name2;      // N_SET: the attribute of `set ns.attr`; N_FOR: second target (a, b)
    BinOp op;
    int negate;             // N_TEST: `is not`
    JNode *a, *b, *c, *d;   // operands; N_SLICE a[b:c:d]; N_COND b if a else c; N_FOR iter a, filter b
    JNode **args;           // N_CALL/N_FILTER/N_TEST positional, N_LIST items, N_DICT keys, N_BODY/N_IF/N_FOR parts
    const char **kw_names;  // keyword arguments (N_CALL/N_FILTER/N_TEST), N_MACRO parameter names
    JNode **kw;             // their values; N_DICT values; N_MACRO parameter defaults (NULL = none)
    int n_args, n_kw;
    JNode *body, *else_body;   // N_FOR, N_MACRO, N_IF (args = conditions, kw = bodies, n_args of each)
};

struct JinjaTemplate {
    Arena arena;
    JNode *root;            // N_BODY
    char *name;
};

// Text -> tree. src need not be NUL-terminated. Nesting (brackets, unary
// operators, blocks) deeper than JINJA_MAX_NESTING levels is an error.
int jinja_compile(JinjaTemplate *t, const char *src, size_t len, PtError *e);

// ---- rendering --------------------------------------------------------------------

typedef struct Scope Scope;
struct Scope {
    Scope *parent;
    int n, cap;
    const char **name;
    JVal *val;
};

struct Render {
    Arena arena;
    const JinjaTemplate *tpl;
    const JDict *globals;   // the caller's variables
    Scope *root;
    jmp_buf fail;
    PtError *err;
    int loop_signal;        // 1 break, 2 continue
    int depth;              // macro calls open
    int nesting;            // evaluations and bodies open (C recursion): at most JINJA_MAX_RENDER_NESTING
    JWork work;             // steps taken and their limit
    const JNode *at;        // the node evaluated last, for the memory limit's message
};

// A render's bounds (jinja_render): JINJA_BASE_STEPS steps plus 4 per byte and
// 1000 per message of its variables; JINJA_BASE_BYTES of memory plus 64 per
// byte; C recursion JINJA_MAX_RENDER_NESTING levels (macros calling macros),
// macros 100 calls deep. The eight families' templates (tests/test_jinja.c)
// take under 600 steps and one 60 kB arena block for a short conversation.
#define JINJA_BASE_STEPS 4000000u
#define JINJA_BASE_BYTES (32u << 20)
enum { JINJA_MAX_RENDER_NESTING = 2000 };

// Ends the render: fills the error (with the node's place when given) and jumps out.
_Noreturn void jr_fail(Render *r, const JNode *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Python's ints have no bound and ours are 64-bit: a result past them ends the
// render with this error rather than wrapping (or being undefined in C).
_Noreturn void jr_overflow(Render *r, const JNode *at);
// jv_equal, its -1 an error of the render; counted in the render's work.
int jr_equal(Render *r, const JNode *at, JVal a, JVal b);
// Counts n more steps, failing at `at` past the render's limit.
void jr_work(Render *r, const JNode *at, uint64_t n);
// jinja_eval.c: what a for loop walks (a list's items, a dict's keys, a string's characters), which the list
// filters take too; and s[from, to) as a new string keeping its bytes' tags.
JList *jr_items(Render *r, const JNode *at, JVal v);
JVal jr_substr(Render *r, const JStr *s, size_t from, size_t to);

// jinja_builtins.c
JVal jb_filter(Render *r, const JNode *at, const char *name, JVal v, const JVal *args, int n, const char **kw_names,
               const JVal *kw, int n_kw);
int jb_test(Render *r, const JNode *at, const char *name, JVal v, const JVal *args, int n);
// obj.name(...): string, dict and list methods. *found = 0 when obj has no such method.
JVal jb_method(Render *r, const JNode *at, JVal obj, const char *name, const JVal *args, int n, int *found);
// A global function by name (range, namespace, dict, raise_exception, strftime_now); NULL if none.
JFunc jb_global(const char *name);
// Python's str.strip family on s: which = 1 left, 2 right, 3 both; chars NULL = whitespace.
JVal jb_strip(Render *r, JVal s, const JStr *chars, int which);

// jinja_value.c: the dictionary of a JinjaVars (the render's globals), and the
// bounds of a render over them (see JINJA_BASE_STEPS).
const JDict *jinja_vars_dict(const JinjaVars *v);
void jinja_vars_limits(const JinjaVars *v, uint64_t *steps, size_t *bytes);
