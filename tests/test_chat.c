// The chat template in use: the bundled template (for checkpoints without
// one) renders what transformers' apply_chat_template renders with the real
// Qwen3 template (fixtures from tests/ref/make_tokenizer_fixtures.py) and the
// same ids; a checkpoint's own template is the one used; SFT masks on the
// whole rendered text under the Qwen2 split and under GPT-2's split (where
// the old per-segment check refused every Qwen3-style line, issue 3), with
// the trained text equal to the reference spans of tests/fixtures/chat.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "../data/chat.h"
#include "../data/sft.h"
#include "../data/tokenizer.h"

#define FIX "tests/fixtures/tok/"

static json_t *load(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    return j;
}

static int messages_of(json_t *conv, ChatMessage *m) {
    json_t *jm = json_object_get(conv, "messages");
    int n = (int)json_array_size(jm);
    assert_true(n <= 16);
    for (int i = 0; i < n; i++) {
        m[i].role = json_string_value(json_object_get(json_array_get(jm, (size_t)i), "role"));
        m[i].content = json_string_value(json_object_get(json_array_get(jm, (size_t)i), "content"));
    }
    return n;
}

static void test_bundled_matches_qwen3(void **s) {
    (void)s;
    json_t *cases = load(FIX "chat.json");
    Tokenizer *tok;
    ChatTemplate *t;
    PtError e;
    if (tokenizer_load_file(&tok, FIX "tokenizer.json", &e)) fail_msg("%s", e.msg);
    assert_int_equal(chat_template_load(&t, NULL, 0, "none", &e), 0);
    assert_true(chat_template_is_bundled(t));
    assert_int_equal(json_array_size(cases), 19);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(cs, "name"));
        ChatMessage m[16];
        int n = messages_of(cs, m);
        ChatText out;
        if (chat_render(t, m, n, json_is_true(json_object_get(cs, "add_generation_prompt")),
                        json_is_true(json_object_get(cs, "enable_thinking")), &out, &e))
            fail_msg("%s: %s", name, e.msg);
        const char *want = json_string_value(json_object_get(cs, "text"));
        if (strcmp(out.text, want)) fail_msg("%s: rendered\n%s\ntransformers\n%s", name, out.text, want);
        int *ids = NULL;
        size_t n_ids = 0, cap = 0;
        assert_int_equal(tokenizer_encode(tok, out.text, out.len, &ids, &n_ids, &cap, &e), 0);
        json_t *want_ids = json_object_get(cs, "ids");
        assert_int_equal(n_ids, json_array_size(want_ids));
        for (size_t k = 0; k < n_ids; k++) assert_int_equal(ids[k], json_integer_value(json_array_get(want_ids, k)));
        free(ids);
        chat_text_free(&out);
    }
    chat_template_free(t);
    tokenizer_free(tok);
    json_decref(cases);
}

// The fixture tokenizer with its pre-tokenizer replaced by GPT-2's split
// (ByteLevel with use_regex), as a SmolLM-style tokenizer splits.
static Tokenizer *gpt2_split_tokenizer(void) {
    json_t *tj = load(FIX "tokenizer.json");
    json_object_set_new(tj, "pre_tokenizer", json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space",
                                                       0, "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(tj, "normalizer", json_null());
    char *text = json_dumps(tj, 0);
    Tokenizer *tok;
    PtError e;
    if (tokenizer_load(&tok, text, strlen(text), "gpt2 split", &e)) fail_msg("%s", e.msg);
    free(text);
    json_decref(tj);
    return tok;
}

// Every conversation through sft_encode_line: the trained tokens spell the
// reference spans; only "leading_newlines" (a reply starting with "\n" right
// after the template's "\n") cannot be masked.
static void check_sft(Tokenizer *tok, const char *label) {
    json_t *convs = load(FIX "chat.json"), *expected = load("tests/fixtures/chat/expected.json");
    json_t *ref = json_object_get(json_object_get(json_object_get(expected, "families"), "qwen3"), "cases");
    ChatTemplate *t;
    PtError e;
    assert_int_equal(chat_template_load(&t, NULL, 0, "none", &e), 0);
    int ok = 0;
    for (size_t c = 0; c < json_array_size(convs); c++) {
        json_t *conv = json_array_get(convs, c);
        const char *name = json_string_value(json_object_get(conv, "name"));
        if (json_is_true(json_object_get(conv, "add_generation_prompt"))) continue;   // no reply to train
        json_t *line_obj = json_pack("{s:O}", "messages", json_object_get(conv, "messages"));
        char *line = json_dumps(line_obj, 0);
        SftExample ex = {0};
        int rc = sft_encode_line(tok, t, line, strlen(line), name, &ex, &e);
        if (!strcmp(name, "leading_newlines")) {
            assert_int_equal(rc, SFT_BOUNDARY_MERGE);
            if (!strstr(e.msg, "joins the chat template's text and message 1's reply"))
                fail_msg("%s: %s", label, e.msg);
        } else {
            if (rc) fail_msg("%s/%s: %s", label, name, e.msg);
            int *trained = xmalloc(ex.n * sizeof *trained, "trained");
            size_t k = 0;
            for (size_t i = 0; i < ex.n; i++)
                if (ex.mask[i]) trained[k++] = ex.ids[i];
            char *text = tokenizer_decode(tok, trained, k, 0);
            const char *want = json_string_value(json_object_get(json_array_get(ref, c), "train_text"));
            if (strcmp(text, want)) fail_msg("%s/%s: trained [%s], reference [%s]", label, name, text, want);
            free(text);
            free(trained);
            ok++;
        }
        sft_example_free(&ex);
        free(line);
        json_decref(line_obj);
    }
    assert_true(ok >= 14);
    chat_template_free(t);
    json_decref(convs);
    json_decref(expected);
}

static void test_sft_masks_qwen2_split(void **s) {
    (void)s;
    Tokenizer *tok;
    PtError e;
    if (tokenizer_load_file(&tok, FIX "tokenizer.json", &e)) fail_msg("%s", e.msg);
    check_sft(tok, "qwen2 split");
    tokenizer_free(tok);
}

static void test_sft_masks_gpt2_split(void **s) {
    (void)s;
    Tokenizer *tok = gpt2_split_tokenizer();
    check_sft(tok, "gpt2 split");
    tokenizer_free(tok);
}

// A checkpoint's own template wins; one without chat_template gets the bundled one.
static void test_template_choice(void **s) {
    (void)s;
    const char *cfg = "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in messages %}[{{ m.role }}]"
                      "{{ m.content }}{{ eos_token }}{% endfor %}\"}";
    ChatTemplate *t;
    PtError e;
    assert_int_equal(chat_template_load(&t, cfg, strlen(cfg), "cfg", &e), 0);
    assert_false(chat_template_is_bundled(t));
    ChatMessage m[2] = {{"user", "hi"}, {"assistant", "yo"}};
    ChatText out;
    assert_int_equal(chat_render(t, m, 2, 0, 1, &out, &e), 0);
    assert_string_equal(out.text, "[user]hi<|im_end|>[assistant]yo<|im_end|>");
    assert_int_equal(out.tag[29], 2);   // "y" of the assistant's content
    chat_text_free(&out);
    chat_template_free(t);
    const char *none = "{\"eos_token\": \"<|im_end|>\"}";
    assert_int_equal(chat_template_load(&t, none, strlen(none), "cfg", &e), 0);
    assert_true(chat_template_is_bundled(t));
    assert_string_equal(chat_template_text(t), chat_bundled_template());
    chat_template_free(t);
    const char *broken = "{\"chat_template\": \"{% if %}\"}";
    assert_int_equal(chat_template_load(&t, broken, strlen(broken), "tokenizer_config.json", &e), -1);
    if (!strstr(e.msg, "tokenizer_config.json chat_template:1:")) fail_msg("%s", e.msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundled_matches_qwen3),
        cmocka_unit_test(test_sft_masks_qwen2_split),
        cmocka_unit_test(test_sft_masks_gpt2_split),
        cmocka_unit_test(test_template_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
