// pairs.c: preference pair lines -> the two token documents of a pair (pairs.h).
#include "pairs.h"
#include <jansson.h>
#include <string.h>
#include "sft_formats.h"

static const char *const SIDE[2] = {"chosen", "rejected"};

void pair_example_free(PairExample *ex) {
    free(ex->ids[0]);
    free(ex->ids[1]);
    free(ex->prompt);
    memset(ex, 0, sizeof *ex);
}

const char *pair_eos_token(const Tokenizer *tok, const ChatTemplate *tmpl) {
    const char *eos = tmpl ? chat_template_token(tmpl, "eos_token") : NULL;
    if (eos && *eos) return eos;
    if (tokenizer_token_id(tok, "<|im_end|>") >= 0) return "<|im_end|>";
    if (tokenizer_token_id(tok, "<|endoftext|>") >= 0) return "<|endoftext|>";
    return NULL;
}

static int encode(const PairCoder *c, const char *text, size_t len, int **ids, size_t *n, size_t *cap,
                  const char *where, PtError *e) {
    PtError te;
    *n = 0;
    if (tokenizer_encode(c->tok, text, len, ids, n, cap, &te)) return pt_fail(e, "%s: %s", where, te.msg);
    return 0;
}

static size_t common_prefix(const int *a, size_t na, const int *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

// Once the prompt alone and both documents are tokenized: the prompt is what
// the prompt's tokens share with both documents (TRL's rule).
static int split_tokens(PairExample *ex, const char *where, int *drop, PtError *e) {
    size_t a = common_prefix(ex->prompt, ex->prompt_n, ex->ids[0], ex->n[0]);
    size_t b = common_prefix(ex->prompt, ex->prompt_n, ex->ids[1], ex->n[1]);
    ex->n_prompt = a < b ? a : b;
    for (int k = 0; k < 2 && *drop == PAIR_KEPT; k++)
        if (ex->n[k] == ex->n_prompt) {
            *drop = PAIR_DROP_EMPTY;
            pt_fail(e, "%s: the %s response adds no token after the prompt", where, SIDE[k]);
        }
    return 0;
}

// Plain text: the prompt alone, and prompt + response + the end token (TRL
// appends it to a response that does not already end with it).
static int encode_text(const PairCoder *c, const char *prompt, size_t np, const char *const resp[2],
                       const size_t nr[2], const char *where, PairExample *ex, int *drop, PtError *e) {
    if (!c->eos)
        return pt_fail(e, "%s: a plain-text pair's responses end with the end-of-sequence token, and the tokenizer "
                          "has none (no eos_token in its tokenizer_config.json, no <|im_end|> or <|endoftext|>)", where);
    size_t ne = strlen(c->eos);
    if (encode(c, prompt, np, &ex->prompt, &ex->prompt_n, &ex->prompt_cap, where, e)) return -1;
    char *text = xmalloc(np + (nr[0] > nr[1] ? nr[0] : nr[1]) + ne + 1, "pair text");
    memcpy(text, prompt, np);
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        size_t n = np + nr[k];
        memcpy(text + np, resp[k], nr[k]);
        if (nr[k] < ne || memcmp(resp[k] + nr[k] - ne, c->eos, ne)) memcpy(text + n, c->eos, ne), n += ne;
        rc = encode(c, text, n, &ex->ids[k], &ex->n[k], &ex->cap[k], where, e);
    }
    free(text);
    return rc ? -1 : split_tokens(ex, where, drop, e);
}

// Implicit plain text: the prompt is the text both start with, up to the
// first character they differ in, a space before it left to the responses
// (TRL's extract_prompt). Pairs it would split arbitrarily (one a prefix of
// the other, nothing in common) are dropped.
static size_t split_text(const char *const s[2], const size_t n[2], const char *where, int *drop, PtError *e) {
    size_t i = 0, shorter = n[0] < n[1] ? n[0] : n[1];
    while (i < shorter && s[0][i] == s[1][i]) i++;
    if (i == shorter) {
        *drop = n[0] == n[1] ? PAIR_DROP_EQUAL : PAIR_DROP_PROMPT_MISMATCH;
        pt_fail(e, n[0] == n[1] ? "%s: chosen and rejected are the same text"
                                : "%s: one of chosen and rejected is the other's beginning, so no prompt parts them",
                where);
        return 0;
    }
    while (i > 0 && ((unsigned char)s[0][i] & 0xC0) == 0x80) i--;   // to the start of the differing character
    if (i == 0) {
        *drop = PAIR_DROP_PROMPT_MISMATCH;
        pt_fail(e, "%s: chosen and rejected share no leading text, so there is no prompt", where);
        return 0;
    }
    return s[0][i - 1] == ' ' ? i - 1 : i;
}

// The chat template's rendering: the prompt with the generation prompt, then
// each prompt + response as one conversation. Thinking is on: TRL passes no
// enable_thinking, which Qwen3's template reads as on.
static int encode_chat(const PairCoder *c, const ChatMessage *prompt, size_t np, ChatMessage *const resp[2],
                       const size_t nr[2], const char *where, PairExample *ex, int *drop, PtError *e) {
    ChatMessage *all = xcalloc(np + (nr[0] > nr[1] ? nr[0] : nr[1]), sizeof *all, "messages");
    memcpy(all, prompt, np * sizeof *all);
    int rc = 0;
    for (int k = -1; k < 2 && !rc; k++) {
        size_t n = np;
        if (k >= 0) memcpy(all + np, resp[k], nr[k] * sizeof *all), n += nr[k];
        ChatText t;
        PtError ce;
        if (chat_render(c->tmpl, all, (int)n, k < 0, 1, &t, &ce)) rc = pt_fail(e, "%s: %s", where, ce.msg);
        else if (k < 0) rc = encode(c, t.text, t.len, &ex->prompt, &ex->prompt_n, &ex->prompt_cap, where, e);
        else rc = encode(c, t.text, t.len, &ex->ids[k], &ex->n[k], &ex->cap[k], where, e);
        chat_text_free(&t);
    }
    free(all);
    return rc ? -1 : split_tokens(ex, where, drop, e);
}

// Roles the template takes, a system message first only; a response holds
// the assistant's turns.
static int check_roles(const ChatMessage *m, size_t n, const char *key, int response, const char *where, PtError *e) {
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return pt_fail(e, "%s: \"%s\" message %zu: unknown role \"%s\" (want system, user or assistant)", where, key,
                           i, r);
        if (response && strcmp(r, "assistant"))
            return pt_fail(e, "%s: \"%s\" message %zu is a %s turn: a response holds assistant turns only (the "
                              "conversation before it goes in \"prompt\")", where, key, i, r);
        if (!strcmp(r, "system") && i > 0)
            return pt_fail(e, "%s: \"%s\" message %zu: a system message must come first", where, key, i);
    }
    return 0;
}

// Implicit prompt: the leading messages both lists hold alike (compared
// whole, as TRL compares them); the rest of each must be assistant turns.
static size_t split_messages(json_t *const list[2], ChatMessage *const m[2], const char *where, int *drop,
                             PtError *e) {
    size_t n[2] = {json_array_size(list[0]), json_array_size(list[1])}, i = 0;
    while (i < n[0] && i < n[1] && json_equal(json_array_get(list[0], i), json_array_get(list[1], i))) i++;
    *drop = PAIR_DROP_PROMPT_MISMATCH;
    if (i == n[0] && i == n[1]) {
        *drop = PAIR_DROP_EQUAL;
        pt_fail(e, "%s: chosen and rejected are the same conversation", where);
    } else if (i == n[0] || i == n[1]) {
        pt_fail(e, "%s: the %s conversation is the beginning of the other, so no prompt parts them", where,
                SIDE[i == n[0] ? 0 : 1]);
    } else if (i == 0) {
        pt_fail(e, "%s: chosen and rejected share no leading message, so there is no prompt", where);
    } else {
        *drop = PAIR_KEPT;
        for (int k = 0; k < 2 && *drop == PAIR_KEPT; k++)
            for (size_t j = i; j < n[k] && *drop == PAIR_KEPT; j++)
                if (strcmp(m[k][j].role, "assistant")) {
                    *drop = PAIR_DROP_PROMPT_MISMATCH;
                    pt_fail(e, "%s: the two conversations part at message %zu, and %s's message %zu after it is a %s "
                               "turn, not the assistant's: their prompts differ", where, i, SIDE[k], j, m[k][j].role);
                }
    }
    return i;
}

// The message-list forms: explicit prompt (p) or implicit.
static int encode_conversation(const PairCoder *c, json_t *p, json_t *const side[2], const char *where,
                               PairExample *ex, int *drop, PtError *e) {
    static const char *const KEYS[3] = {"prompt", "chosen", "rejected"};
    static const char *const WHAT[3] = {"\"prompt\" message", "\"chosen\" message", "\"rejected\" message"};
    json_t *list[3] = {p, side[0], side[1]};
    ChatMessage *m[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        if (!list[k]) continue;
        n[k] = json_array_size(list[k]);
        if (n[k] == 0) {
            rc = pt_fail(e, "%s: \"%s\" is an empty list of messages", where, KEYS[k]);
            break;
        }
        m[k] = xcalloc(n[k], sizeof *m[k], "messages");
        rc = sft_json_messages(list[k], WHAT[k], where, m[k], e) ||
             check_roles(m[k], n[k], KEYS[k], k > 0 && p, where, e);
    }
    size_t shared = 0;
    if (!rc && !p) shared = split_messages(list + 1, m + 1, where, drop, e);
    if (!rc && *drop == PAIR_KEPT) {
        ChatMessage *resp[2] = {m[1] + shared, m[2] + shared};
        size_t nr[2] = {n[1] - shared, n[2] - shared};
        rc = encode_chat(c, p ? m[0] : m[1], p ? n[0] : shared, resp, nr, where, ex, drop, e);
    }
    for (int k = 0; k < 3; k++) free(m[k]);
    return rc ? -1 : 0;
}

static int encode_record(const PairCoder *c, json_t *root, const char *where, PairExample *ex, int *drop,
                         PtError *e) {
    static const char *const UNAPPLIED[] = {"tools", "chat_template_kwargs", "images"};
    for (size_t i = 0; i < sizeof UNAPPLIED / sizeof *UNAPPLIED; i++)
        if (json_object_get(root, UNAPPLIED[i]))
            return pt_fail(e, "%s: \"%s\": TRL applies it, pocket tokenize --pairs does not (remove it)", where,
                           UNAPPLIED[i]);
    json_t *p = json_object_get(root, "prompt"), *side[2];
    for (int k = 0; k < 2; k++)
        if (!(side[k] = json_object_get(root, SIDE[k])))
            return pt_fail(e, "%s: no \"%s\" (a pair needs \"chosen\" and \"rejected\")", where, SIDE[k]);
    int text = json_is_string(side[0]) && json_is_string(side[1]) && (!p || json_is_string(p));
    int chat = json_is_array(side[0]) && json_is_array(side[1]) && (!p || json_is_array(p));
    if (chat) return encode_conversation(c, p, side, where, ex, drop, e);
    if (!text)
        return pt_fail(e, "%s: %s must be all strings (plain text) or all lists of messages", where,
                       p ? "\"prompt\", \"chosen\" and \"rejected\"" : "\"chosen\" and \"rejected\"");
    const char *s[2] = {json_string_value(side[0]), json_string_value(side[1])};
    size_t n[2] = {json_string_length(side[0]), json_string_length(side[1])};
    if (p) return encode_text(c, json_string_value(p), json_string_length(p), s, n, where, ex, drop, e);
    size_t shared = split_text(s, n, where, drop, e);
    if (*drop != PAIR_KEPT) return 0;
    const char *rest[2] = {s[0] + shared, s[1] + shared};
    size_t n_rest[2] = {n[0] - shared, n[1] - shared};
    return encode_text(c, s[0], shared, rest, n_rest, where, ex, drop, e);
}

int pair_encode_line(const PairCoder *c, const char *line, size_t len, const char *where, PairExample *ex, int *drop,
                     PtError *e) {
    ex->n[0] = ex->n[1] = ex->n_prompt = ex->prompt_n = 0;
    *drop = PAIR_KEPT;
    void *root;
    if (sft_json_line(line, len, where, &root, e)) return -1;
    int rc = encode_record(c, root, where, ex, drop, e);
    json_decref(root);
    return rc;
}

int pair_fit(PairExample *ex, size_t max_len, int truncate, const char *where, int *truncated, PtError *why) {
    *truncated = 0;
    if (max_len && (ex->n[0] > max_len || ex->n[1] > max_len)) {
        if (!truncate) {
            pt_fail(why, "%s: %zu and %zu tokens, more than --max-len %zu", where, ex->n[0], ex->n[1], max_len);
            return PAIR_DROP_TOO_LONG;
        }
        if (ex->n_prompt >= max_len) {   // TRL's keep_start would leave no response token
            pt_fail(why, "%s: the prompt alone holds %zu tokens, which fills --max-len %zu", where, ex->n_prompt,
                    max_len);
            return PAIR_DROP_TOO_LONG;
        }
        for (int k = 0; k < 2; k++) ex->n[k] = ex->n[k] > max_len ? max_len : ex->n[k];
        *truncated = 1;
    }
    if (ex->n[0] == ex->n[1] && !memcmp(ex->ids[0], ex->ids[1], ex->n[0] * sizeof(int))) {
        pt_fail(why, "%s: chosen and rejected are the same tokens%s", where, *truncated ? " once truncated" : "");
        *truncated = 0;
        return PAIR_DROP_EQUAL;
    }
    return PAIR_KEPT;
}

int pair_write(DatasetWriter *w, const PairExample *ex, PtError *e) {
    size_t longest = ex->n[0] > ex->n[1] ? ex->n[0] : ex->n[1];
    uint8_t *mask = xmalloc(longest, "pair mask");
    memset(mask, 0, ex->n_prompt);
    memset(mask + ex->n_prompt, 1, longest - ex->n_prompt);
    int rc = dataset_writer_add(w, ex->ids[0], mask, ex->n[0], e) || dataset_writer_add(w, ex->ids[1], mask, ex->n[1], e);
    free(mask);
    return rc ? -1 : 0;
}
