// sft.h: chat JSONL lines -> token ids + loss mask for supervised fine-tuning.
//
// A line is {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
// (an optional system turn first) or {"prompt": "...", "completion": "..."}
// (optionally with "system"). It is rendered with the model's chat template
// (data/chat.h) and tokenized as one text; the mask is 1 on the tokens of the
// assistant replies and the end-of-turn token after each.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"
#include "chat.h"
#include "tokenizer.h"

typedef struct {
    int *ids;
    uint8_t *mask;          // 1: the loss trains this token
    size_t n, cap, mask_cap;
} SftExample;

enum { SFT_BAD_RECORD = -1, SFT_BOUNDARY_MERGE = -2 };

// Parses, renders (with tmpl) and tokenizes one line into ex (reset first).
// where names the line ("file:line") in errors. Returns 0, SFT_BAD_RECORD for
// a line the user must fix (malformed JSON, no "messages", unknown role,
// empty assistant turn, no assistant turn, the template's own error, invalid
// UTF-8), or SFT_BOUNDARY_MERGE when a token of the whole rendered text
// covers both the template's text and a trained span (chat.h's
// chat_train_bytes), so no mask is right for it.
int sft_encode_line(const Tokenizer *tok, const ChatTemplate *tmpl, const char *line, size_t len, const char *where,
                    SftExample *ex, PtError *e);
void sft_example_free(SftExample *ex);

typedef enum { SFT_KEEP = 0, SFT_DROPPED = 1, SFT_TRUNCATED = 2 } SftFit;
// --max-len: an example longer than max_len (0 = no limit) is dropped, or
// with truncate cut to its first max_len tokens (dropped anyway when no
// trained token survives the cut).
SftFit sft_fit(SftExample *ex, size_t max_len, int truncate);
