#include "int4.h"
#include "checkpoint.h"

void int4_default_spec(const ModelConfig *c, QuantSpec *spec, int *quant_embedding) {
    spec->group = 64;
    spec->symmetric = 0;
    *quant_embedding = c->tied_embeddings;
}

int int4_use_weights(Model *m, const char *ckpt_path, QatState *q, float **effective, FILE *log, PtError *e) {
    QuantSpec spec;
    int quant_embedding;
    int rc = checkpoint_read_qat_spec(ckpt_path, &spec, &quant_embedding, e);
    if (rc < 0) return -1;
    int from_qat = rc == 0;
    if (!from_qat) int4_default_spec(&m->w.cfg, &spec, &quant_embedding);
    if (qat_init(q, &m->w.tt, &spec, quant_embedding, 0, ckpt_path, e)) return -1;
    rc = from_qat ? checkpoint_load_qat(ckpt_path, q, &m->w.tt, e)
                  : qat_init_from_weights(q, &m->w.tt, m->w.params, QAT_INIT_RTN, NULL, NULL, ckpt_path, e);
    if (rc) {
        qat_free(q);
        return -1;
    }
    *effective = xaligned(m->w.tt.total * sizeof(float), "int4 weights");
    qat_forward_weights(q, &m->w.tt, m->w.params, *effective);
    model_use_weights(m, *effective);
    if (log)
        fprintf(log, "int4 weights: %s, group %d, %s%s\n", from_qat ? "the checkpoint's QAT scales" : "RTN from float",
                spec.group, spec.symmetric ? "symmetric" : "asymmetric", quant_embedding ? ", embedding quantized" : "");
    return 0;
}
