// test_mnn_draft: a DFlash speculative draft in the MNN package
// (export/mnn_draft.h), read back with the repo's flatbuffer reader:
// - llm.mnn's one extra output, hidden_states: the concatenation along the
//   last axis of the chosen target layers' outputs (after the MLP residual),
//   in the draft's order; the weights and every other op as without a draft;
// - dflash.mnn: the five inputs by the names, types and shapes MNN 3.6.1's
//   DFlash generation feeds, the output "logits", the draft's matrices inline
//   as its fp32 weights, its norms and the target's int4 lm_head in
//   dflash.mnn.weight (the lm_head blob the same bytes as in llm.mnn.weight,
//   every byte of the file referenced);
// - dflash_fc.mnn: target_hidden -> context_hidden, fc and hidden_norm inline;
// - config.json's speculative keys; without a draft none of it;
// - a draft with a vocabulary of its own: a K-row int4 lm_head of its own,
//   its logits scattered to the vocabulary's ids, -FLT_MAX at the others.
// And `pocket export --draft`: a draft made for the target's int4 weights
// (lora_base_hash of int4_lora_base: what `pocket generate --int4` runs) is
// shipped; one made for its float weights, or reading a layer the target
// does not have, is refused in one line naming the draft, nothing written.
// MNN's runtime runs the package in tests/interop/test_spec_runtime.py.
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>
#include "../export/flatbuf_read.h"
#include "../export/mnn_export.h"
#include "../export/mnn_graph.h"
#include "../export/mnn_weights.h"
#include "../formats/checkpoint.h"
#include "../formats/draft_checkpoint.h"
#include "../formats/int4_weights.h"
#include "../formats/lora_checkpoint.h"
#include "test_cli_util.h"

static const char TINY[] =
    "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 3, \"hidden_size\": 64, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 128, \"vocab_size\": 1536, "
    "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
    "\"tie_word_embeddings\": true}";

// A tiny 3-layer target with the fixture tokenizer and its RTN int4 state.
static void tiny_target(ModelBundle *b, QatState *q) {
    ModelConfig cfg;
    PtError e;
    if (config_from_hf_json(&cfg, TINY, "test config", &e)) fail_msg("%s", e.msg);
    bundle_alloc(b, &cfg);
    bundle_init_random(b, 5);
    uint8_t *tok;
    if (read_whole_file("tests/fixtures/tok/tokenizer.json", &tok, &b->tokenizer_json_len, &e)) fail_msg("%s", e.msg);
    b->tokenizer_json = (char *)tok;
    QuantSpec spec = {64, 0};
    if (qat_init(q, &b->tt, &spec, 1, 0, "test", &e) ||
        qat_init_from_weights(q, &b->tt, b->params, QAT_INIT_RTN, NULL, NULL, "test", &e))
        fail_msg("%s", e.msg);
}

// ---- a graph read back: Net fields 3 oplists, 4 outputName, 7 tensorName;
// Op fields 0 inputIndexes, 2 main, 3 name, 5 type.
typedef struct {
    uint8_t *buf;
    FbReader r;
    size_t ops, outputs, names;
    uint32_t n_ops;
} Net;

static void net_read(Net *n, const char *dir, const char *file) {
    char *path = path_join(dir, file);
    size_t len;
    PtError e;
    if (read_whole_file(path, &n->buf, &len, &e)) fail_msg("%s", e.msg);
    free(path);
    n->r = (FbReader){.p = n->buf, .len = len};
    size_t root = fbr_root(&n->r);
    n->ops = fbr_ref(&n->r, root, 3);
    n->outputs = fbr_ref(&n->r, root, 4);
    n->names = fbr_ref(&n->r, root, 7);
    n->n_ops = fbr_vec_len(&n->r, n->ops, 4);
    assert_false(n->r.bad);
}

static int str_is(Net *n, size_t s, const char *want) {
    uint32_t len;
    const char *p = fbr_str(&n->r, s, &len);
    return len == strlen(want) && memcmp(p, want, len) == 0;
}

static size_t op_named(Net *n, const char *name) {
    for (uint32_t i = 0; i < n->n_ops; i++) {
        size_t op = fbr_vec_ref(&n->r, n->ops, i);
        if (str_is(n, fbr_ref(&n->r, op, 3), name)) return op;
    }
    fail_msg("no op named %s", name);
    return 0;
}

static int has_op(Net *n, const char *name) {
    for (uint32_t i = 0; i < n->n_ops; i++)
        if (str_is(n, fbr_ref(&n->r, fbr_vec_ref(&n->r, n->ops, i), 3), name)) return 1;
    return 0;
}

static int op_type(Net *n, size_t op) { return (int)fbr_int(&n->r, op, 5, 4, 0); }
static size_t op_main(Net *n, size_t op) { return fbr_ref(&n->r, op, 2); }

static int count_type(Net *n, int type) {
    int c = 0;
    for (uint32_t i = 0; i < n->n_ops; i++) c += op_type(n, fbr_vec_ref(&n->r, n->ops, i)) == type;
    return c;
}

// The name of the tensor that is input i of op.
static int input_is(Net *n, size_t op, uint32_t i, const char *want) {
    int64_t id = fbr_vec_int(&n->r, fbr_ref(&n->r, op, 0), i, 4);
    return str_is(n, fbr_vec_ref(&n->r, n->names, (uint32_t)id), want);
}

// The graph's outputs are exactly these names, in this order.
static void outputs_are(Net *n, const char *const *want, uint32_t k) {
    assert_int_equal(fbr_vec_len(&n->r, n->outputs, 4), k);
    for (uint32_t i = 0; i < k; i++) assert_true(str_is(n, fbr_vec_ref(&n->r, n->outputs, i), want[i]));
}

// An int32 vector field equals want.
static void ints_are(Net *n, size_t vec, const int32_t *want, uint32_t k) {
    assert_int_equal(fbr_vec_len(&n->r, vec, 4), k);
    for (uint32_t i = 0; i < k; i++) assert_int_equal(fbr_vec_int(&n->r, vec, i, 4), want[i]);
}

// A float vector field equals want exactly.
static void floats_are(Net *n, size_t vec, const float *want, size_t k) {
    assert_int_equal(fbr_vec_len(&n->r, vec, 4), k);
    assert_memory_equal(n->r.p + vec + 4, want, k * sizeof(float));
}

static void input_op(Net *n, const char *name, const int32_t *dims, uint32_t nd, int dtype) {
    size_t op = op_named(n, name), p = op_main(n, op);
    assert_int_equal(op_type(n, op), MNN_OP_INPUT);
    ints_are(n, fbr_ref(&n->r, p, 0), dims, nd);
    assert_int_equal(fbr_int(&n->r, p, 1, 4, 1), dtype);
}

// An fp32 1x1 convolution with the weights [oc, ic] inline.
static void conv_f32(Net *n, const char *name, const float *w, int oc, int ic) {
    size_t op = op_named(n, name), conv = op_main(n, op), common = fbr_ref(&n->r, conv, 0);
    assert_int_equal(op_type(n, op), MNN_OP_CONV);
    assert_int_equal(fbr_int(&n->r, common, 10, 4, 0), oc);
    assert_int_equal(fbr_int(&n->r, common, 11, 4, 0), ic);
    floats_are(n, fbr_ref(&n->r, conv, 1), w, (size_t)oc * ic);
}

// An op's `external` array (Convolution2D field 6, LayerNorm field 5).
static void external_of(Net *n, size_t op, int field, int64_t *x, int k) {
    size_t ext = fbr_ref(&n->r, op_main(n, op), field);
    assert_true(fbr_vec_len(&n->r, ext, 8) >= (uint32_t)k);
    for (int i = 0; i < k; i++) x[i] = fbr_vec_int(&n->r, ext, (uint32_t)i, 8);
}

// A LayerNorm whose gamma (n floats, then as many zero betas) lies in the weight file w: its bytes.
static int64_t norm_blob(Net *net, const uint8_t *w, const char *name, const float *gamma, int n) {
    int64_t x[3];
    size_t op = op_named(net, name);
    assert_int_equal(op_type(net, op), MNN_OP_LAYERNORM);
    external_of(net, op, 5, x, 3);
    assert_int_equal(x[1], 4 * n);
    assert_int_equal(x[2], 4 * n);
    assert_memory_equal(w + x[0], gamma, (size_t)x[1]);
    for (int64_t i = 0; i < x[2]; i++) assert_int_equal(w[x[0] + x[1] + i], 0);
    return x[1] + x[2];
}

static uint8_t *file_of(const char *dir, const char *name, size_t *len) {
    char *p = path_join(dir, name);
    uint8_t *buf;
    PtError e;
    if (read_whole_file(p, &buf, len, &e)) fail_msg("%s", e.msg);
    free(p);
    return buf;
}

static int file_in(const char *dir, const char *name) {
    char *p = path_join(dir, name);
    int yes = path_exists(p);
    free(p);
    return yes;
}

static char *tmp_dir(const char *name) {
    char buf[128];
    snprintf(buf, sizeof buf, "/tmp/pt-mnn-draft-%ld-%s", (long)getpid(), name);
    return xstrdup(buf);
}

static void remove_dir(const char *dir) { assert_int_equal(sh("rm -rf '%s'", dir), 0); }

static void draft_ships_in_the_package(void **state) {
    (void)state;
    ModelBundle b;
    QatState q;
    tiny_target(&b, &q);
    const int H = b.cfg.d_model, D = b.cfg.head_dim, Q = b.cfg.n_head * D, KV = b.cfg.n_kv_head * D;
    DraftConfig dc = {.n_layer = 2, .block = 5, .n_target = 2, .target_layers = {0, 2}, .mask_token = 1500, .d_ff = 96};
    Draft d;
    draft_alloc(&d, &b.cfg, &dc);
    draft_init(&d, 7);
    for (int i = 0; i < d.tt.n; i++)   // norms other than 1, so a swapped one shows
        if (d.tt.t[i].flags & TF_NORM)
            for (size_t j = 0; j < d.tt.t[i].numel; j++) d.params[d.tt.t[i].offset + j] = 1.0f + 0.01f * (float)(i + j);
    DraftViews v;
    draft_views(&v, &d.tt, d.params);
    char *with = tmp_dir("with"), *without = tmp_dir("without");
    MnnExportOptions o = {.fused = 1, .memory = "normal", .force = 1, .greedy = 1};
    MnnExportStats st, st0;
    PtError e;
    if (mnn_export(&b, &q, without, &o, &st0, &e)) fail_msg("%s", e.msg);
    o.draft = &d;
    if (mnn_export(&b, &q, with, &o, &st, &e)) fail_msg("%s", e.msg);
    static const char *const FILES[] = {"dflash.mnn", "dflash.mnn.weight", "dflash_fc.mnn"};
    for (int i = 0; i < 3; i++) {
        assert_true(file_in(with, FILES[i]));
        assert_false(file_in(without, FILES[i]));
    }

    // llm.mnn: the same weights and ops, and hidden_states = concat(layer 0, layer 2) -> [1, S, 2H].
    size_t wl, wl0;
    uint8_t *weights = file_of(with, "llm.mnn.weight", &wl), *weights0 = file_of(without, "llm.mnn.weight", &wl0);
    assert_int_equal(wl, wl0);
    assert_memory_equal(weights, weights0, wl);
    Net llm, llm0;
    net_read(&llm, with, "llm.mnn");
    net_read(&llm0, without, "llm.mnn");
    static const char *const BOTH[] = {"logits", "hidden_states"};
    outputs_are(&llm, BOTH, 2);
    outputs_are(&llm0, BOTH, 1);
    assert_int_equal(llm.n_ops, llm0.n_ops + 2);
    assert_false(has_op(&llm0, "hidden_states"));
    size_t hs = op_named(&llm, "hidden_states"), cat = op_named(&llm, "/hidden_states/concat");
    assert_int_equal(op_type(&llm, hs), MNN_OP_RESHAPE);
    assert_true(input_is(&llm, hs, 0, "/hidden_states/concat"));
    const int32_t hs_dims[3] = {1, -1, 2 * H};
    ints_are(&llm, fbr_ref(&llm.r, op_main(&llm, hs), 0), hs_dims, 3);
    assert_int_equal(op_type(&llm, cat), MNN_OP_CONCAT);
    assert_int_equal(fbr_vec_len(&llm.r, fbr_ref(&llm.r, cat, 0), 4), 2);
    assert_true(input_is(&llm, cat, 0, "/layers.0/mlp_residual"));
    assert_true(input_is(&llm, cat, 1, "/layers.2/mlp_residual"));
    assert_int_equal(fbr_int(&llm.r, op_main(&llm, cat), 0, 4, 0), -1);

    // dflash.mnn: the runtime's inputs and output; the draft's weights.
    Net df;
    net_read(&df, with, "dflash.mnn");
    const int32_t rows[3] = {1, -1, H}, mask[4] = {1, 1, -1, -1}, pos[2] = {1, -1};
    input_op(&df, "noise_embedding", rows, 3, MNN_DT_FLOAT);
    input_op(&df, "context_hidden", rows, 3, MNN_DT_FLOAT);
    input_op(&df, "attention_mask", mask, 4, MNN_DT_FLOAT);
    input_op(&df, "q_position_ids", pos, 2, MNN_DT_INT32);
    input_op(&df, "k_position_ids", pos, 2, MNN_DT_INT32);
    static const char *const LOGITS[] = {"logits"};
    outputs_are(&df, LOGITS, 1);
    assert_int_equal(count_type(&df, MNN_OP_INPUT), 5);
    assert_int_equal(count_type(&df, MNN_OP_CONV), 7 * dc.n_layer + 1);
    assert_int_equal(count_type(&df, MNN_OP_MATMUL), 2 * dc.n_layer);
    assert_int_equal(count_type(&df, MNN_OP_SOFTMAX), dc.n_layer);
    assert_int_equal(count_type(&df, MNN_OP_ATTENTION), 0);   // MNN's fused attention is causal
    char name[128];
    for (int l = 0; l < dc.n_layer; l++) {
        const LayerViews *p = &v.layer[l];
        const struct {
            const char *what;
            const float *w;
            int oc, ic;
        } M[7] = {{"self_attn/q_proj", p->wq, Q, H},      {"self_attn/k_proj", p->wk, KV, H},
                  {"self_attn/v_proj", p->wv, KV, H},     {"self_attn/o_proj", p->wo, H, Q},
                  {"mlp/gate_proj", p->wgate, dc.d_ff, H}, {"mlp/up_proj", p->wup, dc.d_ff, H},
                  {"mlp/down_proj", p->wdown, H, dc.d_ff}};
        for (int m = 0; m < 7; m++) {
            snprintf(name, sizeof name, "/dflash_layers.%d/%s/Linear", l, M[m].what);
            conv_f32(&df, name, M[m].w, M[m].oc, M[m].ic);
        }
        // k and v read [context; normed block rows]; q only the block rows.
        snprintf(name, sizeof name, "/dflash_layers.%d/self_attn/kv_input", l);
        size_t kv = op_named(&df, name);
        assert_true(input_is(&df, kv, 0, "context_hidden"));
        snprintf(name, sizeof name, "/dflash_layers.%d/input_layernorm", l);
        assert_true(input_is(&df, kv, 1, name));
        assert_int_equal(fbr_int(&df.r, op_main(&df, kv), 0, 4, 0), 1);
    }
    // dflash.mnn.weight: the norms' gamma (and zero beta), the lm_head blob as in llm.mnn.weight, nothing else.
    size_t dwl;
    uint8_t *dw = file_of(with, "dflash.mnn.weight", &dwl);
    assert_int_equal((int64_t)dwl, st.draft_weight_bytes);
    int64_t used = 0, x[3], x0[3];
    external_of(&df, op_named(&df, "/lm/lm_head/Linear"), 6, x, 3);
    external_of(&llm, op_named(&llm, "/lm/lm_head/Linear"), 6, x0, 3);
    assert_int_equal(x[1], x0[1]);
    assert_int_equal(x[2], x0[2]);
    assert_memory_equal(dw + x[0], weights + x0[0], (size_t)(x[1] + x[2]));
    used += x[1] + x[2];
    for (int l = 0; l < dc.n_layer; l++) {
        static const char *const NORMS[] = {"input_layernorm", "self_attn/q_norm", "self_attn/k_norm",
                                            "post_attention_layernorm"};
        const float *want[4] = {v.layer[l].ln1, v.layer[l].qnorm, v.layer[l].knorm, v.layer[l].ln2};
        const int n[4] = {H, D, D, H};
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "/dflash_layers.%d/%s", l, NORMS[k]);
            used += norm_blob(&df, dw, name, want[k], n[k]);
        }
    }
    used += norm_blob(&df, dw, "/dflash/norm", v.norm, H);
    assert_int_equal(used, (int64_t)dwl);

    // dflash_fc.mnn: target_hidden [1, S, 2H] -> fc -> hidden_norm -> context_hidden.
    Net fc;
    net_read(&fc, with, "dflash_fc.mnn");
    const int32_t th[3] = {1, -1, 2 * H};
    input_op(&fc, "target_hidden", th, 3, MNN_DT_FLOAT);
    static const char *const CTX[] = {"context_hidden"};
    outputs_are(&fc, CTX, 1);
    conv_f32(&fc, "/dflash/fc/Linear", v.fc, H, 2 * H);
    size_t norm = op_named(&fc, "context_hidden");
    assert_int_equal(op_type(&fc, norm), MNN_OP_LAYERNORM);
    floats_are(&fc, fbr_ref(&fc.r, op_main(&fc, norm), 2), v.hidden_norm, (size_t)H);
    assert_true(fbr_f32(&fc.r, op_main(&fc, norm), 1, 0) == b.cfg.norm_eps);
    assert_int_equal(fbr_int(&fc.r, op_main(&fc, norm), 6, 1, 0), 1);   // RMSNorm

    // config.json: the speculative keys, and none without a draft.
    size_t cl;
    uint8_t *text = file_of(with, "config.json", &cl);
    json_t *cfg = json_loadb((const char *)text, cl, 0, NULL), *cfg0;
    free(text);
    text = file_of(without, "config.json", &cl);
    cfg0 = json_loadb((const char *)text, cl, 0, NULL);
    free(text);
    assert_string_equal(json_string_value(json_object_get(cfg, "speculative_type")), "dflash");
    assert_true(json_is_true(json_object_get(cfg, "hidden_states")));
    assert_string_equal(json_string_value(json_object_get(cfg, "dflash_model")), "dflash.mnn");
    assert_string_equal(json_string_value(json_object_get(cfg, "dflash_fc")), "dflash_fc.mnn");
    assert_int_equal(json_integer_value(json_object_get(cfg, "dflash_block_size")), 5);
    assert_int_equal(json_integer_value(json_object_get(cfg, "dflash_mask_token_id")), 1500);
    assert_int_equal(json_integer_value(json_object_get(cfg, "draft_predict_length")), 4);
    json_t *ids = json_object_get(cfg, "dflash_target_layer_ids");
    assert_int_equal(json_array_size(ids), 2);
    assert_int_equal(json_integer_value(json_array_get(ids, 0)), 0);
    assert_int_equal(json_integer_value(json_array_get(ids, 1)), 2);
    assert_int_equal(json_object_size(cfg), json_object_size(cfg0) + 8);
    assert_null(json_object_get(cfg0, "speculative_type"));
    json_decref(cfg);
    json_decref(cfg0);

    // A draft reading a layer the target does not have: refused before anything is written.
    char *bad = tmp_dir("bad");
    d.cfg.target_layers[1] = 3;
    assert_int_equal(mnn_export(&b, &q, bad, &o, &st, &e), -1);
    assert_non_null(strstr(e.msg, "target layer 3"));
    assert_false(path_exists(bad));
    char *tmp = temp_path_for(bad);
    assert_false(path_exists(tmp));

    free(tmp);
    free(bad);
    free(dw);
    free(weights);
    free(weights0);
    free(llm.buf);
    free(llm0.buf);
    free(df.buf);
    free(fc.buf);
    remove_dir(with);
    remove_dir(without);
    free(with);
    free(without);
    draft_free(&d);
    qat_free(&q);
    bundle_free(&b);
}

// A draft with a vocabulary of its own: dflash.mnn's lm_head is a K-row int4 linear of its own (its blob
// the only one besides the norms), whose [1, B, K] logits a ScatterNd places at the vocabulary's ids of a
// [V, B] zero tensor; -FLT_MAX is added at every other id; the output is still "logits".
static void vocab_draft_scatters_its_rows(void **state) {
    (void)state;
    ModelBundle b;
    QatState q;
    tiny_target(&b, &q);
    const int V = b.cfg.vocab_size, H = b.cfg.d_model;
    DraftConfig dc = {.n_layer = 1, .block = 4, .n_target = 1, .target_layers = {1}, .mask_token = 1500, .d_ff = 64};
    Draft d;
    draft_alloc(&d, &b.cfg, &dc);
    draft_init(&d, 9);
    uint64_t *counts = xcalloc((size_t)V, sizeof(uint64_t), "counts");
    const int32_t ids[5] = {3, 10, 77, 640, V - 1};
    for (int k = 0; k < 5; k++) counts[ids[k]] = (uint64_t)(k + 1);
    draft_pick_vocab(&d, counts, V, 8);
    free(counts);
    assert_int_equal(d.n_vocab, 5);
    char *dir = tmp_dir("vocab");
    MnnExportOptions o = {.fused = 1, .memory = "normal", .force = 1, .greedy = 1, .draft = &d};
    MnnExportStats st;
    PtError e;
    if (mnn_export(&b, &q, dir, &o, &st, &e)) fail_msg("%s", e.msg);
    Net df;
    net_read(&df, dir, "dflash.mnn");
    static const char *const LOGITS[] = {"logits"};
    outputs_are(&df, LOGITS, 1);
    assert_false(has_op(&df, "/lm/lm_head/Linear"));
    size_t rows = op_named(&df, "/dflash/lm_head_rows/Linear"), common = fbr_ref(&df.r, op_main(&df, rows), 0);
    assert_int_equal(op_type(&df, rows), MNN_OP_CONV);
    assert_int_equal(fbr_int(&df.r, common, 10, 4, 0), 5);   // output channels: the vocabulary
    assert_int_equal(fbr_int(&df.r, common, 11, 4, 0), H);
    size_t sc = op_named(&df, "/dflash/vocab/scatter");
    assert_int_equal(op_type(&df, sc), MNN_OP_SCATTER_ND);
    assert_true(input_is(&df, sc, 0, "/dflash/vocab/ids_column"));
    assert_true(input_is(&df, sc, 1, "/dflash/vocab/tokens_first"));
    assert_true(input_is(&df, sc, 2, "/dflash/vocab/shape"));
    ints_are(&df, fbr_ref(&df.r, op_main(&df, op_named(&df, "/dflash/vocab/ids")), 5), ids, 5);
    const int32_t shape[2] = {V, 4};
    ints_are(&df, fbr_ref(&df.r, op_main(&df, op_named(&df, "/dflash/vocab/shape")), 5), shape, 2);
    float *pen = xmalloc((size_t)V * sizeof(float), "penalty");
    for (int i = 0; i < V; i++) pen[i] = -FLT_MAX;
    for (int k = 0; k < 5; k++) pen[ids[k]] = 0.0f;
    floats_are(&df, fbr_ref(&df.r, op_main(&df, op_named(&df, "/dflash/vocab/off_vocabulary")), 7), pen, (size_t)V);
    size_t out = op_named(&df, "logits");
    assert_int_equal(op_type(&df, out), MNN_OP_BINARY);
    assert_true(input_is(&df, out, 0, "/dflash/vocab/logits_rows"));
    assert_true(input_is(&df, out, 1, "/dflash/vocab/off_vocabulary"));
    // the weight file: the rows' blob (header, 5 rows of codes, their scales) and the norms, nothing else
    int64_t x[3];
    external_of(&df, rows, 6, x, 3);
    assert_int_equal(x[1], mnn_idst_header_size(5, H) + 5 * H / 2);
    assert_int_equal(x[2], 5 * (H / 64) * 2 * 2);   // asymmetric: a (zero, scale) fp16 pair per group
    DraftViews v;
    draft_views(&v, &d.tt, d.params);
    size_t dwl;
    uint8_t *dw = file_of(dir, "dflash.mnn.weight", &dwl);
    int64_t used = x[1] + x[2];
    static const char *const NORMS[] = {"input_layernorm", "self_attn/q_norm", "self_attn/k_norm",
                                        "post_attention_layernorm"};
    const float *want[4] = {v.layer[0].ln1, v.layer[0].qnorm, v.layer[0].knorm, v.layer[0].ln2};
    const int n[4] = {H, b.cfg.head_dim, b.cfg.head_dim, H};
    char name[128];
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "/dflash_layers.0/%s", NORMS[k]);
        used += norm_blob(&df, dw, name, want[k], n[k]);
    }
    used += norm_blob(&df, dw, "/dflash/norm", v.norm, H);
    assert_int_equal(used, (int64_t)dwl);
    free(pen);
    free(dw);
    free(df.buf);
    remove_dir(dir);
    free(dir);
    draft_free(&d);
    qat_free(&q);
    bundle_free(&b);
}

// `pocket export ... --draft PATH --out DIR/bad-pkg` fails with one line naming PATH (and `says`), leaving nothing.
static void refused(const char *dir, const char *draft, const char *says) {
    assert_int_not_equal(sh("%s export --ckpt %s/init.h5 --format mnn --draft %s --out %s/bad-pkg >/dev/null "
                            "2>%s/err.txt",
                            pocket(), dir, draft, dir, dir),
                         0);
    char err[2048] = {0}, path[600];
    snprintf(path, sizeof path, "%s/err.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(err, 1, sizeof err - 1, f);
    fclose(f);
    assert_true(n > 0 && strchr(err, '\n') == err + n - 1);   // one line
    assert_non_null(strstr(err, draft));
    assert_non_null(strstr(err, says));
    assert_true(no_entry_with_prefix(dir, "bad-pkg"));
}

static void export_checks_the_draft_against_the_int4_target(void **state) {
    (void)state;
    char *dir = tmp_dir("cli"), path[600];
    assert_int_equal(sh("rm -rf %s && mkdir -p %s", dir, dir), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(write_tiny_config(path, 64, 16, 128, 1505, ", \"rope_theta\": 10000.0"), 0);
    assert_int_equal(sh("%s init --model %s --tokenizer tests/fixtures/tok/tokenizer.json --out %s/init.h5 >/dev/null",
                        pocket(), path, dir),
                     0);
    // The hashes of the target's float weights and of its int4 model (what the package ships).
    snprintf(path, sizeof path, "%s/init.h5", dir);
    ModelBundle b;
    PtError e;
    char float_hash[65], int4_hash[65];
    if (checkpoint_load(path, &b, &e)) fail_msg("%s", e.msg);
    lora_base_hash(&b.tt, b.params, float_hash);
    if (int4_lora_base(&b, path, 1, 2, NULL, NULL, &e)) fail_msg("%s", e.msg);
    lora_base_hash(&b.tt, b.params, int4_hash);
    assert_string_not_equal(float_hash, int4_hash);
    DraftConfig dc = {.n_layer = 1, .block = 4, .n_target = 2, .target_layers = {0, 1}, .mask_token = 1500, .d_ff = 64};
    struct {
        const char *name, *hash;
        int last_layer;
    } drafts[3] = {{"good.h5", int4_hash, 1}, {"float.h5", float_hash, 1}, {"layers.h5", int4_hash, 2}};
    for (int i = 0; i < 3; i++) {
        Draft d;
        dc.target_layers[1] = drafts[i].last_layer;
        draft_alloc(&d, &b.cfg, &dc);
        draft_init(&d, 3);
        strcpy(d.base_sha256, drafts[i].hash);
        snprintf(path, sizeof path, "%s/%s", dir, drafts[i].name);
        if (draft_checkpoint_save(path, &d, NULL, NULL, &e)) fail_msg("%s", e.msg);
        draft_free(&d);
    }
    bundle_free(&b);
    assert_int_equal(sh("%s export --ckpt %s/init.h5 --format mnn --draft %s/good.h5 --out %s/pkg >/dev/null", pocket(),
                        dir, dir, dir),
                     0);
    snprintf(path, sizeof path, "%s/pkg", dir);
    assert_true(file_in(path, "dflash.mnn") && file_in(path, "dflash.mnn.weight") && file_in(path, "dflash_fc.mnn"));
    snprintf(path, sizeof path, "%s/float.h5", dir);
    refused(dir, path, int4_hash);
    snprintf(path, sizeof path, "%s/layers.h5", dir);
    refused(dir, path, "target layer 2");
    // Only the MNN package carries a draft.
    assert_int_not_equal(sh("%s export --ckpt %s/init.h5 --format gguf --draft %s/good.h5 --out %s/bad-pkg.gguf "
                            ">/dev/null 2>&1",
                            pocket(), dir, dir, dir),
                         0);
    assert_true(no_entry_with_prefix(dir, "bad-pkg"));
    remove_dir(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(draft_ships_in_the_package),
        cmocka_unit_test(export_checks_the_draft_against_the_int4_target),
        cmocka_unit_test(vocab_draft_scatters_its_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
