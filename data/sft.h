// sft.h: SFT records -> token ids + loss mask for supervised fine-tuning.
//
// A record in any format data/sft_formats.h reads becomes chat messages:
// system (first only), user and assistant turns, at least one assistant turn,
// none empty. They are rendered with the model's chat template (data/chat.h)
// and tokenized as one text; the mask is 1 on the tokens of the assistant
// replies and the end-of-turn token after each. Every format takes this one
// path after its reader.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"
#include "chat.h"
#include "corpus.h"
#include "sft_formats.h"
#include "tokenizer.h"

typedef struct {
    int *ids;
    uint8_t *mask;          // 1: the loss trains this token
    size_t n, cap, mask_cap;
} SftExample;

enum { SFT_BAD_RECORD = -1, SFT_BOUNDARY_MERGE = -2 };

// Checks, renders (with tmpl) and tokenizes messages into ex (reset first).
// where names the record ("file:line") in errors. Returns 0, SFT_BAD_RECORD
// for messages the user must fix (unknown role, empty assistant turn, no
// assistant turn, a late system turn, the template's own error), or
// SFT_BOUNDARY_MERGE when a token of the whole rendered text covers both the
// template's text and a trained span (chat.h's chat_train_bytes), so no mask
// is right for it.
int sft_encode_messages(const Tokenizer *tok, const ChatTemplate *tmpl, const ChatMessage *msgs, int n_msgs,
                        const char *where, SftExample *ex, PtError *e);
// One record as `pocket tokenize --chat` reads it: sft_read_messages (format
// AUTO: found), then sft_encode_messages; a reader's error is SFT_BAD_RECORD.
// *found: the record's format (sft_format_guard's input).
int sft_encode_record(const Tokenizer *tok, const ChatTemplate *tmpl, const CorpusRecord *rec, SftFormat format,
                      const SftColumns *cols, const char *where, SftExample *ex, SftFormat *found, PtError *e);
// One JSON line of any JSON format, found from its keys.
int sft_encode_line(const Tokenizer *tok, const ChatTemplate *tmpl, const char *line, size_t len, const char *where,
                    SftExample *ex, PtError *e);
void sft_example_free(SftExample *ex);

typedef enum { SFT_KEEP = 0, SFT_DROPPED = 1, SFT_TRUNCATED = 2 } SftFit;
// --max-len: an example longer than max_len (0 = no limit) is dropped, or
// with truncate cut to its first max_len tokens (dropped anyway when no
// trained token survives the cut).
SftFit sft_fit(SftExample *ex, size_t max_len, int truncate);
