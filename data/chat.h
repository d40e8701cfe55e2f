// chat.h: the Qwen3 chat template (ChatML) rendered in C, identical to
// transformers' apply_chat_template, as segments that carry the SFT loss mask.
#pragma once
#include "../util/util.h"

typedef struct {
    const char *role;       // "system", "user", "assistant"
    const char *content;
} ChatMessage;

typedef struct {
    char *text;             // malloc'd
    int train;              // 1: assistant content or its closing <|im_end|> (loss mask 1)
} ChatSegment;

typedef struct {
    ChatSegment *seg;
    int n, cap;
} ChatRender;

// Renders messages as the template does. add_generation_prompt appends
// "<|im_start|>assistant\n" (and, with enable_thinking == 0, the empty think
// block). Errors: unknown role, empty assistant turn, system not first.
int chat_render(ChatRender *out, const ChatMessage *m, int n, int add_generation_prompt, int enable_thinking,
                PtError *e);
char *chat_render_text(const ChatRender *r);   // concatenation, malloc'd
void chat_render_free(ChatRender *r);
