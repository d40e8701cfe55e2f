// mnn_writer.h: the pieces mnn_export.c wires the decoder (llm.mnn) from,
// shared with mnn_draft.c (the DFlash draft's graphs): a graph being built,
// the weight file its ops' blobs stream into, and the target checkpoint whose
// int4 state the linears come from.
#pragma once
#include "../model/draft.h"
#include "mnn_export.h"

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
    int fused;                   // MnnExportOptions.fused
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
