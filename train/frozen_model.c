// frozen_model.c: a forward-only second model (see frozen_model.h).
#include "frozen_model.h"
#include <string.h>
#include "../formats/checkpoint.h"
#include "../formats/int4_weights.h"

int frozen_model_load(FrozenModel *f, const char *path, PtError *e) {
    memset(f, 0, sizeof *f);
    return checkpoint_load(path, &f->b, e);
}

int frozen_model_int4(FrozenModel *f, const char *path, const QuantSpec *spec, int quant_embedding, int init,
                      int threads, int *from_qat, PtError *e) {
    QuantSpec held;
    int held_qemb, rc = checkpoint_read_qat_spec(path, &held, &held_qemb, e);
    if (rc < 0) return -1;
    *from_qat = rc == 0 && held.group == spec->group && held.symmetric == spec->symmetric &&
                held_qemb == quant_embedding;
    QatState q;
    if (qat_init(&q, &f->b.tt, spec, quant_embedding, 0, path, e)) return -1;
    rc = *from_qat ? checkpoint_load_qat(path, &q, &f->b.tt, e)
                   : qat_init_from_weights(&q, &f->b.tt, f->b.params, init, NULL, NULL, path, e);
    if (rc > 0) rc = pt_fail(e, "%s: /qat vanished while reading it", path);
    if (rc == 0) {
        const size_t bytes = f->b.tt.total * sizeof(float);
        float *w = xaligned(bytes, "int4 weights");
        int4_weights(&q, &f->b, threads, w);
        memcpy(f->b.params, w, bytes);
        free(w);
    }
    qat_free(&q);
    return rc;
}

int frozen_model_start(FrozenModel *f, Device *dev, const ModelOptions *opt, int B, int T, PtError *e) {
    f->dev = dev;
    f->params = dev_mirror(dev, f->b.params, f->b.tt.total * sizeof(float), "frozen model's weights");
    ModelOptions o = *opt;
    o.recompute = 0;   // no backward
    model_init(&f->m, dev, &f->b.cfg, &f->b.tt, f->params, &o);
    return model_plan(&f->m, B, T, 0, NULL, e);
}

void frozen_model_free(FrozenModel *f) {
    if (f->params) {
        model_free(&f->m);
        dev_unmirror(f->dev, f->params, f->b.params);
    }
    bundle_free(&f->b);
    memset(f, 0, sizeof *f);
}
