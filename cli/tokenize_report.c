// tokenize_report.c: progress, skipped records and the summary of `pocket
// tokenize` (tokenize_report.h).
#include "tokenize_report.h"
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

void tokenize_progress_start(TokenizeProgress *p) {
    *p = (TokenizeProgress){.t0 = now_seconds(), .tty = isatty(2)};
    p->last = p->t0;
}

void tokenize_progress_text(char *buf, size_t size, double mb, double seconds, double fraction, uint64_t tokens,
                            uint64_t docs) {
    int n = snprintf(buf, size, "%.1f MB read", mb);
    if (fraction >= 0 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - n, " (%.0f%%)", 100 * (fraction > 1 ? 1 : fraction));
    if (n >= 0 && (size_t)n < size) n += snprintf(buf + n, size - n, ", %.2f MB/s", seconds > 0 ? mb / seconds : 0.0);
    if (fraction > 0 && n >= 0 && (size_t)n < size) {   // the rest at the rate so far
        double left = fraction < 1 ? seconds * (1 - fraction) / fraction : 0;
        n += snprintf(buf + n, size - n, ", ETA %dm%02ds", (int)(left / 60), (int)left % 60);
    }
    if (n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - n, ", %" PRIu64 " tokens, %" PRIu64 " documents", tokens, docs);
}

void tokenize_progress(TokenizeProgress *p, const Corpus *c, const DatasetWriter *w, uint64_t bytes, uint64_t input,
                       int final) {
    double now = now_seconds();
    if (final ? !p->open : now - p->last < (p->tty ? 1.0 : 10.0)) return;
    p->last = now;
    int64_t total = corpus_input_total(c);
    double fraction = total > 0 ? (double)input / (double)total : -1;
    char line[256];
    tokenize_progress_text(line, sizeof line, bytes / 1e6, now - p->t0, fraction,
                           dataset_writer_tokens(w), dataset_writer_docs(w));
    if (p->tty) fprintf(stderr, "\r  %s   %s", line, final ? "\n" : "");
    else fprintf(stderr, "pocket tokenize: %s\n", line);
    p->open = p->tty && !final;
}

void tokenize_skip(TokenizeCounts *n, const PtError *err, TokenizeProgress *p) {
    if (n->skipped == 0) n->first_skip = *err;
    if (n->skipped++ >= TOKENIZE_SKIP_WARNINGS) return;
    fprintf(stderr, "%spocket tokenize: skipped %s\n", p->open ? "\n" : "", err->msg);
    p->open = 0;
}

int tokenize_finish(const TokenizeCounts *n, uint64_t docs, PtError *e) {
    if (n->skipped > TOKENIZE_SKIP_WARNINGS)
        fprintf(stderr, "pocket tokenize: ... %" PRIu64 " bad records skipped in all\n", n->skipped);
    if (docs) return 0;
    if (n->skipped && !n->dropped && !n->empty)
        return pt_fail(e, "every record (%" PRIu64 ") was bad and skipped, so no dataset is written; the first: %s",
                       n->skipped, n->first_skip.msg);
    return pt_fail(e, "no document with any token in the inputs (%" PRIu64 " skipped, %" PRIu64 " dropped, %" PRIu64
                      " empty)", n->skipped, n->dropped, n->empty);
}

void tokenize_summary(const char *out, const char *noun, const char *plural, uint64_t docs, uint64_t tokens,
                      int n_files, double mb, double seconds, int threads, const TokenizeCounts *n, int dedup) {
    printf("pocket tokenize: %s: %" PRIu64 " %s, %" PRIu64 " tokens from %d file%s (%.2f MB in %.2f s, %.2f MB/s, "
           "%d threads); dropped %" PRIu64 ", truncated %" PRIu64 ", skipped %" PRIu64 ", empty %" PRIu64,
           out, docs, docs == 1 ? noun : plural, tokens, n_files, n_files == 1 ? "" : "s", mb, seconds,
           seconds > 0 ? mb / seconds : 0.0, threads, n->dropped, n->truncated, n->skipped, n->empty);
    if (dedup) printf(", duplicates %" PRIu64, n->duplicates);
    putchar('\n');
}
