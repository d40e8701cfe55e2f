// mnn_export.h: a checkpoint as the MNN INT4 deployment package that MNN's
// LLM runtime loads (transformers/llm/engine in the MNN repository):
//   llm.mnn            the decoder graph (mnn_writer.h builds it of mnn_graph.h's ops)
//   llm.mnn.weight     int4 linears + RMSNorm weights (mnn_weights.c)
//   config.json        runtime options (file names, backend, sampler)
//   llm_config.json    model description, chat template, tied-embedding location
//   tokenizer.mtok     the tokenizer (mnn_tokenizer.c)
//   embeddings_bf16.bin  only for an untied model: the input embedding as bf16
//   dflash.mnn, dflash.mnn.weight, dflash_fc.mnn  only with a speculative
//                      draft (mnn_draft.h); llm.mnn then also outputs hidden_states
// The int4 codes and fp16 scales are the QatState's, unchanged: what the
// checkpoint trained with (QAT) or its RTN quantization.
#pragma once
#include "../model/bundle.h"
#include "../model/draft.h"
#include "../qat/qat.h"

typedef struct {
    int fused;              // 1: RoPE op, attention output in NC4HW4, MUL_SILU (MNN >= 3.6.1); 0: plain ops
    const char *memory;     // config.json "memory": "low" (int4 kernels) or "normal" (fp32 weights at load)
    int force;              // replace a non-empty output directory
    int greedy;             // config.json sampler_type "greedy" (else MNN's default "mixed" sampler)
    const Draft *draft;     // a DFlash draft for this checkpoint's int4 model to ship with it (NULL: none)
} MnnExportOptions;

typedef struct {
    int n_ops, n_tensors, n_linears;
    int64_t graph_bytes, weight_bytes, tokenizer_bytes, embedding_bytes;
    int draft_ops;          // with a draft: ops of dflash.mnn, and the sizes of its files
    int64_t draft_graph_bytes, draft_weight_bytes, draft_fc_bytes;
} MnnExportStats;

int mnn_export(const ModelBundle *b, const QatState *q, const char *dir, const MnnExportOptions *o, MnnExportStats *st,
               PtError *e);
// What mnn_export would refuse that the config, the tokenizer files, the int4
// grid and o (its draft) show, and an output directory it may not replace:
// checked before the weights are read (b->params is not read).
int mnn_export_check(const ModelBundle *b, const QuantSpec *spec, int quant_embedding, const MnnExportOptions *o,
                     const char *dir, PtError *e);
