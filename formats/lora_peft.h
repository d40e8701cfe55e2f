// lora_peft.h: LoRA adapters in PEFT's format: a folder with
// adapter_config.json (peft_type LORA, r, lora_alpha, lora_dropout,
// target_modules, ...) and adapter_model.safetensors holding, per adapted
// module, base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight
// [r, in] and ...lora_B.weight [out, r] (the names PeftModel saves, without
// the adapter name), so PeftModel.from_pretrained loads it onto the HF export
// of the base.
#pragma once
#include "../model/lora.h"

// Reads a PEFT folder into an adapter for a base of config mc (a's base hash
// left empty: the caller sets it). Refuses, with one line naming the file and
// the key or tensor, what this adapter cannot be: another peft_type, DoRA,
// rslora, bias other than none, modules_to_save, layers_to_transform /
// layers_pattern, rank_pattern / alpha_pattern, fan_in_fan_out, LoRA biases,
// target_parameters, layer_replication, a regex target_modules, a module
// other than q/k/v/o/gate/up/down_proj, and a tensor that is missing, extra
// or of another shape than the base implies (rank or layer count mismatch).
int lora_peft_import(const char *dir, const ModelConfig *mc, LoraAdapter *a, PtError *e);
// 1 when dir holds adapter_config.json.
int lora_peft_is_dir(const char *dir);
// Writes the folder (written whole or not at all: util/out_dir.h);
// base_name goes to base_model_name_or_path.
int lora_peft_export(const LoraAdapter *a, const char *dir, const char *base_name, int force, PtError *e);
