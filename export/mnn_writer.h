// mnn_writer.h: the MNN graph builder: a graph being built, the weight file
// its ops' blobs stream into, and the target checkpoint whose int4 state the
// linears come from; the pieces (mw_*) the decoder (llm.mnn) is wired from,
// which the DFlash draft's graphs (mnn_draft.c) share, and the decoder's whole
// graph. The package these go into is mnn_export.h's; lora.mnn (mnn_lora.h)
// is the decoder's graph with an adapter's ops.
#pragma once
#include "../model/bundle.h"
#include "../model/draft.h"
#include "../model/lora_view.h"
#include "../qat/qat.h"
#include "../util/out_dir.h"
#include "mnn_weights.h"

// cos/sin tables of one set of positions: [1, S, 1, D] for the elementwise
// rotation and [S, D] rows for the fused RoPE op.
typedef struct {
    int cos, sin, cos_rows, sin_rows;
} MnnRope;

typedef struct {
    const ModelBundle *b;
    const QatState *q;
    MnnGraph g;
    MnnWeightFile wf;
    int fused;                   // 1: MNN's fused RoPE, attention and MUL_SILU (MnnExportOptions.fused)
    const LoraWeightsView *lora; // a LoRA graph (lora.mnn): the adapter's ops after each targeted projection
    const Draft *draft;          // llm.mnn also outputs the draft's context, "hidden_states" (mnn_draft.h)
    int mask;                    // the attention mask input
    MnnRope rope;                // the decoder's positions
    int n_linears;
    int64_t lm_head_offset;      // the lm_head blob, for the tied embedding lookup
    int64_t lm_head_code_bytes;  // its header + packed codes (external[1])
    int64_t lm_head_alpha_bytes;
    PtError *e;
} MnnWriter;

// "/layers.L/what", or "/what" for layer -1 (buf: 256 bytes).
char *mw_name(char *buf, int layer, const char *what);
// "base/what" (buf: 256 bytes; may be base itself).
char *mw_sub(char *buf, const char *base, const char *what);
// [1, S, n] (NCHW) <-> NC4HW4 [S, n, 1, 1], the layout convolutions run on;
// from_c4's output is named out_name if given.
int mw_to_c4(MnnWriter *w, const char *name, int x, int n);
int mw_from_c4(MnnWriter *w, const char *name, int y, int n, const char *out_name);
// RMSNorm over the last axis (n values), gamma streamed to the weight file.
int mw_rmsnorm(MnnWriter *w, const char *name, int x, const float *gamma, int n, int *y);
// cos/sin of position_ids [1, S] (int32) with the target's theta and head
// size, computed in the graph as model/ops/rope.c does; ops named prefix/....
void mw_rope_tables(MnnWriter *w, const char *prefix, int position_ids, MnnRope *r);
// x * cos + rotate_half(x) * sin on [1, S, heads, D].
int mw_rope(MnnWriter *w, const char *base, int x, const MnnRope *r);
// logits [1, S, V] = h [1, S, H] through the target's int4 lm_head (the tied
// embedding), its blob streamed to the weight file: "/lm/lm_head/Linear",
// output "logits".
int mw_lm_head(MnnWriter *w, int h, int *logits);
// The lm_head's rows ids[0..n) only (int4, the checkpoint's codes and scales):
// [1, S, n] logits of those tokens.
int mw_lm_head_rows(MnnWriter *w, int h, const int *ids, int n, const char *name, int *logits);

// The decoder's whole graph (llm.mnn) into w->g, its weights streamed to
// w->wf in op order: the four inputs the runtime feeds, the layers (fused or
// not), the final norm and the lm_head, with w->lora's ops after each targeted
// projection and w->draft's "hidden_states" output.
int mw_decoder(MnnWriter *w);

// NAME and NAME.weight into dir: `build` makes the graph in w (w->g
// initialised) with its weights streamed to NAME.weight, which is written
// atomically, then the graph serialized as NAME. *graph_bytes gets its size.
int mw_write(MnnWriter *w, const OutDir *dir, const char *name, int (*build)(MnnWriter *w, const void *ctx),
             const void *ctx, int64_t *graph_bytes);

// What the package format can hold (model type, sizes, the int4 group, a tied
// embedding quantized), checked before anything is written.
int mnn_check_exportable(const ModelConfig *c, const QuantSpec *spec, int quant_embedding, PtError *e);

// The graph alone (llm.mnn's bytes, malloc'd) of the package mnn_export
// writes with `fused`, or with lora its LoRA copy (lora.mnn, mnn_lora.h). The
// weights go through wf as they would to llm.mnn.weight: written, compared
// with wf->expect, or (both NULL) only counted, since the graph holds their
// offsets.
int mnn_export_graph(const ModelBundle *b, const QatState *q, int fused, const LoraWeightsView *lora, MnnWeightFile *wf,
                     uint8_t **graph, size_t *len, PtError *e);
