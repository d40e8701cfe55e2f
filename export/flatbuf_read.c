#include "flatbuf_read.h"
#include <stdio.h>
#include <string.h>

static int fail(FbReader *r, size_t at, const char *what) {
    if (!r->bad) snprintf(r->why, sizeof r->why, "%s at byte %zu (buffer of %zu bytes)", what, at, r->len);
    r->bad = 1;
    return 0;
}

static int in_bounds(FbReader *r, size_t at, size_t n, const char *what) {
    if (r->bad) return 0;
    if (at > r->len || n > r->len - at) return fail(r, at, what);
    return 1;
}

static uint64_t read_le(const uint8_t *p, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

size_t fbr_root(FbReader *r) {
    if (!in_bounds(r, 0, 4, "root offset past the end")) return 0;
    size_t t = (size_t)read_le(r->p, 4);
    if (!in_bounds(r, t, 4, "root table past the end")) return 0;
    return t;
}

size_t fbr_field(FbReader *r, size_t table, int id) {
    if (!table || !in_bounds(r, table, 4, "table past the end")) return 0;
    int64_t soff = (int32_t)read_le(r->p + table, 4);
    int64_t vt = (int64_t)table - soff;
    if (vt < 0 || !in_bounds(r, (size_t)vt, 4, "vtable out of the buffer")) return 0;
    uint16_t vt_size = (uint16_t)read_le(r->p + vt, 2), inline_size = (uint16_t)read_le(r->p + vt + 2, 2);
    if (!in_bounds(r, (size_t)vt, vt_size, "vtable past the end") || !in_bounds(r, table, inline_size, "table past the end"))
        return 0;
    size_t slot = 4 + 2 * (size_t)id;
    if (slot + 2 > vt_size) return 0;
    uint16_t off = (uint16_t)read_le(r->p + vt + slot, 2);
    if (!off) return 0;
    if (off >= inline_size) return fail(r, table, "field offset outside its table");
    return table + off;
}

int64_t fbr_int(FbReader *r, size_t table, int id, int size, int64_t dflt) {
    size_t at = fbr_field(r, table, id);
    if (!at || !in_bounds(r, at, (size_t)size, "scalar past the end")) return dflt;
    uint64_t v = read_le(r->p + at, size);
    if (size < 8 && (v >> (8 * size - 1)) & 1) v |= ~0ull << (8 * size);   // sign-extend
    return (int64_t)v;
}

float fbr_f32(FbReader *r, size_t table, int id, float dflt) {
    size_t at = fbr_field(r, table, id);
    if (!at || !in_bounds(r, at, 4, "float past the end")) return dflt;
    float f;
    memcpy(&f, r->p + at, 4);
    return f;
}

static size_t follow(FbReader *r, size_t at) {
    if (!in_bounds(r, at, 4, "reference past the end")) return 0;
    size_t to = at + (size_t)read_le(r->p + at, 4);
    if (!in_bounds(r, to, 4, "reference target past the end")) return 0;
    return to;
}

size_t fbr_ref(FbReader *r, size_t table, int id) {
    size_t at = fbr_field(r, table, id);
    return at ? follow(r, at) : 0;
}

uint32_t fbr_vec_len(FbReader *r, size_t vec, size_t elem_size) {
    if (!vec || !in_bounds(r, vec, 4, "vector past the end")) return 0;
    uint32_t n = (uint32_t)read_le(r->p + vec, 4);
    if (!in_bounds(r, vec + 4, (size_t)n * elem_size, "vector elements past the end")) return 0;
    return n;
}

size_t fbr_vec_ref(FbReader *r, size_t vec, uint32_t i) { return follow(r, vec + 4 + 4 * (size_t)i); }

int64_t fbr_vec_int(FbReader *r, size_t vec, uint32_t i, int size) {
    size_t at = vec + 4 + (size_t)size * i;
    if (!in_bounds(r, at, (size_t)size, "vector element past the end")) return 0;
    uint64_t v = read_le(r->p + at, size);
    if (size < 8 && (v >> (8 * size - 1)) & 1) v |= ~0ull << (8 * size);
    return (int64_t)v;
}

const char *fbr_str(FbReader *r, size_t str, uint32_t *n) {
    *n = 0;
    if (!str) return "";
    uint32_t len = fbr_vec_len(r, str, 1);
    if (r->bad) return "";
    *n = len;
    return (const char *)r->p + str + 4;
}
