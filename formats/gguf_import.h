// gguf_import.h: a GGUF file (qwen3 or llama architecture) into a
// ModelBundle: the config from the <arch>.* keys, every tensor of the table
// converted to fp32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1), and a tokenizer.json
// rebuilt from the tokenizer.ggml.* keys (formats/gguf_tokenizer.h).
//
// Q4_0/Q4_1 matrices also give back the int4 quantizer state (model/int4_grid.h)
// so that `--int4` and a re-export use the same codes:
//   group G = pocket.quantization.group_size when present and consistent with
//     the blocks, else the largest of 128, 64, 32 for which the G/32 blocks of
//     every group share d (and m), else 32;
//   scale = d; Q4_1: zero = the fp16 value nearest m + 8*d among those whose
//     offset ggml_q4_1_offset(d, zero) is m (it exists for our own exports);
//     Q4_0: zero = 0 (a symmetric state when no block has a negative d or a
//     code 0, as our symmetric exports never do);
//   the weights stored are (u-8)*scale + zero, the quantizer's own formula, so
//     quant_codes gives back the file's codes. A group that no (scale, zero)
//     reproduces (foreign files) is counted and keeps GGUF's d*q + m.
// Matrices that int4 mode quantizes but the file stores in another type get
// RTN scales from their weights (counted too).
#pragma once
#include "../qat/qat.h"
#include "../model/bundle.h"
#include "gguf_reader.h"

typedef struct {
    int restored;             // 1: the file has Q4_0/Q4_1 matrices and q is their state (qat_free it)
    QatState q;               // made by qat_init for the imported bundle's table
    int group_from_metadata;  // 1: G came from pocket.quantization.group_size, 0: found from the blocks
    int n_q4;                 // matrices stored as Q4_0/Q4_1
    int n_rtn;                // quantized matrices stored in another type (RTN scales)
    uint64_t groups;          // int4 groups of the Q4 matrices
    uint64_t inexact_groups;  // of those, groups imported by d*q + m (no exact scale/zero)
} GgufInt4Import;

// Reads the config only (no tensor data).
int gguf_config(const GgufFile *f, ModelConfig *c, PtError *e);

// Every table tensor must be present with its shape (GGUF ne = the HF shape
// reversed); a missing output.weight means tied embeddings; any other tensor
// is an error (dropping weights silently changes the model). llama q/k rows
// (and their int4 scales) are un-permuted back to HF's rotate-half order.
// Shapes are checked before anything is allocated, so the allocation is
// bounded by the file's size. int4 may be NULL (the weights are the same;
// the state is dropped). On failure b is left empty and int4 unrestored.
int gguf_import_file_int4(const GgufFile *f, ModelBundle *b, GgufInt4Import *int4, PtError *e);
int gguf_import_int4(const char *path, ModelBundle *b, GgufInt4Import *int4, PtError *e);
// The same without the quantizer state.
int gguf_import(const char *path, ModelBundle *b, PtError *e);
