// test_model_util.h: a model for tests that owns what it runs on: the bundle
// (config, table, weights, tokenizer), a CPU device with the best kernels and
// the model over the bundle's weights. Keep it in place once made: the model
// points into it.
#pragma once
#include <math.h>
#include <string.h>
#include "../model/bundle.h"
#include "../model/model.h"
#include "../model/ops/ops.h"

typedef struct {
    ModelBundle b;
    Device dev;
    Model m;
} TestModel;

// Takes ownership of the bundle's contents (b is zeroed). opt NULL: fp32.
static inline void test_model_from_bundle(TestModel *t, ModelBundle *b, const ModelOptions *opt) {
    t->b = *b;
    memset(b, 0, sizeof *b);
    cpu_device_init(&t->dev, 0, NULL);
    model_init(&t->m, &t->dev, &t->b.cfg, &t->b.tt, t->b.params, opt);
}

static inline void test_model_free(TestModel *t) {
    model_free(&t->m);
    dev_free(&t->dev);
    bundle_free(&t->b);
}

// A preset with weights of the fixtures' scale (matrices N(0, 0.15^2), norms
// 1 + N(0, 0.1^2)) so that logits spread over several units and every norm
// weight matters; the preset's own init (std 0.02) gives near-flat logits.
static inline void load_preset(const char *name, uint64_t seed, TestModel *tm) {
    ModelConfig c;
    PtError e;
    if (config_preset(&c, name, &e)) die("%s", e.msg);
    ModelBundle b;
    bundle_alloc(&b, &c);
    bundle_init_random(&b, seed);
    Rng rng;
    rng_seed(&rng, seed + 1);
    for (int i = 0; i < b.tt.n; i++) {
        const TensorInfo *t = &b.tt.t[i];
        float *p = b.params + t->offset;
        for (size_t j = 0; j < t->numel; j++)
            p[j] = (t->flags & TF_NORM) ? 1.0f + 0.1f * (float)rng_normal(&rng) : p[j] * (0.15f / c.init_std);
    }
    test_model_from_bundle(tm, &b, NULL);
}

static inline int *random_tokens(int n, int vocab, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    int *t = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) t[i] = (int)(rng_next(&rng) % (uint64_t)vocab);
    return t;
}

static inline double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static inline double rms_diff(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}
