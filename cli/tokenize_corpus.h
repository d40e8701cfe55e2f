// tokenize_corpus.h: `pocket tokenize` of a pre-training corpus (no --chat or
// --choice): every document's text tokenized and ended by <|endoftext|>.
//
// Streaming: records are read in blocks of a few MB and written out as soon as
// they are tokenized, so memory holds three blocks (one being read, one being
// tokenized, one being written) plus the largest single document (a .txt file
// is one document, read whole), whatever the corpus's size; --dedup adds 32
// bytes per distinct document. Reading and writing run on one thread while the
// others tokenize, and documents are written in input order: the output is
// byte-identical for any thread count.
#pragma once
#include "../data/tokenizer.h"

typedef struct {
    const char *tokenizer;   // its path, for messages
    const char *out;
    char **inputs;
    int n_inputs;
    int threads;             // 0: OMP_NUM_THREADS or all cores
    int skip_bad;            // skip and count bad records instead of stopping
    int dedup;               // drop exact repeats of an earlier document (by content hash), counted
} CorpusArgs;

// 0, or 1 after one error line on stderr (nothing written).
int tokenize_corpus(const CorpusArgs *a, const Tokenizer *tok);
