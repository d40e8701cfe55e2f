// tensors.h: the tensor table. One row per parameter (HF name, shape, layer,
// flags). It drives allocation, checkpoint I/O, import/export name mapping,
// the weight-decay mask and QAT selection; no other file lists parameters.
#pragma once
#include "config.h"

#define MAX_LAYERS 256

typedef enum {
    T_EMBED, T_LN1, T_WQ, T_WK, T_WV, T_WO, T_QNORM, T_KNORM, T_LN2,
    T_WGATE, T_WUP, T_WDOWN, T_LNF, T_LMHEAD, T_KIND_COUNT
} TensorKind;

enum {
    TF_DECAY = 1,   // AdamW weight decay applies (matrices, not norms)
    TF_QUANT = 2,   // a matmul weight the int4 quantizer may take
    TF_NORM = 4,    // an RMSNorm weight (initialised to 1)
    TF_EMBED = 8,   // the embedding (also the lm_head when tied)
};

typedef struct {
    char name[96];          // HF parameter name
    TensorKind kind;
    int layer;              // -1 for model-wide tensors
    int ndim;
    int64_t shape[2];       // [out, in] for matrices, as HF stores them
    size_t numel;
    size_t offset;          // in floats, into every flat buffer (params, grads, m, v)
    unsigned flags;
} TensorInfo;

typedef struct {
    TensorInfo *t;
    int n;
    size_t total;           // floats in one flat buffer
    int tied;               // lm_head.weight is model.embed_tokens.weight
} TensorTable;

void tensor_table_build(TensorTable *tt, const ModelConfig *c);
void tensor_table_free(TensorTable *tt);
// Appends a tensor (d1 = 0: 1-D) after the last, 64-byte aligned; the table
// must have room (other tables than the model's: model/lora.c).
void tensor_table_add(TensorTable *tt, TensorKind kind, int layer, const char *name, int64_t d0, int64_t d1,
                      unsigned flags);
// The part of the table inside the floats [lo, hi) of a flat buffer, as a
// table of its own whose offsets count from lo (total = hi - lo): each
// tensor that overlaps the range, cut to the overlap (1-D, same name and
// flags). The optimizer of one rank's shard runs on it. Free it with
// tensor_table_free.
void tensor_table_slice(const TensorTable *tt, size_t lo, size_t hi, TensorTable *out);
// Lookup by HF name; with a tied table "lm_head.weight" resolves to the embedding.
const TensorInfo *tensor_table_find(const TensorTable *tt, const char *name);

// Named views into one flat buffer laid out by the table. The same function
// gives views of params, grads and optimizer moments.
typedef struct {
    float *ln1, *wq, *wk, *wv, *wo, *qnorm, *knorm, *ln2, *wgate, *wup, *wdown;
} LayerViews;

typedef struct {
    float *embed;       // [V, H]
    float *lnf;         // [H]
    float *lm_head;     // [V, H]; == embed when tied
    LayerViews layer[MAX_LAYERS];
} ParamViews;

void param_views(ParamViews *v, const TensorTable *tt, float *base);
// Points lv's view of a layer tensor kind (T_LN1 .. T_WDOWN) at p; other kinds are ignored.
void layer_view_set(LayerViews *lv, TensorKind kind, float *p);
