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
        else if (!strcmp(m->role, "system") && i > 0)
            bad = pt_fail(e, "%s: message %d: a system message must come first", where, i);
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

static size_t special_len(void *tok, const char *s, size_t len) { return tokenizer_special_prefix(tok, s, len); }

// A token's text for an error message: printable, at most 40 bytes.
static void token_text(const char *s, size_t len, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') out[o++] = '\\', out[o++] = 'n';
        else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

// The whole rendered text is tokenized once; each token's bytes are found on
// the text in order, and a token is trained when all its bytes are. A token
// with trained and untrained bytes (the tokenizer merged across the edge of a
// reply) gets no right mask: that is the error.
static int mask_tokens(const Tokenizer *tok, const ChatText *c, const uint8_t *train, const char *where,
                       SftExample *ex, PtError *e) {
    PtError te;
    if (tokenizer_encode(tok, c->text, c->len, &ex->ids, &ex->n, &ex->cap, &te))
        return pt_fail(e, "%s: %s", where, te.msg);
    grow_mask(ex);
    size_t pos = 0;
    for (size_t k = 0; k < ex->n; k++) {
        size_t len;
        const char *b = tokenizer_token_bytes(tok, ex->ids[k], &len);
        if (pos + len > c->len || memcmp(c->text + pos, b, len))
            return pt_fail(e, "%s: token %zu does not spell the text at byte %zu (the tokenizer normalizes or "
                              "drops characters here), so no loss mask can be placed on it",
                           where, k, pos);
        size_t trained = 0;
        for (size_t i = pos; i < pos + len; i++) trained += train[i];
        if (trained && trained < len) {
            size_t at = pos;
            while (at < pos + len && !c->tag[at]) at++;
            if (at == pos + len) at = pos;
            int msg = c->tag[at] ? c->tag[at] - 1 : -1;
            char shown[48];
            token_text(b, len < 40 ? len : 40, shown, sizeof shown);
            return pt_fail(e, "%s: token %zu (\"%s\") joins the chat template's text and %s%d's reply, so no "
                              "loss mask can keep them apart (e.g. a reply starting with whitespace the template "
                              "already ends with)",
                           where, k, shown, msg >= 0 ? "message " : "the edge of message ", msg >= 0 ? msg : 0);
        }
        ex->mask[k] = trained ? 1 : 0;
        pos += len;
    }
    if (pos != c->len) return pt_fail(e, "%s: the tokens spell %zu of the %zu bytes of the chat", where, pos, c->len);
    return 0;
}

int sft_encode_line(const Tokenizer *tok, const ChatTemplate *tmpl, const char *line, size_t len, const char *where,
                    SftExample *ex, PtError *e) {
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
    ChatText c = {0};
    PtError ce;
    int rc = 0;
    uint8_t *train = NULL;
    if (chat_render(tmpl, msgs, n_msgs, 0, 1, &c, &ce)) {
        pt_fail(e, "%s: %s", where, ce.msg);
        rc = SFT_BAD_RECORD;
    } else {
        train = xmalloc(c.len + 1, "train bytes");
        chat_train_bytes(&c, special_len, (void *)tok, train);
        size_t trained = 0;
        for (size_t i = 0; i < c.len; i++) trained += train[i];
        if (!trained) {
            pt_fail(e, "%s: the chat template renders no assistant content, so nothing would be trained", where);
            rc = SFT_BAD_RECORD;
        } else if (mask_tokens(tok, &c, train, where, ex, e)) {
            rc = SFT_BOUNDARY_MERGE;
        }
    }
    free(train);
    chat_text_free(&c);
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
