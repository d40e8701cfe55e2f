// generate_batch.c: pocket generate --batch-file (generate_batch.h): every
// line's prompt through the batched sampler (model/sampler.h), the
// completions as JSON lines.
#include "generate_batch.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../data/chat.h"
#include "../model/sampler.h"
#include "../train/evaluate.h"

typedef struct {
    json_t *id;          // the line's "id", else its number
    int *prompt, n_prompt;   // one array for a line's samples (the sampler reads it once)
    GenParams p;
} Line;

typedef struct {
    Line *lines;
    int n, cap;
} Lines;

static void lines_free(Lines *ls) {
    for (int i = 0; i < ls->n; i++) {
        json_decref(ls->lines[i].id);
        if (i == 0 || ls->lines[i].prompt != ls->lines[i - 1].prompt) free(ls->lines[i].prompt);
    }
    free(ls->lines);
}

// A number of the line: v (NULL: keep *out) within [lo, hi].
static int line_real(json_t *o, const char *key, double lo, double hi, double *out, const char *where, PtError *e) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi)
        return pt_fail(e, "%s: \"%s\" must be a number in [%g, %g]", where, key, lo, hi);
    *out = json_number_value(v);
    return 0;
}

static int line_int(json_t *o, const char *key, long lo, long hi, long *out, const char *where, PtError *e) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return pt_fail(e, "%s: \"%s\" must be an integer in [%ld, %ld]", where, key, lo, hi);
    *out = (long)json_integer_value(v);
    return 0;
}

// What every line is read with: the file's options, the tokenizer, the chat
// template, the model's shape, and the parameters a line starts from (the
// flags' with the default stops; with the template's end-of-turn stop too for
// a prompt the template renders).
typedef struct {
    const BatchOptions *b;
    const Tokenizer *tok;
    const ChatTemplate *tmpl;
    const ModelConfig *cfg;
    GenParams plain, chat;
} Reading;

// The line's prompt messages into m (at most CHAT_PROMPT_MAX): "messages", or
// "prompt" as a user turn (after --system) with --chat; *raw is "prompt" as it
// is without --chat (n = 0).
static int line_messages(json_t *o, const BatchOptions *b, ChatMessage *m, int *n, const char **raw,
                         const char *where, PtError *e) {
    json_t *prompt = json_object_get(o, "prompt"), *messages = json_object_get(o, "messages");
    if (!!prompt + !!messages != 1)
        return pt_fail(e, "%s: a line needs \"prompt\" (a string) or \"messages\" (a list), not %s", where,
                       prompt ? "both" : "neither");
    *n = 0, *raw = NULL;
    if (prompt) {
        if (!json_is_string(prompt)) return pt_fail(e, "%s: \"prompt\" must be a string", where);
        if (!b->chat) {
            *raw = json_string_value(prompt);
            return 0;
        }
        if (b->system) m[(*n)++] = (ChatMessage){"system", b->system};
        m[(*n)++] = (ChatMessage){"user", json_string_value(prompt)};
        return 0;
    }
    if (!json_is_array(messages) || json_array_size(messages) == 0 || json_array_size(messages) > CHAT_PROMPT_MAX)
        return pt_fail(e, "%s: \"messages\" must be a list of 1 to %d messages", where, CHAT_PROMPT_MAX);
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *msg = json_array_get(messages, i), *role = json_object_get(msg, "role"),
               *content = json_object_get(msg, "content");
        if (!json_is_string(role) || !json_is_string(content))
            return pt_fail(e, "%s: message %zu needs \"role\" and \"content\" strings", where, i + 1);
        m[(*n)++] = (ChatMessage){json_string_value(role), json_string_value(content)};
    }
    return 0;
}

// The line's prompt as text: raw, or its messages rendered by the chat template
// with the assistant's header appended and thinking off, as generate --chat renders.
static int line_text(json_t *o, const Reading *r, char **text, int *templated, const char *where, PtError *e) {
    ChatMessage m[CHAT_PROMPT_MAX];
    int n = 0;
    const char *raw;
    if (line_messages(o, r->b, m, &n, &raw, where, e)) return -1;
    *templated = raw == NULL;
    if (raw) {
        *text = xstrdup(raw);
        return 0;
    }
    ChatText c;
    if (chat_render(r->tmpl, m, n, 1, 0, &c, e)) return pt_fail(e, "%s: %s", where, e->msg);
    free(c.tag);
    *text = c.text;
    return 0;
}

// One line of the batch file into ls (one Line per sample).
static int read_line(const char *s, size_t len, int lineno, const Reading *r, Lines *ls, PtError *e) {
    const BatchOptions *b = r->b;
    char where[1100];
    snprintf(where, sizeof where, "%s:%d", b->path, lineno);
    json_error_t je;
    json_t *o = json_loadb(s, len, 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return pt_fail(e, "%s: not a JSON object (%s)", where, o ? "another JSON value" : je.text);
    }
    char *text = NULL;
    int templated = 0;
    int rc = line_text(o, r, &text, &templated, where, e);
    GenParams p = templated ? r->chat : r->plain;
    double temperature = p.temperature, top_p = p.top_p;
    long max_new = p.max_new, top_k = p.top_k, seed = -1;
    rc = rc || line_int(o, "max_new", 0, 1 << 24, &max_new, where, e) ||
         line_int(o, "top_k", 0, 1 << 30, &top_k, where, e) ||
         line_real(o, "temperature", 0, 1e4, &temperature, where, e) ||
         line_real(o, "top_p", 1e-9, 1, &top_p, where, e) || line_int(o, "seed", 0, 9000000000000000L, &seed, where, e);
    int *ids = NULL;
    size_t n = 0, cap = 0;
    if (!rc && tokenizer_encode(r->tok, text, strlen(text), &ids, &n, &cap, e)) rc = pt_fail(e, "%s: %s", where, e->msg);
    if (!rc && n == 0) rc = pt_fail(e, "%s: the prompt gives no tokens", where);
    for (size_t i = 0; !rc && i < n; i++)
        if (ids[i] >= r->cfg->vocab_size)
            rc = pt_fail(e, "%s: the tokenizer gives id %d, outside the model's vocabulary of %d", where, ids[i],
                         r->cfg->vocab_size);
    if (!rc && (long)n + max_new > r->cfg->max_seq)
        rc = pt_fail(e, "%s: a prompt of %zu tokens + %ld new tokens exceeds the model's context of %d positions",
                     where, n, max_new, r->cfg->max_seq);
    free(text);
    if (!rc) {
        p.max_new = (int)max_new, p.top_k = (int)top_k, p.temperature = (float)temperature, p.top_p = (float)top_p;
        // line i (from 1) samples from --seed + (i-1) x samples unless it gives one; its sample k from that + k
        p.seed = seed >= 0 ? (uint64_t)seed : b->base.seed + (uint64_t)(lineno - 1) * (uint64_t)b->samples;
        json_t *id = json_object_get(o, "id");
        int *prompt = xmalloc(n * sizeof(int), "prompt ids");
        memcpy(prompt, ids, n * sizeof(int));
        for (int k = 0; k < b->samples; k++) {
            if (ls->n == ls->cap) {
                ls->cap = ls->cap ? 2 * ls->cap : 256;
                ls->lines = realloc(ls->lines, (size_t)ls->cap * sizeof(Line));
                if (!ls->lines) die("out of memory reading %s", b->path);
            }
            Line *l = &ls->lines[ls->n++];
            l->id = id ? json_incref(id) : json_integer(lineno - 1);
            l->prompt = prompt;
            l->n_prompt = (int)n;
            l->p = p;
            l->p.seed = p.seed + (uint64_t)k;
        }
    }
    free(ids);
    json_decref(o);
    return rc ? -1 : 0;
}

static int read_lines(const BatchOptions *b, const OpenModel *om, const Tokenizer *tok, Lines *ls, PtError *e) {
    uint8_t *data;
    size_t len;
    if (read_whole_file(b->path, &data, &len, e)) return -1;
    char src[1100];
    snprintf(src, sizeof src, "%s:/tokenizer/tokenizer_config.json", b->ckpt);
    ChatTemplate *tmpl = NULL;
    int rc = chat_template_load(&tmpl, om->b.tokenizer_config_json, om->b.tokenizer_config_json_len, src, e);
    Reading r = {b, tok, tmpl, &om->b.cfg, b->base, b->base};
    add_default_stops(&r.plain, r.cfg, tok);
    add_default_stops(&r.chat, r.cfg, tok);
    if (rc == 0) chat_add_end_of_turn_stop(tmpl, &(ChatMessage){"user", "x"}, 1, tok, r.cfg->vocab_size, &r.chat);
    const char *s = (const char *)data, *end = s + len;
    for (int lineno = 1; rc == 0 && s < end; lineno++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k < n) rc = read_line(s, n, lineno, &r, ls, e);
        s += n + 1;
    }
    if (rc == 0 && ls->n == 0) rc = pt_fail(e, "%s: no prompts", b->path);
    chat_template_free(tmpl);
    free(data);
    return rc;
}

typedef struct {
    double t0, last;
    int tty;
} Progress;

static void progress(void *ctx, int done, int n) {
    Progress *p = ctx;
    const double now = now_seconds();
    if (done < n && now - p->last < (p->tty ? 1.0 : 10.0)) return;
    p->last = now;
    fprintf(stderr, p->tty ? "\rpocket generate: %d of %d completions (%.0f s)" : "pocket generate: %d of %d completions "
            "(%.0f s)\n", done, n, now - p->t0);
    if (p->tty && done == n) fputc('\n', stderr);
}

int generate_batch(OpenModel *om, const Tokenizer *tok, const BatchOptions *b, PtError *e) {
    Lines ls = {0};
    if (read_lines(b, om, tok, &ls, e)) {
        lines_free(&ls);
        return -1;
    }
    int max_len = 0, rc = -1;   // read_line checked each against the model's context
    for (int i = 0; i < ls.n; i++) {
        const int need = ls.lines[i].n_prompt + ls.lines[i].p.max_new;
        max_len = need > max_len ? need : max_len;
    }
    SampleJob *jobs = xcalloc((size_t)ls.n, sizeof(SampleJob), "sampling jobs");
    for (int i = 0; i < ls.n; i++)
        jobs[i] = (SampleJob){ls.lines[i].prompt, ls.lines[i].n_prompt, &ls.lines[i].p,
                              xmalloc((size_t)ls.lines[i].p.max_new * sizeof(int), "completion"), 0};
    Sampler s;
    AtomicFile af;
    const int rows = b->rows < ls.n ? b->rows : ls.n;
    Progress pr = {now_seconds(), 0, isatty(fileno(stderr))};
    if (sampler_init(&s, &om->m, rows, max_len, e) == 0) {
        if (sampler_run(&s, jobs, ls.n, progress, &pr, e) == 0 && atomic_open(&af, b->out, e) == 0) {
            long tokens = 0;
            for (int i = 0; i < ls.n; i++) {
                const SampleJob *j = &jobs[i];
                const int stopped = j->n_out > 0 && gen_is_stop(j->p, j->out[j->n_out - 1]);
                char *text = tokenizer_decode(tok, j->out, (size_t)(j->n_out - stopped), 0);
                json_t *o = json_pack("{s:O, s:i, s:s, s:i, s:s}", "id", ls.lines[i].id, "sample",
                                      (int)(i % b->samples), "completion", text, "tokens", j->n_out, "finish",
                                      stopped ? "stop" : "length");
                if (b->ids) {
                    json_t *ids = json_array();
                    for (int t = 0; t < j->n_out; t++) json_array_append_new(ids, json_integer(j->out[t]));
                    json_object_set_new(o, "ids", ids);
                }
                char *line = json_dumps(o, JSON_COMPACT);
                fprintf(af.f, "%s\n", line);
                free(line);
                json_decref(o);
                free(text);
                tokens += j->n_out;
            }
            rc = atomic_commit(&af, e);
            const double dt = now_seconds() - pr.t0;
            if (rc == 0)
                fprintf(stderr, "pocket generate: %d completions (%d prompts x %d samples), %ld new tokens in %.1f s "
                        "(%.1f tok/s, %d rows) -> %s\n", ls.n, ls.n / b->samples, b->samples, tokens, dt,
                        tokens / fmax(dt, 1e-9), rows, b->out);
        }
        sampler_free(&s);
    }
    for (int i = 0; i < ls.n; i++) free(jobs[i].out);
    free(jobs);
    lines_free(&ls);
    return rc;
}
