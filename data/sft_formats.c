// sft_formats.c: OpenAI, ShareGPT, Alpaca and CSV/TSV records -> chat messages (sft_formats.h).
#include "sft_formats.h"
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include "csv.h"

static const char *const NAMES[] = {"auto", "openai", "sharegpt", "alpaca", "csv", "tsv"};

const char *sft_format_name(SftFormat f) { return NAMES[f]; }

int sft_format_parse(const char *name, SftFormat *out) {
    for (int f = SFT_FORMAT_OPENAI; f <= SFT_FORMAT_TSV; f++)
        if (!strcmp(name, NAMES[f])) return *out = (SftFormat)f, 0;
    return -1;
}

static ChatMessage *grow(SftMessages *out, size_t n) {
    out->m = xcalloc(n, sizeof *out->m, "messages");
    out->n = 0;
    return out->m;
}

static void add(SftMessages *out, const char *role, const char *content) {
    out->m[out->n++] = (ChatMessage){role, content};
}

// A string field that may be absent (or null, as table exports write it): NULL.
static int optional_string(json_t *root, const char *key, const char *where, const char **s, PtError *e) {
    json_t *v = json_object_get(root, key);
    *s = json_string_value(v);
    if (v && !json_is_null(v) && !json_is_string(v)) return pt_fail(e, "%s: \"%s\" must be a string", where, key);
    return 0;
}

// The format a line's keys name; AUTO with e set when none or two do.
static SftFormat detect(json_t *root, const char *where, PtError *e) {
    static const char *const KEYS[][3] = {
        [SFT_FORMAT_OPENAI] = {"messages", "prompt", "completion"},
        [SFT_FORMAT_SHAREGPT] = {"conversations"},
        [SFT_FORMAT_ALPACA] = {"instruction", "output"},
    };
    SftFormat found = SFT_FORMAT_AUTO;
    const char *found_key = NULL;
    for (int f = SFT_FORMAT_OPENAI; f <= SFT_FORMAT_ALPACA; f++)
        for (int k = 0; k < 3 && KEYS[f][k]; k++) {
            if (!json_object_get(root, KEYS[f][k])) continue;
            if (found && found != (SftFormat)f) {
                pt_fail(e, "%s: the line has \"%s\" (%s) and \"%s\" (%s): name its format with --format", where,
                        found_key, NAMES[found], KEYS[f][k], NAMES[f]);
                return SFT_FORMAT_AUTO;
            }
            found = (SftFormat)f;
            found_key = KEYS[f][k];
        }
    if (!found)
        pt_fail(e, "%s: no \"messages\" (nor \"prompt\"/\"completion\": openai), \"conversations\" (sharegpt) or "
                   "\"instruction\"/\"output\" (alpaca): the line matches no SFT format",
                where);
    return found;
}

static int read_openai(json_t *root, const char *where, SftMessages *out, PtError *e) {
    json_t *arr = json_object_get(root, "messages");
    if (!arr) {
        json_t *prompt = json_object_get(root, "prompt"), *completion = json_object_get(root, "completion");
        const char *system;
        if (!json_is_string(prompt) || !json_is_string(completion))
            return pt_fail(e, "%s: no \"messages\" array (nor \"prompt\" and \"completion\" strings)", where);
        if (optional_string(root, "system", where, &system, e)) return -1;
        grow(out, 3);
        if (system) add(out, "system", system);
        add(out, "user", json_string_value(prompt));
        add(out, "assistant", json_string_value(completion));
        return 0;
    }
    if (!json_is_array(arr)) return pt_fail(e, "%s: \"messages\" must be an array", where);
    size_t count = json_array_size(arr);
    if (count == 0) return pt_fail(e, "%s: \"messages\" is empty", where);
    if (sft_json_messages(arr, "message", where, grow(out, count), e)) return -1;
    out->n = (int)count;
    return 0;
}

int sft_json_messages(const void *array, const char *what, const char *where, ChatMessage *m, PtError *e) {
    for (size_t i = 0; i < json_array_size(array); i++) {
        json_t *msg = json_array_get(array, i);
        json_t *role = json_is_object(msg) ? json_object_get(msg, "role") : NULL;
        json_t *content = json_is_object(msg) ? json_object_get(msg, "content") : NULL;
        if (!json_is_string(role) || !json_is_string(content))
            return pt_fail(e, "%s: %s %zu needs string \"role\" and \"content\" fields", where, what, i);
        m[i] = (ChatMessage){json_string_value(role), json_string_value(content)};
    }
    return 0;
}

// ShareGPT's speaker names (LLaMA-Factory's and FastChat's human/gpt, axolotl's user/assistant too).
static const char *sharegpt_role(const char *from) {
    if (!strcmp(from, "human") || !strcmp(from, "user")) return "user";
    if (!strcmp(from, "gpt") || !strcmp(from, "assistant")) return "assistant";
    if (!strcmp(from, "system")) return "system";
    return NULL;
}

static int read_sharegpt(json_t *root, const char *where, SftMessages *out, PtError *e) {
    json_t *arr = json_object_get(root, "conversations");
    const char *system;
    if (!json_is_array(arr)) return pt_fail(e, "%s: \"conversations\" must be an array", where);
    if (optional_string(root, "system", where, &system, e)) return -1;
    size_t count = json_array_size(arr);
    if (count == 0) return pt_fail(e, "%s: \"conversations\" is empty", where);
    grow(out, count + 1);
    if (system && *system) add(out, "system", system);
    for (size_t i = 0; i < count; i++) {
        json_t *t = json_array_get(arr, i);
        const char *from = json_string_value(json_is_object(t) ? json_object_get(t, "from") : NULL);
        const char *value = json_string_value(json_is_object(t) ? json_object_get(t, "value") : NULL);
        if (!from || !value) return pt_fail(e, "%s: turn %zu needs string \"from\" and \"value\" fields", where, i);
        const char *role = sharegpt_role(from);
        if (!role && (!strcmp(from, "function_call") || !strcmp(from, "observation") || !strcmp(from, "tool") ||
                      !strcmp(from, "function")))
            return pt_fail(e, "%s: turn %zu: \"%s\" is a tool turn, which pocket tokenize does not train (it trains "
                              "system, user and assistant turns only)", where, i, from);
        if (!role)
            return pt_fail(e, "%s: turn %zu: unknown role \"%s\" (want human or user, gpt or assistant, system)", where,
                           i, from);
        if (system && *system && !strcmp(role, "system"))
            return pt_fail(e, "%s: turn %zu: a system turn and a top-level \"system\" too", where, i);
        add(out, role, value);
    }
    return 0;
}

static int read_alpaca(json_t *root, const char *where, SftMessages *out, PtError *e) {
    json_t *instruction = json_object_get(root, "instruction"), *output = json_object_get(root, "output");
    json_t *history = json_object_get(root, "history");
    const char *input, *system;
    if (!json_is_string(instruction)) return pt_fail(e, "%s: no \"instruction\" string", where);
    if (!json_is_string(output)) return pt_fail(e, "%s: no \"output\" string (the reply to train)", where);
    if (optional_string(root, "input", where, &input, e) || optional_string(root, "system", where, &system, e))
        return -1;
    if (history && !json_is_null(history) && !json_is_array(history))
        return pt_fail(e, "%s: \"history\" must be an array of [instruction, reply] pairs", where);
    size_t turns = json_array_size(history);
    grow(out, 2 * turns + 3);
    if (system && *system) add(out, "system", system);
    for (size_t i = 0; i < turns; i++) {
        json_t *pair = json_array_get(history, i);
        const char *q = json_string_value(json_array_get(pair, 0)), *r = json_string_value(json_array_get(pair, 1));
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !q || !r)
            return pt_fail(e, "%s: \"history\" item %zu is not an [instruction, reply] pair of strings", where, i);
        add(out, "user", q);
        add(out, "assistant", r);
    }
    // The user turn: instruction "\n" input, leaving out an empty part.
    const char *inst = json_string_value(instruction);
    size_t a = strlen(inst), b = input ? strlen(input) : 0;
    out->joined = xmalloc(a + b + 2, "user turn");
    memcpy(out->joined, inst, a);
    size_t at = a;
    if (a && b) out->joined[at++] = '\n';
    memcpy(out->joined + at, input ? input : "", b);
    out->joined[at + b] = 0;
    add(out, "user", out->joined);
    add(out, "assistant", json_string_value(output));
    return 0;
}

static int column(const CsvRow *header, const char *name, int required, const char *where, uint64_t header_line,
                  int *at, PtError *e) {
    *at = -1;
    for (int i = 0; i < header->n; i++) {
        if (strcmp(header->field[i], name)) continue;
        if (*at >= 0)
            return pt_fail(e, "%s: the header (line %" PRIu64 ") names column \"%s\" twice", where, header_line, name);
        *at = i;
    }
    if (*at >= 0 || !required) return 0;
    char names[256] = "";
    for (int i = 0, o = 0; i < header->n && o < (int)sizeof names - 8; i++)
        o += snprintf(names + o, sizeof names - (size_t)o, "%s\"%s\"", i ? ", " : "", header->field[i]);
    return pt_fail(e, "%s: the header (line %" PRIu64 ") has no column \"%s\" (it has %s): name the columns with "
                      "--prompt-column and --completion-column",
                   where, header_line, name, names);
}

static int read_row(const CorpusRecord *rec, const SftColumns *cols, const char *where, SftMessages *out, PtError *e) {
    char sep = rec->format == CORPUS_CSV ? ',' : '\t', why[160];
    size_t bad;
    CsvRow header = {0}, *row = out->row = xcalloc(1, sizeof *row, "row");
    int p, c, s, rc = -1;
    if (!utf8_valid(rec->header, rec->header_len, &bad))
        pt_fail(e, "%s: invalid UTF-8 at byte %zu of the header (line %" PRIu64 ")", where, bad, rec->header_line);
    else if (csv_split(rec->header, rec->header_len, sep, &header, why, sizeof why))
        pt_fail(e, "%s: the header (line %" PRIu64 "): %s", where, rec->header_line, why);
    else if (column(&header, cols->prompt, 1, where, rec->header_line, &p, e) ||
             column(&header, cols->completion, 1, where, rec->header_line, &c, e) ||
             column(&header, cols->system ? cols->system : "system", cols->system != NULL, where, rec->header_line,
                    &s, e)) {
    } else if (!utf8_valid(rec->data, rec->len, &bad))
        pt_fail(e, "%s: invalid UTF-8 at byte %zu of the row", where, bad);
    else if (csv_split(rec->data, rec->len, sep, row, why, sizeof why))
        pt_fail(e, "%s: %s", where, why);
    else if (row->n != header.n)
        pt_fail(e, "%s: the row has %d fields, the header (line %" PRIu64 ") %d", where, row->n, rec->header_line,
                header.n);
    else {
        grow(out, 3);
        if (s >= 0 && row->len[s]) add(out, "system", row->field[s]);
        add(out, "user", row->field[p]);
        add(out, "assistant", row->field[c]);
        rc = 0;
    }
    csv_row_free(&header);
    return rc;
}

int sft_read_messages(const CorpusRecord *rec, SftFormat want, const SftColumns *cols, const char *where,
                      SftMessages *out, PtError *e) {
    memset(out, 0, sizeof *out);
    if (rec->format == CORPUS_CSV || rec->format == CORPUS_TSV) {
        out->format = rec->format == CORPUS_CSV ? SFT_FORMAT_CSV : SFT_FORMAT_TSV;
        if (want && want != out->format)   // a table by its name, and --format names JSON lines
            return pt_fail(e, "%s: --format %s reads JSON lines, not a %s table", where, NAMES[want],
                           NAMES[out->format]);
        return read_row(rec, cols, where, out, e);
    }
    if (want == SFT_FORMAT_CSV || want == SFT_FORMAT_TSV)   // corpus_open_chat reads every file as a table then
        return pt_fail(e, "%s: --format %s reads tables, not JSON lines", where, NAMES[want]);
    if (sft_json_line(rec->data, rec->len, where, &out->json, e)) return -1;
    json_t *root = out->json;
    out->format = want ? want : detect(root, where, e);
    switch (out->format) {
    case SFT_FORMAT_OPENAI: return read_openai(root, where, out, e);
    case SFT_FORMAT_SHAREGPT: return read_sharegpt(root, where, out, e);
    case SFT_FORMAT_ALPACA: return read_alpaca(root, where, out, e);
    default: return -1;   // detect said why
    }
}

int sft_json_line(const char *line, size_t len, const char *where, void **root, PtError *e) {
    size_t bad;
    json_error_t jerr;
    *root = NULL;
    if (!utf8_valid(line, len, &bad)) return pt_fail(e, "%s: invalid UTF-8 at byte %zu of the line", where, bad);
    json_t *j = json_loadb(line, len, 0, &jerr);
    if (!j) return pt_fail(e, "%s: malformed JSON: %s (column %d)", where, jerr.text, jerr.column);
    if (!json_is_object(j)) {
        json_decref(j);
        return pt_fail(e, "%s: expected a JSON object", where);
    }
    *root = j;
    return 0;
}

void sft_messages_free(SftMessages *m) {
    free(m->m);
    json_decref(m->json);
    free(m->joined);
    if (m->row) csv_row_free(m->row);
    free(m->row);
    memset(m, 0, sizeof *m);
}

int sft_format_guard(SftFormatGuard *g, const CorpusRecord *rec, SftFormat format, PtError *e) {
    if (g->file != rec->file) *g = (SftFormatGuard){rec->file, SFT_FORMAT_AUTO, 0};
    if (!format) return 0;
    if (!g->format) {
        g->format = format;
        g->line = rec->line;
        return 0;
    }
    if (format == g->format) return 0;
    return pt_fail(e, "%s:%" PRIu64 ": a %s record in a file of %s records (from line %" PRIu64 "): one format per "
                      "file",
                   rec->file, rec->line, NAMES[format], NAMES[g->format], g->line);
}
