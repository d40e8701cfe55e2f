// loader.c: CPT windows and SFT packing with a seeded, resumable shuffle
// (behaviour described in loader.h).
#include "loader.h"
#include <inttypes.h>
#include <string.h>

void batch_alloc(Batch *b, int B, int T) {
    size_t n = (size_t)B * T;
    b->B = B;
    b->T = T;
    b->rows = B;
    b->tokens = xcalloc(n, sizeof(int), "batch tokens");
    b->targets = xcalloc(n, sizeof(int), "batch targets");
    b->pos = xcalloc(n, sizeof(int), "batch positions");
    b->seg = xcalloc(n, sizeof(int), "batch segments");
    b->mask = xcalloc(n, 1, "batch mask");
    b->src = xcalloc(n, sizeof(int64_t), "batch token sources");
    b->group_first = xcalloc(n + 1, sizeof(int), "batch groups");
    b->group_last = xcalloc(n, sizeof(int), "batch group rows");
    b->group_label = xcalloc(n, sizeof(int), "batch group labels");
    b->cand_doc = xcalloc(n, sizeof(int64_t), "batch candidate documents");
    b->cand_row0 = xcalloc(n, sizeof(int), "batch candidate rows");
    b->n_loss = 0;
}

void batch_free(Batch *b) {
    free(b->tokens);
    free(b->targets);
    free(b->pos);
    free(b->seg);
    free(b->mask);
    free(b->src);
    free(b->group_first);
    free(b->group_last);
    free(b->group_label);
    free(b->cand_doc);
    free(b->cand_row0);
    memset(b, 0, sizeof *b);
}

void batch_copy(Batch *dst, const Batch *src) {
    const size_t n = (size_t)src->B * src->T;
    memcpy(dst->tokens, src->tokens, n * sizeof(int));
    memcpy(dst->targets, src->targets, n * sizeof(int));
    memcpy(dst->pos, src->pos, n * sizeof(int));
    memcpy(dst->seg, src->seg, n * sizeof(int));
    memcpy(dst->mask, src->mask, n);
    memcpy(dst->src, src->src, n * sizeof(int64_t));
    memcpy(dst->group_first, src->group_first, (n + 1) * sizeof(int));
    memcpy(dst->group_last, src->group_last, n * sizeof(int));
    memcpy(dst->group_label, src->group_label, n * sizeof(int));
    memcpy(dst->cand_doc, src->cand_doc, n * sizeof(int64_t));
    memcpy(dst->cand_row0, src->cand_row0, n * sizeof(int));
    dst->rows = src->rows;
    dst->n_loss = src->n_loss;
    dst->n_groups = src->n_groups;
}

// Uniform in [0, n): rejection removes the modulo bias.
static uint64_t uniform_below(Rng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
    do x = rng_next(r);
    while (x >= limit);
    return x % n;
}

// Group g's documents [*first, *end): a choice group's candidates, or a pair's two.
static void group_docs(const Loader *l, uint64_t g, uint64_t *first, uint64_t *end) {
    *first = l->pairs ? 2 * g : l->d->choice_offsets[g];
    *end = l->pairs ? 2 * g + 2 : l->d->choice_offsets[g + 1];
}

static uint64_t group_tokens(const Loader *l, uint64_t g) {
    uint64_t first, end;
    group_docs(l, g, &first, &end);
    return l->d->doc_offsets[end] - l->d->doc_offsets[first];
}

// This epoch's order from cur.rng (Fisher-Yates); remembers where the RNG
// ends up, which is where the next epoch starts.
static void draw_order(Loader *l) {
    Rng r;
    memcpy(r.s, l->cur.rng, sizeof r.s);
    for (uint64_t i = 0; i < l->n_items; i++) l->order[i] = i;
    for (uint64_t i = l->n_items - 1; i > 0; i--) {
        uint64_t j = uniform_below(&r, i + 1), t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
    memcpy(l->next_rng, r.s, sizeof r.s);
}

int loader_open(Loader *l, const Dataset *d, int B, int T, uint64_t seed, int rank, int world, PtError *e) {
    memset(l, 0, sizeof *l);
    if (B < 1 || T < 1) return pt_fail(e, "loader: batch %d x %d must be at least 1 x 1", B, T);
    if (world < 1 || rank < 0 || rank >= world) return pt_fail(e, "loader: rank %d of %d is not valid", rank, world);
    l->d = d;
    l->B = B;
    l->T = T;
    l->rank = rank;
    l->world = world;
    l->sft = d->kind != DATASET_CPT;
    l->choice = d->kind == DATASET_CHOICE;
    l->pairs = d->kind == DATASET_PAIRS;
    if (l->pairs) {   // dataset_open saw a response in every document
        for (uint64_t g = 0; g < d->n_pairs; g++)
            if (group_tokens(l, g) > (uint64_t)T)
                return pt_fail(e, "%s: pair %" PRIu64 " holds %" PRIu64 " tokens (prompt + chosen %" PRIu64 ", prompt + "
                                  "rejected %" PRIu64 "), more than a row of %d: raise seq_len or tokenize with a "
                                  "lower --max-len", d->path, g, group_tokens(l, g), dataset_doc_len(d, 2 * g),
                               dataset_doc_len(d, 2 * g + 1), T);
        l->n_items = d->n_pairs;
        if (l->n_items == 0) return pt_fail(e, "%s: no pairs", d->path);
    } else if (l->choice) {
        for (uint64_t i = 0; i < d->n_docs; i++)
            if (dataset_doc_len(d, i) == 0) return pt_fail(e, "%s: /doc_offsets: candidate %" PRIu64 " is empty", d->path, i);
        for (uint64_t g = 0; g < d->n_groups; g++) {
            uint64_t first = d->choice_offsets[g], end = d->choice_offsets[g + 1], len = group_tokens(l, g);
            if (len > (uint64_t)T)
                return pt_fail(e, "%s: choice group %" PRIu64 " holds %" PRIu64 " tokens (%" PRIu64 " candidates with "
                                  "the prompt each), more than a row of %d: raise the sequence length or shorten it",
                               d->path, g, len, end - first, T);
        }
        l->n_items = d->n_groups;
        if (l->n_items == 0) return pt_fail(e, "%s: no choice groups", d->path);
    } else if (l->sft) {
        if (!d->loss_mask) return pt_fail(e, "%s: an SFT dataset needs /loss_mask", d->path);
        for (uint64_t i = 0; i < d->n_docs; i++)
            if (dataset_doc_len(d, i) == 0) return pt_fail(e, "%s: /doc_offsets: example %" PRIu64 " is empty", d->path, i);
        l->n_items = d->n_docs;
        if (l->n_items == 0) return pt_fail(e, "%s: no examples", d->path);
    } else {
        l->n_items = d->n_tokens > 0 ? (d->n_tokens - 1) / (uint64_t)T : 0;
        if (l->n_items == 0)
            return pt_fail(e, "%s: %" PRIu64 " tokens give no window of %d+1 tokens", d->path, d->n_tokens, T);
    }
    l->order = xmalloc(l->n_items * sizeof(uint64_t), "loader order");
    Rng r;
    rng_seed(&r, seed);
    memcpy(l->cur.rng, r.s, sizeof r.s);
    draw_order(l);
    return 0;
}

void loader_set_doc_mask(Loader *l, int on) { l->doc_mask = on; }

void loader_close(Loader *l) {
    free(l->order);
    memset(l, 0, sizeof *l);
}

void loader_get_cursor(const Loader *l, LoaderCursor *c) { *c = l->cur; }

int loader_set_cursor(Loader *l, const LoaderCursor *c, PtError *e) {
    if (c->index > l->n_items)
        return pt_fail(e, "loader cursor: index %" PRIu64 " is past the %" PRIu64 " items of an epoch "
                          "(a different dataset or sequence length?)", c->index, l->n_items);
    l->cur = *c;
    draw_order(l);
    return 0;
}

// The next item of the stream, rolling into a new epoch when this one is used up.
static uint64_t peek_item(Loader *l) {
    if (l->cur.index == l->n_items && l->one_pass) return UINT64_MAX;   // the pass is over
    if (l->cur.index == l->n_items) {
        l->cur.epoch++;
        l->cur.index = 0;
        memcpy(l->cur.rng, l->next_rng, sizeof l->cur.rng);
        draw_order(l);
    }
    return l->order[l->cur.index];
}

// The document holding token i (the last document starting at or before i).
static uint64_t doc_of(const Dataset *d, uint64_t i) {
    uint64_t lo = 0, hi = d->n_docs;   // doc_offsets[lo] <= i < doc_offsets[hi]
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (d->doc_offsets[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

// One row of a batch: its per-position arrays from the row's flat offset.
typedef struct {
    int *tok, *tgt, *pos, *seg;
    uint8_t *mask;
    int64_t *src;
} Row;

static Row row_at(Batch *b, size_t o) {
    return (Row){b->tokens + o, b->targets + o, b->pos + o, b->seg + o, b->mask + o, b->src + o};
}

// Positions t..T-1 of r: padding, a segment of its own (s), never trained.
static void pad_row(Row r, int t, int T, int s) {
    for (int i = t; i < T; i++) {
        r.tok[i] = 0;
        r.src[i] = -1;
        r.pos[i] = i - t;
        r.seg[i] = s;
        r.tgt[i] = -1;
        r.mask[i] = 0;
    }
}

// A document's first len tokens (from flat token off) at positions t.. of r,
// segment s. Token i is trained on its next one, with that token's SFT loss
// mask, while i + 1 < n_next (0: never).
static void put_doc(const Dataset *d, Row r, int t, uint64_t off, int len, uint64_t n_next, int s) {
    for (int i = 0; i < len; i++) {
        uint64_t at = off + (uint64_t)i;
        int next = (uint64_t)i + 1 < n_next;
        r.tok[t + i] = (int)dataset_token(d, at);
        r.src[t + i] = (int64_t)at;
        r.pos[t + i] = i;
        r.seg[t + i] = s;
        r.tgt[t + i] = next ? (int)dataset_token(d, at + 1) : -1;
        r.mask[t + i] = next ? d->loss_mask[at + 1] : 0;
    }
}

static int fill_cpt_row(Loader *l, Row r) {
    const Dataset *d = l->d;
    int T = l->T;
    uint64_t item = peek_item(l);
    if (item == UINT64_MAX) {   // one pass, and it is over: padding
        pad_row(r, 0, T, 0);
        return 0;
    }
    uint64_t start = item * (uint64_t)T;
    l->cur.index++;
    // With the document mask, the next boundary is where the next document starts.
    uint64_t doc = l->doc_mask ? doc_of(d, start) : 0;
    uint64_t boundary = l->doc_mask ? d->doc_offsets[doc + 1] : UINT64_MAX;
    int s = 0, p = 0;
    for (int t = 0; t < T; t++, p++) {
        uint64_t i = start + (uint64_t)t;
        while (i >= boundary) {   // a document starts here (skipping empty ones)
            doc++;
            boundary = d->doc_offsets[doc + 1];
            if (p) { s++; p = 0; }
        }
        r.tok[t] = (int)dataset_token(d, i);
        r.src[t] = (int64_t)i;
        r.pos[t] = p;
        r.seg[t] = s;
        int ends_doc = i + 1 >= boundary;
        r.tgt[t] = ends_doc ? -1 : (int)dataset_token(d, i + 1);
        r.mask[t] = ends_doc ? 0 : 1;
    }
    return T;
}

// An SFT item's tokens in a row (cut to T), or a group's (choice, pairs).
static int item_len(const Loader *l, uint64_t item) {
    uint64_t full = l->choice || l->pairs ? group_tokens(l, item) : dataset_doc_len(l->d, item);
    return full > (uint64_t)l->T ? l->T : (int)full;
}

// A row of groups at flat offset o of b: every candidate its own segment;
// the candidates' documents and rows and the groups' labels into b. A pair's
// documents get SFT targets and mask (the next token of the same document),
// a choice candidate none. Returns the row's real tokens.
static int fill_group_row(Loader *l, Batch *b, size_t o) {
    const Dataset *d = l->d;
    int T = l->T, t = 0, s = 0;
    const Row r = row_at(b, o);
    while (t < T) {
        uint64_t g = peek_item(l), doc, end;
        if (g == UINT64_MAX || t + item_len(l, g) > T) break;
        l->cur.index++;
        int *first = &b->group_first[b->n_groups];
        for (group_docs(l, g, &doc, &end); doc < end; doc++, s++) {
            uint64_t off = d->doc_offsets[doc];
            int len = (int)dataset_doc_len(d, doc);
            b->cand_doc[first[1]] = (int64_t)doc;
            b->cand_row0[first[1]] = (int)o + t;
            put_doc(d, r, t, off, len, l->pairs ? (uint64_t)len : 0, s);
            t += len;
            b->group_last[first[1]++] = (int)o + t - 1;
        }
        b->group_label[b->n_groups++] = l->pairs ? 0 : (int)d->choice_label[g];
        first[2] = first[1];
    }
    pad_row(r, t, T, s);
    return t;
}

// A row of another rank: the items it takes, without reading their tokens.
static int skip_row(Loader *l) {
    if (!l->sft) {
        if (peek_item(l) == UINT64_MAX) return 0;
        l->cur.index++;
        return l->T;
    }
    for (int t = 0;;) {
        uint64_t item = peek_item(l);
        if (item == UINT64_MAX) return t;
        int len = item_len(l, item);
        if (t + len > l->T) return t;
        l->cur.index++;
        t += len;
    }
}

static int fill_sft_row(Loader *l, Row r) {
    const Dataset *d = l->d;
    int T = l->T, t = 0, s = 0;
    while (t < T) {
        uint64_t ex = peek_item(l);
        if (ex == UINT64_MAX) break;
        uint64_t off = d->doc_offsets[ex], full = dataset_doc_len(d, ex);
        int len = item_len(l, ex);
        if (t + len > T) break;   // it starts the next row
        l->cur.index++;
        if ((uint64_t)len < full) l->n_truncated++;
        put_doc(d, r, t, off, len, full, s);   // a cut example still predicts its next token
        t += len;
        s++;
    }
    pad_row(r, t, T, s);
    return t;
}

void loader_set_one_pass(Loader *l) { l->one_pass = 1; }

int loader_done(const Loader *l) { return l->one_pass && l->cur.index == l->n_items; }

void loader_batch_begin(Batch *b) {
    b->n_groups = 0;
    b->group_first[0] = b->group_first[1] = 0;
}

int loader_next_row(Loader *l, Batch *b, size_t o, int fill) {
    if (!fill) return skip_row(l);
    if (l->choice || l->pairs) return fill_group_row(l, b, o);
    if (l->sft) return fill_sft_row(l, row_at(b, o));
    return fill_cpt_row(l, row_at(b, o));
}

void loader_batch_end(const Loader *l, Batch *b) {
    int n = 0;
    for (size_t i = 0; i < (size_t)b->B * b->T; i++) n += b->mask[i];
    b->n_loss = l->choice || l->pairs ? b->n_groups : n;
}

void loader_next(Loader *l, Batch *b) {
    loader_batch_begin(b);
    for (int w = 0; w < l->world; w++)
        for (int r = 0; r < l->B; r++) loader_next_row(l, b, (size_t)r * l->T, w == l->rank);
    loader_batch_end(l, b);
}
