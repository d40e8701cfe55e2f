// int4_weights.c: the int4 model a checkpoint deploys as (int4_weights.h).
#include "int4_weights.h"
#include <stdlib.h>
#include <string.h>
#include "checkpoint.h"

void int4_default_spec(const ModelConfig *c, QuantSpec *spec, int *quant_embedding) {
    spec->group = QUANT_GROUP_DEFAULT;
    spec->symmetric = 0;
    *quant_embedding = c->tied_embeddings;
}

int int4_read_spec(const ModelConfig *c, const char *ckpt_path, const QuantSpec *rtn_spec, QuantSpec *spec,
                   int *quant_embedding, int *from_qat, PtError *e) {
    int rc = checkpoint_read_qat_spec(ckpt_path, spec, quant_embedding, e);
    if (rc < 0) return -1;
    *from_qat = rc == 0;
    if (!*from_qat) {
        int4_default_spec(c, spec, quant_embedding);
        if (rtn_spec) *spec = *rtn_spec;
    }
    return 0;
}

int int4_load_state(const ModelBundle *b, const char *ckpt_path, const QuantSpec *rtn_spec, QatState *q,
                    int *from_qat, PtError *e) {
    QuantSpec spec;
    int quant_embedding, rc;
    if (int4_read_spec(&b->cfg, ckpt_path, rtn_spec, &spec, &quant_embedding, from_qat, e)) return -1;
    if (qat_init(q, &b->tt, &spec, quant_embedding, 0, ckpt_path, e)) return -1;
    rc = *from_qat ? checkpoint_load_qat(ckpt_path, q, &b->tt, e)
                   : qat_init_from_weights(q, &b->tt, b->params, QAT_INIT_RTN, NULL, NULL, ckpt_path, e);
    if (rc > 0) rc = pt_fail(e, "%s: /qat vanished while reading it", ckpt_path);
    if (rc) qat_free(q);
    return rc;
}

void int4_weights(const QatState *q, const ModelBundle *b, int threads, float *out) {
    qat_host_weights(q, &b->tt, b->params, out, threads);
    // An untied embedding the int4 state leaves in float ships as bf16 rows
    // (MNN's embeddings_bf16.bin, GGUF BF16): look it up at that precision too.
    if (!q->quant_embedding && !b->cfg.tied_embeddings) {
        const TensorInfo *emb = tensor_table_find(&b->tt, "model.embed_tokens.weight");
        float *x = out + emb->offset;
        for (size_t i = 0; i < emb->numel; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    }
}

int int4_lora_base(ModelBundle *b, const char *ckpt, int int4, int threads, int *from_qat, QuantSpec *spec,
                   PtError *e) {
    if (!int4) return 0;
    QatState q;
    int qat;
    if (int4_load_state(b, ckpt, NULL, &q, &qat, e)) return -1;
    // The float weights are replaced: a frozen base never needs them again.
    const size_t bytes = b->tt.total * sizeof(float);
    float *w = xaligned(bytes, "int4 base");
    int4_weights(&q, b, threads, w);
    memcpy(b->params, w, bytes);
    free(w);
    if (from_qat) *from_qat = qat;
    if (spec) *spec = q.spec;
    qat_free(&q);
    return 0;
}
