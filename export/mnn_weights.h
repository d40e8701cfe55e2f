// mnn_weights.h: the blobs of llm.mnn.weight (MNN reads an int4 one as the
// op's IDSTQuan, schema/default/CaffeOp.fbs in the MNN repository): int4
// linears (IDST header, packed codes, fp16 alpha) and RMSNorm gamma/beta, laid
// back to back with no header or padding; each writer returns the `external`
// array of the op that reads the blob.
#pragma once
#include <stdio.h>
#include "../model/int4_grid.h"
#include "mnn_graph.h"

typedef struct {
    FILE *f;             // NULL: nothing is written (a LoRA graph only needs the offsets)
    const char *path;    // for errors
    int64_t offset;      // bytes written so far = the next blob's offset
    FILE *expect;        // with f NULL: the blobs are compared with this file's bytes instead
} MnnWeightFile;

// IDST header size for a [rows, cols] 4-bit matrix: 22 bytes, or 26 when a
// dimension needs 32 bits.
int mnn_idst_header_size(int64_t rows, int64_t cols);

// One int4 linear W[rows, cols] (HF [out, in]) with the quantizer's scale and
// zero per (row, group): the codes come from quant_codes, the alpha holds
// [zero, scale] pairs (asymmetric) or scales (symmetric) as fp16.
int mnn_write_linear(MnnWeightFile *wf, const QuantSpec *spec, const float *w, int64_t rows, int64_t cols,
                     const float *scale, const float *zero, MnnExternal *ext, PtError *e);
// RMSNorm: gamma fp32[n] followed by beta (zeros) fp32[n].
int mnn_write_rmsnorm(MnnWeightFile *wf, const float *gamma, int n, MnnExternal *ext, PtError *e);
