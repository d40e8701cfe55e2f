// chat.c: the Qwen3 chat template (its tokenizer_config.json chat_template) in C. The output equals
// transformers' apply_chat_template with the Qwen3 template (no tools), cut
// into segments whose train flag is the SFT loss mask: 1 on each assistant
// reply and its closing <|im_end|>, 0 on everything else (headers, the think
// block, user and system turns, the "\n" after <|im_end|>).
#include "chat.h"
#include <string.h>

// Appends len bytes of s; joins with the last segment when the flag matches.
static void emit(ChatRender *r, const char *s, size_t len, int train) {
    if (len == 0) return;
    if (r->n > 0 && r->seg[r->n - 1].train == train) {
        ChatSegment *last = &r->seg[r->n - 1];
        size_t old = strlen(last->text);
        char *t = realloc(last->text, old + len + 1);
        if (!t) die("out of memory rendering a chat");
        memcpy(t + old, s, len);
        t[old + len] = 0;
        last->text = t;
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        ChatSegment *seg = realloc(r->seg, (size_t)cap * sizeof *seg);
        if (!seg) die("out of memory rendering a chat");
        r->seg = seg;
        r->cap = cap;
    }
    char *t = xmalloc(len + 1, "chat segment");
    memcpy(t, s, len);
    t[len] = 0;
    r->seg[r->n++] = (ChatSegment){t, train};
}

static void emit_str(ChatRender *r, const char *s, int train) { emit(r, s, strlen(s), train); }

// Python's str.strip('\n') family on [*s, *s + *len).
static void strip_newlines(const char **s, size_t *len, int left, int right) {
    while (left && *len && **s == '\n') (*s)++, (*len)--;
    while (right && *len && (*s)[*len - 1] == '\n') (*len)--;
}

// Last occurrence of needle in [s, s + len), or NULL.
static const char *find_last(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = len >= n ? len - n + 1 : 0; i-- > 0;)
        if (memcmp(s + i, needle, n) == 0) return s + i;
    return NULL;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

// An assistant message split as the template does: the reply after the last
// </think>, the reasoning between the last <think> and the first </think>.
typedef struct {
    const char *reply, *reasoning;
    size_t reply_len, reasoning_len;
} AssistantParts;

static AssistantParts split_reasoning(const char *content) {
    AssistantParts p = {content, "", strlen(content), 0};
    const char *first_close = strstr(content, "</think>");
    if (!first_close) return p;
    const char *last_close = find_last(content, strlen(content), "</think>");
    p.reply = last_close + strlen("</think>");
    p.reply_len = strlen(p.reply);
    strip_newlines(&p.reply, &p.reply_len, 1, 0);
    const char *r = content;
    size_t rlen = (size_t)(first_close - content);
    strip_newlines(&r, &rlen, 0, 1);
    const char *open = find_last(r, rlen, "<think>");
    if (open) {
        rlen -= (size_t)(open + strlen("<think>") - r);
        r = open + strlen("<think>");
    }
    strip_newlines(&r, &rlen, 1, 0);
    p.reasoning = r;
    p.reasoning_len = rlen;
    return p;
}

// The last genuine user query: a user turn that is not a wrapped tool
// response. With none, no turn counts as after it.
static int last_query_index(const ChatMessage *m, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(m[i].role, "user") == 0 &&
            !(strncmp(m[i].content, "<tool_response>", 15) == 0 && ends_with(m[i].content, "</tool_response>")))
            return i;
    return n - 1;
}

static int check_roles(const ChatMessage *m, int n, PtError *e) {
    if (n <= 0) return pt_fail(e, "chat: no messages");
    for (int i = 0; i < n; i++) {
        const char *role = m[i].role ? m[i].role : "(null)";
        if (strcmp(role, "tool") == 0)
            return pt_fail(e, "chat: message %d: role \"tool\" is not supported (no tool calling)", i);
        if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)
            return pt_fail(e, "chat: message %d: unknown role \"%s\" (system, user or assistant)", i, role);
        if (!m[i].content) return pt_fail(e, "chat: message %d (%s): no content", i, role);
        if (strcmp(role, "system") == 0 && i > 0)
            return pt_fail(e, "chat: message %d: a system message must come first", i);
    }
    return 0;
}

int chat_render(ChatRender *out, const ChatMessage *m, int n, int add_generation_prompt, int enable_thinking,
                PtError *e) {
    memset(out, 0, sizeof *out);
    if (check_roles(m, n, e)) return -1;
    int last_query = last_query_index(m, n);
    for (int i = 0; i < n; i++) {
        if (strcmp(m[i].role, "assistant") != 0) {
            emit_str(out, "<|im_start|>", 0);
            emit_str(out, m[i].role, 0);
            emit_str(out, "\n", 0);
            emit_str(out, m[i].content, 0);
            emit_str(out, "<|im_end|>\n", 0);
            continue;
        }
        AssistantParts p = split_reasoning(m[i].content);
        // After the last query, the final turn and turns with reasoning keep a
        // think block; earlier turns lose their reasoning.
        int think_block = i > last_query && (i == n - 1 || p.reasoning_len > 0);
        if (think_block) {
            strip_newlines(&p.reasoning, &p.reasoning_len, 1, 1);
            strip_newlines(&p.reply, &p.reply_len, 1, 0);
        }
        if (p.reply_len == 0) {
            chat_render_free(out);
            return pt_fail(e, "chat: message %d (assistant): empty reply", i);
        }
        emit_str(out, "<|im_start|>assistant\n", 0);
        if (think_block) {
            emit_str(out, "<think>\n", 0);
            emit(out, p.reasoning, p.reasoning_len, 0);
            emit_str(out, "\n</think>\n\n", 0);
        }
        emit(out, p.reply, p.reply_len, 1);
        emit_str(out, "<|im_end|>", 1);
        emit_str(out, "\n", 0);
    }
    if (add_generation_prompt) {
        emit_str(out, "<|im_start|>assistant\n", 0);
        if (!enable_thinking) emit_str(out, "<think>\n\n</think>\n\n", 0);
    }
    return 0;
}

char *chat_render_text(const ChatRender *r) {
    size_t total = 0;
    for (int i = 0; i < r->n; i++) total += strlen(r->seg[i].text);
    char *text = xmalloc(total + 1, "chat text");
    size_t o = 0;
    for (int i = 0; i < r->n; i++) {
        size_t len = strlen(r->seg[i].text);
        memcpy(text + o, r->seg[i].text, len);
        o += len;
    }
    text[o] = 0;
    return text;
}

void chat_render_free(ChatRender *r) {
    for (int i = 0; i < r->n; i++) free(r->seg[i].text);
    free(r->seg);
    memset(r, 0, sizeof *r);
}
