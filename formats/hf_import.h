// hf_import.h: a Hugging Face model directory (config.json, safetensors
// weights, tokenizer files) into a ModelBundle.
#pragma once
#include <jansson.h>
#include "../model/bundle.h"

// Reads DIR/config.json, then DIR/model.safetensors, or when that is absent
// DIR/model.safetensors.index.json and the shards its weight_map names (the
// weight_map is authoritative). Tensors may be F32, BF16 or F16. Every tensor
// of the table must be present with exactly the table's shape; an extra
// tensor (a bias, a parameter of another architecture) is an error, since
// dropping weights silently changes the model; the only tolerated extras are
// rotary_emb.inv_freq buffers (recomputed from the config). With tied
// embeddings a stored lm_head.weight must equal the embedding; with untied
// ones it must be present. DIR/tokenizer.json and DIR/tokenizer_config.json
// are kept verbatim when present. On failure b is left empty (freed).
int hf_import(const char *dir, ModelBundle *b, PtError *e);

// The JSON file at path (duplicate keys refused), or NULL with one line
// naming the file and the place. json_decref it.
json_t *hf_read_json(const char *path, PtError *e);

// 1 when DIR looks like an HF model directory (holds config.json).
int hf_is_model_dir(const char *dir);
