// choice.h: choice JSONL lines -> token ids for the decision head
// (`pocket tokenize --choice`, `[train] mode = choice`).
//
// A line is {"prompt": "...", "candidates": ["...", ...], "label": 2 | "..."}
// (optionally with "system"), or {"messages": [...], "candidates", "label"}
// with the conversation before the answer (roles system, user, assistant).
// The prompt is rendered with the model's chat template as `pocket generate
// --chat` renders it (the assistant header appended, thinking off) and
// tokenized alone; each candidate is tokenized alone and followed by the
// end-of-turn token (<|im_end|>, else <|endoftext|>, when the tokenizer has
// one), so the prompt's ids are a prefix of every (prompt + candidate) and a
// KV cache of the prompt serves every candidate. The decision head reads the
// last token of each (prompt + candidate).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"
#include "chat.h"
#include "tokenizer.h"

enum { CHOICE_MAX_CANDIDATES = 256 };

typedef struct {
    int *prompt;
    size_t n_prompt;
    int **cand;           // [n_cand] token ids, end-of-turn token included
    size_t *cand_len;
    int n_cand, label;
} ChoiceExample;

// Parses, renders and tokenizes one line into ex (reset first); where names
// the line ("file:line") in errors. Returns 0, or -1 for a line the user must
// fix: malformed JSON, no prompt, candidates missing, fewer than 2, more
// than CHOICE_MAX_CANDIDATES, empty or duplicated; a label that is not one
// of the candidates (an index out of range, or a text none of them is).
int choice_encode_line(const Tokenizer *tok, const ChatTemplate *tmpl, const char *line, size_t len,
                       const char *where, ChoiceExample *ex, PtError *e);
void choice_example_free(ChoiceExample *ex);
// The prompt's rendering alone (pocket choose --prompt): one user message,
// an optional system message before it.
int choice_encode_prompt(const Tokenizer *tok, const ChatTemplate *tmpl, const char *system, const char *user,
                         int **ids, size_t *n, PtError *e);
// One candidate's ids: its text, then the end-of-turn token.
int choice_encode_candidate(const Tokenizer *tok, const char *text, int **ids, size_t *n, PtError *e);
