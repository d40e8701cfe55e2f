// gguf_names.h: the model's tensors under their llama.cpp names in GGUF
// ("blk.3.attn_q.weight"; the names gguf-py lists in gguf-py/gguf/constants.py
// of the llama.cpp repository), the q/k row order of its "llama"
// architecture, and which architecture a config is. Kept apart from gguf_reader so that the reader knows nothing
// of the model's tensor table.
#pragma once
#include "../model/tensors.h"
#include "gguf_reader.h"

// GGUF name of a tensor-table row ("blk.3.attn_q.weight").
void gguf_tensor_name(const TensorInfo *ti, char out[GGUF_MAX_NAME]);
// llama.cpp's "llama" architecture uses interleaved RoPE, so its q/k rows are
// stored permuted within each head: GGUF row h*D + 2i + j holds HF row
// h*D + j*D/2 + i (i < D/2, j in {0,1}). to_gguf=1 applies that, 0 undoes it.
// rows = n_heads * head_dim rows of cols floats; src and dst must not overlap.
void gguf_llama_permute(const float *src, float *dst, int n_heads, int head_dim, int64_t cols, int to_gguf);
// llama.cpp's architecture for the config: "qwen3" (with q/k norms) or
// "llama" (without); an error for anything else.
int gguf_arch(const ModelConfig *c, const char **arch, PtError *e);
