// vocab_prune.c: the kept set of a vocabulary pruning and the tokenizer
// files of the kept tokens (vocab_prune.h).
#include "vocab_prune.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "chat.h"

// ---- the merges that make each token ----------------------------------------

// Merge indices by the token they make (CSR): merges first[id] .. first[id+1].
typedef struct {
    int *first;   // [n_ids + 1]
    int *merge;   // [n_merges]
} Makers;

static void makers_build(Makers *mk, const Tokenizer *tok, int n_ids) {
    int n = tokenizer_n_merges(tok);
    mk->first = xcalloc((size_t)n_ids + 1, sizeof *mk->first, "merge index");
    mk->merge = xcalloc(n ? (size_t)n : 1, sizeof *mk->merge, "merge index");
    for (int i = 0; i < n; i++) {
        int a, b, c;
        tokenizer_merge(tok, i, &a, &b, &c);
        mk->first[c + 1]++;
    }
    for (int id = 0; id < n_ids; id++) mk->first[id + 1] += mk->first[id];
    int *fill = xmalloc(((size_t)n_ids + 1) * sizeof *fill, "merge index");
    memcpy(fill, mk->first, ((size_t)n_ids + 1) * sizeof *fill);
    for (int i = 0; i < n; i++) {
        int a, b, c;
        tokenizer_merge(tok, i, &a, &b, &c);
        mk->merge[fill[c]++] = i;
    }
    free(fill);
}

static void makers_free(Makers *mk) {
    free(mk->first);
    free(mk->merge);
}

// ---- the kept set -------------------------------------------------------------

typedef struct {
    const Tokenizer *tok;
    Makers mk;
    uint8_t *kept;
    int n_kept;
    int *stamp;        // per id: the last closure walk that visited it
    int walk;
    int *stack, *found;
} Selection;

// The tokens id needs that are not kept yet: itself and, through every merge
// that makes a token of them, both inputs. Into s->found; returns how many.
static int closure_of(Selection *s, int id) {
    int n_found = 0, top = 0;
    s->walk++;
    s->stack[top++] = id;
    s->stamp[id] = s->walk;
    while (top > 0) {
        int t = s->stack[--top];
        s->found[n_found++] = t;
        for (int k = s->mk.first[t]; k < s->mk.first[t + 1]; k++) {
            int in[2], c;
            tokenizer_merge(s->tok, s->mk.merge[k], &in[0], &in[1], &c);
            for (int j = 0; j < 2; j++)
                if (!s->kept[in[j]] && s->stamp[in[j]] != s->walk) {
                    s->stamp[in[j]] = s->walk;
                    s->stack[top++] = in[j];
                }
        }
    }
    return n_found;
}

static void keep_found(Selection *s, int n) {
    for (int i = 0; i < n; i++) s->kept[s->found[i]] = 1;
    s->n_kept += n;
}

static void keep_with_inputs(Selection *s, int id) {
    if (id >= 0 && !s->kept[id]) keep_found(s, closure_of(s, id));
}

// Most used first; ties (and unused tokens) by id, the earlier merge first.
static int by_use(const void *a, const void *b, void *ctx) {
    const uint64_t *counts = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    if (counts[i] != counts[j]) return counts[i] > counts[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

static void selection_free(Selection *s) {
    makers_free(&s->mk);
    free(s->kept);
    free(s->stamp);
    free(s->stack);
    free(s->found);
}

// The tokens that stay whatever the counts, with their merge inputs; an error
// when keep is below them or not below the tokenizer's tokens.
static int select_required(Selection *s, const Tokenizer *tok, const int *forced, int n_forced, int keep,
                           int *n_tokens, PtError *e) {
    const int n = tokenizer_vocab_size(tok);
    memset(s, 0, sizeof *s);
    s->tok = tok;
    makers_build(&s->mk, tok, n);
    s->kept = xcalloc((size_t)n, 1, "kept tokens");
    s->stamp = xcalloc((size_t)n, sizeof *s->stamp, "kept tokens");
    s->stack = xmalloc((size_t)n * sizeof *s->stack, "kept tokens");
    s->found = xmalloc((size_t)n * sizeof *s->found, "kept tokens");
    int n_added = 0;
    *n_tokens = 0;
    for (int id = 0; id < n; id++) {
        *n_tokens += tokenizer_is_token(tok, id);
        if (tokenizer_is_added(tok, id)) {
            keep_with_inputs(s, id);
            n_added++;
        }
    }
    for (int b = 0; b < 256; b++) keep_with_inputs(s, tokenizer_byte_id(tok, b));
    keep_with_inputs(s, tokenizer_unk_id(tok));
    for (int i = 0; i < n_forced; i++) keep_with_inputs(s, forced[i]);
    if (keep >= *n_tokens)
        return pt_fail(e, "--keep %d is not below the tokenizer's %d tokens: nothing to prune", keep, *n_tokens);
    if (keep < s->n_kept)
        return pt_fail(e,
                       "--keep %d is below the %d tokens that must stay (%d added tokens, the byte tokens, the tokens "
                       "of the config, the chat template and --keep-file, and the merge inputs they need)",
                       keep, s->n_kept, n_added);
    return 0;
}

int vocab_plan_check(const Tokenizer *tok, const int *forced, int n_forced, int keep, PtError *e) {
    Selection s;
    int n_tokens, rc = select_required(&s, tok, forced, n_forced, keep, &n_tokens, e);
    selection_free(&s);
    return rc;
}

int vocab_plan(VocabPlan *p, const Tokenizer *tok, const uint64_t *counts, const int *forced, int n_forced, int keep,
               PtError *e) {
    memset(p, 0, sizeof *p);
    const int n = tokenizer_vocab_size(tok);
    Selection s;
    int n_tokens;
    if (select_required(&s, tok, forced, n_forced, keep, &n_tokens, e)) {
        selection_free(&s);
        return -1;
    }
    p->n_required = s.n_kept;
    int *order = xmalloc((size_t)n * sizeof *order, "token order");
    int n_cand = 0;
    for (int id = 0; id < n; id++)
        if (!s.kept[id] && tokenizer_is_token(tok, id)) order[n_cand++] = id;
    qsort_r(order, (size_t)n_cand, sizeof *order, by_use, (void *)counts);
    // A token whose inputs do not fit is passed over; a later pass takes it
    // when others brought its inputs in. Every pass that starts below keep
    // adds a token: some unkept token has all its inputs kept.
    for (int added = 1; added && s.n_kept < keep;) {
        added = 0;
        for (int i = 0; i < n_cand && s.n_kept < keep; i++) {
            if (s.kept[order[i]]) continue;
            int m = closure_of(&s, order[i]);
            if (s.n_kept + m <= keep) keep_found(&s, m), added = 1;
        }
    }
    free(order);
    p->n_old = n;
    p->n_tokens = n_tokens;
    p->n_kept = s.n_kept;
    p->new_of_old = xmalloc((size_t)n * sizeof *p->new_of_old, "id map");
    p->old_of_new = xmalloc((size_t)s.n_kept * sizeof *p->old_of_new, "id map");
    int next = 0;
    for (int id = 0; id < n; id++) {
        p->new_of_old[id] = s.kept[id] ? next : -1;
        if (s.kept[id]) p->old_of_new[next++] = id;
    }
    for (int i = 0; i < tokenizer_n_merges(tok); i++) {
        int a, b, c;
        tokenizer_merge(tok, i, &a, &b, &c);
        p->n_merges_kept += s.kept[a] && s.kept[b] && s.kept[c];
    }
    selection_free(&s);
    return 0;
}

void vocab_plan_free(VocabPlan *p) {
    free(p->new_of_old);
    free(p->old_of_new);
    memset(p, 0, sizeof *p);
}

// ---- tokens that must stay --------------------------------------------------------

static void push_ids(int **ids, int *n, const int *add, size_t count) {
    int *grown = realloc(*ids, ((size_t)*n + count + 1) * sizeof **ids);
    if (!grown) die("out of memory collecting forced tokens");
    *ids = grown;
    memcpy(*ids + *n, add, count * sizeof *add);
    *n += (int)count;
}

static int push_encoding(const Tokenizer *tok, const char *text, size_t len, int **ids, int *n, PtError *e) {
    int *enc = NULL;
    size_t count = 0, cap = 0;
    int rc = tokenizer_encode(tok, text, len, &enc, &count, &cap, e);
    if (rc == 0) push_ids(ids, n, enc, count);
    free(enc);
    return rc;
}

int vocab_template_tokens(const Tokenizer *tok, const char *config_json, size_t len, int **ids, int *n, PtError *e) {
    ChatTemplate *t;
    if (chat_template_load(&t, config_json, len, "tokenizer_config.json", e)) return -1;
    static const ChatMessage TURNS[] = {{"system", ""}, {"user", ""}, {"assistant", ""}};
    static const struct { int first, count, generation, thinking; } CONVERSATIONS[] = {
        {0, 3, 0, 1}, {1, 2, 0, 1}, {1, 1, 1, 1}, {1, 1, 1, 0}};
    int rc = 0;
    for (size_t k = 0; k < sizeof CONVERSATIONS / sizeof CONVERSATIONS[0] && rc == 0; k++) {
        ChatText text;
        PtError refused;
        if (chat_render(t, TURNS + CONVERSATIONS[k].first, CONVERSATIONS[k].count, CONVERSATIONS[k].generation,
                        CONVERSATIONS[k].thinking, &text, &refused))
            continue;
        rc = push_encoding(tok, text.text, text.len, ids, n, e);
        chat_text_free(&text);
    }
    chat_template_free(t);
    json_t *cfg = config_json ? json_loadb(config_json, len, 0, NULL) : NULL;
    static const char *const SPECIAL[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (int k = 0; k < 4 && rc == 0; k++) {
        json_t *v = json_object_get(cfg, SPECIAL[k]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        int id = json_is_string(v) ? tokenizer_token_id(tok, json_string_value(v)) : -1;
        if (id >= 0) push_ids(ids, n, &id, 1);
    }
    json_decref(cfg);
    return rc;
}

int vocab_keep_file(const Tokenizer *tok, const char *path, int **ids, int *n, PtError *e) {
    uint8_t *data;
    size_t len;
    if (read_whole_file(path, &data, &len, e)) return -1;
    int rc = 0, line = 1;
    for (char *s = (char *)data, *end = s + len; s < end && rc == 0; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *stop = nl ? nl : end;
        if (stop > s && stop[-1] == '\r') stop--;
        char saved = *stop;
        *stop = 0;
        int id = tokenizer_token_id(tok, s);
        if (stop > s && id < 0)
            rc = pt_fail(e, "%s:%d: \"%s\" is not a token of the checkpoint's tokenizer (write each token as "
                            "tokenizer.json spells it, e.g. \"Ġthe\" for \" the\")", path, line, s);
        else if (stop > s) push_ids(ids, n, &id, 1);
        *stop = saved;
        s = nl ? nl + 1 : end;
    }
    free(data);
    return rc;
}

// ---- the tokenizer files ---------------------------------------------------------

static int dump(json_t *root, char **out, size_t *out_len, const char *what, PtError *e) {
    *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!*out) return pt_fail(e, "out of memory writing the pruned %s", what);
    *out_len = strlen(*out);
    return 0;
}

static json_t *token_json(const Tokenizer *tok, int id) {
    size_t len;
    const char *s = tokenizer_vocab_string(tok, id, &len);
    return json_stringn(s, len);
}

int vocab_prune_tokenizer_json(const VocabPlan *p, const Tokenizer *tok, const char *json, size_t len, char **out,
                               size_t *out_len, PtError *e) {
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) return pt_fail(e, "tokenizer.json: invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
    json_t *model = json_object_get(root, "model"), *old_merges = json_object_get(model, "merges");
    json_t *vocab = json_object(), *merges = json_array();
    for (int k = 0; k < p->n_kept; k++) {
        size_t n;
        const char *s = tokenizer_vocab_string(tok, p->old_of_new[k], &n);
        if (s) json_object_setn_new(vocab, s, n, json_integer(k));
    }
    // The merges keep the form they had: "a b" strings or ["a", "b"] pairs.
    json_t *first = json_array_get(old_merges, 0);
    int as_strings = json_is_string(first);
    for (int i = 0; i < tokenizer_n_merges(tok); i++) {
        int a, b, c;
        tokenizer_merge(tok, i, &a, &b, &c);
        if (p->new_of_old[a] < 0 || p->new_of_old[b] < 0 || p->new_of_old[c] < 0) continue;
        json_t *l = token_json(tok, a), *r = token_json(tok, b);
        if (as_strings) {
            size_t ln = json_string_length(l), rn = json_string_length(r);
            char *joined = xmalloc(ln + rn + 2, "merge");
            memcpy(joined, json_string_value(l), ln);
            joined[ln] = ' ';
            memcpy(joined + ln + 1, json_string_value(r), rn);
            json_array_append_new(merges, json_stringn(joined, ln + rn + 1));
            free(joined);
            json_decref(l);
            json_decref(r);
        } else {
            json_array_append_new(merges, json_pack("[oo]", l, r));
        }
    }
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", merges);
    json_t *added = json_object_get(root, "added_tokens");
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        const char *content = json_string_value(json_object_get(a, "content"));
        int old = content ? tokenizer_token_id(tok, content) : -1;
        json_object_set_new(a, "id", json_integer(old >= 0 && old < p->n_old ? p->new_of_old[old] : -1));
    }
    int rc = dump(root, out, out_len, "tokenizer.json", e);
    json_decref(root);
    return rc;
}

int vocab_prune_tokenizer_config(const VocabPlan *p, const char *json, size_t len, const char *src, char **out,
                                 size_t *out_len, PtError *e) {
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) return pt_fail(e, "%s: invalid JSON at line %d column %d: %s", src, je.line, je.column, je.text);
    json_t *decoder = json_object_get(root, "added_tokens_decoder");
    int rc = 0;
    if (json_is_object(decoder)) {
        // Keyed by id: the same entries under the new ids, in id order as before.
        json_t *renamed = json_object();
        const char *key;
        json_t *value;
        json_object_foreach(decoder, key, value) {
            char *end;
            long old = strtol(key, &end, 10);
            if (!*key || *end || old < 0 || old >= p->n_old || p->new_of_old[old] < 0) {
                rc = pt_fail(e, "%s: added_tokens_decoder[\"%s\"] names no token the pruned tokenizer keeps", src, key);
                break;
            }
            char id[24];
            snprintf(id, sizeof id, "%d", p->new_of_old[old]);
            json_object_set(renamed, id, value);
        }
        json_object_set_new(root, "added_tokens_decoder", renamed);
    }
    if (rc == 0) rc = dump(root, out, out_len, src, e);
    json_decref(root);
    return rc;
}
