#include "tensors.h"
#include <string.h>

static void add(TensorTable *tt, TensorKind kind, int layer, const char *name, int64_t d0, int64_t d1,
                unsigned flags) {
    TensorInfo *t = &tt->t[tt->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    // 16-float (64-byte) alignment of every tensor keeps SIMD loads aligned.
    t->offset = tt->total;
    tt->total += (t->numel + 15) / 16 * 16;
    t->flags = flags;
}

void tensor_table_add(TensorTable *tt, TensorKind kind, int layer, const char *name, int64_t d0, int64_t d1,
                      unsigned flags) {
    add(tt, kind, layer, name, d0, d1, flags);
}

void tensor_table_build(TensorTable *tt, const ModelConfig *c) {
    int cap = 3 + c->n_layer * 11;
    tt->t = xcalloc(cap, sizeof(TensorInfo), "tensor table");
    tt->n = 0;
    tt->total = 0;
    tt->tied = c->tied_embeddings;
    int64_t H = c->d_model, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_kv_head * c->head_dim;
    int64_t F = c->d_ff, V = c->vocab_size, D = c->head_dim;
    char nm[96];
    add(tt, T_EMBED, -1, "model.embed_tokens.weight", V, H, TF_DECAY | TF_EMBED);
    for (int l = 0; l < c->n_layer; l++) {
#define NAME(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), nm)
        add(tt, T_LN1, l, NAME("input_layernorm.weight"), H, 0, TF_NORM);
        add(tt, T_WQ, l, NAME("self_attn.q_proj.weight"), Q, H, TF_DECAY | TF_QUANT);
        add(tt, T_WK, l, NAME("self_attn.k_proj.weight"), KV, H, TF_DECAY | TF_QUANT);
        add(tt, T_WV, l, NAME("self_attn.v_proj.weight"), KV, H, TF_DECAY | TF_QUANT);
        add(tt, T_WO, l, NAME("self_attn.o_proj.weight"), H, Q, TF_DECAY | TF_QUANT);
        if (c->qk_norm) {
            add(tt, T_QNORM, l, NAME("self_attn.q_norm.weight"), D, 0, TF_NORM);
            add(tt, T_KNORM, l, NAME("self_attn.k_norm.weight"), D, 0, TF_NORM);
        }
        add(tt, T_LN2, l, NAME("post_attention_layernorm.weight"), H, 0, TF_NORM);
        add(tt, T_WGATE, l, NAME("mlp.gate_proj.weight"), F, H, TF_DECAY | TF_QUANT);
        add(tt, T_WUP, l, NAME("mlp.up_proj.weight"), F, H, TF_DECAY | TF_QUANT);
        add(tt, T_WDOWN, l, NAME("mlp.down_proj.weight"), H, F, TF_DECAY | TF_QUANT);
#undef NAME
    }
    add(tt, T_LNF, -1, "model.norm.weight", H, 0, TF_NORM);
    if (!c->tied_embeddings) add(tt, T_LMHEAD, -1, "lm_head.weight", V, H, TF_DECAY | TF_QUANT);
}

void tensor_table_free(TensorTable *tt) {
    free(tt->t);
    memset(tt, 0, sizeof *tt);
}

void tensor_table_slice(const TensorTable *tt, size_t lo, size_t hi, TensorTable *out) {
    memset(out, 0, sizeof *out);
    out->t = xcalloc((size_t)tt->n + 1, sizeof(TensorInfo), "tensor table slice");
    out->total = hi - lo;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;
        TensorInfo *s = &out->t[out->n++];
        *s = *t;
        s->ndim = 1;
        s->shape[0] = (int64_t)(b - a);
        s->shape[1] = 0;
        s->numel = b - a;
        s->offset = a - lo;
    }
}

const TensorInfo *tensor_table_find(const TensorTable *tt, const char *name) {
    if (tt->tied && strcmp(name, "lm_head.weight") == 0) name = "model.embed_tokens.weight";
    for (int i = 0; i < tt->n; i++)
        if (strcmp(tt->t[i].name, name) == 0) return &tt->t[i];
    return NULL;
}

void layer_view_set(LayerViews *lv, TensorKind kind, float *p) {
    switch (kind) {
    case T_LN1: lv->ln1 = p; break;
    case T_WQ: lv->wq = p; break;
    case T_WK: lv->wk = p; break;
    case T_WV: lv->wv = p; break;
    case T_WO: lv->wo = p; break;
    case T_QNORM: lv->qnorm = p; break;
    case T_KNORM: lv->knorm = p; break;
    case T_LN2: lv->ln2 = p; break;
    case T_WGATE: lv->wgate = p; break;
    case T_WUP: lv->wup = p; break;
    case T_WDOWN: lv->wdown = p; break;
    default: break;
    }
}

void param_views(ParamViews *v, const TensorTable *tt, float *base) {
    memset(v, 0, sizeof *v);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        float *p = base + t->offset;
        switch (t->kind) {
        case T_EMBED: v->embed = p; break;
        case T_LNF: v->lnf = p; break;
        case T_LMHEAD: v->lm_head = p; break;
        default:
            if (t->layer >= 0) layer_view_set(&v->layer[t->layer], t->kind, p);
            break;
        }
    }
    if (tt->tied) v->lm_head = v->embed;
}
