// mnn_draft.c: a DFlash draft's graphs in the MNN package (mnn_draft.h). The
// math is model/draft.h's; the ops are mnn_graph.h's, wired with the
// decoder's pieces (mnn_writer.h).
#include "mnn_draft.h"
#include <float.h>
#include <math.h>
#include <string.h>

int mnn_draft_check(const ModelBundle *b, const Draft *d, PtError *e) {
    const ModelConfig *c = &b->cfg, *t = &d->target;
    if (draft_config_check(&d->cfg, c, "the draft", e)) return -1;
    if (t->d_model != c->d_model || t->n_head != c->n_head || t->n_kv_head != c->n_kv_head ||
        t->head_dim != c->head_dim || t->vocab_size != c->vocab_size)
        return pt_fail(e, "the draft was made for a target of hidden %d, heads %d/%d of %d, vocabulary %d; this one "
                          "has %d, %d/%d of %d, %d", t->d_model, t->n_head, t->n_kv_head, t->head_dim, t->vocab_size,
                       c->d_model, c->n_head, c->n_kv_head, c->head_dim, c->vocab_size);
    return 0;
}

void mnn_draft_config(json_t *j, const Draft *d) {
    json_t *layers = json_array();
    for (int k = 0; k < d->cfg.n_target; k++) json_array_append_new(layers, json_integer(d->cfg.target_layers[k]));
    json_object_set_new(j, "speculative_type", json_string("dflash"));
    json_object_set_new(j, "hidden_states", json_true());
    json_object_set_new(j, "dflash_model", json_string("dflash.mnn"));
    json_object_set_new(j, "dflash_fc", json_string("dflash_fc.mnn"));
    json_object_set_new(j, "dflash_block_size", json_integer(d->cfg.block));
    json_object_set_new(j, "dflash_mask_token_id", json_integer(d->cfg.mask_token));
    json_object_set_new(j, "dflash_target_layer_ids", layers);
    json_object_set_new(j, "draft_predict_length", json_integer(d->cfg.block - 1));
}

static char *layer_name(char *buf, int layer, const char *what) {   // buf: 256 bytes
    snprintf(buf, 256, "/dflash_layers.%d/%s", layer, what);
    return buf;
}

// y [1, S, oc] = x [1, S, ic] W^T, W [oc, ic] fp32 inline.
static int linear_f32(MnnWriter *w, const char *name, int x, const float *weight, int oc, int ic) {
    int c4 = mnn_conv_f32(&w->g, name, mw_to_c4(w, name, x, ic), ic, oc, weight);
    return mw_from_c4(w, name, c4, oc, NULL);
}

// softmax(q k^T / sqrt(D) + mask) v over every key: q [1, B, heads, D], k and
// v [1, T, kv_heads, D], mask [1, 1, B, T]; query head j reads kv head
// j / (heads / kv_heads). Output [1, B, heads * D].
static int attention(MnnWriter *w, const char *base, int q, int k, int v, int mask) {
    const ModelConfig *c = &w->b->cfg;
    MnnGraph *g = &w->g;
    const int nh = c->n_head, nkv = c->n_kv_head, D = c->head_dim;
    const int32_t perm[4] = {0, 2, 1, 3}, qs[4] = {nkv, nh / nkv, -1, D}, ks[4] = {nkv, 1, -1, D},
                  os[4] = {1, nh, -1, D}, flat[3] = {1, -1, nh * D};
    const float scale = 1.0f / sqrtf((float)D);
    char n[256];
    // Heads first; the query heads of one kv head side by side: [kv_heads, group, B, D].
    q = mnn_permute(g, mw_sub(n, base, "q_heads_first"), q, perm, 4);
    q = mnn_reshape(g, mw_sub(n, base, "q_grouped"), q, qs, 4);
    int sc = mnn_const_f32(g, mw_sub(n, base, "scale"), &scale, 1);
    q = mnn_binary(g, mw_sub(n, base, "q_scaled"), q, sc, MNN_BIN_MUL);
    k = mnn_permute(g, mw_sub(n, base, "k_heads_first"), k, perm, 4);
    k = mnn_reshape(g, mw_sub(n, base, "k_grouped"), k, ks, 4);
    v = mnn_permute(g, mw_sub(n, base, "v_heads_first"), v, perm, 4);
    v = mnn_reshape(g, mw_sub(n, base, "v_grouped"), v, ks, 4);
    int s = mnn_matmul(g, mw_sub(n, base, "scores"), q, k, 1);   // [kv_heads, group, B, T]
    s = mnn_binary(g, mw_sub(n, base, "masked"), s, mask, MNN_BIN_ADD);
    s = mnn_softmax(g, mw_sub(n, base, "softmax"), s, -1);
    int o = mnn_matmul(g, mw_sub(n, base, "context"), s, v, 0);   // [kv_heads, group, B, D]
    o = mnn_reshape(g, mw_sub(n, base, "heads"), o, os, 4);
    o = mnn_permute(g, mw_sub(n, base, "rows_first"), o, perm, 4);
    return mnn_reshape(g, mw_sub(n, base, "out"), o, flat, 3);
}

// One draft layer on the block rows h [1, B, H] with the context ctx [1, C, H].
static int layer(MnnWriter *w, const Draft *d, const LayerViews *p, int l, int h, int ctx, int mask,
                 const MnnRope *rq, const MnnRope *rk, int *out) {
    const ModelConfig *c = &w->b->cfg;
    MnnGraph *g = &w->g;
    const int H = c->d_model, D = c->head_dim, Q = c->n_head * D, KV = c->n_kv_head * D, F = d->cfg.d_ff;
    char n[256];
    int a, q, k, v, r1, n2;
    if (mw_rmsnorm(w, layer_name(n, l, "input_layernorm"), h, p->ln1, H, &a)) return -1;
    q = linear_f32(w, layer_name(n, l, "self_attn/q_proj/Linear"), a, p->wq, Q, H);
    int kv_in = mnn_concat(g, layer_name(n, l, "self_attn/kv_input"), ctx, a, 1);   // [ctx; a]
    k = linear_f32(w, layer_name(n, l, "self_attn/k_proj/Linear"), kv_in, p->wk, KV, H);
    v = linear_f32(w, layer_name(n, l, "self_attn/v_proj/Linear"), kv_in, p->wv, KV, H);
    int32_t qs[4] = {1, -1, c->n_head, D}, ks[4] = {1, -1, c->n_kv_head, D};
    q = mnn_reshape(g, layer_name(n, l, "self_attn/q_heads"), q, qs, 4);
    k = mnn_reshape(g, layer_name(n, l, "self_attn/k_heads"), k, ks, 4);
    v = mnn_reshape(g, layer_name(n, l, "self_attn/v_heads"), v, ks, 4);
    if (mw_rmsnorm(w, layer_name(n, l, "self_attn/q_norm"), q, p->qnorm, D, &q) ||
        mw_rmsnorm(w, layer_name(n, l, "self_attn/k_norm"), k, p->knorm, D, &k))
        return -1;
    q = mw_rope(w, layer_name(n, l, "self_attn/q_rope"), q, rq);
    k = mw_rope(w, layer_name(n, l, "self_attn/k_rope"), k, rk);
    int att = attention(w, layer_name(n, l, "self_attn/attention"), q, k, v, mask);
    int o = linear_f32(w, layer_name(n, l, "self_attn/o_proj/Linear"), att, p->wo, H, Q);
    r1 = mnn_binary(g, layer_name(n, l, "attn_residual"), h, o, MNN_BIN_ADD);
    if (mw_rmsnorm(w, layer_name(n, l, "post_attention_layernorm"), r1, p->ln2, H, &n2)) return -1;
    int gate = linear_f32(w, layer_name(n, l, "mlp/gate_proj/Linear"), n2, p->wgate, F, H);
    int up = linear_f32(w, layer_name(n, l, "mlp/up_proj/Linear"), n2, p->wup, F, H);
    int act = mnn_unary(g, layer_name(n, l, "mlp/silu"), gate, MNN_UN_SILU);
    act = mnn_binary(g, layer_name(n, l, "mlp/mul"), act, up, MNN_BIN_MUL);
    int down = linear_f32(w, layer_name(n, l, "mlp/down_proj/Linear"), act, p->wdown, H, F);
    *out = mnn_binary(g, layer_name(n, l, "mlp_residual"), r1, down, MNN_BIN_ADD);
    return 0;
}

// A draft with a vocabulary of its own: the lm_head's rows of those tokens
// only, their logits scattered to their ids in a [1, block, V] "logits" (the
// runtime's argmax reads V columns); every other token gets -FLT_MAX. The
// scatter's shape is fixed, so the graph serves blocks of the config's size,
// the only size the runtime feeds.
static int vocab_logits(MnnWriter *w, const Draft *d, int h) {
    MnnGraph *g = &w->g;
    const int V = w->b->cfg.vocab_size, K = d->n_vocab, B = d->cfg.block;
    int small;
    if (mw_lm_head_rows(w, h, d->vocab, K, "/dflash/lm_head_rows/Linear", &small)) return -1;
    const int32_t bk[2] = {B, K}, swap[2] = {1, 0}, vb[2] = {V, B}, out[3] = {1, B, V};
    int x = mnn_reshape(g, "/dflash/vocab/rows", small, bk, 2);
    x = mnn_permute(g, "/dflash/vocab/tokens_first", x, swap, 2);   // [K, B]
    int32_t *ids = xmalloc((size_t)K * sizeof(int32_t), "vocabulary ids");
    for (int k = 0; k < K; k++) ids[k] = d->vocab[k];
    int idx = mnn_const_i32(g, "/dflash/vocab/ids", ids, K);
    const int32_t col[2] = {K, 1};
    idx = mnn_reshape(g, "/dflash/vocab/ids_column", idx, col, 2);
    int shape = mnn_const_i32(g, "/dflash/vocab/shape", vb, 2);
    x = mnn_scatter_nd(g, "/dflash/vocab/scatter", idx, x, shape);   // [V, B], 0 off the vocabulary
    x = mnn_permute(g, "/dflash/vocab/rows_first", x, swap, 2);
    x = mnn_reshape(g, "/dflash/vocab/logits_rows", x, out, 3);
    float *pen = xmalloc((size_t)V * sizeof(float), "vocabulary penalty");
    for (int i = 0; i < V; i++) pen[i] = -FLT_MAX;
    for (int k = 0; k < K; k++) pen[d->vocab[k]] = 0.0f;
    int p = mnn_const_f32(g, "/dflash/vocab/off_vocabulary", pen, V);
    mnn_binary(g, "logits", x, p, MNN_BIN_ADD);
    free(ids);
    free(pen);
    return 0;
}

// dflash.mnn: its inputs by the names the runtime feeds them.
static int build_dflash(MnnWriter *w, const Draft *d) {
    const ModelConfig *c = &w->b->cfg;
    MnnGraph *g = &w->g;
    DraftViews v;
    draft_views(&v, &d->tt, d->params);
    const int H = c->d_model;
    int32_t rows[3] = {1, -1, H}, mask_dims[4] = {1, 1, -1, -1}, pos_dims[2] = {1, -1};
    int h = mnn_input(g, "noise_embedding", rows, 3, MNN_DT_FLOAT);
    int ctx = mnn_input(g, "context_hidden", rows, 3, MNN_DT_FLOAT);
    int mask = mnn_input(g, "attention_mask", mask_dims, 4, MNN_DT_FLOAT);
    int qpos = mnn_input(g, "q_position_ids", pos_dims, 2, MNN_DT_INT32);
    int kpos = mnn_input(g, "k_position_ids", pos_dims, 2, MNN_DT_INT32);
    MnnRope rq, rk;
    mw_rope_tables(w, "/dflash/rotary_q", qpos, &rq);
    mw_rope_tables(w, "/dflash/rotary_k", kpos, &rk);
    for (int l = 0; l < d->cfg.n_layer; l++)
        if (layer(w, d, &v.layer[l], l, h, ctx, mask, &rq, &rk, &h)) return -1;
    int logits;
    if (mw_rmsnorm(w, "/dflash/norm", h, v.norm, H, &h)) return -1;
    if (d->n_vocab ? vocab_logits(w, d, h) : mw_lm_head(w, h, &logits)) return -1;
    mnn_graph_output(g, "logits");
    return 0;
}

// dflash_fc.mnn: no weight file, everything inline.
static void build_fc(MnnWriter *w, const Draft *d) {
    const int H = w->b->cfg.d_model, W = d->cfg.n_target * H;
    DraftViews v;
    draft_views(&v, &d->tt, d->params);
    int32_t dims[3] = {1, -1, W};
    int x = mnn_input(&w->g, "target_hidden", dims, 3, MNN_DT_FLOAT);
    x = linear_f32(w, "/dflash/fc/Linear", x, v.fc, H, W);
    mnn_rmsnorm_inline(&w->g, "context_hidden", x, v.hidden_norm, H, w->b->cfg.norm_eps);
    mnn_graph_output(&w->g, "context_hidden");
}

static int dflash(MnnWriter *w, const void *d) { return build_dflash(w, d); }

int mnn_draft_write(const ModelBundle *b, const QatState *q, const Draft *d, const OutDir *dir, MnnDraftStats *st,
                    PtError *e) {
    MnnWriter w = {.b = b, .q = q, .e = e}, f = {.b = b, .q = q, .e = e};
    mnn_graph_init(&w.g);
    mnn_graph_init(&f.g);
    uint8_t *fc = NULL;
    size_t fc_len = 0;
    int rc = mw_write(&w, dir, "dflash.mnn", dflash, d, &st->graph_bytes);
    if (rc == 0) {
        build_fc(&f, d);
        fc = mnn_graph_serialize(&f.g, &fc_len);
        rc = out_dir_write(dir, "dflash_fc.mnn", fc, fc_len, e);
    }
    st->ops = w.g.n_ops;
    st->weight_bytes = w.wf.offset;
    st->fc_bytes = (int64_t)fc_len;
    free(fc);
    mnn_graph_free(&w.g);
    mnn_graph_free(&f.g);
    return rc;
}
