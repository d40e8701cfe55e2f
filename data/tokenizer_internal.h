// tokenizer_internal.h: the pieces of the tokenizer shared by its source files
// (tokenizer.c loads and drives, tokenizer_text.c cuts text into pre-tokens,
// tokenizer_bpe.c holds the hash maps and applies merges). Not a public API.
#pragma once
#include <stddef.h>
#include <stdint.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include "tokenizer.h"

// Grows *buf (elements of elem bytes) so that it holds at least need elements.
void tok_grow(void **buf, size_t *cap, size_t need, size_t elem, const char *what);
// tokenizer.json fields (tokenizer.c): an object's "type" ("(no type)" when
// missing), and a boolean field where absent or null gives dflt; the error
// names the file and where.key.
const char *tok_json_type(json_t *obj);
int tok_json_flag(json_t *obj, const char *key, int dflt, int *out, const char *src, const char *where, PtError *e);

// ---- tokenizer_bpe.c: hash maps and merges ------------------------------

// String -> id, open addressing; keys are copied into one arena.
typedef struct {
    uint32_t *slot;         // 1 + entry index, 0 = empty
    uint32_t mask;
    struct StrEntry { size_t off; uint32_t len; uint32_t hash; int32_t id; } *entry;
    uint32_t n, cap_entries;
    char *arena;
    size_t arena_len, arena_cap;
} StrMap;

void strmap_init(StrMap *m, uint32_t expected);
void strmap_free(StrMap *m);
// Inserts or overwrites key -> id.
void strmap_put(StrMap *m, const char *key, size_t len, int32_t id);
int32_t strmap_get(const StrMap *m, const char *key, size_t len);   // -1 if absent

// (left id, right id) -> (rank, merged id), open addressing.
typedef struct {
    struct MergeSlot { uint64_t key; int32_t rank; int32_t merged; } *slot;
    uint64_t mask;
    int shift;
} MergeMap;

void mergemap_init(MergeMap *m, size_t expected);
void mergemap_free(MergeMap *m);
// A pair listed twice takes its later rank, as HF's map build overwrites.
void mergemap_put(MergeMap *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
// Returns the rank (and *merged) or -1 when the pair has no rule.
static inline int32_t mergemap_get(const MergeMap *m, int32_t left, int32_t right, int32_t *merged) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> m->shift;
    for (;; i = (i + 1) & m->mask) {
        const struct MergeSlot *s = &m->slot[i];
        if (s->key == key) {
            *merged = s->merged;
            return s->rank;
        }
        if (s->key == UINT64_MAX) return -1;
    }
}

// Scratch space of one encode call, reused across its words (no per-word malloc).
typedef struct {
    struct BpeSymbol { int32_t id, prev, next; } *sym;
    size_t sym_cap;
    struct BpeCandidate { int32_t rank, pos, left, right, merged; } *heap;
    size_t heap_cap;
    char *text;             // a pre-token in its mapped spelling (ignore_merges)
    size_t text_cap;
    pcre2_match_data *match[16];   // per pre-tokenizer step with a regex
} EncodeScratch;

// ---- the pre-tokenizer steps (tokenizer_pre.c) ----------------------------

// A step splits every piece the step before gave (tokenizer.json's
// pre_tokenizer, a Sequence applied in order); the last pieces go to BPE.
typedef enum { PRE_SPLIT, PRE_DIGITS, PRE_PUNCT, PRE_BYTELEVEL } PreKind;
// HF's SplitDelimiterBehavior: what becomes of a match.
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } SplitBehavior;
typedef struct {
    PreKind kind;
    pcre2_code *re;             // PRE_SPLIT; PRE_BYTELEVEL with use_regex (GPT-2's split)
    SplitBehavior behavior;
    int invert;                 // PRE_SPLIT: the matches are the kept pieces
    int add_prefix_space;       // PRE_BYTELEVEL
} PreStep;
enum { MAX_PRE_STEPS = 16 };
// Normalizer steps, applied in order (utf8proc; tokenizer_text.c).
typedef enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD } NormKind;
enum { MAX_NORM_STEPS = 8 };

// ---- the tokenizer ------------------------------------------------------

// Added tokens searched leftmost-longest: tokens bucketed by first byte,
// longest first within a bucket.
typedef struct {
    int n;
    char **content;
    size_t *len;
    int32_t *id;
    int *order;             // token indices sorted by (first byte, length desc)
    int bucket_start[257];  // order[bucket_start[b] .. bucket_start[b+1]) start with byte b
} AddedMatcher;

struct Tokenizer {
    int n_ids;                  // highest id + 1
    // Per id: the bytes decoding produces, and whether it is a special added token.
    uint8_t *decode_bytes;
    size_t *decode_off;         // n_ids + 1 offsets into decode_bytes; empty for unused ids
    uint8_t *special;           // n_ids flags
    uint8_t *is_added;          // n_ids flags: an added token (added_tokens), in the vocab or not

    StrMap vocab;               // model vocab, keys in tokenizer.json form ("Ġthe")
    StrMap added;               // added-token content -> id
    MergeMap merges;
    int32_t (*merge_list)[3];   // the merges as listed (rank order): left, right, merged
    int n_merges;
    uint32_t *vocab_entry;      // per id: 1 + its vocab.entry index, 0 when id is no vocab token
    int32_t byte_id[256];       // vocab id of the one-byte token, -1 if missing
    uint16_t byte_cp[256];      // GPT-2 byte table (bytes_to_unicode)
    int32_t unk_id;             // -1 when the model has no unk token
    int fuse_unk, ignore_merges;

    AddedMatcher raw_added;     // normalized: false, matched on the raw text
    AddedMatcher norm_added;    // normalized: true, matched after normalization
    NormKind norm[MAX_NORM_STEPS];
    int n_norm;
    PreStep pre[MAX_PRE_STEPS];
    int n_pre;
    char hash[65];
};

// GPT-2 byte <-> code point table (GPT-2's bytes_to_unicode); the tokenizer caches it in byte_cp.
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);   // -1 if cp is not in the table

// BPE on one pre-token's raw bytes; appends ids.
void tok_bpe_word(const Tokenizer *t, const uint8_t *bytes, size_t len, EncodeScratch *s, int **ids, size_t *n,
                  size_t *cap);

// ---- tokenizer_text.c: from text to pre-tokens --------------------------

// Length of the valid UTF-8 prefix; equals len when all is valid.
size_t tok_utf8_valid_prefix(const uint8_t *s, size_t len);
// UTF-8 text of bytes with every maximal invalid subpart replaced by U+FFFD
// (as Rust's from_utf8_lossy); malloc'd, NUL-terminated.
char *tok_utf8_lossy(const uint8_t *bytes, size_t len);

void added_matcher_build(AddedMatcher *m, int n, char **content, const int32_t *id);
void added_matcher_free(AddedMatcher *m);
// Leftmost-longest search in text[from..len): returns the start of the match
// (len if none) and sets *which to the token index.
size_t added_matcher_find(const AddedMatcher *m, const char *text, size_t from, size_t len, int *which);

// The tokenizer's normalizers applied to text; returns NULL when they leave it
// as it is (NFC of NFC text is decided without allocating), else a malloc'd
// normalized copy with its length.
char *tok_normalize(const Tokenizer *t, const char *text, size_t len, size_t *out_len);

// ---- tokenizer_pre.c ------------------------------------------------------

// tokenizer.json's "pre_tokenizer" (null, one step or a Sequence) into t->pre.
int tok_parse_pre_tokenizer(Tokenizer *t, json_t *p, const char *src, PtError *e);
void tok_pre_free(Tokenizer *t);
void tok_scratch_init(const Tokenizer *t, EncodeScratch *s);
void tok_scratch_free(EncodeScratch *s);
// Cuts a normalized plain-text piece into pre-tokens and BPE-encodes each.
int tok_encode_plain(const Tokenizer *t, const char *text, size_t len, EncodeScratch *s, int **ids, size_t *n,
                     size_t *cap, PtError *e);
