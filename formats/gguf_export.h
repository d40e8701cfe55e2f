// gguf_export.h: a whole model as a GGUF file for llama.cpp: general.* and
// <arch>.* keys, the tokenizer (gguf_tokenizer.h) and every tensor of the
// table under its llama.cpp name (gguf_names.h), written with gguf_writer.h.
#pragma once
#include "../model/bundle.h"
#include "../qat/qat.h"
#include "gguf_writer.h"

typedef struct {
    int n_tensors;
    int n_norm;             // 1-D tensors, always F32
    int n_quant;            // matrices in the requested type
    int n_fallback;         // matrices stored as F16 because ne[0] is not a multiple of 32
    int n_int4_float;       // q4_0/q4_1: matrices int4 mode does not quantize (F32; an untied embedding BF16)
    int n_int4_q8_0;        // of those, stored Q8_0 because their values are exactly Q8_0's
    int int4_group;         // q4_0/q4_1: the quantizer's group size
    uint64_t int4_blocks;   // Q4_0/Q4_1 blocks written
    uint64_t inexact_offset_blocks;   // Q4_1 blocks whose offset m is not exact in fp16
    uint64_t bytes;         // file size
} GgufExportStats;

// quant: f32, f16, bf16, q8_0, q4_0, q4_1. Norms stay F32; for f16/bf16/q8_0,
// matrices whose ne[0] is not a multiple of 32 fall back to F16 (q8_0, as
// llama.cpp's converter does).
//
// q4_0/q4_1 write exactly the weights `pocket forward --int4` runs with: int4
// is that quantizer state (the checkpoint's QAT scales, or RTN from the float
// weights; required for these two). Its tensors become Q4 blocks
// (gguf_encode_int4); every other matrix is stored as int4 mode runs it
// (cli/open_model.c): an untied embedding as BF16, anything else F32, so llama.cpp
// computes what --int4 computes. The group size must be a multiple of 32. The metadata gets
// pocket.quantization.group_size (UINT32), .symmetric (BOOL) and
// .inexact_offset_blocks (UINT64). When some Q4_1 offset is inexact, also
// pocket.quantization.zero: ARRAY of UINT16, the fp16 zero point of every
// group of every Q4_1 tensor, in file order (GGUF rows, then groups). Only
// then can an import tell the zero point back: the offset m alone fits
// several fp16 zero points (see formats/gguf_import.h). llama.cpp ignores it.
//
// A tied model has no output.weight. The llama preset is written as
// architecture "llama" with its q/k rows (and their int4 scales) permuted for
// llama.cpp's interleaved RoPE.
int gguf_export(const ModelBundle *b, const char *path, const char *quant, const QatState *int4,
                GgufExportStats *st, PtError *e);
// What gguf_export would refuse that the config, the tokenizer files and the
// int4 grid (int4: NULL unless q4_0/q4_1) show, before the weights are read
// (b->params is not read).
int gguf_export_check(const ModelBundle *b, const char *path, const char *quant, const QuantSpec *int4, PtError *e);
// The ggml type of a --quant name; -1 when unknown.
int gguf_quant_type(const char *quant);
