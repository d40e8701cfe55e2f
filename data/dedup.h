// dedup.h: exact-duplicate documents, found by content hash.
//
// A document's hash is the first 128 bits of SHA-256 over its bytes (two
// different documents share one with probability ~n^2 / 2^129: none in
// practice). The set keeps every hash it was given, 16 bytes each in a table
// at most half full, so its memory grows with the number of distinct
// documents, not with their size. Not thread-safe: hash in parallel, add in
// the documents' order on one thread, so "the first one is kept" is the same
// whatever the thread count.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t lo, hi; } DocHash;

DocHash doc_hash(const void *data, size_t len);

typedef struct {
    DocHash *slot;     // cap entries; {0, 0} marks an empty slot
    size_t cap, n;     // n: distinct hashes held (a real {0, 0} counted in has_zero)
    int has_zero;
} DedupSet;

void dedup_init(DedupSet *s);
void dedup_free(DedupSet *s);
// 1 when h is new (now remembered), 0 when the set held it already.
int dedup_add(DedupSet *s, DocHash h);
