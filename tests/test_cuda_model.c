// test_cuda_model: a whole forward + backward on the GPU against the CPU, for
// the presets tiny, tiny-untied and tiny-llama (plain and packed batches with
// segments, positions and a loss mask) and pocket-0.3b at B=1, T=256, in fp32
// matmuls: the loss within 1e-4 relative and every parameter's gradient
// within 1e-4 normwise (max |gpu - cpu| / max |cpu| per tensor). Both sides
// sum in fp32 in different orders, so they agree to about 1e-6 per op; the
// bound leaves room for that to grow through the layers. On the GPU alone:
// the same step twice, and with recompute on, gives the same bits.
//
// The CUDA model gets its weights as a Model does on any device: the bundle's
// parameters mirrored onto the device (dev_mirror), then model_init.
// Without a GPU (or in a build without CUDA) it prints one line and passes;
// POCKET_REQUIRE_CUDA=1 (tests/cuda/check.sh) makes that a failure.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include "test_model_util.h"
#ifdef POCKET_CUDA
#include "../cuda/cuda.h"
#endif

#define MODEL_TOL 1e-4

static int require_cuda(void) {
    const char *v = getenv("POCKET_REQUIRE_CUDA");
    return v && v[0] == '1';
}

#ifdef POCKET_CUDA
static Device gpu;
static int have_gpu;

typedef struct {
    double loss;
    int count;
    float *grads;   // host copy, tt->total floats
} StepResult;

// One forward + backward of `in` on dev over the host weights `params`
// (mirrored onto dev first), gradients read back to the host.
static StepResult step_on(Device *dev, const ModelBundle *b, float *params, const ModelInput *in,
                          const ModelOptions *opt) {
    StepResult r = {0};
    PtError e;
    const size_t bytes = b->tt.total * sizeof(float);
    float *w = dev_mirror(dev, params, bytes, "test weights");
    Model m;
    model_init(&m, dev, &b->cfg, &b->tt, w, opt);
    if (model_plan(&m, in->B, in->T, 1, NULL, &e)) fail_msg("%s", e.msg);
    model_zero_grads(&m);
    r.loss = model_forward_backward(&m, in, 1.0f / (float)(in->B * in->T), NULL, &r.count);
    r.grads = xmalloc(bytes, "gradients");
    OP(dev, download, r.grads, m.grads, bytes);
    model_free(&m);
    dev_unmirror(dev, w, params);
    return r;
}

// The worst per-tensor normwise error of got against want; names it in *worst_name.
static double worst_tensor(const TensorTable *tt, const float *got, const float *want, const char **worst_name) {
    double worst = 0.0;
    *worst_name = "";
    for (int k = 0; k < tt->n; k++) {
        const TensorInfo *t = &tt->t[k];
        double diff = 0.0, mag = 0.0;
        for (size_t i = t->offset; i < t->offset + t->numel; i++) {
            const double d = fabs((double)got[i] - want[i]);
            diff = isnan(d) ? INFINITY : fmax(diff, d);
            mag = fmax(mag, fabs((double)want[i]));
        }
        const double e = mag > 0.0 ? diff / mag : diff;
        if (e > worst || isnan(e)) {
            worst = isnan(e) ? INFINITY : e;
            *worst_name = t->name;
        }
    }
    return worst;
}

static void compare(const char *what, TestModel *tm, const ModelInput *in) {
    const ModelOptions fp32 = {0, MATMUL_FP32, A16_OFF};
    StepResult cpu = step_on(&tm->dev, &tm->b, tm->b.params, in, &fp32);
    StepResult g1 = step_on(&gpu, &tm->b, tm->b.params, in, &fp32);
    const char *name;
    const double e_grad = worst_tensor(&tm->b.tt, g1.grads, cpu.grads, &name);
    const double e_loss = fabs(g1.loss - cpu.loss) / fabs(cpu.loss);
    printf("  %-34s loss %.6f (cpu %.6f, rel %.1e), count %d; worst gradient %s rel %.1e\n", what, g1.loss / g1.count,
           cpu.loss / cpu.count, e_loss, g1.count, name, e_grad);
    assert_int_equal(g1.count, cpu.count);
    if (!(e_loss <= MODEL_TOL && e_grad <= MODEL_TOL))
        fail_msg("%s: the GPU step is off the CPU's (loss rel %.3g, gradient %s rel %.3g, bound %g)", what, e_loss,
                 name, e_grad, MODEL_TOL);
    free(cpu.grads);
    free(g1.grads);
}

// Determinism on the GPU: the same step twice, and recompute on, give the same bits.
static void same_bits_on_gpu(const char *what, TestModel *tm, const ModelInput *in) {
    const ModelOptions plain = {0, MATMUL_FP32, A16_OFF}, recompute = {1, MATMUL_FP32, A16_OFF};
    StepResult a = step_on(&gpu, &tm->b, tm->b.params, in, &plain);
    StepResult b = step_on(&gpu, &tm->b, tm->b.params, in, &plain);
    StepResult c = step_on(&gpu, &tm->b, tm->b.params, in, &recompute);
    const size_t bytes = tm->b.tt.total * sizeof(float);
    if (a.loss != b.loss || memcmp(a.grads, b.grads, bytes)) fail_msg("%s: two GPU steps differ", what);
    if (a.loss != c.loss || memcmp(a.grads, c.grads, bytes)) fail_msg("%s: recompute changes the GPU step", what);
    printf("  %-34s GPU: the same bits twice, and with recompute on\n", what);
    free(a.grads);
    free(b.grads);
    free(c.grads);
}

// Random tokens, next-token targets with the last of each row ignored.
typedef struct {
    int *tokens, *targets, *pos, *seg;
    uint8_t *mask;
    ModelInput in;
} Batch;

static void batch_make(Batch *bt, int B, int T, int vocab, uint64_t seed, int packed) {
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

static void batch_free(Batch *bt) {
    free(bt->tokens);
    free(bt->targets);
    free(bt->pos);
    free(bt->seg);
    free(bt->mask);
}

static void test_tiny_presets(void **state) {
    (void)state;
    if (!have_gpu) {
        printf("  no GPU: skipped\n");
        return;
    }
    const char *presets[3] = {"tiny", "tiny-untied", "tiny-llama"};
    for (int i = 0; i < 3; i++) {
        TestModel tm;
        load_preset(presets[i], 1000 + i, &tm);
        const int T = 70;   // past one 64-row attention tile, not a multiple of it
        for (int packed = 0; packed < 2; packed++) {
            Batch bt;
            batch_make(&bt, 3, T, tm.b.cfg.vocab_size, 2000 + i, packed);
            char what[64];
            snprintf(what, sizeof what, "%s B=3 T=%d%s", presets[i], T, packed ? " packed" : "");
            compare(what, &tm, &bt.in);
            if (i == 0) same_bits_on_gpu(what, &tm, &bt.in);
            batch_free(&bt);
        }
        test_model_free(&tm);
    }
}

static void test_pocket_03b(void **state) {
    (void)state;
    if (!have_gpu) {
        printf("  no GPU: skipped\n");
        return;
    }
    // The preset's own init (std 0.02): at the fixtures' scale 28 layers of
    // random weights would blow the residual stream up.
    ModelConfig c;
    PtError e;
    if (config_preset(&c, "pocket-0.3b", &e)) die("%s", e.msg);
    ModelBundle b;
    bundle_alloc(&b, &c);
    bundle_init_random(&b, 3);
    TestModel tm;
    test_model_from_bundle(&tm, &b, NULL);
    Batch bt;
    batch_make(&bt, 1, 256, c.vocab_size, 3000, 0);
    compare("pocket-0.3b B=1 T=256", &tm, &bt.in);
    batch_free(&bt);
    test_model_free(&tm);
}

static int setup(void **state) {
    (void)state;
    have_gpu = 0;
    if (cuda_device_count() > 0) {
        PtError e;
        if (cuda_device_init(&gpu, 0, &e)) {
            if (require_cuda()) die("%s", e.msg);
            printf("CUDA model test skipped: %s\n", e.msg);
            return 0;
        }
        char desc[256];
        cuda_describe(&gpu, desc, sizeof desc);
        printf("GPU: %s\n", desc);
        have_gpu = 1;
    } else if (require_cuda()) {
        die("POCKET_REQUIRE_CUDA=1 but the CUDA runtime sees no GPU");
    } else {
        printf("CUDA model test skipped: no GPU on this machine\n");
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (have_gpu) dev_free(&gpu);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_presets),
        cmocka_unit_test(test_pocket_03b),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else   // built without CUDA

static void test_built_without_cuda(void **state) {
    (void)state;
    if (require_cuda()) fail_msg("POCKET_REQUIRE_CUDA=1 but this test was built without CUDA (make CUDA=1)");
    printf("  built without CUDA (make CUDA=1 adds the GPU): skipped\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_built_without_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
