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

void bundle_take_vocab_rows(const ModelBundle *in, const int *rows, int vocab_size, ModelBundle *out) {
    ModelConfig cfg = in->cfg;
    cfg.vocab_size = vocab_size;
    bundle_alloc(out, &cfg);
    for (int i = 0; i < in->tt.n; i++) {
        const TensorInfo *from = &in->tt.t[i], *to = &out->tt.t[i];
        const float *src = in->params + from->offset;
        float *dst = out->params + to->offset;
        if (from->kind != T_EMBED && from->kind != T_LMHEAD) {
            memcpy(dst, src, from->numel * sizeof(float));
            continue;
        }
        const size_t H = (size_t)from->shape[1];   // bundle_alloc zeroed the rows without a source
        for (int r = 0; r < vocab_size; r++)
            if (rows[r] >= 0) memcpy(dst + (size_t)r * H, src + (size_t)rows[r] * H, H * sizeof(float));
    }
}
