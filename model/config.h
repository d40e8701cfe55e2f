// config.h: the model's sizes. Every size the code uses comes from here.
#pragma once
#include "../util/util.h"

typedef struct {
    char name[64];          // preset name or "hf"
    char model_type[32];    // "qwen3" or "llama"
    int n_layer;            // decoder blocks L
    int d_model;            // hidden size H
    int n_head;             // query heads
    int n_kv_head;          // key/value heads (GQA)
    int head_dim;           // per-head size, independent of H / n_head
    int d_ff;               // SwiGLU inner size F
    int vocab_size;         // V
    int max_seq;            // max_position_embeddings
    float rope_theta;
    float norm_eps;
    float init_std;         // initializer_range
    int tied_embeddings;    // lm_head shares the embedding
    int qk_norm;            // per-head RMSNorm on q and k (Qwen3: on; Llama: off)
    int bos_id, eos_id, pad_id;   // -1 when absent
    int choice_id;          // the decision head's lm_head row (model/choice_head.h); 0 = none
} ModelConfig;

// "pocket-0.3b" and tiny test presets ("tiny", "tiny-untied", "tiny-llama").
int config_preset(ModelConfig *c, const char *name, PtError *e);
// Parse an HF config.json (qwen3 or llama model_type); src names the file in errors.
int config_from_hf_json(ModelConfig *c, const char *json_text, const char *src, PtError *e);
// A preset name, a config.json path, or a directory holding config.json.
int config_load(ModelConfig *c, const char *preset_or_path, PtError *e);
// Also refuses a config of more than CONFIG_MAX_PARAMS parameters (2^40), so
// sizes computed from it never overflow.
#define CONFIG_MAX_PARAMS (1ull << 40)
int config_validate(const ModelConfig *c, const char *src, PtError *e);
// HF config.json text for this config (malloc'd), as transformers writes it.
char *config_to_hf_json(const ModelConfig *c);
void config_print(const ModelConfig *c, FILE *f);
// Counts for FLOP accounting.
size_t config_param_count(const ModelConfig *c);
double config_train_flops_per_token(const ModelConfig *c, int T);   // 6N + attention
const char *config_preset_names(void);   // for --help
