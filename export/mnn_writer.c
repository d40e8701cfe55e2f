// mnn_writer.c: the decoder's MNN graph (llm.mnn) and its weights, built from
// a checkpoint's int4 state; see mnn_writer.h. The package around it is
// mnn_export.c's.
#include "mnn_writer.h"
#include <math.h>
#include <string.h>

typedef MnnWriter Writer;

// The adapter's three ops after projection `name` (an int4 convolution of
// layer `layer`, tensor kind `kind`, input x_c4 [S, ic], output y_c4 [S, oc],
// NC4HW4), as mnn_lora.h describes them; returns the tensor the layer reads
// next: y_c4 itself when the view does not target that projection.
static int lora_ops(MnnGraph *g, const LoraWeightsView *v, const char *name, int layer, int kind, int x_c4, int y_c4,
                    int ic, int oc) {
    const int t = lora_target_of_kind((TensorKind)kind);
    if (t < 0 || !((v->targets >> t) & 1)) return y_c4;
    char base[256], n[300];
    snprintf(base, sizeof base, "%s", name);
    char *cut = strstr(base, "/Linear");
    if (cut) *cut = 0;
    // alpha / r goes into lora_B's weights, as MNN's exporter does.
    size_t nb = (size_t)oc * (size_t)v->rank;
    float *b = xmalloc(nb * sizeof(float), "scaled lora_B");
    float s = v->alpha / (float)v->rank;
    for (size_t i = 0; i < nb; i++) b[i] = v->b[layer][t][i] * s;
    snprintf(n, sizeof n, "%s/lora_A", base);
    int a_out = mnn_conv_f32(g, n, x_c4, ic, v->rank, v->a[layer][t]);
    snprintf(n, sizeof n, "%s/lora_B", base);
    int b_out = mnn_conv_f32(g, n, a_out, v->rank, oc, b);
    free(b);
    snprintf(n, sizeof n, "%s/lora_add", base);
    return mnn_binary(g, n, y_c4, b_out, MNN_BIN_ADD);
}

// llm.mnn's "hidden_states" for a draft (mnn_draft.h) from layer_out[l], the
// residual stream after target layer l ([1, S, H] each); the caller declares
// the output.
static void hidden_states(MnnGraph *g, const DraftConfig *dc, const int *layer_out, int H) {
    int in[DRAFT_MAX_TARGETS];
    for (int k = 0; k < dc->n_target; k++) in[k] = layer_out[dc->target_layers[k]];
    int x = dc->n_target > 1 ? mnn_concat_n(g, "/hidden_states/concat", in, dc->n_target, -1) : in[0];
    int32_t dims[3] = {1, -1, dc->n_target * H};
    mnn_reshape(g, "hidden_states", x, dims, 3);
}

char *mw_name(char *buf, int layer, const char *what) {
    if (layer < 0) snprintf(buf, 256, "/%s", what);
    else snprintf(buf, 256, "/layers.%d/%s", layer, what);
    return buf;
}

char *mw_sub(char *buf, const char *base, const char *what) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%.200s/%.50s", base, what);
    memcpy(buf, tmp, sizeof tmp);
    return buf;
}

// The checkpoint's tensor (kind, layer) and its int4 quantizer state.
static int quantized(Writer *w, const char *name, int kind, int layer, const TensorInfo **ti, const QatTensor **qt) {
    const TensorTable *tt = &w->b->tt;
    int row = -1;
    for (int i = 0; i < tt->n && row < 0; i++)
        if (tt->t[i].layer == layer && (int)tt->t[i].kind == kind) row = i;
    if (row < 0) return pt_fail(w->e, "%s: no such tensor in the checkpoint", name);
    *ti = &tt->t[row];
    *qt = qat_find(w->q, row);
    return *qt ? 0 : pt_fail(w->e, "%s: not in the checkpoint's int4 quantizer state", (*ti)->name);
}

// An int4 [oc, ic] matrix with its scale and zero per (row, group) streamed
// to the weight file (where: *ext), and its convolution on the NC4HW4
// [S, ic, 1, 1] input: NC4HW4 [S, oc, 1, 1].
static int int4_conv(Writer *w, const char *name, int x_c4, const float *weight, int oc, int ic, const float *scale,
                     const float *zero, MnnExternal *ext, int *y_c4) {
    if (mnn_write_linear(&w->wf, &w->q->spec, weight, oc, ic, scale, zero, ext, w->e)) return -1;
    w->n_linears++;
    MnnQuantLinear ql = {ic, oc, w->q->spec.group, w->q->spec.symmetric};
    *y_c4 = mnn_conv_int4(&w->g, name, x_c4, &ql, ext);
    return 0;
}

// The int4 convolution of one projection on an NC4HW4 [S, ic, 1, 1] input,
// its weights streamed to llm.mnn.weight with the checkpoint's codes and
// scales. Output NC4HW4 [S, oc, 1, 1].
static int conv(Writer *w, const char *name, int x_c4, const float *weight, int kind, int layer, int *y_c4) {
    const TensorInfo *ti;
    const QatTensor *qt;
    if (quantized(w, name, kind, layer, &ti, &qt)) return -1;
    int oc = (int)ti->shape[0], ic = (int)ti->shape[1];
    MnnExternal ext;
    int64_t at = w->wf.offset;
    if (int4_conv(w, name, x_c4, weight, oc, ic, w->q->scale + qt->offset, w->q->zero + qt->offset, &ext, y_c4))
        return -1;
    if (kind == T_LMHEAD || kind == T_EMBED) {
        w->lm_head_offset = at;
        w->lm_head_code_bytes = ext.ext[1];
        w->lm_head_alpha_bytes = ext.ext[2];
    }
    if (w->lora && layer >= 0) *y_c4 = lora_ops(&w->g, w->lora, name, layer, kind, x_c4, *y_c4, ic, oc);
    return 0;
}

// [1, S, n] (NCHW) -> NC4HW4 [S, n, 1, 1], the layout convolutions run on.
int mw_to_c4(Writer *w, const char *name, int x, int n) {
    char buf[256];
    int32_t dims[4] = {-1, n, 1, 1};
    int t = mnn_reshape(&w->g, mw_sub(buf, name, "pre_reshape"), x, dims, 4);
    return mnn_convert(&w->g, mw_sub(buf, name, "pre_convert"), t, MNN_NCHW, MNN_NC4HW4);
}

// NC4HW4 [S, n, 1, 1] -> [1, S, n] (NCHW), the output named out_name if given.
int mw_from_c4(Writer *w, const char *name, int y, int n, const char *out_name) {
    char buf[256];
    int32_t dims[3] = {1, -1, n};
    int t = mnn_convert(&w->g, mw_sub(buf, name, "post_convert"), y, MNN_NC4HW4, MNN_NCHW);
    return mnn_reshape(&w->g, out_name ? out_name : mw_sub(buf, name, "post_reshape"), t, dims, 3);
}

// y[1,S,oc] = x[1,S,ic] W^T: the convolution between two layout conversions.
static int linear(Writer *w, const char *name, int x, const float *weight, int kind, int layer, const char *out_name,
                  int *y) {
    const TensorInfo *ti = NULL;
    for (int i = 0; i < w->b->tt.n && !ti; i++)
        if (w->b->tt.t[i].layer == layer && (int)w->b->tt.t[i].kind == kind) ti = &w->b->tt.t[i];
    if (!ti) return pt_fail(w->e, "%s: no such tensor in the checkpoint", name);
    int c4;
    if (conv(w, name, mw_to_c4(w, name, x, (int)ti->shape[1]), weight, kind, layer, &c4)) return -1;
    *y = mw_from_c4(w, name, c4, (int)ti->shape[0], out_name);
    return 0;
}

int mw_rmsnorm(Writer *w, const char *name, int x, const float *gamma, int n, int *y) {
    MnnExternal ext;
    if (mnn_write_rmsnorm(&w->wf, gamma, n, &ext, w->e)) return -1;
    *y = mnn_rmsnorm(&w->g, name, x, w->b->cfg.norm_eps, &ext);
    return 0;
}

// cos/sin for the positions of this call, computed in the graph exactly as
// model/ops/rope.c does: angle = float(pos) * inv_freq in fp32, inv_freq = 1 /
// theta^(2i/D); the D/2 values repeated twice (rotate-half layout).
void mw_rope_tables(Writer *w, const char *prefix, int position_ids, MnnRope *r) {
    const ModelConfig *c = &w->b->cfg;
    MnnGraph *g = &w->g;
    int half = c->head_dim / 2;
    float *inv_freq = xmalloc((size_t)half * sizeof(float), "inv_freq");
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
    int32_t col[2] = {-1, 1}, row4[4] = {1, -1, 1, c->head_dim};
    char n[256];
#define NAME(what) (snprintf(n, sizeof n, "%.200s/%s", prefix, what), n)
    int pos = mnn_cast(g, NAME("pos_float"), position_ids, MNN_DT_INT32, MNN_DT_FLOAT);
    pos = mnn_reshape(g, NAME("pos_column"), pos, col, 2);
    int inv = mnn_const_f32(g, NAME("inv_freq"), inv_freq, half);
    int angle = mnn_binary(g, NAME("angle"), pos, inv, MNN_BIN_MUL);
    int cs = mnn_unary(g, NAME("cos_half"), angle, MNN_UN_COS);
    int sn = mnn_unary(g, NAME("sin_half"), angle, MNN_UN_SIN);
    r->cos_rows = mnn_concat(g, NAME("cos_full"), cs, cs, -1);
    r->sin_rows = mnn_concat(g, NAME("sin_full"), sn, sn, -1);
    r->cos = mnn_reshape(g, NAME("cos"), r->cos_rows, row4, 4);
    r->sin = mnn_reshape(g, NAME("sin"), r->sin_rows, row4, 4);
#undef NAME
    free(inv_freq);
}

int mw_rope(Writer *w, const char *base, int x, const MnnRope *r) {
    char buf[256];
    MnnGraph *g = &w->g;
    int halves[2];
    mnn_split_half(g, mw_sub(buf, base, "split"), x, w->b->cfg.head_dim / 2, halves);
    int neg = mnn_unary(g, mw_sub(buf, base, "neg"), halves[1], MNN_UN_NEG);
    int rot = mnn_concat(g, mw_sub(buf, base, "rotate_half"), neg, halves[0], -1);
    int a = mnn_binary(g, mw_sub(buf, base, "mul_cos"), x, r->cos, MNN_BIN_MUL);
    int b = mnn_binary(g, mw_sub(buf, base, "mul_sin"), rot, r->sin, MNN_BIN_MUL);
    return mnn_binary(g, mw_sub(buf, base, "out"), a, b, MNN_BIN_ADD);
}

// One decoder block on h [1, S, H]: returns the next residual stream.
static int block(Writer *w, int l, int h, int *out) {
    const ModelConfig *c = &w->b->cfg;
    const LayerViews *p = NULL;
    ParamViews views;
    param_views(&views, &w->b->tt, w->b->params);
    p = &views.layer[l];
    MnnGraph *g = &w->g;
    char n[256], buf[256];
    int H = c->d_model, D = c->head_dim;
    int n1, q, k, v, att, o, r1, n2, gate, up, act, down;
    if (mw_rmsnorm(w, mw_name(n, l, "input_layernorm"), h, p->ln1, H, &n1) ||
        linear(w, mw_name(n, l, "self_attn/q_proj/Linear"), n1, p->wq, T_WQ, l, NULL, &q) ||
        linear(w, mw_name(n, l, "self_attn/k_proj/Linear"), n1, p->wk, T_WK, l, NULL, &k) ||
        linear(w, mw_name(n, l, "self_attn/v_proj/Linear"), n1, p->wv, T_WV, l, NULL, &v))
        return -1;
    int32_t qs[4] = {1, -1, c->n_head, D}, ks[4] = {1, -1, c->n_kv_head, D};
    q = mnn_reshape(g, mw_name(n, l, "self_attn/q_heads"), q, qs, 4);
    k = mnn_reshape(g, mw_name(n, l, "self_attn/k_heads"), k, ks, 4);
    v = mnn_reshape(g, mw_name(n, l, "self_attn/v_heads"), v, ks, 4);
    if (c->qk_norm && (mw_rmsnorm(w, mw_name(n, l, "self_attn/q_norm"), q, p->qnorm, D, &q) ||
                       mw_rmsnorm(w, mw_name(n, l, "self_attn/k_norm"), k, p->knorm, D, &k)))
        return -1;
    q = mw_rope(w, mw_name(n, l, "self_attn/q_rope"), q, &w->rope);
    k = mw_rope(w, mw_name(n, l, "self_attn/k_rope"), k, &w->rope);
    att = mnn_attention(g, mw_name(n, l, "self_attn/FusedAttention"), q, k, v, w->mask, l, 0);
    if (linear(w, mw_name(n, l, "self_attn/o_proj/Linear"), att, p->wo, T_WO, l, NULL, &o)) return -1;
    r1 = mnn_binary(g, mw_name(n, l, "attn_residual"), h, o, MNN_BIN_ADD);
    if (mw_rmsnorm(w, mw_name(n, l, "post_attention_layernorm"), r1, p->ln2, H, &n2) ||
        linear(w, mw_name(n, l, "mlp/gate_proj/Linear"), n2, p->wgate, T_WGATE, l, NULL, &gate) ||
        linear(w, mw_name(n, l, "mlp/up_proj/Linear"), n2, p->wup, T_WUP, l, NULL, &up))
        return -1;
    act = mnn_unary(g, mw_name(n, l, "mlp/silu"), gate, MNN_UN_SILU);
    act = mnn_binary(g, mw_sub(buf, mw_name(n, l, "mlp"), "mul"), act, up, MNN_BIN_MUL);
    if (linear(w, mw_name(n, l, "mlp/down_proj/Linear"), act, p->wdown, T_WDOWN, l, NULL, &down)) return -1;
    *out = mnn_binary(g, mw_name(n, l, "mlp_residual"), r1, down, MNN_BIN_ADD);
    return 0;
}

// The same block with MNN's fused ops (--graph fused): q/k
// norm + RoPE in one op on the projections' NC4HW4 outputs, attention writing
// NC4HW4 straight into o_proj, and the MLP kept in NC4HW4 from the gate/up
// convolutions through MUL_SILU to down_proj: 4 layout conversions per layer
// instead of 14, and about half the ops.
static int block_fused(Writer *w, int l, int h, int *out) {
    const ModelConfig *c = &w->b->cfg;
    ParamViews views;
    param_views(&views, &w->b->tt, w->b->params);
    const LayerViews *p = &views.layer[l];
    MnnGraph *g = &w->g;
    char n[256], buf[256];
    int H = c->d_model, D = c->head_dim, KV = c->n_kv_head * D;
    int n1, qc, kc, vc, v, rot[2], att, oc, o, r1, n2, gc, uc, mc, dc, d;
    if (mw_rmsnorm(w, mw_name(n, l, "input_layernorm"), h, p->ln1, H, &n1)) return -1;
    int n1c = mw_to_c4(w, mw_name(n, l, "self_attn/qkv_input"), n1, H);
    if (conv(w, mw_name(n, l, "self_attn/q_proj/Linear"), n1c, p->wq, T_WQ, l, &qc) ||
        conv(w, mw_name(n, l, "self_attn/k_proj/Linear"), n1c, p->wk, T_WK, l, &kc) ||
        conv(w, mw_name(n, l, "self_attn/v_proj/Linear"), n1c, p->wv, T_WV, l, &vc))
        return -1;
    int32_t vs[4] = {1, -1, c->n_kv_head, D};
    v = mw_from_c4(w, mw_name(n, l, "self_attn/v_proj/Linear"), vc, KV, NULL);
    v = mnn_reshape(g, mw_name(n, l, "self_attn/v_heads"), v, vs, 4);
    mnn_rope(g, mw_name(n, l, "self_attn/FusedRoPE"), qc, kc, w->rope.cos_rows, w->rope.sin_rows, c->n_head,
             c->n_kv_head, D, c->qk_norm ? p->qnorm : NULL, c->qk_norm ? p->knorm : NULL, c->norm_eps, rot);
    att = mnn_attention(g, mw_name(n, l, "self_attn/FusedAttention"), rot[0], rot[1], v, w->mask, l, 1);
    if (conv(w, mw_name(n, l, "self_attn/o_proj/Linear"), att, p->wo, T_WO, l, &oc)) return -1;
    o = mw_from_c4(w, mw_name(n, l, "self_attn/o_proj/Linear"), oc, H, NULL);
    r1 = mnn_binary(g, mw_name(n, l, "attn_residual"), h, o, MNN_BIN_ADD);
    if (mw_rmsnorm(w, mw_name(n, l, "post_attention_layernorm"), r1, p->ln2, H, &n2)) return -1;
    int n2c = mw_to_c4(w, mw_name(n, l, "mlp/input"), n2, H);
    if (conv(w, mw_name(n, l, "mlp/gate_proj/Linear"), n2c, p->wgate, T_WGATE, l, &gc) ||
        conv(w, mw_name(n, l, "mlp/up_proj/Linear"), n2c, p->wup, T_WUP, l, &uc))
        return -1;
    mc = mnn_binary(g, mw_sub(buf, mw_name(n, l, "mlp"), "mul_silu"), uc, gc, MNN_BIN_MUL_SILU);   // up * silu(gate)
    if (conv(w, mw_name(n, l, "mlp/down_proj/Linear"), mc, p->wdown, T_WDOWN, l, &dc)) return -1;
    d = mw_from_c4(w, mw_name(n, l, "mlp/down_proj/Linear"), dc, H, NULL);
    *out = mnn_binary(g, mw_name(n, l, "mlp_residual"), r1, d, MNN_BIN_ADD);
    return 0;
}

int mw_lm_head(Writer *w, int h, int *logits) {
    ParamViews views;
    param_views(&views, &w->b->tt, w->b->params);
    int kind = w->b->cfg.tied_embeddings ? T_EMBED : T_LMHEAD;
    return linear(w, "/lm/lm_head/Linear", h, views.lm_head, kind, -1, "logits", logits);
}

int mw_lm_head_rows(Writer *w, int h, const int *ids, int n, const char *name, int *logits) {
    const TensorInfo *ti;
    const QatTensor *qt;
    if (quantized(w, name, w->b->cfg.tied_embeddings ? T_EMBED : T_LMHEAD, -1, &ti, &qt)) return -1;
    const int ic = (int)ti->shape[1], groups = ic / w->q->spec.group;
    const float *full = w->b->params + ti->offset, *scale = w->q->scale + qt->offset,
                *zero = w->q->zero + qt->offset;
    // The chosen rows with their own scales: each row's codes are the full matrix's.
    float *wr = xmalloc((size_t)n * ic * sizeof(float), "lm_head rows");
    float *sr = xmalloc((size_t)n * groups * sizeof(float), "lm_head row scales");
    float *zr = xmalloc((size_t)n * groups * sizeof(float), "lm_head row zeros");
    for (int k = 0; k < n; k++) {
        memcpy(wr + (size_t)k * ic, full + (size_t)ids[k] * ic, (size_t)ic * sizeof(float));
        memcpy(sr + (size_t)k * groups, scale + (size_t)ids[k] * groups, (size_t)groups * sizeof(float));
        memcpy(zr + (size_t)k * groups, zero + (size_t)ids[k] * groups, (size_t)groups * sizeof(float));
    }
    MnnExternal ext;
    int c4, rc = int4_conv(w, name, mw_to_c4(w, name, h, ic), wr, n, ic, sr, zr, &ext, &c4);
    free(wr), free(sr), free(zr);
    if (rc) return -1;
    *logits = mw_from_c4(w, name, c4, n, NULL);
    return 0;
}

// The whole graph, streaming the weights in op order.
int mw_decoder(Writer *w) {
    const ModelConfig *c = &w->b->cfg;
    MnnGraph *g = &w->g;
    ParamViews views;
    param_views(&views, &w->b->tt, w->b->params);
    int32_t ids_dims[3] = {-1, 1, c->d_model}, mask_dims[4] = {1, 1, -1, -1}, pos_dims[2] = {1, -1}, idx_dims[1] = {1};
    // The four inputs the runtime feeds, by name and in this order (Llm::load in
    // MNN's transformers/llm/engine/src/llm.cpp).
    int ids = mnn_input(g, "input_ids", ids_dims, 3, MNN_DT_FLOAT);
    w->mask = mnn_input(g, "attention_mask", mask_dims, 4, MNN_DT_FLOAT);
    int pos = mnn_input(g, "position_ids", pos_dims, 2, MNN_DT_INT32);
    int logits_index = mnn_input(g, "logits_index", idx_dims, 1, MNN_DT_INT32);
    mw_rope_tables(w, "/rotary", pos, &w->rope);
    // [S, 1, H] -> [1, S, H], so the residual adds never broadcast.
    int32_t hs[3] = {1, -1, c->d_model};
    int h = mnn_reshape(g, "/embeddings", ids, hs, 3);
    int *layer_out = xmalloc((size_t)c->n_layer * sizeof(int), "layer outputs");
    int rc = 0;
    for (int l = 0; l < c->n_layer && !rc; l++) {
        rc = w->fused ? block_fused(w, l, h, &h) : block(w, l, h, &h);
        layer_out[l] = h;
    }
    if (!rc && w->draft) hidden_states(g, &w->draft->cfg, layer_out, c->d_model);
    free(layer_out);
    if (rc) return -1;
    // Rows from logits_index to the end (-1: the last one), final norm, lm_head.
    h = mnn_slice_from(g, "/logits_rows", h, logits_index, 1);
    char n[256];
    if (mw_rmsnorm(w, mw_name(n, -1, "norm"), h, views.lnf, c->d_model, &h)) return -1;
    int logits;   // the runtime finds the output by this name
    if (mw_lm_head(w, h, &logits)) return -1;
    mnn_graph_output(g, "logits");
    if (w->draft) mnn_graph_output(g, "hidden_states");
    return 0;
}

int mw_write(MnnWriter *w, const OutDir *dir, const char *name, int (*build)(MnnWriter *w, const void *ctx),
             const void *ctx, int64_t *graph_bytes) {
    char weight_name[256];
    snprintf(weight_name, sizeof weight_name, "%s.weight", name);
    char *weight_path = out_dir_path(dir, weight_name);
    AtomicFile af;
    int rc = atomic_open(&af, weight_path, w->e);
    if (rc == 0) {
        w->wf.f = af.f;
        w->wf.path = weight_path;
        rc = build(w, ctx);
        if (rc == 0) rc = atomic_commit(&af, w->e);
        else atomic_abort(&af);
        w->wf.f = NULL;
    }
    if (rc == 0) {
        size_t len = 0;
        uint8_t *graph = mnn_graph_serialize(&w->g, &len);
        rc = out_dir_write(dir, name, graph, len, w->e);
        *graph_bytes = (int64_t)len;
        free(graph);
    }
    w->wf.path = NULL;
    free(weight_path);
    return rc;
}

// What the package format can hold, checked before anything is written.
int mnn_check_exportable(const ModelConfig *c, const QuantSpec *spec, int quant_embedding, PtError *e) {
    if (strcmp(c->model_type, "qwen3") != 0 && strcmp(c->model_type, "llama") != 0)
        return pt_fail(e, "model_type \"%s\" cannot be exported to MNN (qwen3, llama)", c->model_type);
    // MNN counts a tensor's elements in int32 (Tensor::elementSize), and the
    // lm_head [V, H] is one tensor: beyond that the runtime cannot load it.
    if ((int64_t)c->vocab_size * c->d_model > INT32_MAX)
        return pt_fail(e, "vocabulary %d x hidden %d exceeds the %d elements an MNN int4 matrix can hold",
                       c->vocab_size, c->d_model, INT32_MAX);
    if (c->d_model % 4 != 0) return pt_fail(e, "hidden size %d is not a multiple of 4 (MNN's NC4HW4 layout)", c->d_model);
    int sizes[3] = {c->d_model, c->n_head * c->head_dim, c->d_ff};
    const char *what[3] = {"hidden size", "attention width (heads x head_dim)", "FFN size"};
    for (int i = 0; i < 3; i++)
        if (sizes[i] % spec->group != 0)
            return pt_fail(e, "%s %d is not divisible by the int4 block size %d: MNN quantizes each row in blocks",
                           what[i], sizes[i], spec->group);
    if (c->tied_embeddings && !quant_embedding)
        return pt_fail(e, "the model is tied but its int4 state leaves the embedding in float: MNN reads the input "
                          "embedding from the int4 lm_head; `pocket quantize` writes a checkpoint whose int4 state "
                          "quantizes it (as [qat] quant_embedding = 1 does); a draft goes with the int4 weights it "
                          "was trained on, so quantize before draft-data");
    return 0;
}

int mnn_export_graph(const ModelBundle *b, const QatState *q, int fused, const LoraWeightsView *lora, MnnWeightFile *wf,
                     uint8_t **graph, size_t *len, PtError *e) {
    Writer w = {.b = b, .q = q, .fused = fused, .lora = lora, .wf = *wf, .e = e};
    mnn_graph_init(&w.g);
    int rc = mnn_check_exportable(&b->cfg, &q->spec, q->quant_embedding, e) || mw_decoder(&w) ? -1 : 0;
    *graph = rc ? NULL : mnn_graph_serialize(&w.g, len);
    wf->offset = w.wf.offset;
    mnn_graph_free(&w.g);
    return rc;
}

