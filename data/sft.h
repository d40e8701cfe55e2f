// sft.h: chat JSONL lines -> token ids + loss mask for supervised fine-tuning.
//
// A line is {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
// (an optional system turn first) or {"prompt": "...", "completion": "..."}
// (optionally with "system"). It is rendered with the chat template
// (data/chat.h) and each segment is tokenized on its own, so the mask is 1
// exactly on the assistant content tokens and their closing <|im_end|>.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"
#include "tokenizer.h"

typedef struct {
    int *ids;
    uint8_t *mask;          // 1: the loss trains this token
    size_t n, cap, mask_cap;
} SftExample;

enum { SFT_BAD_RECORD = -1, SFT_BOUNDARY_MERGE = -2 };

// Parses, renders and tokenizes one line into ex (reset first). where names
// the line ("file:line") in errors. Returns 0, SFT_BAD_RECORD for a line the
// user must fix (malformed JSON, no "messages", unknown role, empty assistant
// turn, no assistant turn, invalid UTF-8), or SFT_BOUNDARY_MERGE when the
// per-segment ids differ from the ids of the whole rendered text: a segment
// boundary merged tokens, so no mask would be right. The template puts
// boundaries at special tokens and newlines, so that only happens when a
// reply itself starts with a newline after the "assistant\n" header (or on a
// template/tokenizer bug, then on every line).
int sft_encode_line(const Tokenizer *tok, const char *line, size_t len, const char *where, SftExample *ex,
                    PtError *e);
void sft_example_free(SftExample *ex);

typedef enum { SFT_KEEP = 0, SFT_DROPPED = 1, SFT_TRUNCATED = 2 } SftFit;
// --max-len: an example longer than max_len (0 = no limit) is dropped, or
// with truncate cut to its first max_len tokens (dropped anyway when no
// trained token survives the cut).
SftFit sft_fit(SftExample *ex, size_t max_len, int truncate);
