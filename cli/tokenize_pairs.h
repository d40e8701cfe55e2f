// tokenize_pairs.h: `pocket tokenize --pairs`: preference pair JSONL files
// (data/pairs.h's forms) -> a pairs token dataset (data/dataset.h).
#pragma once
#include <stddef.h>
#include "../data/chat.h"
#include "../data/tokenizer.h"

typedef struct {
    char *const *inputs;
    int n_inputs;
    const char *out;
    size_t max_len;    // 0: no limit
    int truncate, skip_bad, threads;
} PairsOptions;

// 0 when the dataset was written; 1 after one error line on stderr, with
// nothing written.
int tokenize_pairs(const PairsOptions *o, const Tokenizer *tok, const ChatTemplate *tmpl);
