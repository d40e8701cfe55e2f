// gguf_writer.h: GGUF v3 files for llama.cpp (ggml's docs/gguf.md).
//
// A GgufWriter collects metadata pairs and tensors, then writes the file in
// one pass: header, pairs, tensor infos, padding, each tensor's
// bytes padded to the alignment, the last one included. Tensors given as fp32
// are encoded while writing, a block of rows at a time, so no second copy of
// the model is held in memory. Files are written to PATH.tmp.PID and renamed.
//
//     GgufWriter *w = gguf_writer_new();
//     gguf_kv_str(w, "general.architecture", "qwen3");
//     gguf_add_tensor(w, "output_norm.weight", 1, ne, GGML_TYPE_F32, data);
//     if (gguf_writer_save(w, "model.gguf", &err)) { ... }
//     gguf_writer_free(w);
//
// The files themselves are made by gguf_export.h (a whole model) and
// gguf_lora.h (a LoRA adapter).
#pragma once
#include "../model/int4_grid.h"
#include "gguf_reader.h"

typedef struct GgufWriter GgufWriter;

GgufWriter *gguf_writer_new(void);
void gguf_writer_free(GgufWriter *w);

// Metadata, in the order added. A repeated key, an over-long string or an
// empty array is recorded and reported by gguf_writer_save.
void gguf_kv_u32(GgufWriter *w, const char *key, uint32_t v);
void gguf_kv_i32(GgufWriter *w, const char *key, int32_t v);
void gguf_kv_u64(GgufWriter *w, const char *key, uint64_t v);
void gguf_kv_f32(GgufWriter *w, const char *key, float v);
void gguf_kv_bool(GgufWriter *w, const char *key, int v);
void gguf_kv_str(GgufWriter *w, const char *key, const char *s);
void gguf_kv_strn(GgufWriter *w, const char *key, const char *s, size_t len);
// Array of n strings; lens may be NULL (then strlen).
void gguf_kv_arr_str(GgufWriter *w, const char *key, const char *const *s, const size_t *lens, uint64_t n);
void gguf_kv_arr_u16(GgufWriter *w, const char *key, const uint16_t *v, uint64_t n);
void gguf_kv_arr_i32(GgufWriter *w, const char *key, const int32_t *v, uint64_t n);

// A tensor of ne[0] x ... x ne[n_dims-1] fp32 values (ne[0] contiguous)
// stored as type (F32, F16, BF16, Q8_0); data must stay valid until
// gguf_writer_save. Errors (bad name, ne[0] not a multiple of the block size,
// unsupported type) are reported here. Q4_0/Q4_1 tensors are added as bytes
// made by gguf_encode_int4.
int gguf_add_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type,
                    const float *data, PtError *e);
// A tensor whose bytes are already encoded in its type (nbytes must match).
int gguf_add_tensor_bytes(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type,
                          const void *bytes, uint64_t nbytes, PtError *e);
int gguf_writer_save(GgufWriter *w, const char *path, PtError *e);
// The size of the file the last successful gguf_writer_save wrote (0 before one).
uint64_t gguf_writer_saved_bytes(const GgufWriter *w);

// Q8_0 block encoder, llama.cpp's reference rounding (quantize_row_q8_0_ref in
// ggml's src/ggml-quants.c): 32 values
// in, one block out; -1 when the fp16 scale overflows.
int ggml_quant_q8_0(const float *x, uint8_t *block);
// n values (a multiple of the block size) to F32, F16, BF16 or Q8_0; returns
// -1 and the index of the first value that does not fit (fp16 overflow) in
// *bad. Q4_0/Q4_1 are not rounded here: their codes come from the int4
// quantizer (gguf_encode_int4).
int ggml_quant_row(uint32_t type, const float *x, uint8_t *out, uint64_t n, uint64_t *bad);

// Int4 weights (model/int4_grid.h) as Q4_0 or Q4_1 blocks:
// codes from quant_codes with the per-(row, group) scale and zero; each group
// of G weights (G a multiple of 32) becomes G/32 blocks carrying the same
// codes and d = scale; Q4_1 blocks also carry m = ggml_q4_1_offset(scale,
// zero), computed once per group. Q4_0 holds w = (u-8)*d only, so it needs
// zero == 0 in every group (a symmetric state). *inexact_blocks (may be NULL)
// is increased by the Q4_1 blocks whose m fp16 could not hold exactly.
// out: rows * cols/32 blocks, rows one after another. `what` names the tensor.
int gguf_encode_int4(uint32_t type, const QuantSpec *spec, const float *w, int64_t rows, int64_t cols,
                     const float *scale, const float *zero, uint8_t *out, uint64_t *inexact_blocks,
                     const char *what, PtError *e);
