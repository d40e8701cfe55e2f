// tokenize_report.h: what `pocket tokenize` tells while and after it runs, for
// every kind of input: the progress line, the records it left out and the
// summary line.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "../data/corpus.h"
#include "../data/dataset.h"

enum { TOKENIZE_SKIP_WARNINGS = 5 };   // bad records reported one by one; the rest counted

// What was left out. skipped: bad records (--skip-bad), the first kept in
// first_skip; duplicates: exact repeats (--dedup).
typedef struct {
    uint64_t dropped, truncated, skipped, empty, duplicates;
    PtError first_skip;
} TokenizeCounts;

// The progress line on stderr: on a terminal every second, rewritten in place
// (carriage return); in a log a line every 10 seconds.
typedef struct {
    double t0, last;
    int tty;
    int open;   // a terminal line without its newline is on the screen
} TokenizeProgress;

void tokenize_progress_start(TokenizeProgress *p);
// Prints when a line is due; final ends the terminal's line. bytes: the
// decompressed input behind what w holds, input: the same place in the
// input files as stored (corpus_input_done), for the share read and the ETA.
void tokenize_progress(TokenizeProgress *p, const Corpus *c, const DatasetWriter *w, uint64_t bytes, uint64_t input,
                       int final);
// The line's text: mb (decompressed input) read in seconds, the fraction of the
// input files read (negative when their size is unknown: no share, no ETA).
void tokenize_progress_text(char *buf, size_t size, double mb, double seconds, double fraction, uint64_t tokens,
                            uint64_t docs);

// Counts a bad record that --skip-bad skips and reports the first few.
void tokenize_skip(TokenizeCounts *n, const PtError *err, TokenizeProgress *p);
// At the end: the count of skips past the reported ones, and the error for a
// run that wrote no document (0 when docs > 0).
int tokenize_finish(const TokenizeCounts *n, uint64_t docs, PtError *e);
// The summary line on stdout: docs documents (noun, plural for several) of
// tokens from n_files files, mb read in seconds, and what was left out
// (duplicates with --dedup).
void tokenize_summary(const char *out, const char *noun, const char *plural, uint64_t docs, uint64_t tokens,
                      int n_files, double mb, double seconds, int threads, const TokenizeCounts *n, int dedup);
