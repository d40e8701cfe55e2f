// vocab_stats.h: what a vocabulary pruning measures on text (`pocket
// prune-vocab`): how often the tokenizer uses each token on a corpus, and on
// held-out texts the tokens per character per script before and after, and
// how many texts keep their token sequence.
//
// Documents are read in blocks on the calling thread and encoded in parallel;
// counts are integer sums and the report's figures are summed per text in
// input order, so nothing depends on the thread count.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "vocab_prune.h"

typedef struct {
    char **text;
    size_t *len;
    size_t n, cap;
} TextList;
void text_list_free(TextList *l);

typedef struct {
    uint64_t docs, tokens, bytes;   // documents counted, their tokens and text bytes
    uint64_t held;                  // documents held out
    int files;
} CountStats;

// Reads the inputs (data/corpus.h: .txt, .jsonl, their .gz, directories) and
// adds each id's uses over the documents' encodings to counts (one per id of
// tok). holdout > 0: document i with i % holdout == holdout / 2 is held out:
// appended to *held (when not NULL) instead of counted; holdout 1 holds out
// every document (reading held-out files). progress: a line now and then
// (NULL: quiet). Errors name the file and place (invalid UTF-8 included), in
// input order.
int vocab_count_corpus(const Tokenizer *tok, char *const *inputs, int n_inputs, int threads, int holdout,
                       uint64_t *counts, TextList *held, CountStats *st, FILE *progress, PtError *e);

// Scripts of the report: Han (CJK radicals U+2E80-2FDF, U+3005, U+3007,
// U+3021-3029, U+3038-303B, the ideographs U+3400-4DBF, U+4E00-9FFF,
// U+F900-FAFF, U+20000-3FFFF), Latin (A-Z, a-z, U+00AA, U+00BA, the letters of
// U+00C0-02AF but U+00D7 and U+00F7, U+1E00-1EFF, U+2C60-2C7F, U+A720-A7FF,
// U+AB30-AB6F, U+FB00-FB06, fullwidth U+FF21-FF3A, U+FF41-FF5A), other
// (digits, spaces, punctuation, every other script); and all of them.
enum { SCRIPT_HAN, SCRIPT_LATIN, SCRIPT_OTHER, SCRIPT_ALL, N_SCRIPTS };
typedef struct {
    double chars[N_SCRIPTS];
    // Tokens per script: each token counts in each script by the share of its
    // bytes that belong to that script's characters.
    double tokens_old[N_SCRIPTS], tokens_new[N_SCRIPTS];
    uint64_t texts;
    uint64_t same;   // texts whose new ids are their old ids mapped through the plan
} PruneReport;

// Encodes every held-out text with the old and the new tokenizer.
int vocab_report(const Tokenizer *old_tok, const Tokenizer *new_tok, const VocabPlan *p, const TextList *held,
                 int threads, PruneReport *r, PtError *e);
// The report as a Markdown table, and the same-sequence share.
void vocab_report_print(const PruneReport *r, FILE *f);
// The script class of a code point (SCRIPT_HAN, SCRIPT_LATIN or SCRIPT_OTHER).
int vocab_script_of(uint32_t cp);
