// gguf_reader.h: GGUF v2/v3 files (ggml's docs/gguf.md) parsed and checked:
// header, metadata key/value pairs, tensor infos, the data section; typed
// metadata lookups; tensors converted to fp32 (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1). Every length and offset is checked against the bytes actually in the
// file before it is used, so a damaged or hostile file gives one error line
// naming the file and the byte offset or key, never a crash or an allocation
// larger than the file.
//
//     GgufFile f;
//     if (gguf_open(&f, "model.gguf", &err)) { ... err.msg ... }
//     const GgufTensor *t = gguf_find_tensor(&f, "output_norm.weight");
//     float *x = xmalloc(t->numel * sizeof(float), "x");
//     if (gguf_read_f32(&f, t, x, &err)) { ... }
//     gguf_close(&f);
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "../util/util.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_VERSION 3
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NAME 64          // tensor names hold at most 63 bytes (ggml's limit)
#define GGUF_MAX_DIMS 4

// Metadata value types (gguf_metadata_value_type in ggml's docs/gguf.md).
typedef enum {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
} GgufValueType;

// The ggml tensor types this toolkit reads and writes (enum ggml_type in ggml's
// include/ggml.h). Other known ggml types parse (so `pocket inspect` shows
// them) but do not convert.
typedef enum {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q8_0 = 8, GGML_TYPE_BF16 = 30
} GgmlType;

#define GGML_QK 32                // elements per Q8_0 / Q4_0 / Q4_1 block
#define GGML_Q8_0_BYTES 34
#define GGML_Q4_0_BYTES 18
#define GGML_Q4_1_BYTES 20

typedef struct {
    char *key;
    uint32_t type;              // GgufValueType
    uint64_t at;                // file offset of the pair, for messages
    union { uint64_t u; int64_t i; double f; } num;   // integer, bool and float scalars
    const uint8_t *str;         // STRING: bytes (not NUL-terminated) and length
    uint64_t str_len;
    uint32_t arr_type;          // ARRAY: element type, count, first element
    uint64_t arr_n;
    const uint8_t *arr;
    uint64_t *arr_str_at;       // ARRAY of STRING: offset of each element's length field from arr
} GgufKV;

typedef struct {
    char *name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];  // ne[0] is the contiguous dimension; unused dims are 1
    uint32_t type;              // ggml type id
    uint64_t offset;            // from the start of the data section
    uint64_t nbytes, numel;
    uint64_t at;                // file offset of the tensor-info record
} GgufTensor;

typedef struct {
    char *path;                 // the name used in messages
    const uint8_t *data;        // the whole file
    size_t len;
    void *map;                  // owned mapping (gguf_open), NULL for gguf_parse
    uint32_t version;
    GgufKV *kv;
    int64_t n_kv;
    GgufTensor *t;
    int64_t n_tensors;
    uint32_t alignment;
    uint64_t data_offset;       // absolute file offset of the data section
} GgufFile;

// Maps and parses a file. On failure f is left closed.
int gguf_open(GgufFile *f, const char *path, PtError *e);
// Parses len bytes at data (not copied: they must outlive f); name is used in
// messages. Checks: magic, version 2 or 3 (big-endian files are refused),
// counts, every string and array inside the file, known value types, no
// nested arrays, unique non-empty keys, general.alignment a UINT32 power of
// two, tensor names non-empty, unique and < 64 bytes, 1..4 dims, known ggml
// types, ne[0] a multiple of the block size, sizes without overflow, offsets
// aligned and every tensor's bytes inside the data section.
int gguf_parse(GgufFile *f, const void *data, size_t len, const char *name, PtError *e);
void gguf_close(GgufFile *f);
// 1 when the file starts with the GGUF magic.
int gguf_is_file(const char *path);

const GgufKV *gguf_find_kv(const GgufFile *f, const char *key);
const GgufTensor *gguf_find_tensor(const GgufFile *f, const char *name);

// Typed lookups: 1 found, 0 absent, -1 wrong type or out of range (e names
// the file, the key and the type found). Integers accept every integer type,
// floats both float types.
int gguf_get_int(const GgufFile *f, const char *key, int64_t *out, PtError *e);
int gguf_get_float(const GgufFile *f, const char *key, double *out, PtError *e);
int gguf_get_bool(const GgufFile *f, const char *key, int *out, PtError *e);
int gguf_get_str(const GgufFile *f, const char *key, const char **s, size_t *len, PtError *e);
// Element i of an array (bounds and element type are the caller's to check).
void gguf_arr_str(const GgufKV *kv, uint64_t i, const char **s, size_t *len);
int64_t gguf_arr_int(const GgufKV *kv, uint64_t i);

const char *gguf_value_type_name(uint32_t type);
// Name of a ggml type ("Q4_K"), NULL when unknown; block geometry of a known type.
const char *ggml_type_name(uint32_t type);
int ggml_type_geometry(uint32_t type, int *block_elems, int *block_bytes);   // -1 when unknown
// Bytes of n elements (n a multiple of the block size) of a type.
uint64_t ggml_row_bytes(uint32_t type, uint64_t n);

// Block decoders (block_q8_0, block_q4_0, block_q4_1 in ggml's src/ggml-common.h):
// one block of 32 values.
void ggml_dequant_q8_0(const uint8_t *block, float *out);
void ggml_dequant_q4_0(const uint8_t *block, float *out);
void ggml_dequant_q4_1(const uint8_t *block, float *out);
// n values of a row (n a multiple of the block size) to fp32; -1 for a type
// that does not convert.
int ggml_dequant_row(uint32_t type, const uint8_t *src, float *dst, uint64_t n);
// Whole tensor to fp32 (t->numel floats).
int gguf_read_f32(const GgufFile *f, const GgufTensor *t, float *out, PtError *e);

// The Q4_1 offset of an int4 group (model/int4_grid.h: w = (u-8)*scale + zero,
// Q4_1: w = u*d + m with d = scale): m = zero - 8*scale, computed once in
// fp32 and rounded to fp16. *exact is 1 when fp16 holds that value exactly.
// The exporter and the importer both call this, so they agree bit for bit.
uint16_t ggml_q4_1_offset(float scale, float zero, int *exact);

// Prints the header, every metadata pair (long arrays abbreviated) and every
// tensor (name, type, shape, offset, bytes), with totals per type, and for
// our int4 exports a line with pocket.quantization.* (group size, blocks whose
// offset fp16 could not hold exactly). gguf_inspect opens the file first.
int gguf_describe(const GgufFile *f, FILE *out, PtError *e);
int gguf_inspect(const char *path, FILE *out, PtError *e);
