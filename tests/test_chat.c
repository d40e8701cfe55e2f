// Chat template parity: the C render equals transformers' apply_chat_template
// with the real Qwen3 template (fixtures from tests/ref/make_tokenizer_fixtures.py)
// for every conversation; its ids equal HF's; the train=1 segments are exactly
// the assistant replies each followed by <|im_end|>; bad conversations are refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>
#include "../data/chat.h"
#include "../data/tokenizer.h"

#define FIX "tests/fixtures/tok/"

static int *encode(const Tokenizer *t, const char *text, int **ids, size_t *n, size_t *cap) {
    PtError e;
    if (tokenizer_encode(t, text, strlen(text), ids, n, cap, &e)) fail_msg("encode: %s", e.msg);
    return *ids;
}

static void test_render_matches_transformers(void **s) {
    (void)s;
    json_error_t je;
    json_t *cases = json_load_file(FIX "chat.json", 0, &je);
    if (!cases) fail_msg("chat.json: %s", je.text);
    Tokenizer *tok;
    PtError e;
    if (tokenizer_load_file(&tok, FIX "tokenizer.json", &e)) fail_msg("%s", e.msg);
    assert_true(json_array_size(cases) >= 15);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c), *jm = json_object_get(cs, "messages");
        const char *name = json_string_value(json_object_get(cs, "name"));
        int n = (int)json_array_size(jm);
        ChatMessage m[16];
        assert_true(n <= 16);
        for (int i = 0; i < n; i++) {
            m[i].role = json_string_value(json_object_get(json_array_get(jm, (size_t)i), "role"));
            m[i].content = json_string_value(json_object_get(json_array_get(jm, (size_t)i), "content"));
        }
        ChatRender r;
        if (chat_render(&r, m, n, json_is_true(json_object_get(cs, "add_generation_prompt")),
                        json_is_true(json_object_get(cs, "enable_thinking")), &e))
            fail_msg("%s: %s", name, e.msg);
        char *text = chat_render_text(&r);
        if (strcmp(text, json_string_value(json_object_get(cs, "text"))) != 0)
            fail_msg("%s: rendered\n%s\ntransformers\n%s", name, text, json_string_value(json_object_get(cs, "text")));

        // The loss mask covers the replies and their <|im_end|>, nothing else.
        size_t trained_len = 0;
        for (int i = 0; i < r.n; i++)
            if (r.seg[i].train) trained_len += strlen(r.seg[i].text);
        char *trained = xmalloc(trained_len + 1, "trained text");
        trained[0] = 0;
        for (int i = 0; i < r.n; i++)
            if (r.seg[i].train) strcat(trained, r.seg[i].text);
        if (strcmp(trained, json_string_value(json_object_get(cs, "train_text"))) != 0)
            fail_msg("%s: trained text \"%s\"", name, trained);

        // Ids of the whole render equal HF's; per-segment ids agree with them
        // except where a reply starts with "\n" right after "assistant\n".
        int *whole = NULL, *parts = NULL;
        size_t nw = 0, cw = 0, np = 0, cp = 0;
        encode(tok, text, &whole, &nw, &cw);
        json_t *want = json_object_get(cs, "ids");
        assert_int_equal(nw, json_array_size(want));
        for (size_t k = 0; k < nw; k++) assert_int_equal(whole[k], json_integer_value(json_array_get(want, k)));
        for (int i = 0; i < r.n; i++) encode(tok, r.seg[i].text, &parts, &np, &cp);
        int same = np == nw && memcmp(parts, whole, nw * sizeof *whole) == 0;
        if (strcmp(name, "leading_newlines") == 0) assert_false(same);
        else if (!same) fail_msg("%s: per-segment ids differ from the whole text's", name);
        free(whole);
        free(parts);
        free(trained);
        free(text);
        chat_render_free(&r);
    }
    tokenizer_free(tok);
    json_decref(cases);
}

static void expect_error(const ChatMessage *m, int n, const char *needle) {
    ChatRender r;
    PtError e;
    assert_int_equal(chat_render(&r, m, n, 0, 1, &e), -1);
    assert_int_equal(r.n, 0);
    if (!strstr(e.msg, needle)) fail_msg("\"%s\" does not say \"%s\"", e.msg, needle);
}

static void test_refused_conversations(void **s) {
    (void)s;
    ChatMessage unknown[] = {{"user", "hi"}, {"robot", "beep"}};
    expect_error(unknown, 2, "message 1: unknown role \"robot\"");
    ChatMessage empty[] = {{"user", "hi"}, {"assistant", ""}};
    expect_error(empty, 2, "message 1 (assistant): empty reply");
    ChatMessage only_thoughts[] = {{"user", "hi"}, {"assistant", "<think>hmm</think>\n\n"}};
    expect_error(only_thoughts, 2, "empty reply");
    ChatMessage late_system[] = {{"user", "hi"}, {"system", "be nice"}, {"assistant", "ok"}};
    expect_error(late_system, 3, "message 1: a system message must come first");
    ChatMessage tool[] = {{"user", "hi"}, {"tool", "{}"}};
    expect_error(tool, 2, "\"tool\" is not supported");
    ChatMessage null_content[] = {{"user", NULL}};
    expect_error(null_content, 1, "no content");
    expect_error(NULL, 0, "no messages");
}

static void test_segments_and_generation_prompt(void **s) {
    (void)s;
    ChatMessage m[] = {{"user", "Q"}, {"assistant", "<think>r</think>A"}};
    ChatRender r;
    PtError e;
    assert_int_equal(chat_render(&r, m, 2, 0, 1, &e), 0);
    // user turn + header + think block (0) | reply + <|im_end|> (1) | "\n" (0)
    assert_int_equal(r.n, 3);
    assert_string_equal(r.seg[0].text, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\n");
    assert_int_equal(r.seg[0].train, 0);
    assert_string_equal(r.seg[1].text, "A<|im_end|>");
    assert_int_equal(r.seg[1].train, 1);
    assert_string_equal(r.seg[2].text, "\n");
    assert_int_equal(r.seg[2].train, 0);
    chat_render_free(&r);
    ChatMessage q[] = {{"user", "Q"}};
    assert_int_equal(chat_render(&r, q, 1, 1, 0, &e), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.seg[0].train, 0);
    assert_string_equal(r.seg[0].text, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    chat_render_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_matches_transformers),
        cmocka_unit_test(test_refused_conversations),
        cmocka_unit_test(test_segments_and_generation_prompt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
