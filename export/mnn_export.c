// mnn_export.c: the MNN package (mnn_export.h): the decoder's graph and
// weights (mnn_writer.h), the tokenizer, the configs and a draft's files.
#include "mnn_export.h"
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include "../util/out_dir.h"
#include "mnn_draft.h"
#include "mnn_tokenizer.h"
#include "mnn_writer.h"

typedef MnnWriter Writer;

static int write_json(const OutDir *d, const char *name, json_t *o, PtError *e) {
    char *text = json_dumps(o, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) die("out of memory serialising %s", name);
    int rc = out_dir_write(d, name, text, strlen(text), e);
    free(text);
    return rc;
}

// Runtime options; the sampler keys are llmexport's defaults (the mixed
// sampler: temperature 0.8, top_k 40, top_p 0.9, min_p 0.05), or greedy.
static json_t *runtime_config(const ModelConfig *c, const MnnExportOptions *o) {
    json_t *j = json_object();
    json_object_set_new(j, "llm_model", json_string("llm.mnn"));
    json_object_set_new(j, "llm_weight", json_string("llm.mnn.weight"));
    json_object_set_new(j, "tokenizer_file", json_string("tokenizer.mtok"));
    if (!c->tied_embeddings) json_object_set_new(j, "embedding_file", json_string("embeddings_bf16.bin"));
    json_object_set_new(j, "backend_type", json_string("cpu"));
    json_object_set_new(j, "thread_num", json_integer(4));
    json_object_set_new(j, "precision", json_string("low"));
    json_object_set_new(j, "memory", json_string(o->memory ? o->memory : "low"));
    json_object_set_new(j, "sampler_type", json_string(o->greedy ? "greedy" : "mixed"));
    json_object_set_new(j, "temperature", json_real(0.8));
    json_object_set_new(j, "top_k", json_integer(40));
    json_object_set_new(j, "top_p", json_real(0.9));
    json_object_set_new(j, "min_p", json_real(0.05));
    json_object_set_new(j, "repetition_penalty", json_real(1.0));
    if (o->draft) mnn_draft_config(j, o->draft);
    return j;
}

// The model description the runtime reads (llm_config.json; MNN's
// transformers/llm/engine/src/llmconfig.hpp).
static json_t *model_config(const Writer *w) {
    const ModelBundle *b = w->b;
    const ModelConfig *c = &b->cfg;
    json_t *j = json_object();
    json_object_set_new(j, "model_type", json_string(c->model_type));
    json_object_set_new(j, "hidden_size", json_integer(c->d_model));
    json_object_set_new(j, "layer_nums", json_integer(c->n_layer));
    // "float": on CPU the runtime then passes a scalar 0 and the attention op is causal itself.
    json_object_set_new(j, "attention_mask", json_string("float"));
    json_object_set_new(j, "attention_type", json_string("full"));
    json_object_set_new(j, "is_mrope", json_false());
    json_t *tcfg = b->tokenizer_config_json ? json_loadb(b->tokenizer_config_json, b->tokenizer_config_json_len, 0, NULL)
                                            : NULL;
    const char *tmpl = json_string_value(json_object_get(tcfg, "chat_template"));
    json_t *eos = json_object_get(tcfg, "eos_token");
    if (json_is_object(eos)) eos = json_object_get(eos, "content");
    if (tmpl) {
        json_t *jinja = json_object();
        json_object_set_new(jinja, "chat_template", json_string(tmpl));
        if (json_is_string(eos)) json_object_set_new(jinja, "eos", json_string(json_string_value(eos)));
        json_object_set_new(j, "jinja", jinja);
    }
    json_decref(tcfg);
    if (c->tied_embeddings) {
        // The input embedding is read from the int4 lm_head rows: codes right
        // after its IDST header, alpha right after the codes.
        int64_t header = mnn_idst_header_size(c->vocab_size, c->d_model);
        json_t *t = json_object();
        json_object_set_new(t, "weight_offset", json_integer(w->lm_head_offset + header));
        json_object_set_new(t, "alpha_offset", json_integer(w->lm_head_offset + w->lm_head_code_bytes));
        json_object_set_new(t, "alpha_size", json_integer(w->lm_head_alpha_bytes));
        json_object_set_new(t, "quant_bit", json_integer(4));
        json_object_set_new(t, "quant_block", json_integer(w->q->spec.group));
        json_object_set_new(t, "alpha_dtype", json_string("fp16"));
        json_object_set_new(j, "tie_embeddings", t);
    }
    if (c->choice_id > 0) {
        // The decision head (model/choice_head.h) is lm_head row token_id, shipped
        // in llm.mnn.weight with the other rows: the runtime's own forward gives it.
        json_t *h = json_object();
        json_object_set_new(h, "token_id", json_integer(c->choice_id));
        json_object_set_new(h, "score", json_string("logits[token_id] at the last position of the forward over the "
                                                    "prompt's ids (chat template, assistant header, thinking off) "
                                                    "followed by the candidate's ids and <|im_end|>"));
        json_object_set_new(h, "pick", json_string("the candidate with the highest score; softmax over the scores "
                                                   "gives the probabilities"));
        json_object_set_new(j, "pocket_choice", h);
    }
    return j;
}

// Untied: the input embedding [V, H] as bf16 rows (round to nearest even).
static int write_embedding(const OutDir *d, const ModelBundle *b, int64_t *bytes, PtError *e) {
    ParamViews v;
    param_views(&v, &b->tt, b->params);
    size_t n = (size_t)b->cfg.vocab_size * (size_t)b->cfg.d_model;
    uint16_t *h = xmalloc(n * sizeof(uint16_t), "bf16 embedding");
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(v.embed[i]);
    int rc = out_dir_write(d, "embeddings_bf16.bin", h, n * sizeof(uint16_t), e);
    free(h);
    *bytes = (int64_t)(n * sizeof(uint16_t));
    return rc;
}

static int decoder(MnnWriter *w, const void *ctx) {
    (void)ctx;
    return mw_decoder(w);
}

int mnn_export(const ModelBundle *b, const QatState *q, const char *dir, const MnnExportOptions *o, MnnExportStats *st,
               PtError *e) {
    memset(st, 0, sizeof *st);
    if (mnn_check_exportable(&b->cfg, &q->spec, q->quant_embedding, e) || (o->draft && mnn_draft_check(b, o->draft, e)))
        return -1;
    OutDir d;
    if (out_dir_begin(&d, dir, o->force, e)) return -1;
    Writer w = {.b = b, .q = q, .fused = o->fused, .draft = o->draft, .e = e};
    mnn_graph_init(&w.g);
    uint8_t *tok = NULL;
    size_t tok_len = 0;
    // The tokenizer first: its checks fail before 170 MB of weights are written.
    int rc = mnn_tokenizer_build(b, &tok, &tok_len, e);
    if (rc == 0) rc = mw_write(&w, &d, "llm.mnn", decoder, NULL, &st->graph_bytes);
    if (rc == 0) rc = out_dir_write(&d, "tokenizer.mtok", tok, tok_len, e);
    if (rc == 0 && !b->cfg.tied_embeddings) rc = write_embedding(&d, b, &st->embedding_bytes, e);
    if (rc == 0) rc = write_json(&d, "config.json", runtime_config(&b->cfg, o), e);
    if (rc == 0) rc = write_json(&d, "llm_config.json", model_config(&w), e);
    MnnDraftStats ds = {0};
    if (rc == 0 && o->draft) rc = mnn_draft_write(b, q, o->draft, &d, &ds, e);
    st->draft_ops = ds.ops;
    st->draft_graph_bytes = ds.graph_bytes;
    st->draft_weight_bytes = ds.weight_bytes;
    st->draft_fc_bytes = ds.fc_bytes;
    st->n_ops = w.g.n_ops;
    st->n_tensors = w.g.n_tensors;
    st->n_linears = w.n_linears;
    st->weight_bytes = w.wf.offset;
    st->tokenizer_bytes = (int64_t)tok_len;
    free(tok);
    mnn_graph_free(&w.g);
    if (rc) {
        out_dir_abort(&d);
        return -1;
    }
    return out_dir_commit(&d, e);
}

int mnn_export_check(const ModelBundle *b, const QuantSpec *spec, int quant_embedding, const MnnExportOptions *o,
                     const char *dir, PtError *e) {
    uint8_t *tok = NULL;
    size_t len = 0;
    int rc = mnn_check_exportable(&b->cfg, spec, quant_embedding, e) || (o->draft && mnn_draft_check(b, o->draft, e)) ||
             mnn_tokenizer_build(b, &tok, &len, e) || out_dir_check(dir, o->force, e);
    free(tok);
    return rc ? -1 : 0;
}
