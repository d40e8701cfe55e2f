// test_fixture_util.h: reading the reference fixtures of tests/ref (cmocka
// tests): a float32 tensor of an expected.safetensors, by name and size.
#pragma once
#include "../formats/safetensors.h"

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
