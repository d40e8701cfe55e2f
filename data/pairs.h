// pairs.h: preference pairs -> token ids for DPO, IPO and SimPO
// (`pocket tokenize --pairs`, `[train] mode = dpo`), tokenized as TRL 1.16.0's
// DPOTrainer tokenizes them, so a dataset made for TRL trains the same here.
//
// A JSON line holds one pair, in one of four forms found from its keys:
//   standard        {"prompt": str, "chosen": str, "rejected": str}: plain text, no chat
//                   template; each response ends with the end-of-sequence token's text
//                   (appended unless it already ends with it)
//   conversational  {"prompt": [messages], "chosen": [messages], "rejected": [messages]}:
//                   the chat template renders the prompt with the generation prompt, and
//                   prompt + response as one conversation; a response holds assistant turns
//   implicit        {"chosen": [messages], "rejected": [messages]} (Anthropic HH style): the
//                   prompt is the longest run of equal leading messages, the responses what
//                   follows; as conversational from there
//   implicit text   {"chosen": str, "rejected": str}: the prompt is the text both start
//                   with, up to the first differing character (one space before it left to
//                   the responses); as standard from there
// Messages are {"role": "system"|"user"|"assistant", "content": str}, a system
// message first only.
//
// Tokens: the prompt alone and each prompt + response are tokenized whole
// (the conversational forms: rendered first); the prompt is the tokens the
// prompt alone shares with both (a template that renders the prompt alone
// otherwise, or a token merged across the edge, moves the response's start
// back to where they part), and the documents are prompt + chosen and prompt
// + rejected, the mask 1 on every token after the prompt: the response, and
// for a chat template what it writes around the reply (Qwen3's empty think
// block, <|im_end|> and the newline after it).
//
// Dropped (counted by reason, dataset.h's PairDropReason), where TRL would
// train on nonsense or on nothing: chosen equal to rejected (as tokens, after
// any truncation); an implicit pair whose two lists part before their last
// assistant turns, or share no leading message or character, or one of which
// is a prefix of the other; a response with no token past the prompt; a pair
// longer than --max-len (TRL's max_length: per sequence), or with --truncate
// (TRL's keep_start) one whose prompt alone fills it.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"
#include "chat.h"
#include "dataset.h"
#include "tokenizer.h"

enum { PAIR_KEPT = -1 };   // pair_encode_line's and pair_fit's *drop when the pair stays

typedef struct {
    const Tokenizer *tok;
    const ChatTemplate *tmpl;   // the conversational forms
    const char *eos;            // the standard forms' end token (pair_eos_token); NULL: none
} PairCoder;

typedef struct {
    int *ids[2];        // prompt + chosen, prompt + rejected
    size_t n[2], cap[2];
    size_t n_prompt;    // the leading tokens both share as the prompt (mask 0)
    int *prompt;        // the prompt tokenized alone
    size_t prompt_n, prompt_cap;
} PairExample;

// The end-of-sequence text a plain-text response ends with, as TRL takes the
// tokenizer's eos_token: tokenizer_config.json's, else <|im_end|> or
// <|endoftext|> when the tokenizer has it; NULL when none.
const char *pair_eos_token(const Tokenizer *tok, const ChatTemplate *tmpl);

// Parses, renders and tokenizes one line into ex. Returns -1 for a record the
// user must fix (malformed JSON, invalid UTF-8, no "chosen" or "rejected",
// wrong types, a role other than system, user or assistant, a late system
// message, a response turn that is not the assistant's, keys TRL reads that
// pocket does not apply: "tools", "chat_template_kwargs", "images"); else 0,
// with *drop PAIR_KEPT or the PairDropReason it is left out for (why says why).
int pair_encode_line(const PairCoder *c, const char *line, size_t len, const char *where, PairExample *ex, int *drop,
                     PtError *e);
// --max-len (0: none) and --truncate, then the equality check: PAIR_KEPT or a
// reason (why set); *truncated when a document was cut.
int pair_fit(PairExample *ex, size_t max_len, int truncate, const char *where, int *truncated, PtError *why);
// Appends the pair's two documents with their masks.
int pair_write(DatasetWriter *w, const PairExample *ex, PtError *e);
void pair_example_free(PairExample *ex);
