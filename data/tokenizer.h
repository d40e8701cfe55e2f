// tokenizer.h: byte-level BPE loaded from an HF tokenizer.json, matching HF
// `tokenizers` token for token (added tokens split out first, NFC, the Qwen2
// split regex, GPT-2 byte mapping, rank-ordered merges).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"

typedef struct Tokenizer Tokenizer;

// json: the tokenizer.json bytes (len bytes, need not be NUL-terminated);
// src names the file in error messages.
int tokenizer_load(Tokenizer **out, const char *json, size_t len, const char *src, PtError *e);
int tokenizer_load_file(Tokenizer **out, const char *path, PtError *e);
void tokenizer_free(Tokenizer *tok);

// Appends the ids of text[0..len) to *ids (growing *cap with realloc).
// Invalid UTF-8 is an error naming the byte offset.
int tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int **ids, size_t *n, size_t *cap,
                     PtError *e);
// UTF-8 text of ids (invalid byte sequences become U+FFFD as HF does);
// skip_special drops added tokens flagged special. malloc'd, NUL-terminated.
char *tokenizer_decode(const Tokenizer *tok, const int *ids, size_t n, int skip_special);

int tokenizer_vocab_size(const Tokenizer *tok);          // highest id + 1, added tokens included
int tokenizer_token_id(const Tokenizer *tok, const char *content);   // exact token (added or vocab), -1 if none
// SHA-256 (hex) of the tokenizer.json bytes: datasets record it, the loader compares it.
const char *tokenizer_hash(const Tokenizer *tok);
// The bytes id decodes to (empty for an unknown id); not NUL-terminated.
const char *tokenizer_token_bytes(const Tokenizer *tok, int id, size_t *len);
// Length of the longest special added token s[0..len) starts with, 0 if none.
size_t tokenizer_special_prefix(const Tokenizer *tok, const char *s, size_t len);

// The model's merges in rank order, as tokenizer.json lists them ("#version"
// lines left out): merge i joins the ids left and right into merged.
int tokenizer_n_merges(const Tokenizer *tok);
void tokenizer_merge(const Tokenizer *tok, int i, int *left, int *right, int *merged);
// The model vocab's string for id, in tokenizer.json's byte-level spelling
// ("Ġthe" for " the"), not NUL-terminated; NULL when id is no vocab token
// (an added token the vocab lacks, or an unused id).
const char *tokenizer_vocab_string(const Tokenizer *tok, int id, size_t *len);
// 1 when id is an added token (tokenizer.json's added_tokens).
int tokenizer_is_added(const Tokenizer *tok, int id);
// 1 when id names a token: a vocab token or an added one (not an unused id).
int tokenizer_is_token(const Tokenizer *tok, int id);
// The vocab id of the one-byte token of byte (0..255), -1 when the vocab lacks it.
int tokenizer_byte_id(const Tokenizer *tok, int byte);
// The model's unk token, -1 when it has none.
int tokenizer_unk_id(const Tokenizer *tok);
