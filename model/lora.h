// lora.h: LoRA adapters on the decoder's projections, as PEFT defines them:
// a targeted projection y = x W^T becomes
//     y = x W^T + (alpha / r) * (x A^T) B^T,    A [r, in], B [out, r]
// with W frozen. The adapter is a tensor table of its own (one row per A and
// B, PEFT's names and shapes), so allocation, the optimizer, checkpoints and
// the data-parallel step work on it as on a model's table; the decoder
// (model.c) runs it through the same backend ops as the base.
#pragma once
#include "tensors.h"

// The projections an adapter may target. This order is the target index
// shared by every consumer (the exporters, the checkpoint's bit mask).
enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_N_TARGETS };

enum { LORA_INIT_PEFT = 0, LORA_INIT_GAUSSIAN = 1 };

typedef struct {
    int rank;            // r >= 1
    float alpha;         // the update is scaled by alpha / r
    float dropout;       // on the adapter's input in training (model.h: lora_tmp)
    unsigned targets;    // bit t: target t (LORA_Q ..) is adapted
} LoraConfig;

// Marks the B half of a pair in the adapter table's flags (A has it clear).
#define TF_LORA_B (1u << 8)

// "q", "k", ... and PEFT's module names "q_proj", ... of target t.
const char *lora_target_name(int t);
// The base's tensor kind (T_WQ ..) of target t, and the target of a kind (-1: none).
TensorKind lora_target_kind(int t);
int lora_target_of_kind(TensorKind k);
const char *lora_target_module(int t);
// The target whose short or module name is `name`, -1 when none.
int lora_target_find(const char *name);
// "q,k,v,o" (short or module names, commas, spaces allowed) into a bit mask;
// fails naming the first unknown entry, or an empty list.
int lora_targets_parse(const char *list, unsigned *mask, const char *src, PtError *e);
// The canonical list of a mask: "q,k,v,o,gate,up,down" (the table order).
void lora_targets_format(unsigned mask, char *out, size_t cap);
static inline float lora_scale(const LoraConfig *c) { return c->alpha / (float)c->rank; }
// Refuses what the adapter cannot be: rank outside 1..LORA_MAX_RANK, no
// target, alpha zero or not finite, dropout outside [0, 1). src names the origin.
enum { LORA_MAX_RANK = 65536 };
int lora_config_check(const LoraConfig *c, const char *src, PtError *e);

// The in and out features of target t's projection in a model of this config.
void lora_target_dims(const ModelConfig *c, int t, int *in, int *out);
// The adapter's table: for each layer, each target in order, A [r, in] then
// B [out, r], named base_model.model.model.layers.{l}.self_attn.q_proj.lora_A.weight
// etc. (PEFT's names), kind = the projection's base kind, flags TF_DECAY
// (PEFT trains them with weight decay like any parameter), TF_LORA_B on B.
void lora_table_build(TensorTable *tt, const ModelConfig *mc, const LoraConfig *lc);
// The adapter table row of (layer, target, B?), -1 when not targeted.
int lora_table_index(const TensorTable *tt, int layer, int target, int b);

// Named views of one flat buffer laid out by an adapter table; NULL where a
// projection is not targeted.
typedef struct {
    float *a[LORA_N_TARGETS], *b[LORA_N_TARGETS];
} LoraLayerViews;
typedef struct {
    LoraLayerViews layer[MAX_LAYERS];
} LoraViews;
void lora_views(LoraViews *v, const TensorTable *tt, float *base);

// PEFT's initialisation: B = 0; A uniform in +-1/sqrt(in) (kaiming_uniform_
// with a = sqrt(5), PEFT's default), or N(0, 1/r) (init = gaussian).
// Deterministic in the seed.
void lora_init(float *params, const TensorTable *tt, const LoraConfig *c, int init, uint64_t seed);

// An adapter in host memory: what checkpoints, importers and exporters pass
// around. The weight of (layer, target) is lora_adapter_tensor(a, l, t, 0)
// (A, [rank, in]) and (.., 1) (B, [out, rank]); both NULL when t is not a
// target. The update it makes is lora_scale(&a->cfg) * B A.
typedef struct {
    LoraConfig cfg;
    TensorTable tt;            // lora_table_build of the base's config
    float *params;             // tt.total floats, 64-byte aligned
    char base_sha256[65];      // the base it was trained on (formats/lora_checkpoint.h); "" = unknown
    int base_int4;             // trained against the int4 base (QLoRA)
} LoraAdapter;

void lora_adapter_alloc(LoraAdapter *a, const ModelConfig *mc, const LoraConfig *lc);
void lora_adapter_free(LoraAdapter *a);
float *lora_adapter_tensor(const LoraAdapter *a, int layer, int target, int b);
