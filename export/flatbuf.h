// flatbuf.h: a small FlatBuffers writer, enough for MNN's graph schema,
// without the flatbuffers library.
//
// Build a tree (tables with scalar and reference fields, strings, vectors),
// then serialize it. Serialization goes front to back: each table's vtable is
// written just before it, and every child (string, vector, sub-table) after
// the field that references it, so every reference is a positive forward
// offset as the format requires. Inline fields are laid out largest first,
// equal sizes in field-id order. Scalars are always written explicitly, even
// when they equal the schema default (as MNNConvert does), so a reader never
// depends on defaults we might have mistaken.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct FbNode FbNode;
typedef struct {
    FbNode **all;   // every node made by this builder, freed by fb_free
    size_t n, cap;
} FbBuilder;

#define FB_MAX_FIELDS 24   // the largest MNN table used (IDSTQuan) has 16

void fb_init(FbBuilder *b);
void fb_free(FbBuilder *b);

FbNode *fb_table(FbBuilder *b);
void fb_u8(FbNode *table, int id, uint8_t v);   // also bool and int8 enums
void fb_i8(FbNode *table, int id, int8_t v);
void fb_i32(FbNode *table, int id, int32_t v);
void fb_u32(FbNode *table, int id, uint32_t v);
void fb_f32(FbNode *table, int id, float v);
void fb_ref(FbNode *table, int id, FbNode *child);   // table, string or vector

FbNode *fb_string(FbBuilder *b, const char *s);
FbNode *fb_vec_i32(FbBuilder *b, const int32_t *v, size_t n);
FbNode *fb_vec_i64(FbBuilder *b, const int64_t *v, size_t n);
FbNode *fb_vec_f32(FbBuilder *b, const float *v, size_t n);
// A vector of references (tables or strings) that grows with fb_vec_push.
FbNode *fb_vec_refs(FbBuilder *b);
void fb_vec_push(FbNode *vec, FbNode *item);

// The serialized buffer with `root` as root table (malloc'd, *len bytes).
uint8_t *fb_serialize(const FbNode *root, size_t *len);
