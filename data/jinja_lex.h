// jinja_lex.h: the tokens of a template (jinja_lex.c), read by jinja_parse.c.
#pragma once
#include <stddef.h>
#include "../util/util.h"

typedef enum { TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STRING, TK_INT, TK_FLOAT,
               TK_OP, TK_EOF } JTokKind;

typedef struct {
    JTokKind kind;
    const char *start;      // into JTokens.src; a TK_STRING keeps its quotes
    size_t len;
    int line, col;
} JToken;

typedef struct {
    JToken *tok;
    int n, cap;
    char *src;              // the normalized source the tokens point into
} JTokens;

int jinja_lex(JTokens *t, const char *src, size_t len, const char *name, PtError *e);
void jinja_tokens_free(JTokens *t);
