#include "flatbuf.h"
#include <stdlib.h>
#include <string.h>
#include "../util/bytes.h"
#include "../util/util.h"

enum { FB_TABLE, FB_STRING, FB_VEC_SCALAR, FB_VEC_REFS };

typedef struct {
    uint8_t present, size, is_ref;   // size of the inline slot in bytes (refs: 4)
    uint8_t bytes[4];                // scalar value, little-endian
    FbNode *child;
} FbField;

struct FbNode {
    int kind;
    FbField field[FB_MAX_FIELDS];   // FB_TABLE
    uint8_t *data;                  // FB_STRING (with its 0), FB_VEC_SCALAR
    size_t n, elem;                 // element count and size
    FbNode **items;                 // FB_VEC_REFS
    size_t cap;
};

static FbNode *node_new(FbBuilder *b, int kind) {
    FbNode *nd = xcalloc(1, sizeof *nd, "flatbuffer node");
    nd->kind = kind;
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        FbNode **all = realloc(b->all, b->cap * sizeof *all);
        if (!all) {
            fprintf(stderr, "out of memory growing the flatbuffer node list\n");
            exit(1);
        }
        b->all = all;
    }
    b->all[b->n++] = nd;
    return nd;
}

void fb_init(FbBuilder *b) { memset(b, 0, sizeof *b); }

void fb_free(FbBuilder *b) {
    for (size_t i = 0; i < b->n; i++) {
        free(b->all[i]->data);
        free(b->all[i]->items);
        free(b->all[i]);
    }
    free(b->all);
    memset(b, 0, sizeof *b);
}

FbNode *fb_table(FbBuilder *b) { return node_new(b, FB_TABLE); }

static void set_scalar(FbNode *t, int id, const void *v, int size) {
    if (t->kind != FB_TABLE || id < 0 || id >= FB_MAX_FIELDS) {
        fprintf(stderr, "flatbuf: field %d set on a non-table or beyond %d slots\n", id, FB_MAX_FIELDS);
        abort();
    }
    FbField *f = &t->field[id];
    memset(f, 0, sizeof *f);
    f->present = 1;
    f->size = (uint8_t)size;
    memcpy(f->bytes, v, (size_t)size);   // the writer assumes a little-endian host, as MNN does
}

void fb_u8(FbNode *t, int id, uint8_t v) { set_scalar(t, id, &v, 1); }
void fb_i8(FbNode *t, int id, int8_t v) { set_scalar(t, id, &v, 1); }
void fb_i32(FbNode *t, int id, int32_t v) { set_scalar(t, id, &v, 4); }
void fb_u32(FbNode *t, int id, uint32_t v) { set_scalar(t, id, &v, 4); }
void fb_f32(FbNode *t, int id, float v) { set_scalar(t, id, &v, 4); }

void fb_ref(FbNode *t, int id, FbNode *child) {
    uint32_t zero = 0;
    set_scalar(t, id, &zero, 4);
    t->field[id].is_ref = 1;
    t->field[id].child = child;
}

FbNode *fb_string(FbBuilder *b, const char *s) {
    FbNode *nd = node_new(b, FB_STRING);
    nd->n = strlen(s);
    nd->elem = 1;
    nd->data = xmalloc(nd->n + 1, "flatbuffer string");
    memcpy(nd->data, s, nd->n + 1);
    return nd;
}

static FbNode *vec_scalar(FbBuilder *b, const void *v, size_t n, size_t elem) {
    FbNode *nd = node_new(b, FB_VEC_SCALAR);
    nd->n = n;
    nd->elem = elem;
    nd->data = xmalloc(n * elem + 1, "flatbuffer vector");
    if (n) memcpy(nd->data, v, n * elem);
    return nd;
}
FbNode *fb_vec_i32(FbBuilder *b, const int32_t *v, size_t n) { return vec_scalar(b, v, n, 4); }
FbNode *fb_vec_i64(FbBuilder *b, const int64_t *v, size_t n) { return vec_scalar(b, v, n, 8); }
FbNode *fb_vec_f32(FbBuilder *b, const float *v, size_t n) { return vec_scalar(b, v, n, 4); }

FbNode *fb_vec_refs(FbBuilder *b) { return node_new(b, FB_VEC_REFS); }

void fb_vec_push(FbNode *vec, FbNode *item) {
    if (vec->n == vec->cap) {
        vec->cap = vec->cap ? 2 * vec->cap : 16;
        FbNode **items = realloc(vec->items, vec->cap * sizeof *items);
        if (!items) {
            fprintf(stderr, "out of memory growing a flatbuffer vector\n");
            exit(1);
        }
        vec->items = items;
    }
    vec->items[vec->n++] = item;
}

// ---- serialization ----

typedef Bytes Out;
static void out_put(Out *o, const void *v, size_t n) { bytes_put(o, v, n); }
static void out_pad_to(Out *o, size_t align, size_t phase) {   // until len % align == phase
    while (o->len % align != phase) out_put(o, "", 1);
}
static void put_u32_at(Out *o, size_t pos, uint32_t v) { memcpy(o->p + pos, &v, 4); }

static size_t write_node(Out *o, const FbNode *nd);

// Writes the child and points the uint32 slot at `slot` to it.
static void write_child(Out *o, size_t slot, const FbNode *child) {
    size_t at = write_node(o, child);
    put_u32_at(o, slot, (uint32_t)(at - slot));
}

static size_t write_table(Out *o, const FbNode *t) {
    int n_slots = 0;
    for (int id = 0; id < FB_MAX_FIELDS; id++)
        if (t->field[id].present) n_slots = id + 1;
    // Inline layout: soffset at 0, then fields by decreasing size, id order.
    uint16_t off[FB_MAX_FIELDS] = {0};
    size_t at = 4;
    for (int size = 4; size >= 1; size /= 2)
        for (int id = 0; id < n_slots; id++)
            if (t->field[id].present && t->field[id].size == size) {
                off[id] = (uint16_t)at;
                at += (size_t)size;
            }
    size_t inline_size = at;
    out_pad_to(o, 2, 0);
    size_t vt = o->len;
    uint16_t head[2] = {(uint16_t)(4 + 2 * n_slots), (uint16_t)inline_size};
    out_put(o, head, 4);
    out_put(o, off, 2 * (size_t)n_slots);
    out_pad_to(o, 4, 0);
    size_t start = o->len;
    int32_t soffset = (int32_t)(start - vt);
    bytes_put_zeros(o, inline_size);
    memcpy(o->p + start, &soffset, 4);
    for (int id = 0; id < n_slots; id++)
        if (t->field[id].present) memcpy(o->p + start + off[id], t->field[id].bytes, t->field[id].size);
    for (int id = 0; id < n_slots; id++)
        if (t->field[id].present && t->field[id].is_ref) write_child(o, start + off[id], t->field[id].child);
    return start;
}

static size_t write_node(Out *o, const FbNode *nd) {
    uint32_t count = (uint32_t)nd->n;
    size_t at;
    switch (nd->kind) {
    case FB_TABLE:
        return write_table(o, nd);
    case FB_STRING:
        out_pad_to(o, 4, 0);
        at = o->len;
        out_put(o, &count, 4);
        out_put(o, nd->data, nd->n + 1);   // with its terminating 0
        return at;
    case FB_VEC_SCALAR:
        // The elements start right after the count: align them to their size.
        out_pad_to(o, nd->elem > 4 ? nd->elem : 4, nd->elem > 4 ? nd->elem - 4 : 0);
        at = o->len;
        out_put(o, &count, 4);
        if (nd->n) out_put(o, nd->data, nd->n * nd->elem);
        return at;
    default: {   // FB_VEC_REFS
        out_pad_to(o, 4, 0);
        at = o->len;
        out_put(o, &count, 4);
        size_t slots = o->len;
        bytes_put_zeros(o, 4 * nd->n);
        for (size_t i = 0; i < nd->n; i++) write_child(o, slots + 4 * i, nd->items[i]);
        return at;
    }
    }
}

uint8_t *fb_serialize(const FbNode *root, size_t *len) {
    Out o = {.what = "the flatbuffer"};
    uint32_t zero = 0;
    out_put(&o, &zero, 4);
    write_child(&o, 0, root);
    out_pad_to(&o, 4, 0);
    *len = o.len;
    return o.p;
}
