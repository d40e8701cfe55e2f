// Chat templates of eight model families (Qwen2.5, Qwen3, Llama 3, SmolLM2,
// Mistral, Gemma, DeepSeek, Phi), rendered by our Jinja subset, equal
// transformers' apply_chat_template on the 19 conversations of
// tests/fixtures/tok/chat.json, or fail where the template raises (fixtures
// from tests/ref/make_chat_fixtures.py); the trained bytes equal the spans
// that script finds on transformers' text. Then the Jinja subset's own
// corners, each against what jinja2 gives.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "../data/chat.h"
#include "../data/jinja.h"

#define FIX "tests/fixtures/chat/"

static size_t end_token_len(void *ctx, const char *s, size_t len) {
    const char *end = ctx;
    size_t n = strlen(end);
    return n <= len && !memcmp(s, end, n) ? n : 0;
}

static void test_families_match_transformers(void **state) {
    (void)state;
    json_error_t je;
    json_t *expected = json_load_file(FIX "expected.json", 0, &je);
    json_t *convs = json_load_file("tests/fixtures/tok/chat.json", 0, &je);
    if (!expected || !convs) fail_msg("fixtures: %s", je.text);
    json_t *families = json_object_get(expected, "families");
    assert_int_equal(json_object_size(families), 8);
    const char *family;
    json_t *fam;
    int rendered = 0, refused = 0;
    json_object_foreach(families, family, fam) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s.jinja", family);
        uint8_t *text;
        size_t len;
        PtError e;
        if (read_whole_file(path, &text, &len, &e)) fail_msg("%s", e.msg);
        json_t *cfg = json_object();
        json_t *bos = json_object_get(fam, "bos_token"), *eos = json_object_get(fam, "eos_token");
        if (json_is_string(bos)) json_object_set(cfg, "bos_token", bos);
        json_object_set(cfg, "eos_token", eos);
        char *cfg_text = json_dumps(cfg, 0);
        ChatTemplate *t;
        if (chat_template_from_text(&t, (const char *)text, len, path, cfg_text, strlen(cfg_text), &e))
            fail_msg("%s", e.msg);
        const char *end_token = json_string_value(json_object_get(fam, "end_token"));
        json_t *cases = json_object_get(fam, "cases");
        assert_int_equal(json_array_size(cases), json_array_size(convs));
        for (size_t c = 0; c < json_array_size(cases); c++) {
            json_t *cs = json_array_get(cases, c), *conv = json_array_get(convs, c), *jm = json_object_get(conv, "messages");
            const char *name = json_string_value(json_object_get(cs, "name"));
            int n = (int)json_array_size(jm);
            ChatMessage m[16];
            assert_true(n <= 16);
            for (int i = 0; i < n; i++) {
                m[i].role = json_string_value(json_object_get(json_array_get(jm, (size_t)i), "role"));
                m[i].content = json_string_value(json_object_get(json_array_get(jm, (size_t)i), "content"));
            }
            ChatText out;
            int rc = chat_render(t, m, n, json_is_true(json_object_get(conv, "add_generation_prompt")),
                                 json_is_true(json_object_get(conv, "enable_thinking")), &out, &e);
            const char *error = json_string_value(json_object_get(cs, "error"));
            if (error) {
                if (rc == 0) fail_msg("%s/%s: rendered, transformers raised \"%s\"", family, name, error);
                if (!strstr(e.msg, error)) fail_msg("%s/%s: \"%s\" does not say \"%s\"", family, name, e.msg, error);
                refused++;
                continue;
            }
            if (rc) fail_msg("%s/%s: %s", family, name, e.msg);
            const char *want = json_string_value(json_object_get(cs, "text"));
            if (strlen(want) != out.len || memcmp(want, out.text, out.len))
                fail_msg("%s/%s: rendered\n[%s]\ntransformers\n[%s]", family, name, out.text, want);
            uint8_t *train = xmalloc(out.len + 1, "train");
            chat_train_bytes(&out, end_token_len, (void *)end_token, train);
            char *trained = xmalloc(out.len + 1, "trained");
            size_t k = 0;
            for (size_t i = 0; i < out.len; i++)
                if (train[i]) trained[k++] = out.text[i];
            trained[k] = 0;
            const char *want_train = json_string_value(json_object_get(cs, "train_text"));
            if (strcmp(trained, want_train))
                fail_msg("%s/%s: trained\n[%s]\nexpected\n[%s]", family, name, trained, want_train);
            free(train);
            free(trained);
            chat_text_free(&out);
            rendered++;
        }
        chat_template_free(t);
        free(cfg_text);
        json_decref(cfg);
        free(text);
    }
    assert_int_equal(rendered + refused, 8 * 19);
    assert_true(refused >= 10);
    json_decref(expected);
    json_decref(convs);
}

// Renders src with no variables but x = "ab" (tag 7 on its bytes).
static char *render(const char *src, PtError *e, uint16_t **tags) {
    JinjaTemplate *t;
    if (jinja_parse(&t, src, strlen(src), "t", e)) return NULL;
    JinjaVars *v = jinja_vars_new();
    jinja_vars_add_message(v, "assistant", "ab", 7);
    jinja_vars_set_str(v, "s", "  Hello World  ");
    char *text;
    size_t len;
    uint16_t *tg;
    int rc = jinja_render(t, v, &text, &len, &tg, e);
    jinja_vars_free(v);
    jinja_free(t);
    if (rc) return NULL;
    if (tags) *tags = tg;
    else free(tg);
    return text;
}

static void expect(const char *src, const char *want) {
    PtError e;
    char *got = render(src, &e, NULL);
    if (!got) fail_msg("%s: %s", src, e.msg);
    if (strcmp(got, want)) fail_msg("%s: got [%s], want [%s]", src, got, want);
    free(got);
}

static void expect_error(const char *src, const char *needle) {
    PtError e;
    char *got = render(src, &e, NULL);
    if (got) fail_msg("%s: rendered [%s], want an error", src, got);
    if (!strstr(e.msg, needle)) fail_msg("%s: error \"%s\" does not say \"%s\"", src, e.msg, needle);
}

// Each expected string is what jinja2 3.1 renders (trim_blocks, lstrip_blocks).
static void test_jinja_corners(void **state) {
    (void)state;
    expect("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 1 / 4 }}|{{ 2 ** 10 }}", "7|3|-4|-2|0.25|1024");
    expect("{{ 'a' ~ 1 ~ none }}|{{ [1, 'x'] }}|{{ {'k': true} }}|{{ 1.0 }}|{{ 1e-5 }}", "a1None|[1, 'x']|{'k': True}|1.0|1e-05");
    expect("{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip()|upper }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}",
           "Hello World|Hello World|HELLO WORLD  |['Hello', 'World']|['a', 'b', '', 'c']");
    expect("{{ 'héllo'[1:3] }}|{{ 'abc'[::-1] }}|{{ [1,2,3,4][-2:] }}|{{ 'abc'[-1] }}|{{ 'x'.startswith(('y','x')) }}",
           "él|cba|[3, 4]|c|True");
    expect("{% for x in [3, 4, 5] if x != 4 %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}{% endfor %}", "13,25");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for x in [] %}y{% else %}empty{% endfor %}",
           "a=1;b=2;empty");
    expect("{% set x = 1 %}{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}", "1");
    expect("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "6");
    expect("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           "02");
    expect("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bo') }} {{ greet('Al', punct='?') }}",
           "Hi Bo! Hi Al?");
    expect("{{ undefined_thing }}|{{ undefined_thing is defined }}|{{ none is none }}|{{ 3 is odd }}|{{ 'x' is string }}",
           "|False|True|True|True");
    expect("{{ [{'r': 'a'}, {'r': 'b'}]|selectattr('r', 'equalto', 'b')|list|length }}|{{ ['a','b']|join('-') }}"
           "|{{ [{'n': 1}]|map(attribute='n')|first }}|{{ {'a': [1, 'é']}|tojson }}|{{ [1]|tojson(indent=2) }}",
           "1|a-b|1|{\"a\": [1, \"é\"]}|[\n  1\n]");
    expect("{{ 'yes' if 0 else 'no' }}|{{ 1 and 'b' }}|{{ 0 or 'c' }}|{{ not 1 in [1] }}|{{ 'b' not in 'abc' }}", "no|b|c|False|False");
    // whitespace control: trim_blocks eats the newline after a tag, lstrip_blocks the indent before one
    expect("a\n  {% if true %}\n    b\n  {% endif %}\nc", "a\n    b\nc");
    expect("a  {{- ' b ' -}}  c\n{#- comment #}\nd", "a b cd");
    expect("x\n", "x");
    // tags follow the bytes of the content through slicing, strip and concatenation
    uint16_t *tags;
    PtError e;
    char *got = render("<{{ messages[0].content[1:] + '!' }}>", &e, &tags);
    assert_non_null(got);
    assert_string_equal(got, "<b!>");
    assert_int_equal(tags[0], 0);
    assert_int_equal(tags[1], 7);
    assert_int_equal(tags[2], 0);
    free(got);
    free(tags);
    expect_error("{{ raise_exception('no system role') }}", "no system role");
    expect_error("{% if x %}", "never closed");
    expect_error("{{ 1 + }}", "t:1:");
    expect_error("{{ 'a' + 1 }}", "unsupported operand");
    expect_error("{{ x.y }}", "'x' is undefined");
    expect_error("{% set y = 1 %}{% set y.z = 2 %}", "not a namespace");
    expect_error("{{ s|nosuchfilter }}", "unknown filter 'nosuchfilter'");
    expect_error("{% include 'x' %}", "unsupported tag");
}

// What a hostile or broken template meets: each limit is one clear error
// naming the place, reached in bounded time and memory (docs/fuzzing.md).
static void test_jinja_limits(void **state) {
    (void)state;
    // Lexing is linear: 50,000 tags (400 kB) take 0.04 s (47 s when every
    // token's line was counted from the start; the bound leaves room for a
    // loaded machine), and a late error still names its line and column.
    size_t n = 50000;
    char *big = malloc(8 * n + 16);
    for (size_t i = 0; i < n; i++) memcpy(big + 8 * i, "{{ 1 }}\n", 8);
    strcpy(big + 8 * n, "x{{ + }}");
    double t0 = now_seconds();
    expect_error(big, "t:50001:7: expected an expression");
    assert_true(now_seconds() - t0 < 5.0);
    free(big);
    // Nesting past JINJA_MAX_NESTING (200) is an error where the parser
    // recursed until the stack ran out (at 20,000 nested ifs, 6,000 brackets) or the
    // renderer did (10,000 nots); 60 levels are fine.
    big = malloc(8 * n + 16);
    for (size_t i = 0; i < n; i++) memcpy(big + 8 * i, "{%if 1%}", 8);
    big[8 * n] = 0;
    expect_error(big, "nested too deeply (more than 200 levels)");
    const struct { const char *open, *close; int levels; } chains[] = {{"(", ")", 6000}, {"not ", "", 10000}, {"-", "", 10000}};
    for (int k = 0; k < 3; k++) {
        char *p = big;
        p += sprintf(p, "{{ ");
        for (int i = 0; i < chains[k].levels; i++) p += sprintf(p, "%s", chains[k].open);
        p += sprintf(p, "1");
        for (int i = 0; i < chains[k].levels; i++) p += sprintf(p, "%s", chains[k].close);
        sprintf(p, " }}");
        expect_error(big, "nested too deeply");
    }
    free(big);
    // 64-bit integers: a result past them is an error (Python's ints would grow; C's are undefined there).
    expect("{{ 9223372036854775807 - 1 }}|{{ (-1) ** 65 }}|{{ 2 ** 62 }}|{{ (-9223372036854775807 - 1) % -1 }}"
           "|{{ '3.7'|int }}|{{ 'x'|int(5) }}|{{ 'nan'|float|int }}|{{ 'abc'[::9223372036854775807] }}"
           "|{{ (-9223372036854775807 - 1) is divisibleby(-1) }}|{{ range(9223372036854775806, 9223372036854775807, 5)|list }}",
           "9223372036854775806|-1|4611686018427387904|0|3|5|0|a|True|[9223372036854775806]");
    const char *const overflows[] = {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                                     "{{ 4611686018427387904 * 2 }}", "{{ 3 ** 41 }}",
                                     "{{ (-9223372036854775807 - 1) // -1 }}", "{{ -(-9223372036854775807 - 1) }}",
                                     "{{ (-9223372036854775807 - 1)|abs }}", "{{ 1e300|int }}",
                                     "{{ '99999999999999999999'|int }}"};
    for (size_t i = 0; i < sizeof overflows / sizeof overflows[0]; i++)
        expect_error(overflows[i], "integer overflow: the result does not fit in 64 bits");
    expect_error("{{ 99999999999999999999 }}", "t:1:4: integer literal out of the 64-bit range");
    // A namespace may hold itself (Python compares it by identity first); two that hold each other nest without
    // end, which Python refuses too (RecursionError). A list or dict is not a key, as in Python.
    expect("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns == ns }}|{{ ns in [ns] }}|{{ [ns] == [ns] }}",
           "True|True|True");
    expect_error("{% set a = namespace() %}{% set b = namespace() %}{% set a.x = b %}{% set b.x = a %}{{ a == b }}",
                 "nested deeper than 200 levels");
    expect_error("{{ {[1]: 2} }}", "t:1:5: unhashable type: 'list'");
    expect("{{ {1: 'a', 'k': none, true: 2}[1] }}", "2");
    // Work and memory are bounded per render (here 4,000,000 steps + 4 x 26 bytes + 1,000 x 1 message of
    // variables, and 32 MB + 64 x 26 bytes): a
    // loop without end in practice, output or values that grow without end, slow searches in a loop, and a
    // macro that recurses through deep expressions each end in one error, in a twentieth of a second (the
    // bound of 5 s leaves room for a loaded machine; without the bounds they ran for hours or ran out of memory).
    const struct { const char *src, *says; } bounded[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "uses more than 32 MB"},
        {"{% for i in range(100000) %}{% if i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i"
         " + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i + i == -1 %}{% endif %}"
         "{% endfor %}", "t:1:109: the template takes more than 4001104 steps"},  // left operand first: one place with every compiler
        {"{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         "t:1:78: the template uses more than 32 MB of memory"},
        {"{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
         "uses more than 32 MB"},
        {"{% set s = 'a' * 100000 %}{% set t = s ~ '' %}{% for i in range(100000) %}{% if s == t %}{% endif %}{% endfor %}",
         "takes more than"},
        {"{% set s = 'a' * 100000 %}{% for i in range(100000) %}{{ s.strip(s ~ 'b') }}{% endfor %}", "takes more than"},
        {"{{ ('a' * 100000).replace('', 'b' * 1000) }}", "uses more than 32 MB"},
        {"{{ 'x'|indent(100000000000, true) }}", "uses more than 32 MB"},
        {"{% macro f(n) %}{{ not not not not not not not not not not not not not not not not not not not not not not not not not not not not not not f(n) }}{% endmacro %}{{ f(1) }}",
         "nests deeper than 2000 levels as it renders"},
        {"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "macro calls nested too deeply"},
    };
    for (size_t i = 0; i < sizeof bounded / sizeof bounded[0]; i++) {
        t0 = now_seconds();
        expect_error(bounded[i].src, bounded[i].says);
        if (now_seconds() - t0 > 5.0) fail_msg("%s: %.2f s", bounded[i].src, now_seconds() - t0);
    }
    // Within the bounds: searches and replacements on long strings run in linear time.
    expect("{% set s = 'ab' * 100000 %}{{ s.count('ba') }}|{{ s.find('bb') }}|{{ s.replace('ab', 'c')|length }}"
           "|{{ s.split('ba')|length }}|{{ 'abab'.count('') }}|{{ 'xab'.find('') }}|{{ 'aXbXc'.replace('X', '', 1) }}",
           "99999|-1|100000|100000|5|0|abXc");
    expect("{{ " "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))"
           " }}|{{ not not not not 1 }}|{{ - - 2 }}", "1|True|2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families_match_transformers),
        cmocka_unit_test(test_jinja_corners),
        cmocka_unit_test(test_jinja_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
