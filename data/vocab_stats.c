// vocab_stats.c: token counts on a corpus and the held-out report of a
// vocabulary pruning (vocab_stats.h).
#include "vocab_stats.h"
#include <inttypes.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>
#include "corpus.h"

enum { BLOCK_RECORDS = 1024, BLOCK_BYTES = 8 << 20 };

void text_list_free(TextList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->text[i]);
    free(l->text);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static void text_list_add(TextList *l, char *text, size_t len) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        char **t = realloc(l->text, l->cap * sizeof *t);
        size_t *n = realloc(l->len, l->cap * sizeof *n);
        if (!t || !n) die("out of memory holding held-out texts");
        l->text = t, l->len = n;
    }
    l->text[l->n] = text;
    l->len[l->n++] = len;
}

// ---- counting ---------------------------------------------------------------------

typedef struct {
    CorpusRecord rec;
    char *text;
    size_t len, n_ids;
    int held, bad;
    PtError err;
} Doc;

// One document: its text, and unless held out its ids counted into counts.
static void count_doc(const Tokenizer *tok, Doc *d, uint64_t *counts, int **ids, size_t *cap) {
    d->n_ids = 0;
    if (corpus_record_text(&d->rec, &d->text, &d->len, &d->err)) {
        d->bad = 1;
        return;
    }
    if (d->held) return;
    PtError te;
    size_t n = 0;
    if (tokenizer_encode(tok, d->text, d->len, ids, &n, cap, &te)) {
        char where[1100];
        pt_fail(&d->err, "%s: %s", corpus_where(&d->rec, where, sizeof where), te.msg);
        d->bad = 1;
        return;
    }
    for (size_t i = 0; i < n; i++) counts[(*ids)[i]]++;
    d->n_ids = n;
}

static void show_progress(FILE *f, const Corpus *c, const CountStats *st, double t0, int final) {
    double dt = now_seconds() - t0, mb = corpus_bytes_read(c) / 1e6;
    fprintf(f, "\r  counting: %.1f MB read, %.2f MB/s, %" PRIu64 " documents, %" PRIu64 " tokens%s", mb,
            dt > 0 ? mb / dt : 0.0, st->docs, st->tokens, final ? "\n" : "");
}

int vocab_count_corpus(const Tokenizer *tok, char *const *inputs, int n_inputs, int threads, int holdout,
                       uint64_t *counts, TextList *held, CountStats *st, FILE *progress, PtError *e) {
    memset(st, 0, sizeof *st);
    Corpus *c;
    if (corpus_open(&c, inputs, n_inputs, e)) return -1;
    st->files = corpus_n_files(c);
    const size_t n_ids = (size_t)tokenizer_vocab_size(tok);
    if (threads <= 0) threads = omp_get_max_threads();
    // Each thread counts into its own row; the rows are summed at the end.
    uint64_t *local = xcalloc((size_t)threads * n_ids, sizeof *local, "token counts");
    Doc *docs = xcalloc(BLOCK_RECORDS, sizeof *docs, "documents");
    uint64_t index = 0;
    int rc = 0, more = 1, tty = progress && isatty(fileno(progress));
    double t0 = now_seconds(), shown = t0;
    while (more && !rc) {
        int n = 0;
        size_t bytes = 0;
        PtError read_err;
        int read_failed = 0;
        while (n < BLOCK_RECORDS && bytes < BLOCK_BYTES) {
            int got = corpus_next(c, &docs[n].rec, &read_err);
            if (got <= 0) {
                read_failed = got < 0;
                more = 0;
                break;
            }
            docs[n].held = holdout > 0 && index % (uint64_t)holdout == (uint64_t)holdout / 2;
            index++;
            bytes += docs[n++].rec.len;
        }
#pragma omp parallel num_threads(threads)
        {
            int *ids = NULL;
            size_t cap = 0;
            uint64_t *mine = local + (size_t)omp_get_thread_num() * n_ids;
#pragma omp for schedule(dynamic, 1)
            for (int i = 0; i < n; i++) count_doc(tok, &docs[i], mine, &ids, &cap);
            free(ids);
        }
        for (int i = 0; i < n; i++) {   // the first error in input order
            Doc *d = &docs[i];
            if (!rc && d->bad) {
                *e = d->err;
                rc = -1;
            } else if (!rc && d->held) {
                if (held) text_list_add(held, d->text, d->len), d->text = NULL;
                st->held++;
            } else if (!rc) {
                st->docs++;
                st->tokens += d->n_ids;
                st->bytes += d->len;
            }
            free(d->text);
            free(d->rec.data);
            memset(d, 0, sizeof *d);
        }
        if (!rc && read_failed) *e = read_err, rc = -1;
        if (tty && now_seconds() - shown > 0.5) show_progress(progress, c, st, t0, 0), shown = now_seconds();
    }
    if (tty && shown > t0) show_progress(progress, c, st, t0, 1);
    for (int t = 0; t < threads; t++)
        for (size_t id = 0; id < n_ids; id++) counts[id] += local[(size_t)t * n_ids + id];
    free(local);
    free(docs);
    corpus_close(c);
    return rc;
}

// ---- the held-out report -------------------------------------------------------------

int vocab_script_of(uint32_t cp) {
    static const uint32_t HAN[][2] = {{0x2E80, 0x2FDF}, {0x3005, 0x3005}, {0x3007, 0x3007}, {0x3021, 0x3029},
                                      {0x3038, 0x303B}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xF900, 0xFAFF},
                                      {0x20000, 0x3FFFF}};
    static const uint32_t LATIN[][2] = {{'A', 'Z'}, {'a', 'z'}, {0xAA, 0xAA}, {0xBA, 0xBA}, {0xC0, 0xD6},
                                        {0xD8, 0xF6}, {0xF8, 0x2AF}, {0x1E00, 0x1EFF}, {0x2C60, 0x2C7F},
                                        {0xA720, 0xA7FF}, {0xAB30, 0xAB6F}, {0xFB00, 0xFB06}, {0xFF21, 0xFF3A},
                                        {0xFF41, 0xFF5A}};
    for (size_t i = 0; i < sizeof HAN / sizeof HAN[0]; i++)
        if (cp >= HAN[i][0] && cp <= HAN[i][1]) return SCRIPT_HAN;
    for (size_t i = 0; i < sizeof LATIN / sizeof LATIN[0]; i++)
        if (cp >= LATIN[i][0] && cp <= LATIN[i][1]) return SCRIPT_LATIN;
    return SCRIPT_OTHER;
}

// The script of every byte of s (a byte of a character takes the character's;
// an invalid byte is a character of its own, other); characters per script.
static void byte_scripts(const uint8_t *s, size_t len, uint8_t *cls, double chars[N_SCRIPTS]) {
    for (size_t i = 0; i < len;) {
        uint32_t cp = s[i];
        size_t n = 1;
        if (s[i] >= 0xC0 && s[i] < 0xF8) {
            n = s[i] < 0xE0 ? 2 : s[i] < 0xF0 ? 3 : 4;
            cp = s[i] & (0x7F >> n);
            for (size_t k = 1; k < n; k++) {
                if (i + k >= len || (s[i + k] & 0xC0) != 0x80) {
                    n = 1, cp = 0xFFFD;
                    break;
                }
                cp = cp << 6 | (s[i + k] & 0x3F);
            }
        }
        int c = s[i] >= 0x80 && n == 1 ? SCRIPT_OTHER : vocab_script_of(cp);
        memset(cls + i, c, n);
        chars[c]++;
        i += n;
    }
}

// Tokens per script of one encoding, whose decoded bytes are buf (cls per byte).
static void token_shares(const Tokenizer *tok, const int *ids, size_t n, const uint8_t *cls, double tokens[N_SCRIPTS]) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        tokenizer_token_bytes(tok, ids[i], &len);
        if (!len) continue;
        int in[3] = {0};
        for (size_t k = 0; k < len; k++) in[cls[at + k]]++;
        for (int c = 0; c < 3; c++) tokens[c] += (double)in[c] / (double)len;
        at += len;
    }
}

typedef struct {
    double chars[N_SCRIPTS], tokens_old[N_SCRIPTS], tokens_new[N_SCRIPTS];
    int same, bad;
    PtError err;
} TextFigures;

static void text_figures(const Tokenizer *old_tok, const Tokenizer *new_tok, const VocabPlan *p, const char *text,
                         size_t len, int **ids, size_t *cap, TextFigures *f) {
    memset(f, 0, sizeof *f);
    size_t n = 0, n_old, n_new;   // the old ids, then the new ones behind them
    if (tokenizer_encode(old_tok, text, len, ids, &n, cap, &f->err)) {
        f->bad = 1;
        return;
    }
    n_old = n;
    if (tokenizer_encode(new_tok, text, len, ids, &n, cap, &f->err)) {
        f->bad = 1;
        return;
    }
    n_new = n - n_old;
    const int *o = *ids, *w = *ids + n_old;
    f->same = n_old == n_new;
    for (size_t i = 0; i < n_old && f->same; i++) f->same = p->new_of_old[o[i]] == w[i];
    // Both decode to the text as the tokenizer saw it (normalized).
    size_t bytes = 0;
    for (size_t i = 0; i < n_old; i++) {
        size_t l;
        tokenizer_token_bytes(old_tok, o[i], &l);
        bytes += l;
    }
    uint8_t *buf = xmalloc(bytes + 1, "decoded text"), *cls = xmalloc(bytes + 1, "scripts");
    size_t at = 0;
    for (size_t i = 0; i < n_old; i++) {
        size_t l;
        const char *s = tokenizer_token_bytes(old_tok, o[i], &l);
        memcpy(buf + at, s, l);
        at += l;
    }
    byte_scripts(buf, bytes, cls, f->chars);
    token_shares(old_tok, o, n_old, cls, f->tokens_old);
    token_shares(new_tok, w, n_new, cls, f->tokens_new);
    free(buf);
    free(cls);
}

int vocab_report(const Tokenizer *old_tok, const Tokenizer *new_tok, const VocabPlan *p, const TextList *held,
                 int threads, PruneReport *r, PtError *e) {
    memset(r, 0, sizeof *r);
    if (threads <= 0) threads = omp_get_max_threads();
    TextFigures *f = xcalloc(held->n ? held->n : 1, sizeof *f, "report");
#pragma omp parallel num_threads(threads)
    {
        int *ids = NULL;
        size_t cap = 0;
#pragma omp for schedule(dynamic, 1)
        for (size_t i = 0; i < held->n; i++) text_figures(old_tok, new_tok, p, held->text[i], held->len[i], &ids, &cap, &f[i]);
        free(ids);
    }
    int rc = 0;
    for (size_t i = 0; i < held->n && !rc; i++) {
        if (f[i].bad) {
            rc = pt_fail(e, "held-out text %zu: %s", i + 1, f[i].err.msg);
            break;
        }
        for (int c = 0; c < SCRIPT_ALL; c++) {
            r->chars[c] += f[i].chars[c];
            r->tokens_old[c] += f[i].tokens_old[c];
            r->tokens_new[c] += f[i].tokens_new[c];
            r->chars[SCRIPT_ALL] += f[i].chars[c];
            r->tokens_old[SCRIPT_ALL] += f[i].tokens_old[c];
            r->tokens_new[SCRIPT_ALL] += f[i].tokens_new[c];
        }
        r->texts++;
        r->same += (uint64_t)f[i].same;
    }
    free(f);
    return rc;
}

void vocab_report_print(const PruneReport *r, FILE *f) {
    static const char *const NAMES[N_SCRIPTS] = {"Han", "Latin", "other", "all"};
    fprintf(f, "| script | characters | tokens/char before | tokens/char after | change |\n");
    fprintf(f, "| --- | ---: | ---: | ---: | ---: |\n");
    for (int c = 0; c < N_SCRIPTS; c++) {
        double n = r->chars[c];
        if (n == 0) {
            fprintf(f, "| %s | 0 | - | - | - |\n", NAMES[c]);
            continue;
        }
        double before = r->tokens_old[c] / n, after = r->tokens_new[c] / n;
        fprintf(f, "| %s | %.0f | %.4f | %.4f | %+.2f%% |\n", NAMES[c], n, before, after,
                before > 0 ? 100.0 * (after / before - 1.0) : 0.0);
    }
    fprintf(f, "\nheld-out texts with the same token sequence (mapped to the new ids): %" PRIu64 " of %" PRIu64
               " (%.1f%%)\n", r->same, r->texts, r->texts ? 100.0 * (double)r->same / (double)r->texts : 0.0);
}
