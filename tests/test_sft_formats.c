// test_sft_formats.c: the SFT formats users hold (data/sft_formats.h) through
// the code `pocket tokenize --chat` runs for each record (corpus_open_chat,
// corpus_next, sft_encode_record): every ShareGPT, Alpaca, CSV and TSV
// fixture gives the token ids and loss masks of its OpenAI-messages
// equivalent, written beside it by tests/ref/make_format_fixtures.py with
// Python's json and csv modules; each record's format is found as named; RFC
// 4180 rows split as the RFC's rules say; bad lines fail with file:line.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>
#include "../data/csv.h"
#include "../data/dataset.h"
#include "../data/sft.h"

#define FMT "tests/fixtures/data/formats/"
#define TOK "tests/fixtures/tok/tokenizer.json"

typedef struct {
    int *ids[16];
    uint8_t *mask[16];
    size_t n[16];
    int count;
} Encoded;

static void encoded_free(Encoded *x) {
    for (int i = 0; i < x->count; i++) free(x->ids[i]), free(x->mask[i]);
    memset(x, 0, sizeof *x);
}

// Every record of path as tokenize --chat reads it; each must be of format want.
static void encode_file(const Tokenizer *tok, const ChatTemplate *t, const char *path, SftFormat force,
                        const SftColumns *cols, SftFormat want, Encoded *out) {
    Corpus *c;
    PtError e;
    char *inputs[1] = {(char *)path};
    char table = force == SFT_FORMAT_CSV ? ',' : force == SFT_FORMAT_TSV ? '\t' : 0;
    if (corpus_open_chat(&c, inputs, 1, table, &e)) fail_msg("%s", e.msg);
    memset(out, 0, sizeof *out);
    CorpusRecord rec;
    int got;
    while ((got = corpus_next(c, &rec, &e)) == 1) {
        char where[600];
        SftExample ex = {0};
        SftFormat found;
        if (sft_encode_record(tok, t, &rec, force, cols, corpus_where(&rec, where, sizeof where), &ex, &found, &e))
            fail_msg("%s", e.msg);
        if (found != want) fail_msg("%s: found %s, want %s", where, sft_format_name(found), sft_format_name(want));
        assert_true(out->count < 16);
        out->ids[out->count] = ex.ids;
        out->mask[out->count] = ex.mask;
        out->n[out->count++] = ex.n;
        free(rec.data);
    }
    if (got < 0) fail_msg("%s", e.msg);
    corpus_close(c);
}

static void check_same(const Tokenizer *tok, const ChatTemplate *t, const char *file, SftFormat force,
                       const SftColumns *cols, SftFormat want, const char *openai) {
    Encoded a, b;
    encode_file(tok, t, file, force, cols, want, &a);
    encode_file(tok, t, openai, SFT_FORMAT_AUTO, cols, SFT_FORMAT_OPENAI, &b);
    assert_true(a.count >= 3);
    assert_int_equal(a.count, b.count);
    for (int i = 0; i < a.count; i++) {
        if (a.n[i] != b.n[i]) fail_msg("%s record %d: %zu tokens, the OpenAI equivalent %zu", file, i, a.n[i], b.n[i]);
        assert_memory_equal(a.ids[i], b.ids[i], a.n[i] * sizeof(int));
        assert_memory_equal(a.mask[i], b.mask[i], a.n[i]);
        assert_non_null(memchr(a.mask[i], 1, a.n[i]));   // something is trained
    }
    encoded_free(&a);
    encoded_free(&b);
}

static void each_format(const Tokenizer *tok, const ChatTemplate *t) {
    SftColumns cols = {"prompt", "completion", NULL}, named = {"question", "answer", NULL};
    check_same(tok, t, FMT "sharegpt.jsonl", SFT_FORMAT_AUTO, &cols, SFT_FORMAT_SHAREGPT, FMT "sharegpt.openai.jsonl");
    check_same(tok, t, FMT "alpaca.jsonl", SFT_FORMAT_AUTO, &cols, SFT_FORMAT_ALPACA, FMT "alpaca.openai.jsonl");
    check_same(tok, t, FMT "table.csv", SFT_FORMAT_AUTO, &cols, SFT_FORMAT_CSV, FMT "table.openai.jsonl");
    check_same(tok, t, FMT "table.tsv", SFT_FORMAT_AUTO, &cols, SFT_FORMAT_TSV, FMT "table.tsv.openai.jsonl");
    check_same(tok, t, FMT "named.csv", SFT_FORMAT_AUTO, &named, SFT_FORMAT_CSV, FMT "named.openai.jsonl");
    // Forced: the same records; a .csv read as a TSV has one column.
    check_same(tok, t, FMT "sharegpt.jsonl", SFT_FORMAT_SHAREGPT, &cols, SFT_FORMAT_SHAREGPT,
               FMT "sharegpt.openai.jsonl");
    check_same(tok, t, FMT "table.tsv", SFT_FORMAT_TSV, &cols, SFT_FORMAT_TSV, FMT "table.tsv.openai.jsonl");
}

static void test_formats_match_openai(void **state) {
    (void)state;
    Tokenizer *tok = NULL;
    ChatTemplate *t = NULL, *qwen25 = NULL;   // (fail_msg jumps out; clang cannot tell)
    PtError e;
    if (tokenizer_load_file(&tok, TOK, &e) || dataset_load_chat_template(TOK, &t, &e)) fail_msg("%s", e.msg);
    each_format(tok, t);   // the template tokenize uses for this tokenizer (the bundled one)
    // And under a released template that adds a default system turn when there is none.
    uint8_t *text;
    size_t len;
    const char *path = "tests/fixtures/chat/qwen2.5.jinja";
    if (read_whole_file(path, &text, &len, &e) || chat_template_with_text(&qwen25, t, (char *)text, len, path, &e))
        fail_msg("%s", e.msg);
    each_format(tok, qwen25);
    free(text);
    chat_template_free(qwen25);
    chat_template_free(t);
    tokenizer_free(tok);
}

// One JSON line through the record path (as line 4 of x.jsonl): the format
// found, and the error (needle NULL: none).
typedef struct {
    const char *line;
    SftFormat force, found;
    const char *needle;
} LineCase;

static void expect_line(const Tokenizer *tok, const ChatTemplate *t, const LineCase *c) {
    PtError e;
    CorpusRecord rec = {.data = (char *)c->line, .len = strlen(c->line), .file = "x.jsonl", .line = 4,
                        .format = CORPUS_JSONL};
    SftExample ex = {0};
    SftFormat found;
    int rc = sft_encode_record(tok, t, &rec, c->force, NULL, "x.jsonl:4", &ex, &found, &e);
    sft_example_free(&ex);
    if (!c->needle && rc) fail_msg("[%s]: %s", c->line, e.msg);
    if (c->needle && (!rc || !strstr(e.msg, c->needle) || strncmp(e.msg, "x.jsonl:4: ", 11)))
        fail_msg("[%s]: [%s] lacks [%s]", c->line, rc ? e.msg : "(no error)", c->needle);
    assert_int_equal(found, c->found);
}

#define A SFT_FORMAT_AUTO
#define O SFT_FORMAT_OPENAI
#define S SFT_FORMAT_SHAREGPT
#define L SFT_FORMAT_ALPACA

static void test_detection_and_bad_lines(void **state) {
    (void)state;
#define TURN(from, value) "{\"from\": \"" from "\", \"value\": \"" value "\"}"
#define SHAREGPT(...) "{\"conversations\": [" __VA_ARGS__ "]}"
    static const LineCase cases[] = {
        {"{\"prompt\": \"a\", \"completion\": \"b\"}", A, O, NULL},
        {"{\"instruction\": \"a\", \"output\": \"b\"}", A, L, NULL},
        {SHAREGPT(TURN("human", "a") ", " TURN("gpt", "b")), A, S, NULL},
        {"{\"text\": \"a\"}", A, A, "matches no SFT format"},
        {"[1, 2]", A, A, "expected a JSON object"},
        {"{\"messages\": [], \"conversations\": []}", A, A,
         "the line has \"messages\" (openai) and \"conversations\" (sharegpt): name its format with --format"},
        {"{\"prompt\": \"a\", \"output\": \"b\"}", A, A, "\"prompt\" (openai) and \"output\" (alpaca)"},
        {"{\"instruction\": \"a\", \"input\": \"b\"}", A, L, "no \"output\" string"},
        {"{\"output\": \"b\"}", A, L, "no \"instruction\" string"},
        {"{\"instruction\": \"a\", \"input\": 3, \"output\": \"b\"}", A, L, "\"input\" must be a string"},
        {"{\"instruction\": \"a\", \"output\": \"b\", \"history\": [[\"q\"]]}", A, L,
         "\"history\" item 0 is not an [instruction, reply] pair"},
        {"{\"instruction\": \"a\", \"output\": \" \"}", A, L, "empty assistant turn"},
        {SHAREGPT(TURN("human", "a") ", " TURN("bot", "b")), A, S,
         "turn 1: unknown role \"bot\" (want human or user, gpt or assistant, system)"},
        {SHAREGPT(TURN("human", "a") ", " TURN("function_call", "{}")), A, S,
         "turn 1: \"function_call\" is a tool turn"},
        {SHAREGPT(TURN("observation", "a")), A, S, "turn 0: \"observation\" is a tool turn"},
        {SHAREGPT("{\"from\": \"human\", \"text\": \"a\"}"), A, S, "turn 0 needs string \"from\" and \"value\""},
        {SHAREGPT(), A, S, "\"conversations\" is empty"},
        {"{\"system\": \"s\", \"conversations\": [" TURN("system", "t") ", " TURN("gpt", "b") "]}", A, S,
         "turn 0: a system turn and a top-level \"system\" too"},
        {SHAREGPT(TURN("human", "a") ", " TURN("system", "b") ", " TURN("gpt", "c")), A, S,
         "message 1: a system message must come first"},
        {SHAREGPT(TURN("human", "a")), A, S, "no assistant turn"},
        // Forced formats read no other: the ShareGPT line is not OpenAI.
        {SHAREGPT(TURN("human", "a") ", " TURN("gpt", "b")), O, O, "no \"messages\" array"},
        {"{\"instruction\": \"a\", \"output\": \"b\"}", S, S, "\"conversations\" must be an array"},
        {"{\"instruction\": \"a\", \"output\": \"b\"", A, A, "malformed JSON"},
        {"{\"instruction\": \"\xc3\x28\", \"output\": \"b\"}", A, A, "invalid UTF-8 at byte 17"},
    };
    Tokenizer *tok;
    ChatTemplate *t;
    PtError e;
    if (tokenizer_load_file(&tok, TOK, &e) || dataset_load_chat_template(TOK, &t, &e)) fail_msg("%s", e.msg);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) expect_line(tok, t, &cases[i]);
    chat_template_free(t);
    tokenizer_free(tok);
}
#undef A
#undef O
#undef S
#undef L

static void test_format_guard(void **state) {
    (void)state;
    SftFormatGuard g = {0};
    PtError e;
    const char *a = "a.jsonl", *b = "b.jsonl";
    CorpusRecord r = {.file = a, .line = 1};
    assert_int_equal(sft_format_guard(&g, &r, SFT_FORMAT_AUTO, &e), 0);   // a record of no format sets nothing
    r.line = 2;
    assert_int_equal(sft_format_guard(&g, &r, SFT_FORMAT_ALPACA, &e), 0);
    r.line = 3;
    assert_int_equal(sft_format_guard(&g, &r, SFT_FORMAT_ALPACA, &e), 0);
    r.line = 5;
    assert_int_equal(sft_format_guard(&g, &r, SFT_FORMAT_SHAREGPT, &e), -1);
    assert_string_equal(e.msg, "a.jsonl:5: a sharegpt record in a file of alpaca records (from line 2): one format "
                               "per file");
    r = (CorpusRecord){.file = b, .line = 1};   // a new file sets its own
    assert_int_equal(sft_format_guard(&g, &r, SFT_FORMAT_SHAREGPT, &e), 0);
}

// Rows split by RFC 4180's rules (section 2), written out by hand.
static void expect_fields(const char *row, char sep, int n, const char *const *want) {
    CsvRow r = {0};
    char why[160];
    if (csv_split(row, strlen(row), sep, &r, why, sizeof why)) fail_msg("[%s]: %s", row, why);
    if (r.n != n) fail_msg("[%s]: %d fields, want %d", row, r.n, n);
    for (int i = 0; i < n; i++) {
        if (strcmp(r.field[i], want[i])) fail_msg("[%s] field %d: [%s], want [%s]", row, i, r.field[i], want[i]);
        assert_int_equal(r.len[i], strlen(want[i]));
    }
    csv_row_free(&r);
}

static void expect_csv_error(const char *row, const char *needle) {
    CsvRow r = {0};
    char why[160];
    assert_int_equal(csv_split(row, strlen(row), ',', &r, why, sizeof why), -1);
    if (!strstr(why, needle)) fail_msg("[%s]: [%s] lacks [%s]", row, why, needle);
    csv_row_free(&r);
}

static void test_csv_rows(void **state) {
    (void)state;
    expect_fields("aaa,bbb,ccc", ',', 3, (const char *[]){"aaa", "bbb", "ccc"});
    expect_fields("\"aaa\",\"b,bb\",ccc", ',', 3, (const char *[]){"aaa", "b,bb", "ccc"});
    expect_fields("\"a\"\"b\",\"\"\"\",\"\"", ',', 3, (const char *[]){"a\"b", "\"", ""});
    expect_fields("\"two\r\nlines\",x", ',', 2, (const char *[]){"two\r\nlines", "x"});
    expect_fields(",", ',', 2, (const char *[]){"", ""});
    expect_fields("", ',', 1, (const char *[]){""});
    expect_fields("ab\"c,d", ',', 2, (const char *[]){"ab\"c", "d"});   // a quote inside an unquoted field stays
    expect_fields("a\tb,c\t\"d\te\"", '\t', 3, (const char *[]){"a", "b,c", "d\te"});
    expect_csv_error("\"ab\"c,d", "field 1: text after its closing quote");
    expect_csv_error("x,\"never closed", "field 2: a quoted field is never closed");
    // Cutting rows: a newline inside quotes is text; resuming a scan byte by
    // byte finds the end one scan of the whole finds.
    const char *s = "x,\"a\nb\"\"\n\"\r\nnext\n";
    CsvScan whole = {0}, parts = {0};
    size_t end_whole, end_parts = 0;
    assert_int_equal(csv_scan_row(&whole, s, strlen(s), ',', &end_whole), 1);
    assert_int_equal(end_whole, 11);
    assert_int_equal(whole.newlines, 2);
    int found = 0;
    for (size_t n = 0; n <= strlen(s) && !found; n++) found = csv_scan_row(&parts, s, n, ',', &end_parts);
    assert_int_equal(end_parts, end_whole);
    assert_int_equal(parts.newlines, 2);
}

// Rows across the reader's 1 MiB reads: each row's fields and first line,
// with a quoted newline in every row and CRLF endings.
static void test_table_rows_across_reads(void **state) {
    (void)state;
    char path[] = "/tmp/pocket-test-rows-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    fputs("prompt,completion\r\n", f);
    enum { ROWS = 12000 };   // about 3 MB
    char pad[400];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    for (int i = 0; i < ROWS; i++) fprintf(f, "p%d,\"first, \"\"%d\"\"\r\n%s\"\r\n", i, i, pad + i % 300);
    fclose(f);
    Corpus *c;
    PtError e;
    char *inputs[1] = {path};
    if (corpus_open_chat(&c, inputs, 1, 0, &e) == 0) fail_msg("a .XXXXXX name is no table");
    if (corpus_open_chat(&c, inputs, 1, ',', &e)) fail_msg("%s", e.msg);
    CorpusRecord rec;
    CsvRow row = {0};
    char why[160], want[600];
    int n = 0;
    while (corpus_next(c, &rec, &e) == 1) {
        assert_int_equal(rec.line, 2 + 2 * (uint64_t)n);
        assert_int_equal(rec.header_line, 1);
        assert_int_equal(rec.header_len, 17);
        if (csv_split(rec.data, rec.len, ',', &row, why, sizeof why)) fail_msg("row %d: %s", n, why);
        assert_int_equal(row.n, 2);
        snprintf(want, sizeof want, "p%d", n);
        assert_string_equal(row.field[0], want);
        snprintf(want, sizeof want, "first, \"%d\"\r\n%s", n, pad + n % 300);
        assert_string_equal(row.field[1], want);
        free(rec.data);
        n++;
    }
    assert_int_equal(n, ROWS);
    assert_true(corpus_bytes_read(c) > (2u << 20));
    csv_row_free(&row);
    corpus_close(c);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formats_match_openai),
        cmocka_unit_test(test_detection_and_bad_lines),
        cmocka_unit_test(test_format_guard),
        cmocka_unit_test(test_csv_rows),
        cmocka_unit_test(test_table_rows_across_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
