// csv.h: RFC 4180 rows (CSV, and TSV in the same dialect with a tab) for
// `pocket tokenize --chat` tables of prompt and completion columns.
//
// A field is quoted when it starts with '"'; inside, '""' is one quote and
// separators and newlines are text. A quote inside an unquoted field is
// taken as it stands (as Python's csv reads it); text after a closing quote
// is an error. Rows end at a newline outside quotes; the corpus reader
// (data/corpus.c) cuts rows with csv_scan_row and strips a final '\r'.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Where a scan of one row stands, so it can resume when more bytes arrive.
typedef struct {
    size_t at;           // bytes of the row scanned so far
    int state;
    uint64_t newlines;   // newlines inside quoted fields so far
} CsvScan;

// Scans s[0..n) (the row's bytes read so far) from sc->at: 1 and *end =
// the offset of the newline that ends the row, or 0 when s holds no row end
// yet (at the end of the file the row is all of s).
int csv_scan_row(CsvScan *sc, const char *s, size_t n, char sep, size_t *end);

// A row's fields, unquoted and NUL-terminated, in one buffer.
typedef struct {
    char **field;
    size_t *len;
    int n, cap;
    char *buf;
} CsvRow;

// Splits s[0..n) (one row, without its newline). 0, or -1 with why in err.
int csv_split(const char *s, size_t n, char sep, CsvRow *row, char *err, size_t err_size);
void csv_row_free(CsvRow *row);
