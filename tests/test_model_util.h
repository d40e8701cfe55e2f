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

typedef struct {
    double loss;
    int count;
    float *grads;   // host copy, tt->total floats
} StepResult;

// A batch of random tokens, next-token targets with the last of each row
// ignored; packed: documents with segment ids, positions and a loss mask.
typedef struct {
    int *tokens, *targets, *pos, *seg;
    uint8_t *mask;
    ModelInput in;
} StepBatch;

static inline void step_batch_make(StepBatch *bt, int B, int T, int vocab, uint64_t seed, int packed) {
    memset(bt, 0, sizeof *bt);
    const int N = B * T;
    bt->tokens = random_tokens(N, vocab, seed);
    bt->targets = xmalloc(N * sizeof(int), "targets");
    for (int n = 0; n < N; n++) bt->targets[n] = (n + 1) % T ? bt->tokens[n + 1] : -1;
    bt->in = (ModelInput){.B = B, .T = T, .tokens = bt->tokens, .targets = bt->targets};
    if (!packed) return;
    // Documents of 5..40 tokens packed into each row: segment ids, positions
    // from 0 in each document, the first 3 tokens of each (a prompt) masked.
    bt->pos = xmalloc(N * sizeof(int), "pos");
    bt->seg = xmalloc(N * sizeof(int), "seg");
    bt->mask = xmalloc(N, "mask");
    Rng r;
    rng_seed(&r, seed + 7);
    for (int b = 0; b < B; b++) {
        int id = 0, p = 0, left = 0;
        for (int t = 0; t < T; t++) {
            if (left == 0) {
                id++;
                p = 0;
                left = 5 + (int)(rng_next(&r) % 36);
            }
            const int n = b * T + t;
            bt->seg[n] = id;
            bt->pos[n] = p;
            bt->mask[n] = p >= 3;
            if (left == 1) bt->targets[n] = -1;   // no target across documents
            p++;
            left--;
        }
    }
    bt->in.pos = bt->pos;
    bt->in.seg = bt->seg;
    bt->in.mask = bt->mask;
}

static inline void step_batch_free(StepBatch *bt) {
    free(bt->tokens);
    free(bt->targets);
    free(bt->pos);
    free(bt->seg);
    free(bt->mask);
}

// One forward + backward of `in` on dev over the host weights `params`
// (mirrored onto dev first), gradients read back to the host.
static inline StepResult step_on(Device *dev, const ModelBundle *b, float *params, const ModelInput *in,
                                 const ModelOptions *opt) {
    StepResult r = {0};
    PtError e;
    const size_t bytes = b->tt.total * sizeof(float);
    float *w = dev_mirror(dev, params, bytes, "test weights");
    Model m;
    model_init(&m, dev, &b->cfg, &b->tt, w, opt);
    if (model_plan(&m, in->B, in->T, 1, NULL, &e)) die("%s", e.msg);
    model_zero_grads(&m);
    r.loss = model_forward_backward(&m, in, 1.0f / (float)(in->B * in->T), NULL, &r.count);
    r.grads = xmalloc(bytes, "gradients");
    OP(dev, download, r.grads, m.grads, bytes);
    model_free(&m);
    dev_unmirror(dev, w, params);
    return r;
}

// max |got - want| / max |want| (the absolute error when want is all zero);
// a NaN in either gives infinity, so it never passes a bound.
static inline double normwise_error(const float *got, const float *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        diff = isnan(d) ? INFINITY : fmax(diff, d);
        mag = fmax(mag, fabs((double)want[i]));
    }
    return mag > 0.0 ? diff / mag : diff;
}

// The worst per-tensor normwise error of got against want; names it in *worst_name.
static inline double worst_tensor(const TensorTable *tt, const float *got, const float *want, const char **worst_name) {
    double worst = 0.0;
    *worst_name = "";
    for (int k = 0; k < tt->n; k++) {
        const TensorInfo *t = &tt->t[k];
        const double e = normwise_error(got + t->offset, want + t->offset, t->numel);
        if (e > worst) {
            worst = e;
            *worst_name = t->name;
        }
    }
    return worst;
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

// A LoRA adapter of rank 3, alpha 6 on `targets` of cfg's model, A and B both
// random N(0, 0.3) (PEFT's zero B would leave dA zero); the caller frees it.
static inline void lora_random_adapter(LoraAdapter *ad, const ModelConfig *cfg, unsigned targets) {
    LoraConfig lc = {.rank = 3, .alpha = 6.0f, .targets = targets};
    lora_adapter_alloc(ad, cfg, &lc);
    Rng r;
    rng_seed(&r, 99);
    for (size_t i = 0; i < ad->tt.total; i++) ad->params[i] = (float)(0.3 * rng_normal(&r));
}

// Every adapter tensor's gradient (grads, laid out by ad->tt) against the
// five-point finite difference of loss(ctx) at 6 random entries (truncation
// O(h^4), so h can stay large against the forward's fp32 rounding): within 5e-3
// relative per tensor, and each tensor one the loss moves. Returns the worst
// error, or -1 with why[256] saying which tensor failed.
static inline double lora_check_finite_differences(LoraAdapter *ad, const float *grads, double (*loss)(void *ctx),
                                                   void *ctx, char why[256]) {
    Rng r;
    rng_seed(&r, 5);
    double worst = 0;
    for (int i = 0; i < ad->tt.n; i++) {
        const TensorInfo *t = &ad->tt.t[i];
        double d2 = 0, g2 = 0;
        for (int k = 0; k < 6; k++) {
            const size_t j = t->offset + rng_next(&r) % t->numel;
            float *w = ad->params + j, keep = *w;
            const float h = 1e-2f, at[4] = {keep + h, keep - h, keep + 2 * h, keep - 2 * h};
            double f[4];
            for (int q = 0; q < 4; q++) {
                *w = at[q];
                f[q] = loss(ctx);
            }
            *w = keep;
            const double fd = (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12.0 * h);
            d2 += (fd - grads[j]) * (fd - grads[j]);
            g2 += fd * fd;
        }
        const double rel = sqrt(d2) / fmax(sqrt(g2), 1e-6);
        if (!(rel <= 5e-3)) {
            snprintf(why, 256, "%s: gradient off finite differences by %.2e relative", t->name, rel);
            return -1;
        }
        if (!(sqrt(g2) > 1e-5)) {
            snprintf(why, 256, "%s: the loss does not move it, so it checks nothing", t->name);
            return -1;
        }
        worst = fmax(worst, rel);
    }
    return worst;
}
