// lora_view.h: a LoRA adapter as the exporters read it (formats/gguf_lora.c,
// export/mnn_lora.c): plain pointers into the adapter's weights, in PEFT's
// layout, and nothing of how they were trained. A targeted projection
// y = x W^T becomes
//     y = x W^T + (alpha / rank) * (x A^T) B^T,    A [rank, in], B [out, rank]
// both row-major. Target index t (0..6) is q, k, v, o, gate, up, down: the
// order of model/lora.h (lora_target_name) and the adapter checkpoints.
#pragma once
#include "bundle.h"
#include "lora.h"

typedef struct {
    int rank;
    float alpha;
    unsigned targets;        // bit t: target t is adapted (in every layer)
    int n_layer;             // the adapter's layer count
    int64_t in[LORA_N_TARGETS], out[LORA_N_TARGETS];   // the adapter's own shapes of target t
    int int4_base;           // trained against the base's int4 weights (QLoRA), else its float weights
    const float *a[MAX_LAYERS][LORA_N_TARGETS];   // NULL where not adapted
    const float *b[MAX_LAYERS][LORA_N_TARGETS];
} LoraWeightsView;

// The base's tensor-table row adapted by (layer, target t); -1 when none.
int lora_view_row(const TensorTable *tt, int layer, int t);
// The adapter fits this base: rank >= 1, alpha non-zero and finite (as
// lora_config_check), the base's layer
// count, every target's [out, in] the base projection's, A and B given exactly
// where targeted, every value finite. Errors name `src` (the adapter) and the
// first place that does not fit.
int lora_view_check(const LoraWeightsView *v, const ModelBundle *b, const char *src, PtError *e);

// Folds the adapter into a copy of the weights: for every targeted
// projection W += (alpha / rank) * B A, accumulated in double per weight and
// rounded once. params is laid out by b->tt (the caller's copy of b->params,
// or of the dequantized int4 weights for an int4_base adapter).
void lora_view_merge(const LoraWeightsView *v, const TensorTable *tt, float *params);
