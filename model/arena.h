// arena.h: named buffers carved out of one allocation, each 64-byte aligned,
// as the decoder (model.c) and the draft (draft_model.c) plan their
// activations: a first pass with base NULL only counts the bytes, the second
// hands out the pieces of the allocation made that size. Internal to model/.
#pragma once
#include <stddef.h>

typedef struct { unsigned char *base; size_t used; } Carver;

static inline void *carve(Carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->used : NULL;
    c->used += (bytes + 63) / 64 * 64;
    return p;
}

static inline float *carve_floats(Carver *c, size_t n) { return carve(c, n * sizeof(float)); }
