// sft.c: chat JSONL line -> rendered chat -> token ids + loss mask.
#include "sft.h"
#include <jansson.h>
#include <string.h>
#include "chat.h"
#include "corpus.h"

void sft_example_free(SftExample *ex) {
    free(ex->ids);
    free(ex->mask);
    memset(ex, 0, sizeof *ex);
}

static int is_blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return 0;
    return 1;
}

static int known_role(const char *r) { return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant"); }

// Fills msgs (pointers into root, which must outlive them) from either form.
static int parse_messages(json_t *root, const char *where, ChatMessage **msgs, int *n, PtError *e) {
    if (!json_is_object(root)) return pt_fail(e, "%s: expected a JSON object", where);
    json_t *arr = json_object_get(root, "messages");
    if (!arr) {
        json_t *prompt = json_object_get(root, "prompt"), *completion = json_object_get(root, "completion");
        json_t *system = json_object_get(root, "system");
        if (!json_is_string(prompt) || !json_is_string(completion))
            return pt_fail(e, "%s: no \"messages\" array (nor \"prompt\" and \"completion\" strings)", where);
        if (system && !json_is_string(system)) return pt_fail(e, "%s: \"system\" must be a string", where);
        *msgs = xcalloc(3, sizeof **msgs, "messages");
        *n = 0;
        if (system) (*msgs)[(*n)++] = (ChatMessage){"system", json_string_value(system)};
        (*msgs)[(*n)++] = (ChatMessage){"user", json_string_value(prompt)};
        (*msgs)[(*n)++] = (ChatMessage){"assistant", json_string_value(completion)};
    } else {
        if (!json_is_array(arr)) return pt_fail(e, "%s: \"messages\" must be an array", where);
        size_t count = json_array_size(arr);
        if (count == 0) return pt_fail(e, "%s: \"messages\" is empty", where);
        *msgs = xcalloc(count, sizeof **msgs, "messages");
        *n = (int)count;
        for (size_t i = 0; i < count; i++) {
            json_t *m = json_array_get(arr, i);
            json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
            json_t *content = json_is_object(m) ? json_object_get(m, "content") : NULL;
            if (!json_is_string(role) || !json_is_string(content)) {
                free(*msgs);
                return pt_fail(e, "%s: message %zu needs string \"role\" and \"content\" fields", where, i);
            }
            (*msgs)[i] = (ChatMessage){json_string_value(role), json_string_value(content)};
        }
    }
    int assistants = 0;
    for (int i = 0; i < *n; i++) {
        const ChatMessage *m = &(*msgs)[i];
        int bad = 0;
        if (!known_role(m->role))
            bad = pt_fail(e, "%s: message %d: unknown role \"%s\" (want system, user or assistant)", where, i, m->role);
        else if (!strcmp(m->role, "assistant") && is_blank(m->content))
            bad = pt_fail(e, "%s: message %d: empty assistant turn", where, i);
        if (bad) {
            free(*msgs);
            return -1;
        }
        assistants += !strcmp(m->role, "assistant");
    }
    if (!assistants) {
        free(*msgs);
        return pt_fail(e, "%s: no assistant turn to train on", where);
    }
    return 0;
}

static void grow_mask(SftExample *ex) {
    if (ex->mask_cap >= ex->n) return;
    size_t cap = ex->mask_cap ? ex->mask_cap : 256;
    while (cap < ex->n) cap *= 2;
    uint8_t *grown = realloc(ex->mask, cap);
    if (!grown) die("out of memory growing a loss mask");
    ex->mask = grown;
    ex->mask_cap = cap;
}

// Tokenizes each rendered segment; mask = the segment's train flag.
static int encode_segments(const Tokenizer *tok, const ChatRender *r, const char *where, SftExample *ex, PtError *e) {
    for (int s = 0; s < r->n; s++) {
        size_t before = ex->n;
        PtError te;
        if (tokenizer_encode(tok, r->seg[s].text, strlen(r->seg[s].text), &ex->ids, &ex->n, &ex->cap, &te))
            return pt_fail(e, "%s: %s", where, te.msg);
        grow_mask(ex);
        memset(ex->mask + before, r->seg[s].train ? 1 : 0, ex->n - before);
    }
    return 0;
}

// The mask is only right when tokenizing segment by segment gives the same
// ids as the whole text; boundaries sit at special tokens or newlines, so a
// difference means a template or tokenizer bug.
static int check_boundaries(const Tokenizer *tok, const ChatRender *r, const char *where, const SftExample *ex,
                            PtError *e) {
    char *text = chat_render_text(r);
    int *whole = NULL;
    size_t n = 0, cap = 0;
    PtError te;
    int rc = tokenizer_encode(tok, text, strlen(text), &whole, &n, &cap, &te);
    if (rc) pt_fail(e, "%s: %s", where, te.msg);
    else if (n != ex->n || memcmp(whole, ex->ids, n * sizeof(int))) {
        size_t k = 0;
        while (k < n && k < ex->n && whole[k] == ex->ids[k]) k++;
        rc = pt_fail(e, "%s: the chat segments tokenized one by one differ from the whole text at token %zu (%zu vs "
                        "%zu tokens), so no loss mask fits; does a reply start with a newline?",
                     where, k, ex->n, n);
    }
    free(whole);
    free(text);
    return rc;
}

int sft_encode_line(const Tokenizer *tok, const char *line, size_t len, const char *where, SftExample *ex,
                    PtError *e) {
    ex->n = 0;
    size_t bad;
    if (!utf8_valid(line, len, &bad)) {
        pt_fail(e, "%s: invalid UTF-8 at byte %zu of the line", where, bad);
        return SFT_BAD_RECORD;
    }
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root) {
        pt_fail(e, "%s: malformed JSON: %s (column %d)", where, jerr.text, jerr.column);
        return SFT_BAD_RECORD;
    }
    ChatMessage *msgs = NULL;
    int n_msgs = 0;
    if (parse_messages(root, where, &msgs, &n_msgs, e)) {
        json_decref(root);
        return SFT_BAD_RECORD;
    }
    ChatRender r = {0};
    PtError ce;
    int rc = 0;
    if (chat_render(&r, msgs, n_msgs, 0, 1, &ce)) {
        pt_fail(e, "%s: %s", where, ce.msg);
        rc = SFT_BAD_RECORD;
    }
    if (!rc && encode_segments(tok, &r, where, ex, e)) rc = SFT_BAD_RECORD;
    if (!rc && check_boundaries(tok, &r, where, ex, e)) rc = SFT_BOUNDARY_MERGE;
    chat_render_free(&r);
    free(msgs);
    json_decref(root);
    return rc;
}

SftFit sft_fit(SftExample *ex, size_t max_len, int truncate) {
    if (max_len == 0 || ex->n <= max_len) return SFT_KEEP;
    if (!truncate) return SFT_DROPPED;
    ex->n = max_len;
    for (size_t i = 0; i < max_len; i++)
        if (ex->mask[i]) return SFT_TRUNCATED;
    return SFT_DROPPED;
}
