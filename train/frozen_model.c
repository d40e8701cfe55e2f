// frozen_model.c: a forward-only second model (see frozen_model.h).
#include "frozen_model.h"
#include <string.h>
#include "../formats/checkpoint.h"

int frozen_model_load(FrozenModel *f, const char *path, PtError *e) {
    memset(f, 0, sizeof *f);
    return checkpoint_load(path, &f->b, e);
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
