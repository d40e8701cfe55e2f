// libFuzzer target: a chat template (our Jinja subset: lexer, parser,
// renderer, filters, tests, methods) rendered over fixed conversations, as
// `pocket tokenize --chat-template FILE`, `--chat` and `generate --chat` use
// it: the SFT path (render, trained bytes, tokenize, loss mask) and the
// generation prompt with thinking off (the choice and generate path).
// The input is the template text; an optional second part (FUZZ_PART_MARK)
// is a tokenizer_config.json, whose special tokens the template sees and
// whose own chat_template (a string or a list of named templates) is then
// loaded and rendered the same way, as a checkpoint's is.
// Errors (the template's raise_exception included) are fine; a crash, a
// sanitizer report, a leak, a timeout or an allocation over the limit is a bug.
#include <string.h>
#include "../../data/choice.h"
#include "../../data/sft.h"
#include "fuzz_util.h"

static const ChatMessage SIMPLE[] = {
    {"system", "You are terse."}, {"user", "Hi there"}, {"assistant", "Hello! How can I help?"}};
static const ChatMessage TURNS[] = {
    {"user", "2+2?"}, {"assistant", "<think>\nadd\n</think>\n\n4"}, {"user", "和 3 呢？"}, {"assistant", " 7 \n"}};
static const ChatMessage LONE[] = {{"assistant", "just me"}};

// A render stopped by a bound of data/jinja_internal.h (steps, memory); the
// other conversations would spend the same again before the same error.
static int spent(const PtError *e) {
    return strstr(e->msg, "the template takes more than") || strstr(e->msg, "the template uses more than");
}

// The SFT path tokenizes what renders; a text past 64 kB (a template that
// prints megabytes of spaces) is only rendered: the tokenizer's time on long
// texts is its own (tests/test_tokenizer.c), not the template's.
static void render_all(const ChatTemplate *t) {
    const Tokenizer *tok = fuzz_tokenizer();
    const struct { const ChatMessage *m; int n; } convs[] = {{SIMPLE, 3}, {TURNS, 4}, {LONE, 1}};
    SftExample ex = {0};
    for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++) {
        PtError e;
        ChatText c;
        if (chat_render(t, convs[k].m, convs[k].n, 0, 1, &c, &e)) {   // as the SFT path renders
            if (spent(&e)) break;
            continue;
        }
        size_t len = c.len;
        chat_text_free(&c);
        if (len <= 64 << 10) sft_encode_messages(tok, t, convs[k].m, convs[k].n, "fuzz", &ex, &e);
        if (chat_render(t, convs[k].m, convs[k].n, 1, 0, &c, &e) == 0) chat_text_free(&c);
    }
    sft_example_free(&ex);
    const ChatMessage prompt[] = {{"system", "Be brief."}, {"user", "Pick one."}};
    ChatText c;
    PtError e;
    if (chat_render(t, prompt, 2, 1, 0, &c, &e)) return;
    size_t len = c.len;
    chat_text_free(&c);
    int *ids = NULL;
    size_t n = 0;
    if (len <= 64 << 10 && choice_encode_prompt(tok, t, "Be brief.", "Pick one.", &ids, &n, &e) == 0) free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzPart parts[2];
    int n = fuzz_parts(data, size, parts, 2);
    const char *config = n > 1 ? (const char *)parts[1].p : NULL;
    size_t config_len = n > 1 ? parts[1].n : 0;
    ChatTemplate *t;
    PtError e;
    if (chat_template_from_text(&t, (const char *)parts[0].p, parts[0].n, "fuzz.jinja", config, config_len, &e) == 0) {
        render_all(t);
        chat_template_free(t);
    }
    if (config && chat_template_load(&t, config, config_len, "fuzz/tokenizer_config.json", &e) == 0) {
        if (!chat_template_is_bundled(t)) render_all(t);
        chat_template_free(t);
    }
    return 0;
}
