// hf_export.h: a ModelBundle out as a Hugging Face model directory that
// transformers' from_pretrained loads: config.json, model.safetensors (every
// tensor of the table under its HF name; tied models store only the
// embedding, as save_pretrained does) and the tokenizer files when the bundle
// has them.
#pragma once
#include "../model/bundle.h"

// dtype: "F32", "BF16" or "F16" (case-insensitive), the storage type of the
// weights; config.json's torch_dtype says the same. Atomic at directory
// level: everything is written into DIR.tmp.PID, which is then renamed to
// DIR. An existing empty DIR is replaced; a non-empty one is an error unless
// force, in which case it is replaced whole (its old contents are deleted
// only after the new directory is in place). On failure nothing is left.
int hf_export(const ModelBundle *b, const char *dir, const char *dtype, int force, PtError *e);
// Its refusals that need no model: an unknown dtype, a directory it may not replace.
int hf_export_check(const char *dir, const char *dtype, int force, PtError *e);
