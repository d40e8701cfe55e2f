// test_tokenize_pairs.c: `pocket tokenize --pairs` end to end through the
// real binary ($POCKET) on the samples in tests/fixtures/data/pairs/, read
// here with jansson:
//
// - standard pairs: each document is the tokenization of prompt + response +
//   the end-of-sequence text (not doubled when the response ends with it;
//   tokenizer_config.json's eos_token when there is one), the mask 0 on the
//   prompt (the run of the prompt's own tokens both documents start with) and
//   1 after;
// - conversational pairs: the documents are Qwen3's chat format, written out
//   here, the prompt rendered with the assistant header; the masked tokens
//   spell the empty think block, the reply, <|im_end|> and the newline; a
//   --chat-template file of the same template gives the same dataset;
// - the implicit forms give what their explicit equivalents give (built here
//   from the lines);
// - drops counted by reason (each sample line says what it expects), the
//   first five reported on stderr with file:line; --max-len with and without
//   --truncate against counts taken from the full dataset; the attributes;
// - every bad line: one stderr line naming file:line, a non-zero exit, no
//   file; --skip-bad counts them; flags that do not go with --pairs; the
//   output does not depend on --threads; `pocket inspect` shows the counts
//   and the sample pair.
// (tests/interop/test_pairs_trl.py holds the same samples to TRL 1.16.0.)
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "test_cli_util.h"

#define TOK "tests/fixtures/tok/tokenizer.json"
#define PAIRS "tests/fixtures/data/pairs/"

typedef CliEnv Env;

static int setup(void **state) { return cli_env_setup(state, "pairs-cli"); }
static int teardown(void **state) { return cli_env_teardown(state); }

static char *slurp(const char *path) {
    uint8_t *data;
    size_t len;
    PtError e;
    return read_whole_file(path, &data, &len, &e) ? xstrdup("") : (char *)data;
}

// `pocket tokenize --pairs --tokenizer tok ARGS --out DIR/out`: the exit
// status; stderr when asked (malloc'd).
static int tokenize(const Env *v, const char *tok, const char *args, const char *out, char **err) {
    int rc = sh("%s tokenize --pairs --tokenizer %s %s --out %s/%s >%s/stdout 2>%s/stderr", pocket(), tok ? tok : TOK,
                args, v->dir, out, v->dir, v->dir);
    if (err) {
        char path[128];
        snprintf(path, sizeof path, "%s/stderr", v->dir);
        *err = slurp(path);
    }
    return rc;
}

static void open_out(const Env *v, const char *out, Dataset *d) {
    char path[128];
    PtError e;
    snprintf(path, sizeof path, "%s/%s", v->dir, out);
    if (dataset_open(d, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(d->kind, DATASET_PAIRS);
}

// The JSON lines of a file (at most cap).
static int read_lines(const char *path, json_t **out, int cap) {
    char *all = slurp(path), *save = NULL;
    int n = 0;
    for (char *line = strtok_r(all, "\n", &save); line && n < cap; line = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        if (!(out[n++] = json_loads(line, 0, &je))) fail_msg("%s: %s", path, je.text);
    }
    free(all);
    return n;
}

static void free_lines(json_t **l, int n) {
    for (int i = 0; i < n; i++) json_decref(l[i]);
}

// The sample NAME.jsonl's lines (16 at most) and its dataset, one pair a line.
static int tokenize_sample(const Env *v, const char *tok, const char *name, json_t **lines, Dataset *d) {
    char in[128], out[64];
    snprintf(in, sizeof in, PAIRS "%s.jsonl", name);
    snprintf(out, sizeof out, "%s.h5", name);
    int n = read_lines(in, lines, 16);
    assert_int_equal(tokenize(v, tok, in, out, NULL), 0);
    open_out(v, out, d);
    assert_int_equal(d->n_pairs, n);
    return n;
}

typedef struct {
    char *s;
    size_t n, cap;
} Text;

static void put(Text *t, const char *s) {
    size_t k = strlen(s);
    if (t->n + k + 1 > t->cap) {
        t->cap = 2 * (t->n + k + 1);
        t->s = realloc(t->s, t->cap);
        assert_non_null(t->s);
    }
    memcpy(t->s + t->n, s, k + 1);
    t->n += k;
}

static int *encode(const Env *v, const char *text, size_t *n) {
    int *ids = NULL;
    size_t cap = 0;
    PtError e;
    *n = 0;
    if (tokenizer_encode(v->tok, text, strlen(text), &ids, n, &cap, &e)) fail_msg("%s", e.msg);
    return ids;
}

static char *decode(const Env *v, const Dataset *d, uint64_t a, uint64_t b) {
    int *ids = xmalloc((b - a + 1) * sizeof(int), "ids");
    for (uint64_t i = a; i < b; i++) ids[i - a] = (int)dataset_token(d, i);
    char *s = tokenizer_decode(v->tok, ids, b - a, 0);
    free(ids);
    return s;
}

// Pair g of d against its texts: document k is the tokenization of full[k];
// the prompt is the longest run of prompt's own tokens that both documents
// start with (TRL's rule); the mask is 0 on it and 1 after. Returns the
// prompt's length.
static size_t check_pair(const Env *v, const Dataset *d, uint64_t g, const char *prompt, const char *const full[2]) {
    size_t np, n[2], n_prompt = SIZE_MAX;
    int *p = encode(v, prompt, &np), *ids[2];
    for (int k = 0; k < 2; k++) {
        ids[k] = encode(v, full[k], &n[k]);
        size_t same = 0;
        while (same < np && same < n[k] && p[same] == ids[k][same]) same++;
        n_prompt = same < n_prompt ? same : n_prompt;
    }
    for (int k = 0; k < 2; k++) {
        uint64_t doc = 2 * g + (uint64_t)k, off = d->doc_offsets[doc];
        if (dataset_doc_len(d, doc) != n[k])
            fail_msg("pair %llu %s: %llu tokens, want %zu (%s)", (unsigned long long)g, k ? "rejected" : "chosen",
                     (unsigned long long)dataset_doc_len(d, doc), n[k], full[k]);
        for (size_t i = 0; i < n[k]; i++) {
            assert_int_equal(dataset_token(d, off + i), ids[k][i]);
            assert_int_equal(d->loss_mask[off + i], i >= n_prompt);
        }
        free(ids[k]);
    }
    free(p);
    return n_prompt;
}

// Prompt + response + the end token, unless the response ends with it.
static char *with_eos(const char *prompt, const char *resp, const char *eos) {
    Text t = {0};
    put(&t, prompt);
    put(&t, resp);
    size_t r = strlen(resp), k = strlen(eos);
    if (r < k || strcmp(resp + r - k, eos)) put(&t, eos);
    return t.s;
}

static void standard_pairs(const Env *v, const char *tok, const char *eos) {
    json_t *l[16];
    Dataset d;
    int n = tokenize_sample(v, tok, "standard", l, &d);
    int eos_id = tokenizer_token_id(v->tok, eos);
    for (int g = 0; g < n; g++) {
        const char *prompt = json_string_value(json_object_get(l[g], "prompt"));
        char *full[2] = {with_eos(prompt, json_string_value(json_object_get(l[g], "chosen")), eos),
                         with_eos(prompt, json_string_value(json_object_get(l[g], "rejected")), eos)};
        check_pair(v, &d, (uint64_t)g, prompt, (const char *const *)full);
        for (int k = 0; k < 2; k++) {   // ends with exactly one end token
            uint64_t end = d.doc_offsets[2 * g + k + 1];
            assert_int_equal(dataset_token(&d, end - 1), eos_id);
            assert_int_not_equal(dataset_token(&d, end - 2), eos_id);
            free(full[k]);
        }
    }
    dataset_close(&d);
    free_lines(l, n);
}

static void test_standard(void **state) {
    Env *v = *state;
    standard_pairs(v, NULL, "<|im_end|>");   // no tokenizer_config.json: <|im_end|>
    // A tokenizer_config.json beside tokenizer.json names the end token.
    assert_int_equal(sh("cp " TOK " %s/tokenizer.json && echo '{\"eos_token\": \"<|endoftext|>\"}' "
                        ">%s/tokenizer_config.json", v->dir, v->dir), 0);
    char tok[128];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", v->dir);
    standard_pairs(v, tok, "<|endoftext|>");
}

// Qwen3's chat format: the messages, then the response's assistant turns
// (the last with its empty think block) or, for the prompt alone, the
// assistant header. Every conversation here ends its prompt with a user turn.
static char *qwen3(json_t *msgs, json_t *resp) {
    Text t = {0};
    put(&t, "");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        put(&t, "<|im_start|>");
        put(&t, json_string_value(json_object_get(m, "role")));
        put(&t, "\n");
        put(&t, json_string_value(json_object_get(m, "content")));
        put(&t, "<|im_end|>\n");
    }
    if (!resp) put(&t, "<|im_start|>assistant\n");
    for (size_t i = 0; resp && i < json_array_size(resp); i++) {
        put(&t, i + 1 == json_array_size(resp) ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n");
        put(&t, json_string_value(json_object_get(json_array_get(resp, i), "content")));
        put(&t, "<|im_end|>\n");
    }
    return t.s;
}

// Two pairs datasets with the same documents and masks.
static void expect_same(const Env *v, const char *a_name, const char *b_name) {
    Dataset a, b;
    open_out(v, a_name, &a);
    open_out(v, b_name, &b);
    assert_true(a.n_pairs > 0);
    assert_int_equal(a.n_docs, b.n_docs);
    assert_memory_equal(a.doc_offsets, b.doc_offsets, (a.n_docs + 1) * sizeof(uint64_t));
    for (uint64_t i = 0; i < a.n_tokens; i++) assert_int_equal(dataset_token(&a, i), dataset_token(&b, i));
    assert_memory_equal(a.loss_mask, b.loss_mask, a.n_tokens);
    dataset_close(&a);
    dataset_close(&b);
}

static void test_conversational(void **state) {
    Env *v = *state;
    json_t *l[16];
    Dataset d;
    int n = tokenize_sample(v, NULL, "conversational", l, &d);
    for (int g = 0; g < n; g++) {
        json_t *p = json_object_get(l[g], "prompt");
        char *prompt = qwen3(p, NULL), *full[2];
        for (int k = 0; k < 2; k++) full[k] = qwen3(p, json_object_get(l[g], k ? "rejected" : "chosen"));
        size_t n_prompt = check_pair(v, &d, (uint64_t)g, prompt, (const char *const *)full);
        for (int k = 0; k < 2; k++) {   // the masked tokens: the think block, the reply, <|im_end|> and "\n"
            uint64_t doc = 2 * (uint64_t)g + (uint64_t)k;
            char *masked = decode(v, &d, d.doc_offsets[doc] + n_prompt, d.doc_offsets[doc + 1]), want[512];
            json_t *reply = json_array_get(json_object_get(l[g], k ? "rejected" : "chosen"), 0);
            snprintf(want, sizeof want, "<think>\n\n</think>\n\n%s<|im_end|>\n", json_string_value(json_object_get(reply, "content")));
            assert_string_equal(masked, want);
            free(masked);
            free(full[k]);
        }
        free(prompt);
    }
    dataset_close(&d);
    free_lines(l, n);
    // The real Qwen3 template as a file: the same dataset as the bundled one.
    assert_int_equal(tokenize(v, NULL, "--chat-template tests/fixtures/tok/qwen3_chat_template.jinja " PAIRS
                                       "conversational.jsonl", "conv-file.h5", NULL), 0);
    expect_same(v, "conversational.h5", "conv-file.h5");
}

static void write_lines(const Env *v, const char *name, json_t **lines, int n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", v->dir, name);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) {
        char *s = json_dumps(lines[i], JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
    }
    fclose(f);
}

// {"chosen": [...], "rejected": [...]} equals {"prompt": the shared
// messages, "chosen": [the last], "rejected": [the last]}; {"chosen": str,
// "rejected": str} equals {"prompt": the text both start with, up to the
// first byte they differ in, less a space before it, "chosen" and
// "rejected": the rest}.
static void test_implicit(void **state) {
    Env *v = *state;
    json_t *l[16], *x[16];
    int n = read_lines(PAIRS "implicit.jsonl", l, 16);
    for (int i = 0; i < n; i++) {
        json_t *c = json_object_get(l[i], "chosen"), *r = json_object_get(l[i], "rejected");
        size_t last = json_array_size(c) - 1;
        assert_int_equal(json_array_size(r) - 1, last);
        json_t *prompt = json_array();
        for (size_t j = 0; j < last; j++) {
            assert_true(json_equal(json_array_get(c, j), json_array_get(r, j)));
            json_array_append(prompt, json_array_get(c, j));
        }
        x[i] = json_pack("{s:o, s:[O], s:[O]}", "prompt", prompt, "chosen", json_array_get(c, last), "rejected",
                         json_array_get(r, last));
    }
    write_lines(v, "explicit.jsonl", x, n);
    free_lines(x, n);
    free_lines(l, n);
    char args[256];
    snprintf(args, sizeof args, "%s/explicit.jsonl", v->dir);
    assert_int_equal(tokenize(v, NULL, PAIRS "implicit.jsonl", "implicit.h5", NULL), 0);
    assert_int_equal(tokenize(v, NULL, args, "explicit.h5", NULL), 0);
    expect_same(v, "implicit.h5", "explicit.h5");

    n = read_lines(PAIRS "implicit_text.jsonl", l, 16);
    for (int i = 0; i < n; i++) {
        const char *c = json_string_value(json_object_get(l[i], "chosen"));
        const char *r = json_string_value(json_object_get(l[i], "rejected"));
        size_t at = 0;
        while (c[at] == r[at]) at++;
        while (at > 0 && ((unsigned char)c[at] & 0xC0) == 0x80) at--;   // the character's first byte
        if (at > 0 && c[at - 1] == ' ') at--;
        char *prompt = strndup(c, at);
        x[i] = json_pack("{s:s, s:s, s:s}", "prompt", prompt, "chosen", c + at, "rejected", r + at);
        free(prompt);
    }
    write_lines(v, "standard.jsonl", x, n);
    free_lines(x, n);
    free_lines(l, n);
    snprintf(args, sizeof args, "%s/standard.jsonl", v->dir);
    assert_int_equal(tokenize(v, NULL, PAIRS "implicit_text.jsonl", "implicit-text.h5", NULL), 0);
    assert_int_equal(tokenize(v, NULL, args, "from-text.h5", NULL), 0);
    expect_same(v, "implicit-text.h5", "from-text.h5");
}

static void test_drops(void **state) {
    Env *v = *state;
    json_t *l[32];
    int n = read_lines(PAIRS "drops.jsonl", l, 32), kept = 0, reported = 0;
    uint64_t want[PAIR_DROP_REASONS] = {0};
    char *err;
    assert_int_equal(tokenize(v, NULL, PAIRS "drops.jsonl", "drops.h5", &err), 0);
    for (int i = 0; i < n; i++) {
        const char *expect = json_string_value(json_object_get(l[i], "expect"));
        if (!strcmp(expect, "kept")) {
            kept++;
            continue;
        }
        int r = 0;
        while (r < PAIR_DROP_REASONS && strcmp(pair_drop_name(r), expect)) r++;
        assert_true(r < PAIR_DROP_REASONS);
        want[r]++;
        char line[64];   // the first five drops are reported with their line
        snprintf(line, sizeof line, "dropped " PAIRS "drops.jsonl:%d: ", i + 1);
        if (reported++ < 5 && !strstr(err, line)) fail_msg("stderr lacks '%s':\n%s", line, err);
    }
    Dataset d;
    open_out(v, "drops.h5", &d);
    assert_int_equal(d.n_pairs, kept);
    uint64_t total = 0;
    for (int r = 0; r < PAIR_DROP_REASONS; r++) {
        assert_int_equal(d.n_dropped_pair[r], want[r]);
        total += want[r];
    }
    assert_int_equal(d.n_dropped, total);
    char summary[256];
    snprintf(summary, sizeof summary, "%d pairs kept (0 truncated), %llu dropped (equal %llu, prompt_mismatch %llu,", kept,
             (unsigned long long)total, (unsigned long long)want[PAIR_DROP_EQUAL],
             (unsigned long long)want[PAIR_DROP_PROMPT_MISMATCH]);
    if (!strstr(err, summary)) fail_msg("stderr lacks '%s':\n%s", summary, err);
    // The first kept pair is line 1's: "Q: 1 + 1?" then " 2" and " 3".
    char *text = decode(v, &d, d.doc_offsets[0], d.doc_offsets[2]);
    assert_string_equal(text, "Q: 1 + 1? 2<|im_end|>Q: 1 + 1? 3<|im_end|>");
    free(text);
    dataset_close(&d);
    free(err);
    free_lines(l, n);
}

// --max-len L: pairs with a document over L dropped; with --truncate the
// documents cut to L, a pair whose prompt reaches L dropped, and a pair whose
// cut documents are equal dropped as equal. Expected from the full dataset.
static void test_max_len(void **state) {
    Env *v = *state;
    assert_int_equal(tokenize(v, NULL, PAIRS "conversational.jsonl " PAIRS "implicit.jsonl", "full.h5", NULL), 0);
    Dataset f, d;
    open_out(v, "full.h5", &f);
    uint64_t n_prompt[16], longest[16], shortest_prompt = UINT64_MAX;
    for (uint64_t g = 0; g < f.n_pairs; g++) {
        uint64_t c = f.doc_offsets[2 * g], i = 0;
        while (!f.loss_mask[c + i]) i++;
        n_prompt[g] = i;
        longest[g] = dataset_doc_len(&f, 2 * g) > dataset_doc_len(&f, 2 * g + 1) ? dataset_doc_len(&f, 2 * g)
                                                                                 : dataset_doc_len(&f, 2 * g + 1);
        shortest_prompt = i < shortest_prompt ? i : shortest_prompt;
    }
    const uint64_t limits[] = {shortest_prompt + 1, shortest_prompt + 6, longest[0] - 1};
    for (int t = 0; t < 3; t++) {
        uint64_t L = limits[t], over = 0, too_long = 0, equal = 0, truncated = 0, kept[16], n_kept = 0;
        for (uint64_t g = 0; g < f.n_pairs; g++) over += longest[g] > L;
        char args[256];
        snprintf(args, sizeof args, "--max-len %llu " PAIRS "conversational.jsonl " PAIRS "implicit.jsonl",
                 (unsigned long long)L);
        if (over == f.n_pairs) {
            assert_int_not_equal(tokenize(v, NULL, args, "cut.h5", NULL), 0);
        } else {
            assert_int_equal(tokenize(v, NULL, args, "cut.h5", NULL), 0);
            open_out(v, "cut.h5", &d);
            assert_int_equal(d.n_pairs, f.n_pairs - over);
            assert_int_equal(d.n_dropped_pair[PAIR_DROP_TOO_LONG], over);
            dataset_close(&d);
        }
        for (uint64_t g = 0; g < f.n_pairs; g++) {   // --truncate: what stays
            if (n_prompt[g] >= L) {
                too_long++;
                continue;
            }
            uint64_t n = dataset_doc_len(&f, 2 * g) < L ? dataset_doc_len(&f, 2 * g) : L;
            int same = n == (dataset_doc_len(&f, 2 * g + 1) < L ? dataset_doc_len(&f, 2 * g + 1) : L);
            for (uint64_t i = 0; same && i < n; i++)
                same = dataset_token(&f, f.doc_offsets[2 * g] + i) == dataset_token(&f, f.doc_offsets[2 * g + 1] + i);
            if (same) equal++;
            else kept[n_kept++] = g, truncated += longest[g] > L;
        }
        if (t == 0) assert_true(equal > 0);          // cut inside the think block both responses start with
        if (t == 1) assert_true(truncated > 0 && too_long > 0);
        snprintf(args, sizeof args, "--max-len %llu --truncate " PAIRS "conversational.jsonl " PAIRS "implicit.jsonl",
                 (unsigned long long)L);
        if (!n_kept) {
            assert_int_not_equal(tokenize(v, NULL, args, "cut.h5", NULL), 0);
            continue;
        }
        assert_int_equal(tokenize(v, NULL, args, "cut.h5", NULL), 0);
        open_out(v, "cut.h5", &d);
        assert_int_equal(d.n_pairs, n_kept);
        assert_int_equal(d.n_dropped_pair[PAIR_DROP_TOO_LONG], too_long);
        assert_int_equal(d.n_dropped_pair[PAIR_DROP_EQUAL], equal);
        assert_int_equal(d.n_truncated, truncated);
        for (uint64_t k = 0; k < n_kept; k++)
            for (uint64_t s = 0; s < 2; s++) {   // a prefix of the full document, with its mask
                uint64_t full = 2 * kept[k] + s, n = dataset_doc_len(&f, full) < L ? dataset_doc_len(&f, full) : L;
                assert_int_equal(dataset_doc_len(&d, 2 * k + s), n);
                for (uint64_t i = 0; i < n; i++) {
                    assert_int_equal(dataset_token(&d, d.doc_offsets[2 * k + s] + i),
                                     dataset_token(&f, f.doc_offsets[full] + i));
                    assert_int_equal(d.loss_mask[d.doc_offsets[2 * k + s] + i], f.loss_mask[f.doc_offsets[full] + i]);
                }
            }
        dataset_close(&d);
    }
    dataset_close(&f);
}

// One failing run: a non-zero exit, one stderr line holding needle, no output.
static void expect_failure(const Env *v, const char *args, const char *needle) {
    char *err;
    if (tokenize(v, NULL, args, "fail.h5", &err) == 0) fail_msg("'%s' succeeded", args);
    char *nl = strchr(err, '\n');
    if (!nl || nl[1]) fail_msg("stderr is not one line: [%s]", err);
    if (!strstr(err, needle) || strncmp(err, "pocket tokenize: ", 17)) fail_msg("stderr lacks '%s': %s", needle, err);
    assert_true(no_entry_with_prefix(v->dir, "fail.h5"));
    free(err);
}

static void test_bad_lines(void **state) {
    Env *v = *state;
    static const char *const WHY[] = {
        "malformed JSON", "no \"chosen\"", "no \"rejected\"",
        "\"prompt\", \"chosen\" and \"rejected\" must be all strings (plain text) or all lists of messages",
        "\"chosen\" and \"rejected\" must be all strings", "\"prompt\" message 0: unknown role \"tool\"",
        "\"chosen\" message 0 is a user turn", "\"prompt\" message 1: a system message must come first",
        "\"prompt\" message 0 needs string \"role\" and \"content\"", "\"tools\": TRL applies it",
        "expected a JSON object", "\"prompt\" is an empty list", "\"rejected\" message 1: unknown role \"bot\"",
    };
    const int n_bad = (int)(sizeof WHY / sizeof *WHY);
    char *all = slurp(PAIRS "bad.jsonl"), *save = NULL, args[256], needle[512];
    int k = 0;
    for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
        assert_true(k < n_bad);
        char path[128];   // a good line, then the bad one
        snprintf(path, sizeof path, "%s/bad%d.jsonl", v->dir, k);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n%s\n", line);
        fclose(f);
        snprintf(needle, sizeof needle, "bad%d.jsonl:2: %s", k, WHY[k]);
        expect_failure(v, path, needle);
    }
    assert_int_equal(k, n_bad);
    free(all);
    snprintf(args, sizeof args, "%s/utf8.jsonl", v->dir);
    FILE *f = fopen(args, "w");
    const char *bad = "{\"prompt\": \"a\", \"chosen\": \"b \xff\", \"rejected\": \"c\"}\n";
    fputs(bad, f);
    fclose(f);
    snprintf(needle, sizeof needle, "utf8.jsonl:1: invalid UTF-8 at byte %d of the line", (int)(strchr(bad, '\xff') - bad));
    expect_failure(v, args, needle);
    // --skip-bad: each skipped and counted, the good lines kept.
    char *err;
    assert_int_equal(tokenize(v, NULL, "--skip-bad " PAIRS "bad.jsonl " PAIRS "standard.jsonl", "skip.h5", &err), 0);
    assert_non_null(strstr(err, "skipped " PAIRS "bad.jsonl:1: malformed JSON"));
    Dataset d;
    open_out(v, "skip.h5", &d);
    assert_int_equal(d.n_skipped, n_bad);
    json_t *l[16];
    int n = read_lines(PAIRS "standard.jsonl", l, 16);
    assert_int_equal(d.n_pairs, n);
    free_lines(l, n);
    dataset_close(&d);
    free(err);
}

static void test_usage_and_nothing_kept(void **state) {
    Env *v = *state;
    assert_int_equal(tokenize(v, NULL, "--chat " PAIRS "standard.jsonl", "x.h5", NULL), 2);
    assert_int_equal(tokenize(v, NULL, "--format openai " PAIRS "standard.jsonl", "x.h5", NULL), 2);
    assert_int_equal(tokenize(v, NULL, "--truncate " PAIRS "standard.jsonl", "x.h5", NULL), 2);   // needs --max-len
    expect_failure(v, "tests/fixtures/data/corpus/01_intro.txt", "--pairs reads .jsonl");
    expect_failure(v, "--max-len 2 --truncate " PAIRS "standard.jsonl", "no pair kept (4 dropped: equal 0, "
                                                                       "prompt_mismatch 0, too_long 4");
    // A template that renders no reply: every response empty.
    char args[256];
    snprintf(args, sizeof args, "%s/user_only.jinja", v->dir);
    FILE *f = fopen(args, "w");
    fputs("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}", f);
    fclose(f);
    snprintf(args, sizeof args, "--chat-template %s/user_only.jinja " PAIRS "conversational.jsonl", v->dir);
    expect_failure(v, args, "empty 4; 0 skipped), so no dataset is written; the first: " PAIRS
                            "conversational.jsonl:1: the chosen response adds no token after the prompt");
}

static void test_threads_and_inspect(void **state) {
    Env *v = *state;
    const char *all = PAIRS "standard.jsonl " PAIRS "conversational.jsonl " PAIRS "implicit.jsonl " PAIRS
                      "implicit_text.jsonl " PAIRS "drops.jsonl";
    char args[512];
    snprintf(args, sizeof args, "--threads 1 %s", all);
    assert_int_equal(tokenize(v, NULL, args, "t1.h5", NULL), 0);
    snprintf(args, sizeof args, "--threads 3 %s", all);
    assert_int_equal(tokenize(v, NULL, args, "t3.h5", NULL), 0);
    expect_same(v, "t1.h5", "t3.h5");
    assert_int_equal(sh("%s inspect %s/t1.h5 --tokenizer " TOK " >%s/inspect.txt", pocket(), v->dir, v->dir), 0);
    snprintf(args, sizeof args, "%s/inspect.txt", v->dir);
    char *text = slurp(args);
    Dataset d;
    open_out(v, "t1.h5", &d);
    char want[256];
    snprintf(want, sizeof want, "pairs           %llu kept", (unsigned long long)d.n_pairs);
    // Pair 0 is standard.jsonl's first line: "The sky is", " blue.", " green.".
    size_t np, nc, nr;
    free(encode(v, "The sky is", &np));
    free(encode(v, "The sky is blue.<|im_end|>", &nc));
    free(encode(v, "The sky is green.<|im_end|>", &nr));
    char prompt[64], chosen[64], rejected[64];
    snprintf(prompt, sizeof prompt, "prompt    (%zu tokens): The sky is\n", np);
    snprintf(chosen, sizeof chosen, "chosen    (%zu tokens):  blue.<|im_end|>\n", nc - np);
    snprintf(rejected, sizeof rejected, "rejected  (%zu tokens):  green.<|im_end|>\n", nr - np);
    const char *lines[] = {"token dataset (pairs)", want, "dropped (equal 4, prompt_mismatch 5, too_long 0, empty 0)",
                           prompt, chosen, rejected};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        if (!strstr(text, lines[i])) fail_msg("inspect lacks '%s':\n%s", lines[i], text);
    dataset_close(&d);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standard),
        cmocka_unit_test(test_conversational),
        cmocka_unit_test(test_implicit),
        cmocka_unit_test(test_drops),
        cmocka_unit_test(test_max_len),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_usage_and_nothing_kept),
        cmocka_unit_test(test_threads_and_inspect),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
