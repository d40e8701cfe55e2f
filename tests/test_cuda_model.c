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
// Without a GPU (or in a build without CUDA) its tests print why and are
// reported skipped; POCKET_REQUIRE_CUDA=1 (tests/cuda/check.sh) makes that a
// failure.
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
static char no_gpu[300];   // why there is none

// Skips the calling test when there is no GPU.
static void need_gpu(void) {
    if (have_gpu) return;
    printf("  %s: skipped\n", no_gpu);
    skip();
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

static void test_tiny_presets(void **state) {
    (void)state;
    need_gpu();
    const char *presets[3] = {"tiny", "tiny-untied", "tiny-llama"};
    for (int i = 0; i < 3; i++) {
        TestModel tm;
        load_preset(presets[i], 1000 + i, &tm);
        const int T = 70;   // past one 64-row attention tile, not a multiple of it
        for (int packed = 0; packed < 2; packed++) {
            StepBatch bt;
            step_batch_make(&bt, 3, T, tm.b.cfg.vocab_size, 2000 + i, packed);
            char what[64];
            snprintf(what, sizeof what, "%s B=3 T=%d%s", presets[i], T, packed ? " packed" : "");
            compare(what, &tm, &bt.in);
            if (i == 0) same_bits_on_gpu(what, &tm, &bt.in);
            step_batch_free(&bt);
        }
        test_model_free(&tm);
    }
}

static void test_pocket_03b(void **state) {
    (void)state;
    need_gpu();
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
    StepBatch bt;
    step_batch_make(&bt, 1, 256, c.vocab_size, 3000, 0);
    compare("pocket-0.3b B=1 T=256", &tm, &bt.in);
    step_batch_free(&bt);
    test_model_free(&tm);
}

static int setup(void **state) {
    (void)state;
    have_gpu = 0;
    if (cuda_device_count() > 0) {
        PtError e;
        if (cuda_device_init(&gpu, 0, &e)) {
            if (require_cuda()) die("%s", e.msg);
            snprintf(no_gpu, sizeof no_gpu, "the CUDA device did not open: %s", e.msg);
            return 0;
        }
        char desc[256];
        cuda_describe(&gpu, desc, sizeof desc);
        printf("GPU: %s\n", desc);
        have_gpu = 1;
    } else if (require_cuda()) {
        die("POCKET_REQUIRE_CUDA=1 but the CUDA runtime sees no GPU");
    } else {
        snprintf(no_gpu, sizeof no_gpu, "no GPU on this machine");
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
    skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_built_without_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
