// choice.c: choice JSONL line -> rendered prompt + candidates -> token ids (choice.h).
#include "choice.h"
#include <jansson.h>
#include <string.h>
#include "sft_formats.h"

void choice_example_free(ChoiceExample *ex) {
    free(ex->prompt);
    for (int k = 0; k < ex->n_cand; k++) free(ex->cand[k]);
    free(ex->cand);
    free(ex->cand_len);
    memset(ex, 0, sizeof *ex);
}

static int render_prompt(const Tokenizer *tok, const ChatTemplate *tmpl, const ChatMessage *m, int n, int **ids,
                         size_t *len, const char *where, PtError *e) {
    ChatText c = {0};
    PtError ce;
    size_t cap = 0;
    *len = 0;
    // As `pocket generate --chat` asks for a reply: the assistant header, thinking off.
    if (chat_render(tmpl, m, n, 1, 0, &c, &ce)) return pt_fail(e, "%s: %s", where, ce.msg);
    int rc = tokenizer_encode(tok, c.text, c.len, ids, len, &cap, &ce);
    chat_text_free(&c);
    if (rc) return pt_fail(e, "%s: %s", where, ce.msg);
    if (*len == 0) return pt_fail(e, "%s: the prompt renders to no tokens", where);
    return 0;
}

int choice_encode_prompt(const Tokenizer *tok, const ChatTemplate *tmpl, const char *system, const char *user,
                         int **ids, size_t *n, PtError *e) {
    ChatMessage m[2] = {{"system", system}, {"user", user}};
    return render_prompt(tok, tmpl, system ? m : m + 1, system ? 2 : 1, ids, n, "the prompt", e);
}

int choice_encode_candidate(const Tokenizer *tok, const char *text, int **ids, size_t *n, PtError *e) {
    size_t cap = 0;
    *n = 0;
    if (tokenizer_encode(tok, text, strlen(text), ids, n, &cap, e)) return -1;
    int end = tokenizer_token_id(tok, "<|im_end|>");
    if (end < 0) end = tokenizer_token_id(tok, "<|endoftext|>");
    if (end < 0) return 0;
    int *grown = realloc(*ids, (*n + 1) * sizeof(int));
    if (!grown) die("out of memory growing a candidate");
    *ids = grown;
    (*ids)[(*n)++] = end;
    return 0;
}

// The conversation before the answer: "messages", or "prompt" (+ "system").
static int parse_prompt(json_t *root, const char *where, ChatMessage **msgs, int *n, PtError *e) {
    json_t *arr = json_object_get(root, "messages"), *prompt = json_object_get(root, "prompt");
    json_t *system = json_object_get(root, "system");
    if (arr && prompt) return pt_fail(e, "%s: give \"prompt\" or \"messages\", not both", where);
    if (!arr) {
        if (!json_is_string(prompt)) return pt_fail(e, "%s: no \"prompt\" string (nor a \"messages\" array)", where);
        if (system && !json_is_string(system)) return pt_fail(e, "%s: \"system\" must be a string", where);
        *msgs = xcalloc(2, sizeof **msgs, "messages");
        *n = 0;
        if (system) (*msgs)[(*n)++] = (ChatMessage){"system", json_string_value(system)};
        (*msgs)[(*n)++] = (ChatMessage){"user", json_string_value(prompt)};
        return 0;
    }
    size_t count = json_is_array(arr) ? json_array_size(arr) : 0;
    if (count == 0) return pt_fail(e, "%s: \"messages\" must be a non-empty array", where);
    *msgs = xcalloc(count, sizeof **msgs, "messages");
    *n = (int)count;
    for (size_t i = 0; i < count; i++) {
        json_t *m = json_array_get(arr, i);
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        json_t *content = json_is_object(m) ? json_object_get(m, "content") : NULL;
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        if (!json_is_string(content) || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))) {
            free(*msgs);
            *msgs = NULL;
            return pt_fail(e, "%s: message %zu needs a \"role\" (system, user or assistant) and a string \"content\"",
                           where, i);
        }
        (*msgs)[i] = (ChatMessage){r, json_string_value(content)};
    }
    return 0;
}

// Candidates: 2..CHOICE_MAX_CANDIDATES distinct non-empty strings; the label an
// index among them or one of their texts.
static int parse_candidates(json_t *root, const char *where, int *label, PtError *e) {
    json_t *c = json_object_get(root, "candidates"), *l = json_object_get(root, "label");
    if (!json_is_array(c)) return pt_fail(e, "%s: no \"candidates\" array", where);
    size_t n = json_array_size(c);
    if (n < 2 || n > CHOICE_MAX_CANDIDATES)
        return pt_fail(e, "%s: %zu candidates (want 2 to %d)", where, n, CHOICE_MAX_CANDIDATES);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(c, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return pt_fail(e, "%s: candidate %zu is not a non-empty string", where, i);
        for (size_t j = 0; j < i; j++)
            if (json_equal(s, json_array_get(c, j)))
                return pt_fail(e, "%s: candidates %zu and %zu are the same (\"%s\")", where, j, i, json_string_value(s));
    }
    if (json_is_integer(l)) {
        json_int_t v = json_integer_value(l);
        if (v < 0 || (size_t)v >= n)
            return pt_fail(e, "%s: label %lld is outside the %zu candidates (indices 0 to %zu)", where, (long long)v, n,
                           n - 1);
        *label = (int)v;
        return 0;
    }
    if (!json_is_string(l)) return pt_fail(e, "%s: no \"label\" (a candidate's index or its text)", where);
    for (size_t i = 0; i < n; i++)
        if (json_equal(l, json_array_get(c, i))) {
            *label = (int)i;
            return 0;
        }
    return pt_fail(e, "%s: label \"%s\" is not one of the candidates", where, json_string_value(l));
}

int choice_encode_line(const Tokenizer *tok, const ChatTemplate *tmpl, const char *line, size_t len,
                       const char *where, ChoiceExample *ex, PtError *e) {
    choice_example_free(ex);
    void *json;
    if (sft_json_line(line, len, where, &json, e)) return -1;
    json_t *root = json;
    ChatMessage *msgs = NULL;
    int n_msgs = 0, label = 0;
    int rc = parse_candidates(root, where, &label, e) || parse_prompt(root, where, &msgs, &n_msgs, e) ? -1 : 0;
    if (!rc) rc = render_prompt(tok, tmpl, msgs, n_msgs, &ex->prompt, &ex->n_prompt, where, e);
    if (!rc) {
        json_t *c = json_object_get(root, "candidates");
        ex->n_cand = (int)json_array_size(c);
        ex->label = label;
        ex->cand = xcalloc((size_t)ex->n_cand, sizeof(int *), "candidates");
        ex->cand_len = xcalloc((size_t)ex->n_cand, sizeof(size_t), "candidate lengths");
        PtError te;
        for (int k = 0; k < ex->n_cand && !rc; k++)
            if (choice_encode_candidate(tok, json_string_value(json_array_get(c, k)), &ex->cand[k], &ex->cand_len[k],
                                        &te))
                rc = pt_fail(e, "%s: candidate %d: %s", where, k, te.msg);
    }
    free(msgs);
    json_decref(root);
    if (rc) choice_example_free(ex);
    return rc;
}
