// jinja_lex.c: template text -> tokens, as jinja2's lexer cuts it with
// trim_blocks and lstrip_blocks on (transformers' settings): line breaks
// normalized to "\n" and one trailing line break dropped, {%- -%} stripping,
// the newline after a block tag or comment removed, and the spaces before a
// block tag or comment alone on its line removed.
#include <stdlib.h>
#include <string.h>
#include "jinja_lex.h"

static void fail_at(PtError *e, const char *name, int line, int col, const char *msg) {
    pt_fail(e, "%s:%d:%d: %s", name, line, col, msg);
}

// Python's str.splitlines separators become "\n" (jinja2 splits and joins the source).
static char *normalize_newlines(const char *src, size_t len, size_t *out_len) {
    char *out = xmalloc(len + 1, "template");
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '\r') {
            if (i + 1 < len && src[i + 1] == '\n') i++;
            out[o++] = '\n';
        } else if (c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
            out[o++] = '\n';
        } else if (c == 0xC2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85) {
            out[o++] = '\n', i++;
        } else if (c == 0xE2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                   ((unsigned char)src[i + 2] == 0xA8 || (unsigned char)src[i + 2] == 0xA9)) {
            out[o++] = '\n', i += 2;
        } else {
            out[o++] = (char)c;
        }
    }
    if (o && out[o - 1] == '\n') o--;   // keep_trailing_newline is off
    out[o] = 0;
    *out_len = o;
    return out;
}

static void push(JTokens *t, JToken tok) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->tok = realloc(t->tok, (size_t)t->cap * sizeof *t->tok);
        if (!t->tok) die("out of memory lexing a template");
    }
    t->tok[t->n++] = tok;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

// Where a source offset lies, 1-based, counted on from the offset asked
// before (the lexer asks in increasing order), so lexing stays linear in the
// template's length.
typedef struct {
    size_t at;
    int line, col;
} Place;

static void place(const char *s, Place *p, size_t at, int *line, int *col) {
    if (at < p->at) *p = (Place){0, 1, 1};
    for (size_t i = p->at; i < at; i++) {
        if (s[i] == '\n') p->line++, p->col = 1;
        else if (((unsigned char)s[i] & 0xC0) != 0x80) p->col++;
    }
    p->at = at;
    *line = p->line, *col = p->col;
}

// Tokens inside a tag, from *pos up to its end ("}}" or "%}", with an optional
// leading "-"); *strip_after says the end was "-}}"/"-%}".
static int lex_tag(JTokens *t, const char *s, size_t len, size_t *pos, int is_var, int *strip_after, Place *pl,
                   const char *name, PtError *e) {
    size_t i = *pos;
    int depth = 0;   // open brackets: "}}" inside a dict literal is not the end
    for (;;) {
        while (i < len && is_space(s[i])) i++;
        int line, col;
        place(s, pl, i, &line, &col);
        if (i >= len) return fail_at(e, name, line, col, is_var ? "unclosed {{" : "unclosed {%"), -1;
        const char *end = is_var ? "}}" : "%}";
        if (depth == 0 && s[i] == '-' && i + 2 < len && !strncmp(s + i + 1, end, 2)) {
            *strip_after = 1, *pos = i + 3;
            return 0;
        }
        if (depth == 0 && i + 1 < len && !strncmp(s + i, end, 2)) {
            *strip_after = 0, *pos = i + 2;
            return 0;
        }
        JToken tok = {.start = s + i, .line = line, .col = col};
        char c = s[i];
        if (is_name_start(c)) {
            size_t j = i;
            while (j < len && (is_name_start(s[j]) || is_digit(s[j]))) j++;
            tok.kind = TK_NAME, tok.len = j - i, i = j;
        } else if (is_digit(c)) {
            size_t j = i;
            int is_float = 0;
            while (j < len && (is_digit(s[j]) || s[j] == '_')) j++;
            if (j + 1 < len && s[j] == '.' && is_digit(s[j + 1])) {
                is_float = 1, j++;
                while (j < len && (is_digit(s[j]) || s[j] == '_')) j++;
            }
            if (j < len && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1;
                if (k < len && (s[k] == '+' || s[k] == '-')) k++;
                if (k < len && is_digit(s[k])) {
                    is_float = 1, j = k;
                    while (j < len && is_digit(s[j])) j++;
                }
            }
            tok.kind = is_float ? TK_FLOAT : TK_INT, tok.len = j - i, i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < len && s[j] != c) j += s[j] == '\\' ? 2 : 1;
            if (j >= len) return fail_at(e, name, line, col, "unterminated string"), -1;
            tok.kind = TK_STRING, tok.len = j + 1 - i, i = j + 1;
        } else {
            static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                              ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
            size_t k = 0, n = sizeof OPS / sizeof OPS[0];
            while (k < n && strncmp(s + i, OPS[k], strlen(OPS[k]))) k++;
            if (k == n) return fail_at(e, name, line, col, "unexpected character in a tag"), -1;
            tok.kind = TK_OP, tok.len = strlen(OPS[k]), i += tok.len;
            if (c == '(' || c == '[' || c == '{') depth++;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        }
        push(t, tok);
    }
}

int jinja_lex(JTokens *t, const char *src, size_t src_len, const char *name, PtError *e) {
    memset(t, 0, sizeof *t);
    size_t len;
    char *s = normalize_newlines(src, src_len, &len);
    t->src = s;
    size_t i = 0;
    int strip_next = 0;       // the previous tag ended with "-": strip the text's leading whitespace
    int trim_newline = 0;     // the previous tag was a block or comment: drop one leading "\n"
    int line_starting = 1;    // the text starts a line (for lstrip_blocks)
    Place pl = {0, 1, 1};
    while (i <= len) {
        // The text up to the next tag.
        size_t j = i;
        while (j + 1 < len && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#'))) j++;
        if (j + 1 >= len) j = len;
        size_t a = i, b = j;
        if (strip_next) while (a < b && is_space(s[a])) a++;
        else if (trim_newline && a < b && s[a] == '\n') a++;
        char kind = j < len ? s[j + 1] : 0;
        char mod = j + 2 < len ? s[j + 2] : 0;
        if (kind && mod == '-') {
            while (b > a && is_space(s[b - 1])) b--;
        } else if ((kind == '%' || kind == '#') && mod != '+') {
            size_t l = b;
            while (l > a && s[l - 1] != '\n') l--;
            int at_line_start = l > a || (l == a && (a > i ? s[a - 1] == '\n' : line_starting));
            size_t k = l;
            while (k < b && (s[k] == ' ' || s[k] == '\t')) k++;
            if (at_line_start && k == b) b = l;
        }
        if (b > a) {
            int line, col;
            place(s, &pl, a, &line, &col);
            push(t, (JToken){.kind = TK_TEXT, .start = s + a, .len = b - a, .line = line, .col = col});
        }
        if (j >= len) break;
        int line, col;
        place(s, &pl, j, &line, &col);
        size_t p = j + 2 + (mod == '-' || mod == '+');
        if (kind == '#') {
            const char *close = strstr(s + p, "#}");
            if (!close) return fail_at(e, name, line, col, "unclosed comment {#"), -1;
            strip_next = close > s + p && close[-1] == '-';
            trim_newline = 1;
            i = (size_t)(close - s) + 2;
            line_starting = 0;
            continue;
        }
        int is_var = kind == '{';
        push(t, (JToken){.kind = is_var ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, .start = s + j, .len = 2, .line = line,
                         .col = col});
        int strip_after;
        if (lex_tag(t, s, len, &p, is_var, &strip_after, &pl, name, e)) return -1;
        place(s, &pl, p - 2, &line, &col);
        push(t, (JToken){.kind = is_var ? TK_VAR_END : TK_BLOCK_END, .start = s + p - 2, .len = 2, .line = line,
                         .col = col});
        strip_next = strip_after;
        trim_newline = !is_var;
        line_starting = 0;
        i = p;
    }
    int line, col;
    place(s, &pl, len, &line, &col);
    push(t, (JToken){.kind = TK_EOF, .start = s + len, .line = line, .col = col});
    return 0;
}

void jinja_tokens_free(JTokens *t) {
    free(t->tok);
    free(t->src);
    memset(t, 0, sizeof *t);
}
