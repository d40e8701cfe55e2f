// csv.c: RFC 4180 rows (csv.h): one state machine cuts rows and splits fields.
#include "csv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../util/util.h"

enum { FIELD_START, UNQUOTED, QUOTED, QUOTE_SEEN };

// The state after byte c; a quote opens a quoted field only at its start.
static int step(int state, char c, char sep) {
    switch (state) {
    case FIELD_START: return c == '"' ? QUOTED : c == sep ? FIELD_START : UNQUOTED;
    case UNQUOTED: return c == sep ? FIELD_START : UNQUOTED;
    case QUOTED: return c == '"' ? QUOTE_SEEN : QUOTED;
    default: return c == '"' ? QUOTED : c == sep ? FIELD_START : UNQUOTED;   // QUOTE_SEEN: "" or the end of the quotes
    }
}

int csv_scan_row(CsvScan *sc, const char *s, size_t n, char sep, size_t *end) {
    for (; sc->at < n; sc->at++) {
        char c = s[sc->at];
        if (c == '\n') {
            if (sc->state != QUOTED) {
                *end = sc->at;
                return 1;
            }
            sc->newlines++;
        }
        sc->state = step(sc->state, c, sep);
    }
    return 0;
}

void csv_row_free(CsvRow *row) {
    free(row->field);
    free(row->len);
    free(row->buf);
    memset(row, 0, sizeof *row);
}

static void end_field(CsvRow *row, char *start, char **o) {
    if (row->n == row->cap) {
        row->cap = row->cap ? 2 * row->cap : 8;
        row->field = realloc(row->field, (size_t)row->cap * sizeof *row->field);
        row->len = realloc(row->len, (size_t)row->cap * sizeof *row->len);
        if (!row->field || !row->len) die("out of memory splitting a CSV row");
    }
    row->field[row->n] = start;
    row->len[row->n++] = (size_t)(*o - start);
    *(*o)++ = 0;
}

int csv_split(const char *s, size_t n, char sep, CsvRow *row, char *err, size_t err_size) {
    row->n = 0;
    free(row->buf);
    row->buf = xmalloc(2 * n + 2, "CSV row");   // every byte, and a NUL per field (at most n + 1 fields)
    char *o = row->buf, *start = o;
    int state = FIELD_START;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int next = step(state, c, sep);
        if (state == QUOTE_SEEN && next == UNQUOTED) {
            snprintf(err, err_size, "field %d: text after its closing quote (quote the whole field and double the "
                                    "quotes inside it)", row->n + 1);
            return -1;
        }
        if (next == FIELD_START) {
            end_field(row, start, &o);
            start = o;
        } else if (!(state == FIELD_START && next == QUOTED) && !(state == QUOTED && next == QUOTE_SEEN)) {
            *o++ = c;   // not an opening quote, nor the first quote of a pair or the closing one
        }
        state = next;
    }
    if (state == QUOTED) {
        snprintf(err, err_size, "field %d: a quoted field is never closed", row->n + 1);
        return -1;
    }
    end_field(row, start, &o);
    return 0;
}
