// flatbuf_read.h: bounds-checked reading of a FlatBuffers buffer (for
// `pocket inspect` of an MNN graph). Every accessor checks that what it reads
// lies inside the buffer; on a violation it records the first error in the
// reader and returns 0 / an empty result, so callers check `r->bad` once.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p;
    size_t len;
    int bad;            // set at the first out-of-bounds read
    char why[160];      // what was wrong, with the byte offset
} FbReader;

// Position of the root table (0 and r->bad on failure).
size_t fbr_root(FbReader *r);
// Absolute position of field `id` of the table at `table`, 0 when absent.
size_t fbr_field(FbReader *r, size_t table, int id);
int64_t fbr_int(FbReader *r, size_t table, int id, int size, int64_t dflt);   // signed scalar of 1, 2, 4 or 8 bytes
float fbr_f32(FbReader *r, size_t table, int id, float dflt);
// The table, vector or string a reference field points to (0 when absent).
size_t fbr_ref(FbReader *r, size_t table, int id);
// Vector at `vec`: element count; elements start at vec + 4.
uint32_t fbr_vec_len(FbReader *r, size_t vec, size_t elem_size);
// Element i of a vector of references.
size_t fbr_vec_ref(FbReader *r, size_t vec, uint32_t i);
int64_t fbr_vec_int(FbReader *r, size_t vec, uint32_t i, int size);
// A string as pointer + length (not NUL-terminated in general); "" when absent.
const char *fbr_str(FbReader *r, size_t str, uint32_t *n);
