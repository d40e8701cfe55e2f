// test_backends.h: every backend present, as devices the op tests run on:
// the CPU once per kernel set this CPU runs (AVX-512, AVX2+FMA, portable; for
// bf16 AVX512_BF16 and portable). A new backend adds its devices here, and
// every op test then checks it against the same double references. The op
// tests hand the ops host arrays, which are device memory on every device
// here (Backend.host_memory); a backend with memory of its own needs them
// mirrored to it first (dev_mirror, backend.h).
#pragma once
#include <stdio.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"

enum { MAX_TEST_DEVICES = 8 };

typedef struct {
    char name[64];
    Device dev;
} TestDevice;

// Workspace every op test shape fits in (the tests' shapes are small).
#define TEST_WORKSPACE_BYTES ((size_t)64 << 20)

static inline void test_cpu_device(TestDevice *t, const char *name, const CpuKernels *k, int threads) {
    snprintf(t->name, sizeof t->name, "cpu %s", name);
    cpu_device_init(&t->dev, threads, k);
    dev_reserve(&t->dev, TEST_WORKSPACE_BYTES);
}

// Fills out[] with the devices present; returns how many. threads <= 0: all cores.
static inline int test_devices(TestDevice *out, int threads) {
    const MatmulKernel *f32[3] = {matmul_kernel_avx512(), matmul_kernel_avx2(), matmul_kernel_portable()};
    const MatmulBf16Kernel *bf16[2] = {matmul_bf16_kernel_avx512(), matmul_bf16_kernel_portable()};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (!f32[i]) continue;
        // AVX-512 pairs with AVX512_BF16 when the CPU has it, the rest with the
        // portable bf16 kernel, so every bf16 kernel runs too.
        const MatmulBf16Kernel *b = i == 0 && bf16[0] ? bf16[0] : bf16[1];
        CpuKernels k = {f32[i], b, 256};
        char name[48];
        snprintf(name, sizeof name, "%s/%s", f32[i]->name, b->name);
        test_cpu_device(&out[n++], name, &k, threads);
    }
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
