// sft.c: chat JSONL line -> rendered chat -> token ids + loss mask.
#include "sft.h"
#include <string.h>
#include "chat.h"
#include "corpus.h"
#include "sft_formats.h"

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

// The rules every format's messages keep.
static int check_messages(const ChatMessage *m, int n, const char *where, PtError *e) {
    int assistants = 0;
    for (int i = 0; i < n; i++) {
        if (!known_role(m[i].role))
            return pt_fail(e, "%s: message %d: unknown role \"%s\" (want system, user or assistant)", where, i,
                           m[i].role);
        if (!strcmp(m[i].role, "assistant") && is_blank(m[i].content))
            return pt_fail(e, "%s: message %d: empty assistant turn", where, i);
        if (!strcmp(m[i].role, "system") && i > 0)
            return pt_fail(e, "%s: message %d: a system message must come first", where, i);
        assistants += !strcmp(m[i].role, "assistant");
    }
    if (!assistants) return pt_fail(e, "%s: no assistant turn to train on", where);
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

int sft_encode_messages(const Tokenizer *tok, const ChatTemplate *tmpl, const ChatMessage *msgs, int n_msgs,
                        const char *where, SftExample *ex, PtError *e) {
    ex->n = 0;
    if (check_messages(msgs, n_msgs, where, e)) return SFT_BAD_RECORD;
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
    return rc;
}

int sft_encode_record(const Tokenizer *tok, const ChatTemplate *tmpl, const CorpusRecord *rec, SftFormat format,
                      const SftColumns *cols, const char *where, SftExample *ex, SftFormat *found, PtError *e) {
    SftMessages m;
    ex->n = 0;
    int rc = SFT_BAD_RECORD;
    if (sft_read_messages(rec, format, cols, where, &m, e) == 0)
        rc = sft_encode_messages(tok, tmpl, m.m, m.n, where, ex, e);
    *found = m.format;
    sft_messages_free(&m);
    return rc;
}

int sft_encode_line(const Tokenizer *tok, const ChatTemplate *tmpl, const char *line, size_t len, const char *where,
                    SftExample *ex, PtError *e) {
    CorpusRecord rec = {.data = (char *)line, .len = len, .file = where, .format = CORPUS_JSONL};
    SftFormat found;
    return sft_encode_record(tok, tmpl, &rec, SFT_FORMAT_AUTO, NULL, where, ex, &found, e);
}

SftFit sft_fit(SftExample *ex, size_t max_len, int truncate) {
    if (max_len == 0 || ex->n <= max_len) return SFT_KEEP;
    if (!truncate) return SFT_DROPPED;
    ex->n = max_len;
    for (size_t i = 0; i < max_len; i++)
        if (ex->mask[i]) return SFT_TRUNCATED;
    return SFT_DROPPED;
}
