// gguf_import.h: a GGUF file (qwen3 or llama architecture) into a
// ModelBundle: the config from the <arch>.* keys, every tensor of the table
// converted to fp32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1), and a tokenizer.json
// rebuilt from the tokenizer.ggml.* keys (export/gguf_tokenizer.h).
#pragma once
#include "bundle.h"
#include "gguf_reader.h"

// Reads the config only (no tensor data).
int gguf_config(const GgufFile *f, ModelConfig *c, PtError *e);

// Every table tensor must be present with its shape (GGUF ne = the HF shape
// reversed); a missing output.weight means tied embeddings; any other tensor
// is an error (dropping weights silently changes the model). llama q/k rows
// are un-permuted back to HF's rotate-half order. Shapes are checked before
// anything is allocated, so the allocation is bounded by the file's size. On
// failure b is left empty.
int gguf_import_file(const GgufFile *f, ModelBundle *b, PtError *e);
int gguf_import(const char *path, ModelBundle *b, PtError *e);
