// jinja.h: the subset of Jinja that chat templates use, rendered in C as
// transformers renders them (jinja2 with trim_blocks and lstrip_blocks, the
// loop controls, the {% generation %} block, raise_exception, strftime_now and
// a tojson that keeps non-ASCII text): text and variables, if/elif/else,
// for (with a filter, else, loop.*, unpacking), set (names and namespace
// attributes), macros, break/continue; literals, lists, dicts, attribute and
// item access, slices, the Python operators, `x if c else y`; the common
// filters, tests and string/dict methods. Anything else is a parse or render
// error naming the place in the template.
//
// Strings carry a tag per byte through every operation that keeps their
// bytes (concatenation, slicing, strip, split, ...): the chat renderer tags
// each assistant message's content and finds the trained spans in the output.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"

typedef struct JinjaTemplate JinjaTemplate;
typedef struct JinjaVars JinjaVars;

// name labels the template in errors ("tokenizer_config.json chat_template").
int jinja_parse(JinjaTemplate **out, const char *src, size_t len, const char *name, PtError *e);
void jinja_free(JinjaTemplate *t);

// The variables a render sees.
JinjaVars *jinja_vars_new(void);
void jinja_vars_free(JinjaVars *v);
void jinja_vars_set_str(JinjaVars *v, const char *name, const char *s);
void jinja_vars_set_bool(JinjaVars *v, const char *name, int b);
// Appends {"role": role, "content": content} to the list `messages`; every
// byte of content carries tag (0 = none).
void jinja_vars_add_message(JinjaVars *v, const char *role, const char *content, uint16_t tag);

// Renders t: *text (malloc'd, NUL-terminated, *len bytes) and *tags (malloc'd,
// one per byte). On error (raise_exception included) nothing is returned.
int jinja_render(const JinjaTemplate *t, const JinjaVars *vars, char **text, size_t *len, uint16_t **tags,
                 PtError *e);
