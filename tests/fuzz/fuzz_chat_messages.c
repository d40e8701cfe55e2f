// libFuzzer target: the conversation, under fixed real chat templates (the
// bundled one and the eight families of tests/fixtures/chat: Qwen2.5, Qwen3,
// Llama 3.1, SmolLM2, Mistral Nemo, Gemma 2, DeepSeek-R1-Distill, Phi-3.5).
// Input: byte 0 picks the template, byte 1 the flags (add_generation_prompt,
// enable_thinking), then role NUL content NUL role NUL content ... (any
// bytes: unknown roles, empty or huge contents, think tags, special tokens).
// Each conversation is rendered, its trained bytes found, and it goes
// through the SFT path (role checks, tokenize, loss mask) as a record would.
// ChatMessage carries role and content only: the SFT readers refuse tool
// turns before a template sees them (data/sft_formats.h), so there are no
// tool fields to fuzz here. Errors are fine; a crash, a sanitizer report, a
// leak, a timeout or an allocation over the limit is a bug.
#include <string.h>
#include "../../data/sft.h"
#include "fuzz_util.h"

static const char *const TEMPLATES[] = {"qwen2.5", "qwen3", "llama3", "smollm2", "mistral", "gemma", "deepseek", "phi"};
enum { N_TEMPLATES = sizeof TEMPLATES / sizeof TEMPLATES[0] + 1, MAX_MESSAGES = 256 };
static ChatTemplate *tmpl[N_TEMPLATES];

void fuzz_setup(void) {
    static const char config[] = "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|im_end|>\"}";
    PtError e;
    if (chat_template_load(&tmpl[0], NULL, 0, "bundled", &e)) die("fuzz: %s", e.msg);
    for (int k = 1; k < N_TEMPLATES; k++) {
        char rel[96];
        snprintf(rel, sizeof rel, "tests/fixtures/chat/%s.jinja", TEMPLATES[k - 1]);
        size_t len;
        uint8_t *text = fuzz_fixture(rel, &len);
        if (chat_template_from_text(&tmpl[k], (const char *)text, len, rel, config, sizeof config - 1, &e))
            die("fuzz: %s", e.msg);
        free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const ChatTemplate *t = tmpl[data[0] % N_TEMPLATES];
    int add_generation_prompt = data[1] & 1, enable_thinking = (data[1] >> 1) & 1;
    // role, content, role, content, ...: NUL-terminated copies of the pieces.
    char *text = malloc(size - 1);
    memcpy(text, data + 2, size - 2);
    text[size - 2] = 0;
    ChatMessage m[MAX_MESSAGES];
    int n = 0;
    for (char *p = text, *end = text + size - 2; p < end && n < MAX_MESSAGES;) {
        m[n].role = p;
        p += strlen(p) + 1;
        m[n].content = p < end ? p : "";
        if (p < end) p += strlen(p) + 1;
        n++;
    }
    ChatText c;
    PtError e;
    if (chat_render(t, m, n, add_generation_prompt, enable_thinking, &c, &e) == 0) {
        uint8_t *train = malloc(c.len + 1);
        chat_train_bytes(&c, NULL, NULL, train);
        free(train);
        chat_text_free(&c);
    }
    SftExample ex = {0};
    sft_encode_messages(fuzz_tokenizer(), t, m, n, "fuzz", &ex, &e);
    sft_example_free(&ex);
    free(text);
    return 0;
}
