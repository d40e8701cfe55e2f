// chat.c: the chat template of a checkpoint (chat.h), rendered with data/jinja.h.
#include "chat.h"
#include <jansson.h>
#include <string.h>
#include "jinja.h"

// The bundled template, written for this project: it renders what Qwen3's
// template renders for conversations without tools (a think block on the
// turns after the last user query, the reasoning before the last </think>
// dropped from earlier turns, thinking off as an empty think block).
static const char BUNDLED[] =
    "{%- set ns = namespace(last_query=messages|length - 1, found=false) %}\n"
    "{%- for m in messages[::-1] %}\n"
    "    {%- if not ns.found and m.role == 'user' and not (m.content.startswith('<tool_response>') and "
    "m.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.found = true %}\n"
    "        {%- set ns.last_query = messages|length - 1 - loop.index0 %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for m in messages %}\n"
    "    {%- if m.role != 'assistant' %}\n"
    "        {{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {%- set reply = m.content %}\n"
    "        {%- set thought = '' %}\n"
    "        {%- if '</think>' in m.content %}\n"
    "            {%- set reply = m.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- set thought = m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_start|>assistant\\n' }}\n"
    "        {%- if loop.index0 > ns.last_query and (loop.last or thought) %}\n"
    "            {{- '<think>\\n' + thought.strip('\\n') + '\\n</think>\\n\\n' + reply.lstrip('\\n') }}\n"
    "        {%- else %}\n"
    "            {{- reply }}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n";

struct ChatTemplate {
    JinjaTemplate *jt;
    char *text;
    int bundled;
    char *special[4][2];   // name, value: the tokenizer_config.json tokens the template sees
};

static const char *const SPECIAL_KEYS[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};

const char *chat_bundled_template(void) { return BUNDLED; }

// "<s>" or {"content": "<s>", ...} in tokenizer_config.json.
static const char *token_string(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static int build(ChatTemplate **out, const char *text, size_t text_len, int bundled, const char *name, json_t *cfg,
                 PtError *e) {
    ChatTemplate *t = xcalloc(1, sizeof *t, "chat template");
    t->text = xmalloc(text_len + 1, "chat template");
    memcpy(t->text, text, text_len);
    t->text[text_len] = 0;
    t->bundled = bundled;
    for (int k = 0; k < 4; k++) {
        const char *v = token_string(cfg, SPECIAL_KEYS[k]);
        if (v) t->special[k][0] = xstrdup(SPECIAL_KEYS[k]), t->special[k][1] = xstrdup(v);
    }
    if (jinja_parse(&t->jt, t->text, text_len, name, e)) {
        chat_template_free(t);
        *out = NULL;
        return -1;
    }
    *out = t;
    return 0;
}

static int parse_config(const char *config_json, size_t len, const char *src, json_t **cfg, PtError *e) {
    *cfg = NULL;
    if (!config_json) return 0;
    json_error_t je;
    *cfg = json_loadb(config_json, len, 0, &je);
    if (!*cfg) return pt_fail(e, "%s: invalid JSON at line %d column %d: %s", src, je.line, je.column, je.text);
    return 0;
}

int chat_template_load(ChatTemplate **out, const char *config_json, size_t len, const char *src, PtError *e) {
    json_t *cfg;
    *out = NULL;
    if (parse_config(config_json, len, src, &cfg, e)) return -1;
    json_t *tmpl = json_object_get(cfg, "chat_template");
    if (json_is_array(tmpl)) {   // named templates: the "default" one
        json_t *chosen = NULL;
        for (size_t i = 0; i < json_array_size(tmpl); i++) {
            const char *name = json_string_value(json_object_get(json_array_get(tmpl, i), "name"));
            if (name && !strcmp(name, "default")) chosen = json_object_get(json_array_get(tmpl, i), "template");
        }
        tmpl = chosen;
    }
    int rc;
    if (json_is_string(tmpl) && json_string_length(tmpl) > 0) {
        char name[1100];
        snprintf(name, sizeof name, "%s chat_template", src);
        rc = build(out, json_string_value(tmpl), json_string_length(tmpl), 0, name, cfg, e);
    } else {
        rc = build(out, BUNDLED, strlen(BUNDLED), 1, "the bundled chat template", cfg, e);
    }
    json_decref(cfg);
    return rc;
}

int chat_template_from_text(ChatTemplate **out, const char *text, size_t text_len, const char *name,
                            const char *config_json, size_t config_len, PtError *e) {
    json_t *cfg;
    *out = NULL;
    if (parse_config(config_json, config_len, name, &cfg, e)) return -1;
    int rc = build(out, text, text_len, 0, name, cfg, e);
    json_decref(cfg);
    return rc;
}

int chat_template_with_text(ChatTemplate **out, const ChatTemplate *base, const char *text, size_t text_len,
                            const char *name, PtError *e) {
    json_t *cfg = json_object();
    for (int k = 0; k < 4; k++)
        if (base->special[k][0]) json_object_set_new(cfg, base->special[k][0], json_string(base->special[k][1]));
    int rc = build(out, text, text_len, 0, name, cfg, e);
    json_decref(cfg);
    return rc;
}

void chat_template_free(ChatTemplate *t) {
    if (!t) return;
    jinja_free(t->jt);
    for (int k = 0; k < 4; k++) free(t->special[k][0]), free(t->special[k][1]);
    free(t->text);
    free(t);
}

const char *chat_template_text(const ChatTemplate *t) { return t->text; }
int chat_template_is_bundled(const ChatTemplate *t) { return t->bundled; }

const char *chat_template_token(const ChatTemplate *t, const char *key) {
    for (int k = 0; k < 4; k++)
        if (t->special[k][0] && !strcmp(t->special[k][0], key)) return t->special[k][1];
    return NULL;
}

int chat_render(const ChatTemplate *t, const ChatMessage *m, int n, int add_generation_prompt, int enable_thinking,
                ChatText *out, PtError *e) {
    memset(out, 0, sizeof *out);
    if (n >= 65535) return pt_fail(e, "chat: %d messages (at most 65534)", n);
    JinjaVars *v = jinja_vars_new();
    for (int i = 0; i < n; i++)
        jinja_vars_add_message(v, m[i].role, m[i].content, !strcmp(m[i].role, "assistant") ? (uint16_t)(i + 1) : 0);
    jinja_vars_set_bool(v, "add_generation_prompt", add_generation_prompt);
    jinja_vars_set_bool(v, "enable_thinking", enable_thinking);
    for (int k = 0; k < 4; k++)
        if (t->special[k][0]) jinja_vars_set_str(v, t->special[k][0], t->special[k][1]);
    int rc = jinja_render(t->jt, v, &out->text, &out->len, &out->tag, e);
    jinja_vars_free(v);
    return rc;
}

void chat_text_free(ChatText *c) {
    free(c->text);
    free(c->tag);
    memset(c, 0, sizeof *c);
}

void chat_train_bytes(const ChatText *c, size_t (*end_len)(void *ctx, const char *s, size_t len), void *ctx,
                      uint8_t *train) {
    memset(train, 0, c->len);
    size_t i = 0;
    while (i < c->len) {
        if (!c->tag[i]) {
            i++;
            continue;
        }
        uint16_t k = c->tag[i];
        size_t last = i;
        for (size_t j = i; j < c->len; j++)
            if (c->tag[j] == k) last = j;
        size_t end = last + 1;
        if (end_len) end += end_len(ctx, c->text + end, c->len - end);
        memset(train + i, 1, end - i);
        i = end;
    }
}
