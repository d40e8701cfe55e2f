// dedup.c: a set of 128-bit document hashes (open addressing, linear probing).
#include "dedup.h"
#include <string.h>
#include "../util/util.h"
#include "sha256.h"

DocHash doc_hash(const void *data, size_t len) {
    Sha256 s;
    uint8_t digest[32];
    sha256_init(&s);
    sha256_update(&s, data, len);
    sha256_final(&s, digest);
    DocHash h;
    memcpy(&h.lo, digest, 8);
    memcpy(&h.hi, digest + 8, 8);
    return h;
}

void dedup_init(DedupSet *s) { memset(s, 0, sizeof *s); }

void dedup_free(DedupSet *s) {
    free(s->slot);
    memset(s, 0, sizeof *s);
}

static int is_empty(DocHash h) { return h.lo == 0 && h.hi == 0; }

// The slot holding h, or the empty one where it would go. The hash bits are
// already uniform, so lo picks the slot directly.
static size_t find(const DedupSet *s, DocHash h) {
    size_t i = (size_t)h.lo & (s->cap - 1);
    while (!is_empty(s->slot[i]) && (s->slot[i].lo != h.lo || s->slot[i].hi != h.hi)) i = (i + 1) & (s->cap - 1);
    return i;
}

static void grow(DedupSet *s) {
    DedupSet bigger = {.cap = s->cap ? 2 * s->cap : 1024, .n = s->n, .has_zero = s->has_zero};
    bigger.slot = xcalloc(bigger.cap, sizeof *bigger.slot, "duplicate hashes");
    for (size_t i = 0; i < s->cap; i++)
        if (!is_empty(s->slot[i])) bigger.slot[find(&bigger, s->slot[i])] = s->slot[i];
    free(s->slot);
    *s = bigger;
}

int dedup_add(DedupSet *s, DocHash h) {
    if (is_empty(h)) {   // the one value that marks empty slots is kept aside
        int fresh = !s->has_zero;
        s->has_zero = 1;
        return fresh;
    }
    if (2 * (s->n + 1) > s->cap) grow(s);
    size_t i = find(s, h);
    if (!is_empty(s->slot[i])) return 0;
    s->slot[i] = h;
    s->n++;
    return 1;
}
