#include "open_model.h"
#include "../formats/checkpoint.h"

void int4_default_spec(const ModelConfig *c, QuantSpec *spec, int *quant_embedding) {
    spec->group = 64;
    spec->symmetric = 0;
    *quant_embedding = c->tied_embeddings;
}

int int4_load_state(const ModelBundle *b, const char *ckpt_path, const QuantSpec *rtn_spec, QatState *q,
                    int *from_qat, PtError *e) {
    QuantSpec spec;
    int quant_embedding;
    int rc = checkpoint_read_qat_spec(ckpt_path, &spec, &quant_embedding, e);
    if (rc < 0) return -1;
    *from_qat = rc == 0;
    if (!*from_qat) {
        int4_default_spec(&b->cfg, &spec, &quant_embedding);
        if (rtn_spec) spec = *rtn_spec;
    }
    if (qat_init(q, &b->tt, &spec, quant_embedding, 0, ckpt_path, e)) return -1;
    rc = *from_qat ? checkpoint_load_qat(ckpt_path, q, &b->tt, e)
                   : qat_init_from_weights(q, &b->tt, b->params, QAT_INIT_RTN, NULL, NULL, ckpt_path, e);
    if (rc > 0) rc = pt_fail(e, "%s: /qat vanished while reading it", ckpt_path);
    if (rc) qat_free(q);
    return rc;
}

int int4_use_weights_spec(Model *m, const char *ckpt_path, const QuantSpec *rtn_spec, QatState *q,
                          float **effective, FILE *log, PtError *e) {
    int from_qat;
    if (int4_load_state(&m->w, ckpt_path, rtn_spec, q, &from_qat, e)) return -1;
    const QuantSpec spec = q->spec;
    const int quant_embedding = q->quant_embedding;
    if (from_qat && rtn_spec && (rtn_spec->group != spec.group || !rtn_spec->symmetric != !spec.symmetric)) {
        qat_free(q);
        return pt_fail(e,
                       "%s: holds QAT scales for int4 group %d %s, not the requested group %d %s "
                       "(a chosen grid applies to float checkpoints only)",
                       ckpt_path, spec.group, spec.symmetric ? "symmetric" : "asymmetric", rtn_spec->group,
                       rtn_spec->symmetric ? "symmetric" : "asymmetric");
    }
    *effective = xaligned(m->w.tt.total * sizeof(float), "int4 weights");
    qat_forward_weights(q, &m->w.tt, m->w.params, *effective);
    // An untied embedding the int4 state leaves in float ships as bf16 rows
    // (MNN's embeddings_bf16.bin, GGUF BF16): look it up at that precision too.
    if (!quant_embedding && !m->w.cfg.tied_embeddings) {
        const TensorInfo *emb = tensor_table_find(&m->w.tt, "model.embed_tokens.weight");
        float *x = *effective + emb->offset;
        for (size_t i = 0; i < emb->numel; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    }
    model_use_weights(m, *effective);
    if (log)
        fprintf(log, "int4 weights: %s, group %d, %s%s\n", from_qat ? "the checkpoint's QAT scales" : "RTN from float",
                spec.group, spec.symmetric ? "symmetric" : "asymmetric", quant_embedding                     ? ", embedding quantized"
                : !m->w.cfg.tied_embeddings ? ", embedding in bf16"
                                            : "");
    return 0;
}

int int4_use_weights(Model *m, const char *ckpt_path, QatState *q, float **effective, FILE *log, PtError *e) {
    return int4_use_weights_spec(m, ckpt_path, NULL, q, effective, log, e);
}
