// corpus.h: reads the inputs of `pocket tokenize` as a stream of records.
//
// Inputs are files or directories. A directory is walked recursively in
// byte-wise sorted order and contributes its .txt, .jsonl, .txt.gz and
// .jsonl.gz files (others and dot-files are ignored). A .txt file is one
// record (one document); a .jsonl file gives one record per non-blank line.
// .gz files are decompressed with zlib; a truncated or corrupt stream is an
// error naming the file. corpus_open_chat also reads tables for SFT: .csv and
// .tsv (and .gz) files give one record per row (data/csv.h) after the header
// row, which every record of the file carries.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"

typedef enum { CORPUS_TXT = 0, CORPUS_JSONL = 1, CORPUS_CSV = 2, CORPUS_TSV = 3 } CorpusFormat;

typedef struct {
    char *data;            // the record's bytes, NUL-terminated, malloc'd: the caller frees it
    size_t len;
    const char *file;      // the input file (valid until corpus_close)
    uint64_t line;         // 1-based line of a JSONL record or the first line of a row; 0 for a .txt file
    CorpusFormat format;
    const char *header;    // a table's header row (valid until corpus_close), without a UTF-8 BOM
    size_t header_len;
    uint64_t header_line;
} CorpusRecord;

typedef struct Corpus Corpus;

// Expands the inputs into the file list. Errors: a missing input, a file of
// an unknown type, a directory with no usable file.
int corpus_open(Corpus **out, char *const *inputs, int n_inputs, PtError *e);
// The same, for SFT: directories also give .csv and .tsv files (and .gz);
// table = ',' or '\t' reads every input as a table with that separator,
// whatever its name (0: by the name).
int corpus_open_chat(Corpus **out, char *const *inputs, int n_inputs, char table, PtError *e);
// 1: *rec holds the next record; 0: end of the inputs; -1: error (e).
int corpus_next(Corpus *c, CorpusRecord *rec, PtError *e);
uint64_t corpus_bytes_read(const Corpus *c);   // decompressed bytes so far (progress)
// How far reading has got through the input files as they are stored
// (compressed bytes for .gz), and their total size, for an ETA; the total is
// -1 when an input is not a regular file (a pipe).
uint64_t corpus_input_done(const Corpus *c);
int64_t corpus_input_total(const Corpus *c);
int corpus_n_files(const Corpus *c);
void corpus_close(Corpus *c);

// 1 when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points
// above U+10FFFF); otherwise 0 and *bad_offset is the first bad byte.
int utf8_valid(const char *s, size_t n, size_t *bad_offset);

// "FILE" for a .txt record, "FILE:LINE" for a JSONL record or a row, into buf.
const char *corpus_where(const CorpusRecord *rec, char *buf, size_t size);

// The text of a pre-training record: a .txt file's bytes, or the "text"
// string of a JSONL line (malloc'd, *len bytes, NUL-terminated). Errors name
// the file and byte offset (.txt) or file:line (JSONL): invalid UTF-8,
// malformed JSON, no string "text" field.
int corpus_record_text(const CorpusRecord *rec, char **text, size_t *len, PtError *e);
