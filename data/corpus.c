// corpus.c: input files (txt, jsonl, gzip) as a stream of records.
#include "corpus.h"
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include <zlib.h>
#include "csv.h"

enum { READ_CHUNK = 1 << 20, MAX_DIR_DEPTH = 64 };

struct Corpus {
    char **files;
    int n_files, cap_files;
    int tables;             // corpus_open_chat: .csv and .tsv files too
    char force_sep;         // every file is a table with this separator (0: by the name)
    char **headers;         // per file: a table's header row, once read
    size_t *header_len;
    uint64_t *header_line;
    int next_file;          // index of the next file to open
    int cur;                // index of the open file, -1 when none
    gzFile gz;
    CorpusFormat format;
    int is_gz;
    uint64_t line;          // lines consumed in the open JSONL file
    char *buf;              // JSONL read buffer: unread bytes are buf[pos, len)
    size_t len, pos, cap;
    int eof;
    uint64_t bytes;
    int64_t *sizes;         // per file as stored, for progress (-1: not a regular file)
    int64_t total;          // their sum, -1 when one is unknown
};

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

// -1 when the name is not an input type we read.
static int format_of(const char *name, int *is_gz) {
    *is_gz = ends_with(name, ".gz");
    if (ends_with(name, ".txt") || ends_with(name, ".txt.gz")) return CORPUS_TXT;
    if (ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz")) return CORPUS_JSONL;
    if (ends_with(name, ".csv") || ends_with(name, ".csv.gz")) return CORPUS_CSV;
    if (ends_with(name, ".tsv") || ends_with(name, ".tsv.gz")) return CORPUS_TSV;
    return -1;
}

static int usable(const Corpus *c, int format) { return format >= 0 && (c->tables || format <= CORPUS_JSONL); }

static void add_file(Corpus *c, const char *path) {
    if (c->n_files == c->cap_files) {
        c->cap_files = c->cap_files ? 2 * c->cap_files : 16;
        char **grown = realloc(c->files, c->cap_files * sizeof *grown);
        if (!grown) die("out of memory growing the file list");
        c->files = grown;
    }
    c->files[c->n_files++] = xstrdup(path);
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Adds the usable files under dir, recursively, in byte-wise sorted order.
static int walk_dir(Corpus *c, const char *dir, int depth, PtError *e) {
    if (depth > MAX_DIR_DEPTH) return pt_fail(e, "%s: directories nested deeper than %d (a symlink loop?)", dir, MAX_DIR_DEPTH);
    DIR *d = opendir(dir);
    if (!d) return pt_fail(e, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;   // ".", "..", hidden files
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **grown = realloc(names, cap * sizeof *grown);
            if (!grown) die("out of memory listing %s", dir);
            names = grown;
        }
        names[n++] = xstrdup(ent->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char *path = path_join(dir, names[i]);
        int gz;
        if (!rc && path_is_dir(path)) rc = walk_dir(c, path, depth + 1, e);
        else if (!rc && usable(c, format_of(names[i], &gz))) add_file(c, path);
        free(path);
        free(names[i]);
    }
    free(names);
    return rc;
}

void corpus_close(Corpus *c) {
    if (!c) return;
    if (c->gz) gzclose_r(c->gz);
    for (int i = 0; i < c->n_files; i++) free(c->files[i]), free(c->headers ? c->headers[i] : NULL);
    free(c->files);
    free(c->headers);
    free(c->header_len);
    free(c->header_line);
    free(c->sizes);
    free(c->buf);
    free(c);
}

static int open_inputs(Corpus **out, char *const *inputs, int n_inputs, int tables, char force_sep, PtError *e) {
    if (n_inputs <= 0) return pt_fail(e, "no input files given");
    Corpus *c = xcalloc(1, sizeof *c, "corpus");
    c->cur = -1;
    c->tables = tables;
    c->force_sep = force_sep;
    const char *types = tables ? ".txt, .jsonl, .csv, .tsv or their .gz" : ".txt, .jsonl, .txt.gz or .jsonl.gz";
    for (int i = 0; i < n_inputs; i++) {
        const char *in = inputs[i];
        int gz, before = c->n_files;
        if (!path_exists(in)) {
            corpus_close(c);
            return pt_fail(e, "%s: no such file or directory", in);
        }
        if (path_is_dir(in)) {
            if (walk_dir(c, in, 0, e)) {
                corpus_close(c);
                return -1;
            }
            if (c->n_files == before) {
                corpus_close(c);
                return pt_fail(e, "%s: directory holds no %s file", in, types);
            }
        } else if (!force_sep && !usable(c, format_of(in, &gz))) {
            corpus_close(c);
            if (format_of(in, &gz) >= 0)
                return pt_fail(e, "%s: a table of prompts and completions is SFT data: tokenize it with --chat", in);
            return pt_fail(e, "%s: unknown input type (want %s)", in, types);
        } else {
            add_file(c, in);
        }
    }
    c->headers = xcalloc((size_t)c->n_files, sizeof *c->headers, "table headers");
    c->header_len = xcalloc((size_t)c->n_files, sizeof *c->header_len, "table headers");
    c->header_line = xcalloc((size_t)c->n_files, sizeof *c->header_line, "table headers");
    c->sizes = xcalloc((size_t)c->n_files, sizeof *c->sizes, "file sizes");
    for (int i = 0; i < c->n_files; i++) {
        c->sizes[i] = file_size(c->files[i]);
        c->total = c->sizes[i] < 0 || c->total < 0 ? -1 : c->total + c->sizes[i];
    }
    *out = c;
    return 0;
}

int corpus_open(Corpus **out, char *const *inputs, int n_inputs, PtError *e) {
    return open_inputs(out, inputs, n_inputs, 0, 0, e);
}

int corpus_open_chat(Corpus **out, char *const *inputs, int n_inputs, char table, PtError *e) {
    return open_inputs(out, inputs, n_inputs, 1, table, e);
}

int corpus_n_files(const Corpus *c) { return c->n_files; }
uint64_t corpus_bytes_read(const Corpus *c) { return c->bytes; }
int64_t corpus_input_total(const Corpus *c) { return c->total; }

uint64_t corpus_input_done(const Corpus *c) {
    uint64_t done = 0;
    int finished = c->gz ? c->cur : c->next_file;   // the open file counts up to where zlib has read
    for (int i = 0; i < finished; i++) done += c->sizes[i] > 0 ? (uint64_t)c->sizes[i] : 0;
    if (c->gz) {
        z_off_t at = gzoffset(c->gz);
        done += at > 0 ? (uint64_t)at : 0;
    }
    return done;
}

// Reads up to n bytes; 0 at a clean end of stream. A truncated or corrupt
// gzip stream is an error (zlib reports it as a short read plus an error).
static int read_some(Corpus *c, char *dst, size_t n, size_t *got, PtError *e) {
    const char *file = c->files[c->cur];
    int r = gzread(c->gz, dst, (unsigned)(n > READ_CHUNK ? READ_CHUNK : n));
    int err = Z_OK;
    const char *msg = gzerror(c->gz, &err);
    if (r < 0 || (err != Z_OK && err != Z_STREAM_END)) {
        if (err == Z_BUF_ERROR) return pt_fail(e, "%s: truncated gzip stream (unexpected end of file)", file);
        if (err == Z_ERRNO) return pt_fail(e, "%s: read error: %s", file, strerror(errno));
        // zlib's message starts with the path it was opened with.
        size_t n = strlen(file);
        if (msg && !strncmp(msg, file, n) && !strncmp(msg + n, ": ", 2)) msg += n + 2;
        return pt_fail(e, "%s: corrupt gzip stream: %s", file, msg ? msg : "zlib error");
    }
    if (c->is_gz && r > 0 && gzdirect(c->gz)) return pt_fail(e, "%s: not gzip-compressed data despite the .gz name", file);
    *got = (size_t)r;
    c->bytes += (uint64_t)r;
    return 0;
}

static int open_next_file(Corpus *c, PtError *e) {
    if (c->gz) gzclose_r(c->gz);
    c->gz = NULL;
    c->cur = c->next_file++;
    const char *file = c->files[c->cur];
    c->format = (CorpusFormat)format_of(file, &c->is_gz);
    if (c->force_sep) c->format = c->force_sep == ',' ? CORPUS_CSV : CORPUS_TSV;
    c->gz = gzopen(file, "rb");
    if (!c->gz) return pt_fail(e, "%s: cannot open: %s", file, errno ? strerror(errno) : "out of memory");
    gzbuffer(c->gz, 1 << 17);
    c->line = 0;
    c->len = c->pos = 0;
    c->eof = 0;
    return 0;
}

static int read_whole(Corpus *c, CorpusRecord *rec, PtError *e) {
    size_t len = 0, cap = 1 << 16;
    char *data = xmalloc(cap + 1, "document");
    for (;;) {
        if (len == cap) {
            cap *= 2;
            char *grown = realloc(data, cap + 1);
            if (!grown) die("out of memory reading %s", c->files[c->cur]);
            data = grown;
        }
        size_t got;
        if (read_some(c, data + len, cap - len, &got, e)) {
            free(data);
            return -1;
        }
        if (got == 0) break;
        len += got;
    }
    data[len] = 0;
    *rec = (CorpusRecord){.data = data, .len = len, .file = c->files[c->cur], .format = CORPUS_TXT};
    return 0;
}

static int all_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

// The end of the record at c->pos: 1 with *end (its newline), or 0 when
// the buffer holds no end yet. A table's row may hold quoted newlines.
static int record_end(Corpus *c, CsvScan *sc, size_t *end) {
    if (!c->buf) return 0;   // nothing read yet (and no pointer to offset)
    if (c->format == CORPUS_JSONL) {
        char *nl = c->len > c->pos + sc->at ? memchr(c->buf + c->pos + sc->at, '\n', c->len - c->pos - sc->at) : NULL;
        sc->at = c->len - c->pos;   // bytes before this hold no newline
        if (nl) *end = (size_t)(nl - c->buf);
        return nl != NULL;
    }
    if (!csv_scan_row(sc, c->buf + c->pos, c->len - c->pos, c->format == CORPUS_CSV ? ',' : '\t', end)) return 0;
    *end += c->pos;
    return 1;
}

// Next non-blank line of the open JSONL file, or row of the open table (its
// first is the header, kept): 1 found, 0 end of file.
static int read_line(Corpus *c, CorpusRecord *rec, PtError *e) {
    CsvScan sc = {0};
    for (;;) {
        size_t end;
        int found = record_end(c, &sc, &end);
        if (found || (c->eof && c->len > c->pos)) {
            if (!found) end = c->len;
            size_t start = c->pos, n = end - start;
            if (c->line == 0 && c->format >= CORPUS_CSV && n >= 3 && !memcmp(c->buf + start, "\xef\xbb\xbf", 3))
                start += 3, n -= 3;   // a UTF-8 byte order mark, as spreadsheets write it
            c->pos = found ? end + 1 : end;
            uint64_t first_line = ++c->line;
            c->line += sc.newlines;
            sc = (CsvScan){0};
            if (n && c->buf[start + n - 1] == '\r') n--;
            if (all_blank(c->buf + start, n)) continue;
            char *data = xmalloc(n + 1, "line");
            memcpy(data, c->buf + start, n);
            data[n] = 0;
            if (c->format >= CORPUS_CSV && !c->headers[c->cur]) {
                c->headers[c->cur] = data;
                c->header_len[c->cur] = n;
                c->header_line[c->cur] = first_line;
                continue;
            }
            *rec = (CorpusRecord){data, n, c->files[c->cur], first_line, c->format, c->headers[c->cur],
                                  c->header_len[c->cur], c->header_line[c->cur]};
            return 1;
        }
        if (c->eof) return 0;
        // Keep the unread tail, then read more behind it.
        if (c->len > c->pos) memmove(c->buf, c->buf + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
        if (c->cap - c->len < READ_CHUNK) {
            c->cap = c->cap ? 2 * c->cap : 2 * READ_CHUNK;
            char *grown = realloc(c->buf, c->cap);
            if (!grown) die("out of memory reading %s", c->files[c->cur]);
            c->buf = grown;
        }
        size_t got;
        if (read_some(c, c->buf + c->len, c->cap - c->len, &got, e)) return -1;
        if (got == 0) c->eof = 1;
        c->len += got;
    }
}

int corpus_next(Corpus *c, CorpusRecord *rec, PtError *e) {
    for (;;) {
        if (c->cur < 0 || !c->gz) {
            if (c->next_file >= c->n_files) return 0;
            if (open_next_file(c, e)) return -1;
        }
        if (c->format == CORPUS_TXT) {
            int rc = read_whole(c, rec, e);
            gzclose_r(c->gz);
            c->gz = NULL;
            return rc ? -1 : 1;
        }
        int rc = read_line(c, rec, e);
        if (rc != 0) return rc;
        gzclose_r(c->gz);
        c->gz = NULL;
    }
}

int utf8_valid(const char *str, size_t n, size_t *bad_offset) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) { i++; continue; }
        size_t need;
        uint32_t cp, min;
        if ((b & 0xe0) == 0xc0) { need = 1; cp = b & 0x1f; min = 0x80; }
        else if ((b & 0xf0) == 0xe0) { need = 2; cp = b & 0x0f; min = 0x800; }
        else if ((b & 0xf8) == 0xf0) { need = 3; cp = b & 0x07; min = 0x10000; }
        else { *bad_offset = i; return 0; }
        if (i + need >= n) { *bad_offset = i; return 0; }   // sequence cut off by the end
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80) { *bad_offset = i; return 0; }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) { *bad_offset = i; return 0; }
        i += need + 1;
    }
    return 1;
}

const char *corpus_where(const CorpusRecord *rec, char *buf, size_t size) {
    if (rec->format != CORPUS_TXT) snprintf(buf, size, "%s:%" PRIu64, rec->file, rec->line);
    else snprintf(buf, size, "%s", rec->file);
    return buf;
}

int corpus_record_text(const CorpusRecord *rec, char **text, size_t *len, PtError *e) {
    size_t bad;
    if (rec->format == CORPUS_TXT) {
        if (!utf8_valid(rec->data, rec->len, &bad))
            return pt_fail(e, "%s: invalid UTF-8 at byte offset %zu", rec->file, bad);
        *text = xmalloc(rec->len + 1, "text");
        memcpy(*text, rec->data, rec->len + 1);
        *len = rec->len;
        return 0;
    }
    if (!utf8_valid(rec->data, rec->len, &bad))
        return pt_fail(e, "%s:%" PRIu64 ": invalid UTF-8 at byte %zu of the line", rec->file, rec->line, bad);
    json_error_t jerr;
    json_t *root = json_loadb(rec->data, rec->len, JSON_ALLOW_NUL, &jerr);
    if (!root)
        return pt_fail(e, "%s:%" PRIu64 ": malformed JSON: %s (column %d)", rec->file, rec->line, jerr.text,
                       jerr.column);
    json_t *t = json_is_object(root) ? json_object_get(root, "text") : NULL;
    if (!json_is_string(t)) {
        json_decref(root);
        return pt_fail(e, "%s:%" PRIu64 ": no \"text\" string in this line", rec->file, rec->line);
    }
    *len = json_string_length(t);
    *text = xmalloc(*len + 1, "text");
    memcpy(*text, json_string_value(t), *len);
    (*text)[*len] = 0;
    json_decref(root);
    return 0;
}
