// test_backends.h: every backend present, as devices the op tests run on:
// the CPU once per kernel set this CPU runs (AVX-512, AVX2+FMA, NEON,
// portable; for bf16 AVX512_BF16, BFDOT, the fp32 AVX-512, AVX2 and NEON
// tiles over bf16-rounded operands, and portable), and, in a build with CUDA (make CUDA=1) on a
// machine with a GPU, the GPU. A new backend adds its devices here, and every
// op test then checks it against the same double references.
//
// Ops take device memory: the tests mirror their host arrays onto the device
// (Mirrors below: dev_mirror, which hands the host buffer itself over on the
// CPU, so it costs nothing there), run the op, and read results back with
// fetch (OP download, a no-op on the CPU's own buffer).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#ifdef POCKET_CUDA
#include "../cuda/cuda.h"
#endif

enum { MAX_TEST_DEVICES = 8 };

// Why test_devices found no GPU device (a build without CUDA, no GPU, a GPU
// that did not open); empty when it found one. test_gpu_device reports it.
static char gpu_absent[300];

typedef struct {
    char name[64];
    Device dev;
    int gpu;   // a GPU device: its own memory, its own rounding (tolerances: dev_tol)
} TestDevice;

// The bound a device is held to: the CPU's own where the test states one;
// on a GPU the looser of that and gpu_tol (the GPU sums in other orders, in
// fp32: 1e-5 normwise for the ops, 1e-4 for attention and the classifier).
static inline double dev_tol(const TestDevice *t, double cpu_tol, double gpu_tol) {
    return t->gpu && gpu_tol > cpu_tol ? gpu_tol : cpu_tol;
}

// Host arrays mirrored onto one device for one op call; mirrors_free gives
// them all back.
enum { MAX_MIRRORS = 24 };
typedef struct {
    Device *d;
    int n;
    void *dev[MAX_MIRRORS];
    const void *host[MAX_MIRRORS];
} Mirrors;

static inline Mirrors mirrors_on(Device *d) {
    Mirrors m;
    memset(&m, 0, sizeof m);
    m.d = d;
    return m;
}

// Device memory holding host's bytes (the host buffer itself on the CPU).
static inline void *mirror(Mirrors *m, const void *host, size_t bytes) {
    if (m->n == MAX_MIRRORS) {
        fprintf(stderr, "test: more than %d mirrored buffers\n", MAX_MIRRORS);
        abort();
    }
    void *p = dev_mirror(m->d, (void *)host, bytes, "test buffer");
    m->dev[m->n] = p;
    m->host[m->n++] = host;
    return p;
}

static inline void mirrors_free(Mirrors *m) {
    for (int i = 0; i < m->n; i++) dev_unmirror(m->d, m->dev[i], m->host[i]);
    m->n = 0;
}

// Reads a device buffer back into host memory.
static inline void fetch(Device *d, void *host, const void *dev_ptr, size_t bytes) {
    OP(d, download, host, dev_ptr, bytes);
}

// Workspace every op test shape fits in (the tests' shapes are small).
#define TEST_WORKSPACE_BYTES ((size_t)64 << 20)

static inline void test_cpu_device(TestDevice *t, const char *name, const CpuKernels *k, int threads) {
    snprintf(t->name, sizeof t->name, "cpu %s", name);
    cpu_device_init(&t->dev, threads, k);
    dev_reserve(&t->dev, TEST_WORKSPACE_BYTES);
}

// Fills out[] with the devices present; returns how many. threads <= 0: all cores.
static inline int test_devices(TestDevice *out, int threads) {
    const MatmulKernel *f32[4] = {matmul_kernel_avx512(), matmul_kernel_avx2(), matmul_kernel_neon(),
                                  matmul_kernel_portable()};
    int n = 0;
    for (int i = 0; i < 4; i++) {
        if (!f32[i]) continue;
        // Each fp32 set with its own bf16 kernel (AVX512_BF16 or BFDOT, or
        // the fp32 tiles over bf16-rounded operands, or portable), and
        // AVX-512 / NEON once more with the rounded kernel when the CPU has
        // AVX512_BF16 / BFDOT, so every bf16 kernel runs too.
        const MatmulBf16Kernel *own = matmul_bf16_kernel_on(f32[i]);
        const MatmulBf16Kernel *b[2] = {own ? own : matmul_bf16_kernel_portable(), NULL};
        const MatmulBf16Kernel *fast = i == 0 ? matmul_bf16_kernel_avx512() : i == 2 ? matmul_bf16_kernel_neon() : NULL;
        if (fast) {
            b[1] = b[0];
            b[0] = fast;
        }
        for (int j = 0; j < 2 && b[j]; j++) {
            CpuKernels k = {f32[i], b[j], 256};
            char name[48];
            snprintf(name, sizeof name, "%s/%s", f32[i]->name, b[j]->name);
            test_cpu_device(&out[n++], name, &k, threads);
        }
    }
    // POCKET_REQUIRE_CUDA=1 (tests/cuda/check.sh sets it): no GPU is a failure, not a skip.
    const char *require = getenv("POCKET_REQUIRE_CUDA");
    const int required = require && require[0] == '1';
    gpu_absent[0] = '\0';
#ifdef POCKET_CUDA
    if (cuda_device_count() > 0) {
        PtError e;
        TestDevice *t = &out[n];
        if (cuda_device_init(&t->dev, 0, &e) == 0) {
            snprintf(t->name, sizeof t->name, "cuda 0");
            t->gpu = 1;
            dev_reserve(&t->dev, TEST_WORKSPACE_BYTES);
            n++;
        } else if (required) {
            die("%s", e.msg);
        } else {
            snprintf(gpu_absent, sizeof gpu_absent, "the CUDA device did not open: %s", e.msg);
        }
    } else if (required) {
        die("POCKET_REQUIRE_CUDA=1 but the CUDA runtime sees no GPU");
    } else {
        snprintf(gpu_absent, sizeof gpu_absent, "no GPU on this machine");
    }
#else
    if (required) die("POCKET_REQUIRE_CUDA=1 but this test was built without CUDA (make CUDA=1)");
    snprintf(gpu_absent, sizeof gpu_absent, "built without CUDA (make CUDA=1 adds the GPU)");
#endif
    if (gpu_absent[0]) printf("CUDA device skipped: %s\n", gpu_absent);
    return n;
}

static inline void test_devices_free(TestDevice *d, int n) {
    for (int i = 0; i < n; i++) dev_free(&d[i].dev);
}

// One line naming the devices a test program checks, so a log says what ran.
static inline void test_devices_print(const TestDevice *d, int n) {
    printf("devices (%d):", n);
    for (int i = 0; i < n; i++) printf("%s %s", i ? "," : "", d[i].name);
    printf("\n");
}

// The device the model-level tests run on: the best kernels, all cores.
static inline void test_best_device(Device *d) {
    cpu_device_init(d, 0, NULL);
}

// The devices of a test program: its cmocka group setup fills them (and
// prints their names), its teardown frees them.
static TestDevice devs[MAX_TEST_DEVICES];
static int n_devs;

static inline int devices_setup(void **state) {
    (void)state;
    n_devs = test_devices(devs, 0);
    test_devices_print(devs, n_devs);
    return 0;
}

static inline int devices_teardown(void **state) {
    (void)state;
    test_devices_free(devs, n_devs);
    return 0;
}

// The GPU's part of an op test program (GPU_DEVICE_TEST in its list): passes
// when the other tests ran on a GPU device too, and is reported skipped (with
// the reason) when there was none, so a run without a GPU does not count the
// GPU as checked.
static inline void test_gpu_device(void **state) {
    (void)state;
    for (int i = 0; i < n_devs; i++)
        if (devs[i].gpu) return;
    printf("  the ops were checked on the CPU only: %s\n", gpu_absent);
    skip();
}
#define GPU_DEVICE_TEST cmocka_unit_test(test_gpu_device)
