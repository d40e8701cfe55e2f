// tokenizer_bpe.c: the string and pair hash maps, the GPT-2 byte table, and
// BPE merge application on one pre-token, as HF tokenizers' BPE model applies merges.
#include <string.h>
#include "tokenizer_internal.h"

void tok_grow(void **buf, size_t *cap, size_t need, size_t elem, const char *what) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*buf, c * elem);
    if (!p) die("out of memory growing %s to %zu entries", what, c);
    *buf = p;
    *cap = c;
}

// ---- StrMap ---------------------------------------------------------------

static uint32_t hash_bytes(const char *s, size_t len) {
    // FNV-1a, 32-bit: keys are short token strings.
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static void strmap_rehash(StrMap *m, uint32_t slots) {
    free(m->slot);
    m->slot = xcalloc(slots, sizeof *m->slot, "token map");
    m->mask = slots - 1;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = m->entry[e].hash & m->mask;
        while (m->slot[i]) i = (i + 1) & m->mask;
        m->slot[i] = e + 1;
    }
}

void strmap_init(StrMap *m, uint32_t expected) {
    memset(m, 0, sizeof *m);
    uint32_t slots = 16;
    while (slots < 2 * expected) slots *= 2;
    strmap_rehash(m, slots);
}

void strmap_free(StrMap *m) {
    free(m->slot);
    free(m->entry);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

static int32_t strmap_find(const StrMap *m, const char *key, size_t len, uint32_t h) {
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t s = m->slot[i];
        if (!s) return -1;
        const struct StrEntry *en = &m->entry[s - 1];
        if (en->hash == h && en->len == len && memcmp(m->arena + en->off, key, len) == 0) return (int32_t)(s - 1);
    }
}

void strmap_put(StrMap *m, const char *key, size_t len, int32_t id) {
    uint32_t h = hash_bytes(key, len);
    int32_t at = strmap_find(m, key, len, h);
    if (at >= 0) {
        m->entry[at].id = id;
        return;
    }
    if (2 * (m->n + 1) > m->mask + 1) strmap_rehash(m, 2 * (m->mask + 1));
    size_t ecap = m->cap_entries;
    tok_grow((void **)&m->entry, &ecap, m->n + 1, sizeof *m->entry, "token map");
    m->cap_entries = (uint32_t)ecap;
    tok_grow((void **)&m->arena, &m->arena_cap, m->arena_len + len + 1, 1, "token strings");
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = 0;
    m->entry[m->n] = (struct StrEntry){m->arena_len, (uint32_t)len, h, id};
    m->arena_len += len + 1;
    uint32_t i = h & m->mask;
    while (m->slot[i]) i = (i + 1) & m->mask;
    m->slot[i] = ++m->n;
}

int32_t strmap_get(const StrMap *m, const char *key, size_t len) {
    if (!m->slot) return -1;
    int32_t at = strmap_find(m, key, len, hash_bytes(key, len));
    return at < 0 ? -1 : m->entry[at].id;
}

// ---- MergeMap ---------------------------------------------------------------

void mergemap_init(MergeMap *m, size_t expected) {
    uint64_t slots = 16;
    int bits = 4;
    while (slots < 2 * expected) slots *= 2, bits++;
    m->slot = xmalloc(slots * sizeof *m->slot, "merge map");
    for (uint64_t i = 0; i < slots; i++) m->slot[i].key = UINT64_MAX;
    m->mask = slots - 1;
    m->shift = 64 - bits;
}

void mergemap_free(MergeMap *m) {
    free(m->slot);
    memset(m, 0, sizeof *m);
}

void mergemap_put(MergeMap *m, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    // Sized at init for every rule, so the table never fills past half.
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> m->shift;
    while (m->slot[i].key != UINT64_MAX && m->slot[i].key != key) i = (i + 1) & m->mask;
    m->slot[i] = (struct MergeSlot){key, rank, merged};
}

// ---- GPT-2 byte table -------------------------------------------------------

// Printable bytes keep their own code point; the other 68 take U+0100.. in order.
static int byte_is_printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t rank = 0;
    for (int x = 0; x < b; x++) rank += !byte_is_printable(x);
    return 0x100 + rank;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t rank = cp - 0x100;
    for (int b = 0; b < 256; b++)
        if (!byte_is_printable(b) && rank-- == 0) return b;
    return -1;
}

// ---- merges on one pre-token ------------------------------------------------

// Min-heap on (rank, position): lowest rank first, leftmost among equals.
static int cand_less(const struct BpeCandidate *a, const struct BpeCandidate *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(EncodeScratch *s, size_t *n, struct BpeCandidate c) {
    tok_grow((void **)&s->heap, &s->heap_cap, *n + 1, sizeof *s->heap, "merge queue");
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = c;
}

static struct BpeCandidate heap_pop(EncodeScratch *s, size_t *n) {
    struct BpeCandidate top = s->heap[0], last = s->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && cand_less(&s->heap[child + 1], &s->heap[child])) child++;
        if (!cand_less(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (*n) s->heap[i] = last;
    return top;
}

static void push_pair(const Tokenizer *t, EncodeScratch *s, size_t *heap_n, int32_t pos) {
    const struct BpeSymbol *sym = s->sym;
    int32_t next = sym[pos].next, merged;
    if (next < 0) return;
    int32_t rank = mergemap_get(&t->merges, sym[pos].id, sym[next].id, &merged);
    if (rank >= 0) heap_push(s, heap_n, (struct BpeCandidate){rank, pos, sym[pos].id, sym[next].id, merged});
}

static void push_id(int **ids, size_t *n, size_t *cap, int id) {
    if (*n == *cap) tok_grow((void **)ids, cap, *n + 1, sizeof **ids, "token ids");
    (*ids)[(*n)++] = id;
}

void tok_bpe_word(const Tokenizer *t, const uint8_t *bytes, size_t len, EncodeScratch *s, int **ids, size_t *n,
                  size_t *cap) {
    if (t->ignore_merges) {
        // The whole pre-token is looked up first (in its mapped spelling).
        tok_grow((void **)&s->text, &s->text_cap, 2 * len + 1, 1, "mapped text");
        size_t m = 0;
        for (size_t i = 0; i < len; i++) {
            uint32_t cp = t->byte_cp[bytes[i]];
            if (cp < 0x80) {
                s->text[m++] = (char)cp;
            } else {
                s->text[m++] = (char)(0xC0 | cp >> 6);
                s->text[m++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        int32_t whole = strmap_get(&t->vocab, s->text, m);
        if (whole >= 0) {
            push_id(ids, n, cap, whole);
            return;
        }
    }
    // One symbol per byte. A byte with no token becomes unk (runs fused when
    // fuse_unk) or, with no unk token, is dropped as HF does.
    tok_grow((void **)&s->sym, &s->sym_cap, len, sizeof *s->sym, "merge symbols");
    int32_t count = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[bytes[i]];
        if (id < 0) {
            if (t->unk_id < 0) continue;
            if (t->fuse_unk && count > 0 && s->sym[count - 1].id == t->unk_id) continue;
            id = t->unk_id;
        }
        s->sym[count] = (struct BpeSymbol){id, count - 1, count + 1};
        count++;
    }
    if (count == 0) return;
    s->sym[count - 1].next = -1;

    size_t heap_n = 0;
    for (int32_t i = 0; i + 1 < count; i++) push_pair(t, s, &heap_n, i);
    while (heap_n) {
        struct BpeCandidate c = heap_pop(s, &heap_n);
        struct BpeSymbol *left = &s->sym[c.pos];
        // Stale: the left symbol was absorbed, or either side changed since the push.
        if (left->id < 0 || left->next < 0 || left->id != c.left || s->sym[left->next].id != c.right) continue;
        int32_t right_pos = left->next;
        struct BpeSymbol *right = &s->sym[right_pos];
        left->id = c.merged;
        left->next = right->next;
        if (right->next >= 0) s->sym[right->next].prev = c.pos;
        right->id = -1;
        if (left->prev >= 0) push_pair(t, s, &heap_n, left->prev);
        push_pair(t, s, &heap_n, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) push_id(ids, n, cap, s->sym[i].id);
}
