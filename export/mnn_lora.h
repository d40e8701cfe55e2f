// mnn_lora.h: LoRA adapters for MNN's LLM runtime, as MNN's own exporter
// makes them (transformers/llm/export/utils/lora.py in the MNN repository)
// and its runtime loads them (Llm::create_lora in
// transformers/llm/engine/src/llm.cpp):
//
//   lora.mnn   a copy of the base package's graph (llm.mnn) whose int4
//              convolutions keep their names and their `external` offsets into
//              the package's llm.mnn.weight; after each targeted projection
//              of layer i two 1x1 convolutions with inline fp32 weights,
//              lora_A [r, in] and lora_B x alpha/r [out, r], both reading the
//              projection's NC4HW4 input, and a BinaryOp ADD of the
//              projection's output and lora_B's, which the rest of the layer
//              reads instead. Named <projection>/lora_A, /lora_B, /lora_add
//              (the projection's "/Linear" replaced).
//
// The runtime loads lora.mnn with the base module as `base`: an op whose name,
// type and parameter type equal a base op's clones that op's execution, so
// the int4 weights are in memory once however many adapters are loaded; only
// the adapter's own convolutions and the KV cache are per adapter.
//
// The graph of lora.mnn is the decoder's (mnn_writer.h's mw_decoder) with
// these ops; this file writes it beside a package, or folds the adapter into
// a whole package (mnn_export.h).
#pragma once
#include "../model/lora_view.h"
#include "mnn_export.h"

typedef struct {
    int fused;              // the package's graph form
    int n_adapted;          // projections with an adapter
    int n_ops;              // ops of lora.mnn
    int64_t bytes;          // its size
    char path[1024];        // where it was written
} MnnLoraStats;

// lora.mnn beside the base package: `out` is the package directory (then
// DIR/lora.mnn) or a file path inside one (several adapters for one base).
// The package must be the one `pocket export --format mnn` writes for this
// checkpoint and int4 state: its llm.mnn must equal the base graph rebuilt
// here (either form) and its llm.mnn.weight the weights, byte for byte, else
// nothing is written. An existing adapter file is replaced only with force.
// src names the adapter in errors.
int mnn_lora_export(const ModelBundle *b, const QatState *q, const LoraWeightsView *v, const char *src,
                    const char *out, int force, MnnLoraStats *st, PtError *e);
// Its checks that need no weights: a base package's files at out, and an
// adapter file there replaced only with force.
int mnn_lora_export_check(const char *out, int force, PtError *e);

// --merge: a whole package (mnn_export) with the adapter folded into the
// weights. Each targeted projection becomes W' = W0 + (alpha / r) B A, W0 the
// weights the adapter was trained on (int4_weights, the base's dequantized
// int4 weights, for an int4_base adapter; else the float weights), and its
// codes are re-derived on the base's own int4 grid: quant_codes(W') with the
// base's fp16 scale and zero point per (row, group), kept, except in a group
// where some merged weight lies beyond the grid's range (its rounded position
// outside the codes): that group gets RTN's scale and zero of its merged
// weights rather than clamping them. Why: an update under half a step leaves
// the code as it was whatever the grid, and a new grid for every group would
// also move the base's own rounding (measured in docs/exports.md); only an update
// the grid cannot hold at all needs a wider one. So an int4 merge keeps the
// part of the adapter that crosses rounding boundaries; lora.mnn keeps all.
typedef struct {
    int64_t total;       // weights of the adapted projections
    int64_t changed;     // of them, codes that differ from the base package's
    int64_t groups;      // (row, group) grids of the adapted projections
    int64_t regridded;   // of them, widened to RTN's because a merged weight was beyond the base's range
} MnnMergeStats;
int mnn_lora_merge(const ModelBundle *b, const QatState *q, const float *int4_weights, const LoraWeightsView *v,
                   const char *dir, const MnnExportOptions *o, MnnExportStats *st, MnnMergeStats *ms, PtError *e);
