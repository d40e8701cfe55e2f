// test_fixture_util.h: reading the reference fixtures of tests/ref (cmocka
// tests): a float32 tensor of an expected.safetensors, by name and size; and
// damaging an HDF5 file the project wrote, for the bad-input tests.
#pragma once
#include <hdf5.h>
#include "../formats/safetensors.h"

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
