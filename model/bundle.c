#include "bundle.h"
#include <string.h>

void bundle_alloc(ModelBundle *b, const ModelConfig *cfg) {
    memset(b, 0, sizeof *b);
    b->cfg = *cfg;
    tensor_table_build(&b->tt, cfg);
    b->params = xaligned(b->tt.total * sizeof(float), "model parameters");
}

void bundle_init_random(ModelBundle *b, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < b->tt.n; i++) {
        const TensorInfo *t = &b->tt.t[i];
        float *p = b->params + t->offset;
        if (t->flags & TF_NORM) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        } else {
            for (size_t j = 0; j < t->numel; j++) p[j] = (float)(rng_normal(&rng) * b->cfg.init_std);
        }
        if ((t->flags & TF_EMBED) && b->cfg.pad_id >= 0)
            memset(p + (size_t)b->cfg.pad_id * t->shape[1], 0, t->shape[1] * sizeof(float));
    }
}

void bundle_free(ModelBundle *b) {
    free(b->params);
    free(b->tokenizer_json);
    free(b->tokenizer_config_json);
    tensor_table_free(&b->tt);
    memset(b, 0, sizeof *b);
}
