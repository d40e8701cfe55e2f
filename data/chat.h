// chat.h: a model's chat template, the one truth for how a conversation
// becomes text: tokenizer_config.json's Jinja chat_template (or a GGUF's
// tokenizer.chat_template, which import stores there), rendered by
// data/jinja.h as transformers' apply_chat_template renders it. A checkpoint
// without one gets the bundled template, which renders Qwen3's (no tools).
// `pocket tokenize --chat`, `generate --chat`, eval and every exporter use it.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"

typedef struct {
    const char *role;       // "system", "user", "assistant"
    const char *content;
} ChatMessage;

typedef struct ChatTemplate ChatTemplate;

// config: tokenizer_config.json's bytes (NULL, or one without chat_template:
// the bundled template); its bos/eos/pad/unk tokens become the template's
// variables as transformers passes them. src names the file in errors.
int chat_template_load(ChatTemplate **out, const char *config_json, size_t len, const char *src, PtError *e);
// A template given as text (pocket tokenize --chat-template FILE); the special
// token strings come from config_json as above (may be NULL).
int chat_template_from_text(ChatTemplate **out, const char *text, size_t text_len, const char *name,
                            const char *config_json, size_t config_len, PtError *e);
// base's special tokens with another template text.
int chat_template_with_text(ChatTemplate **out, const ChatTemplate *base, const char *text, size_t text_len,
                            const char *name, PtError *e);
void chat_template_free(ChatTemplate *t);
// The Jinja text: the checkpoint's, or the bundled one.
const char *chat_template_text(const ChatTemplate *t);
// A special token's text from tokenizer_config.json ("eos_token", "bos_token",
// "pad_token", "unk_token"), as the template sees it; NULL when not given.
const char *chat_template_token(const ChatTemplate *t, const char *key);
int chat_template_is_bundled(const ChatTemplate *t);
// The bundled template's text (exporters write it for a checkpoint that has none).
const char *chat_bundled_template(void);

// A rendered conversation: tag[i] = k + 1 when byte i comes from message k's
// content (assistant messages only), else 0.
typedef struct {
    char *text;
    size_t len;
    uint16_t *tag;
} ChatText;

// Renders m[0..n) (n < 65535). enable_thinking is passed to the template as
// Qwen3's templates read it; extra variables none.
int chat_render(const ChatTemplate *t, const ChatMessage *m, int n, int add_generation_prompt, int enable_thinking,
                ChatText *out, PtError *e);
void chat_text_free(ChatText *c);

// Per byte of c, 1 where the SFT loss trains: for each assistant message the
// bytes from the first to the last that come from its content, and then the
// end-of-turn token the text continues with, whose length end_len gives (0 =
// none; the SFT code passes the tokenizer's special tokens). The template's
// own text around a reply is not trained; reasoning it renders from the
// content (a think block) is.
void chat_train_bytes(const ChatText *c, size_t (*end_len)(void *ctx, const char *s, size_t len), void *ctx,
                      uint8_t *train);
