// lora.c: the adapter's targets, tensor table, views and initialisation (lora.h).
#include "lora.h"
#include <math.h>
#include <string.h>

static const char *const NAMES[LORA_N_TARGETS] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *const MODULES[LORA_N_TARGETS] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};
static const TensorKind KINDS[LORA_N_TARGETS] = {T_WQ, T_WK, T_WV, T_WO, T_WGATE, T_WUP, T_WDOWN};

const char *lora_target_name(int t) { return t >= 0 && t < LORA_N_TARGETS ? NAMES[t] : "?"; }
const char *lora_target_module(int t) { return t >= 0 && t < LORA_N_TARGETS ? MODULES[t] : "?"; }

int lora_target_find(const char *name) {
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (!strcmp(name, NAMES[t]) || !strcmp(name, MODULES[t])) return t;
    return -1;
}

int lora_targets_parse(const char *list, unsigned *mask, const char *src, PtError *e) {
    *mask = 0;
    const char *p = list;
    while (*p) {
        p += strspn(p, " ,");
        size_t n = strcspn(p, " ,");
        if (!n) break;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        int t = n < sizeof name ? lora_target_find(name) : -1;
        if (t < 0)
            return pt_fail(e, "%s: unknown LoRA target '%.*s' (targets: q, k, v, o, gate, up, down)", src, (int)n, p);
        *mask |= 1u << t;
        p += n;
    }
    if (!*mask) return pt_fail(e, "%s: no LoRA target (give some of q, k, v, o, gate, up, down)", src);
    return 0;
}

void lora_targets_format(unsigned mask, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (mask & (1u << t) && len < cap) len += snprintf(out + len, cap - len, "%s%s", len ? "," : "", NAMES[t]);
}

int lora_config_check(const LoraConfig *c, const char *src, PtError *e) {
    if (c->rank < 1 || c->rank > LORA_MAX_RANK)
        return pt_fail(e, "%s: LoRA rank %d is outside 1..%d", src, c->rank, LORA_MAX_RANK);
    if (!c->targets || c->targets >> LORA_N_TARGETS)
        return pt_fail(e, "%s: LoRA target mask 0x%x is empty or unknown", src, c->targets);
    if (!isfinite(c->alpha) || c->alpha == 0)
        return pt_fail(e, "%s: LoRA alpha %g is zero or not finite", src, c->alpha);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return pt_fail(e, "%s: LoRA dropout %g is outside [0, 1)", src, c->dropout);
    return 0;
}

void lora_target_dims(const ModelConfig *c, int t, int *in, int *out) {
    const int H = c->d_model, Q = c->n_head * c->head_dim, KV = c->n_kv_head * c->head_dim, F = c->d_ff;
    static const int IN[LORA_N_TARGETS] = {0, 0, 0, 1, 0, 0, 2}, OUT[LORA_N_TARGETS] = {1, 3, 3, 0, 2, 2, 0};
    const int dims[4] = {H, Q, F, KV};   // what IN / OUT index: 0 H, 1 Q, 2 F, 3 KV
    *in = dims[IN[t]];
    *out = dims[OUT[t]];
}

void lora_table_build(TensorTable *tt, const ModelConfig *mc, const LoraConfig *lc) {
    memset(tt, 0, sizeof *tt);
    tt->t = xcalloc((size_t)mc->n_layer * LORA_N_TARGETS * 2 + 1, sizeof(TensorInfo), "adapter table");
    char name[96];
    for (int l = 0; l < mc->n_layer; l++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!(lc->targets & (1u << t))) continue;
            int in, out;
            lora_target_dims(mc, t, &in, &out);
            const char *part = t <= LORA_O ? "self_attn" : "mlp";
            for (int b = 0; b < 2; b++) {
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l, part,
                         MODULES[t], b ? 'B' : 'A');
                tensor_table_add(tt, KINDS[t], l, name, b ? out : lc->rank, b ? lc->rank : in,
                                 TF_DECAY | (b ? TF_LORA_B : 0));
            }
        }
}

TensorKind lora_target_kind(int t) { return KINDS[t]; }

int lora_target_of_kind(TensorKind k) {
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (KINDS[t] == k) return t;
    return -1;
}

int lora_table_index(const TensorTable *tt, int layer, int target, int b) {
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        if (ti->layer == layer && lora_target_of_kind(ti->kind) == target && !(ti->flags & TF_LORA_B) == !b) return i;
    }
    return -1;
}

void lora_views(LoraViews *v, const TensorTable *tt, float *base) {
    memset(v, 0, sizeof *v);
    if (!base) return;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        int t = lora_target_of_kind(ti->kind);
        if (t < 0 || ti->layer < 0 || ti->layer >= MAX_LAYERS) continue;
        LoraLayerViews *lv = &v->layer[ti->layer];
        if (ti->flags & TF_LORA_B) lv->b[t] = base + ti->offset;
        else lv->a[t] = base + ti->offset;
    }
}

void lora_init(float *params, const TensorTable *tt, const LoraConfig *c, int init, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        float *p = params + ti->offset;
        if (ti->flags & TF_LORA_B) {
            memset(p, 0, ti->numel * sizeof(float));
            continue;
        }
        // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(in)
        const double bound = 1.0 / sqrt((double)ti->shape[1]), std = 1.0 / c->rank;
        for (size_t j = 0; j < ti->numel; j++)
            p[j] = init == LORA_INIT_GAUSSIAN ? (float)(rng_normal(&rng) * std)
                                              : (float)((2.0 * rng_uniform(&rng) - 1.0) * bound);
    }
}

void lora_adapter_alloc(LoraAdapter *a, const ModelConfig *mc, const LoraConfig *lc) {
    memset(a, 0, sizeof *a);
    a->cfg = *lc;
    lora_table_build(&a->tt, mc, lc);
    a->params = xaligned((a->tt.total ? a->tt.total : 1) * sizeof(float), "LoRA adapter");
}

void lora_adapter_free(LoraAdapter *a) {
    free(a->params);
    tensor_table_free(&a->tt);
    memset(a, 0, sizeof *a);
}

float *lora_adapter_tensor(const LoraAdapter *a, int layer, int target, int b) {
    int i = lora_table_index(&a->tt, layer, target, b);
    return i < 0 ? NULL : a->params + a->tt.t[i].offset;
}
