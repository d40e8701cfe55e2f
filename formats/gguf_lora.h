// gguf_lora.h: a LoRA adapter as the GGUF file llama.cpp loads beside its
// base model (llama_adapter_lora_init in src/llama-adapter.cpp of the
// llama.cpp repository; llama-cpp-python's Llama(lora_path=...)):
//
//   general.architecture  the base's ("qwen3", or "llama"): llama.cpp refuses
//                         another
//   general.type          "adapter"
//   adapter.type          "lora"
//   adapter.lora.alpha    FLOAT32; the runtime scales by alpha / rank, rank
//                         read from lora_b's ne[0]
//   blk.N.<proj>.weight.lora_a  ne = [in, r]   (PEFT's A [r, in] row-major)
//   blk.N.<proj>.weight.lora_b  ne = [r, out]  (PEFT's B [out, r] row-major)
//
// <proj> is the base tensor's name (attn_q, ..., ffn_down): llama.cpp pairs
// each adapter with the model tensor of that name and checks that the
// model's ne[0] is lora_a's ne[0] and its ne[1] lora_b's ne[1]. For the
// "llama" architecture the q and k rows of the base are stored permuted for
// interleaved RoPE (gguf_names.h), so lora_b's rows of q and k are permuted
// the same way. Tensors are F32 or F16 (type).
#pragma once
#include "../model/lora_view.h"

typedef struct {
    int n_tensors;
    uint64_t bytes;
} GgufLoraStats;

// type: "f32" or "f16". src names the adapter in errors. Written to
// PATH.tmp.PID and renamed.
int gguf_lora_export(const ModelBundle *b, const LoraWeightsView *v, const char *src, const char *path,
                     const char *type, GgufLoraStats *st, PtError *e);
