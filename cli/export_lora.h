// export_lora.h: `pocket export --lora ADAPTER`: an adapter checkpoint
// (formats/lora_checkpoint.h) for the runtimes: --format mnn writes lora.mnn
// beside the base package (export/mnn_lora.h), or with --merge a whole package
// with the adapter folded in; --format gguf the llama.cpp adapter
// (formats/gguf_lora.h). open_model has loaded the adapter and checked its
// base hash (the float weights, or the int4 weights for a QLoRA adapter,
// which mnn requires: MNN runs the int4 model).
#pragma once
#include "../export/mnn_export.h"
#include "open_model.h"

typedef struct {
    const char *adapter;          // the adapter checkpoint
    const char *format;           // "mnn" or "gguf"
    const char *out;
    const char *quant;            // gguf tensor type: f32 (default) or f16
    int merge, force;
    const MnnExportOptions *mnn;  // --merge: the package's options
} LoraExportArgs;

// om: the base checkpoint opened with the adapter (om->ad), and with its int4
// state for mnn.
int export_lora(const OpenModel *om, const LoraExportArgs *a, PtError *e);
