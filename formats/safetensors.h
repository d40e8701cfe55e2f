// safetensors.h: reader and writer for the safetensors format (defined in the
// README of the huggingface/safetensors repository).
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header,
// then the data buffer. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets into the
// data buffer) plus an optional "__metadata__" map of strings.
//
// Reading:
//     StFile f;
//     if (st_open(&f, "model.safetensors", &err)) { ... err.msg ... }
//     const StTensor *t = st_find(&f, "model.norm.weight");
//     float *x = xmalloc(t->numel * sizeof(float), "x");
//     if (st_read_f32(&f, t, x, &err)) { ... }
//     st_close(&f);
//
// Writing (data already in the tensor's dtype, little-endian):
//     StWriteTensor w = {.name = "logits", .dtype = "F32", .ndim = 2,
//                        .shape = {T, V}, .data = logits};
//     if (st_write("out.safetensors", &w, 1, &err)) { ... }
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "../util/util.h"

typedef struct {
    char *name;
    const char *dtype;      // canonical dtype string ("F32", "BF16", "I64", ...)
    int dtype_size;         // bytes per element
    int ndim;               // 0 for a scalar
    int64_t *shape;         // ndim dims, outermost first (NULL when ndim == 0)
    uint64_t numel;         // product of shape (1 for a scalar)
    uint64_t begin, end;    // byte range [begin, end) in the data buffer
} StTensor;

typedef struct {
    char *path;
    StTensor *t;            // sorted by data offset (the order in the file)
    int n;
    char **meta_key;        // the __metadata__ map, n_meta pairs
    char **meta_value;
    int n_meta;
    uint64_t header_len;    // N
    const uint8_t *data;    // start of the data buffer (inside the mapping)
    uint64_t data_len;
    void *map;              // whole file, read-only mmap
    size_t map_len;
} StFile;

// Opens and validates a file as the reference implementation does: header
// length bounds (<= 100,000,000 and inside the file), a JSON object header
// with unique keys, known dtypes, non-negative shapes, size == numel x dtype
// size for every tensor, offsets that (sorted) start at 0 and are contiguous
// without gaps or overlaps, the last one ending exactly at the end of the
// file, and __metadata__ a map of strings. Errors name the file and the
// tensor or byte offset at fault. On failure f is left closed.
int st_open(StFile *f, const char *path, PtError *e);
void st_close(StFile *f);

// Lookup by name; NULL when absent.
const StTensor *st_find(const StFile *f, const char *name);
// Value of a __metadata__ key; NULL when absent.
const char *st_metadata(const StFile *f, const char *key);
// Raw bytes of a tensor (t->end - t->begin bytes; may be unaligned).
const void *st_data(const StFile *f, const StTensor *t);
// Converts F32, F16 or BF16 to fp32 into out (t->numel floats). Other dtypes
// (integers, F64, fp8) are an error naming the file, tensor and dtype.
int st_read_f32(const StFile *f, const StTensor *t, float *out, PtError *e);

// Bytes per element of a dtype string; 0 when unknown.
int st_dtype_size(const char *dtype);

#define ST_WRITE_MAX_DIMS 8
typedef struct {
    const char *name;
    const char *dtype;      // any known dtype; "F32", "BF16" and "F16" are the usual ones
    int ndim;               // 0..ST_WRITE_MAX_DIMS
    int64_t shape[ST_WRITE_MAX_DIMS];
    const void *data;       // numel x dtype size bytes, little-endian, in that dtype
} StWriteTensor;

// Writes n tensors in the given order, back to back, with __metadata__
// {"format": "pt"}, the header padded with spaces so the data starts at a
// multiple of 8. Atomic: written to PATH.tmp.PID and renamed. Names must be
// unique and non-empty.
int st_write(const char *path, const StWriteTensor *t, int n, PtError *e);

// Prints every tensor (name, dtype, shape, bytes) in file order, the
// metadata, and totals (tensors, elements, bytes per dtype).
int st_inspect(const char *path, FILE *out, PtError *e);
