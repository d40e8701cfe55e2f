// test_fixture_util.h: reading the reference fixtures of tests/ref (cmocka
// tests): a float32 tensor of an expected.safetensors, by name and size; and
// damaging an HDF5 file the project wrote, for the bad-input tests.
#pragma once
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include "../formats/safetensors.h"
#include "../model/tensors.h"

// Overwrites the integer attribute /group@name of the HDF5 file at path.
static inline void h5_set_int_attr(const char *path, const char *group, const char *name, int value) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, group, H5P_DEFAULT);
    hid_t attr = H5Aopen(g, name, H5P_DEFAULT);   // through the open group: H5Aopen_by_name's handle cannot write
    assert_true(attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT, &value) >= 0);
    H5Aclose(attr);
    H5Gclose(g);
    H5Fclose(f);
}

// The tensor `name` of f as floats (malloc'd); fails the test when it is
// missing or does not hold numel values.
static inline float *expected(const StFile *f, const char *name, size_t numel) {
    const StTensor *t = st_find(f, name);
    if (!t) fail_msg("fixture lacks %s", name);
    assert_int_equal(t->numel, numel);
    float *x = malloc(numel * sizeof(float));
    PtError e;
    assert_int_equal(st_read_f32(f, t, x, &e), 0);
    return x;
}

// How much farther from a float64 reference gradient than PyTorch's own
// float32 run of the same case (a fixture's case<k>.floor32) a whole float32
// gradient may land: another summation order rounds otherwise, and lands on
// either side of PyTorch's figure (measured 0.78x to 1.39x of it over the
// builds of one CPU: gcc -O3 native, x86-64-v3, clang, the sanitizer build).
#define FLOAT32_FLOOR_MARGIN 2.0

// Gradients grads (laid out by tt) against the fixture's tensors
// "<prefix><tensor name>": |got - want|_2 / |want|_2 of each tensor, the
// worst into *worst and its name into *worst_name, and of the whole
// gradient, returned.
static inline double fixture_grad_error(const StFile *f, const char *prefix, const TensorTable *tt, const float *grads,
                                        double *worst, const char **worst_name) {
    double all_d2 = 0, all_w2 = 0;
    *worst = 0, *worst_name = "";
    for (int t = 0; t < tt->n; t++) {
        const TensorInfo *ti = &tt->t[t];
        char name[512];
        snprintf(name, sizeof name, "%.300s%s", prefix, ti->name);
        float *want = expected(f, name, ti->numel);
        double d2 = 0, w2 = 0;
        for (size_t j = 0; j < ti->numel; j++) {
            const double d = (double)grads[ti->offset + j] - want[j];
            d2 += d * d, w2 += (double)want[j] * want[j];
        }
        free(want);
        const double r = sqrt(d2) / fmax(sqrt(w2), 1e-30);
        if (r > *worst) *worst = r, *worst_name = ti->name;
        all_d2 += d2, all_w2 += w2;
    }
    return sqrt(all_d2 / all_w2);
}
