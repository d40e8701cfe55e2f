// h5_read_all, pocket's reader of chunked data (util/h5_chunks.c): what h5py
// wrote (tests/ref/make_h5_fixtures.py: edge chunks, ranks 1 to 3, shuffle
// and deflate alone and together, float64 read as float32, unwritten chunks
// holding the fill value) reads back as the formulas h5py wrote; lzf is
// refused by name; chunks whose stored bytes do not make a whole chunk (the
// crafted files on which libhdf5 1.10's own H5Dread over-reads its buffers)
// are one error naming the dataset.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "../util/h5.h"

#define H5PY "tests/fixtures/h5/h5py_chunks.h5"

static void *read_all(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims) {
    void *out = NULL;
    PtError e;
    if (h5_read_dataset_alloc(f, name, type, rank, dims, &out, H5PY, &e)) fail_msg("%s", e.msg);
    return out;
}

static void test_h5py_datasets(void **s) {
    (void)s;
    PtError e;
    hid_t f = h5_open_read(H5PY, &e);
    if (f < 0) fail_msg("%s", e.msg);
    hsize_t d2[2] = {37, 19}, d1[1] = {1000}, d16[1] = {777}, d3[3] = {5, 6, 7}, dsp[1] = {100};
    float *a = read_all(f, "f32_shuffle_gzip", H5T_NATIVE_FLOAT, 2, d2);
    for (int i = 0; i < 37 * 19; i++) assert_true(a[i] == (float)i * 0.5f - 100);
    free(a);
    float *b = read_all(f, "f64_gzip", H5T_NATIVE_FLOAT, 1, d1);   // converted as libhdf5 converts
    for (int j = 0; j < 1000; j++) assert_true(b[j] == (float)((double)j * 0.1 - 20));
    free(b);
    uint16_t *c = read_all(f, "u16_shuffle", H5T_NATIVE_UINT16, 1, d16);
    for (int k = 0; k < 777; k++) assert_int_equal(c[k], (k * 97) % 65536);
    free(c);
    uint32_t *m = read_all(f, "u32_rank3", H5T_NATIVE_UINT32, 3, d3);
    for (int i = 0; i < 5 * 6 * 7; i++) assert_int_equal(m[i], (uint32_t)i * 3 + 1);
    free(m);
    char *bytes;
    size_t len;
    assert_int_equal(h5_read_bytes(f, "u8_gzip", &bytes, &len, H5PY, &e), 0);
    assert_int_equal(len, 300);
    for (int i = 0; i < 300; i++) assert_int_equal((uint8_t)bytes[i], (i * 7) % 256);
    free(bytes);
    int32_t *sp = read_all(f, "i32_sparse", H5T_NATIVE_INT32, 1, dsp);
    for (int i = 0; i < 100; i++) assert_int_equal(sp[i], i >= 20 && i < 35 ? i - 20 : -7);
    free(sp);
    void *out = NULL;
    assert_int_equal(h5_read_dataset_alloc(f, "f32_lzf", H5T_NATIVE_FLOAT, 2, d2, &out, H5PY, &e), -1);
    assert_null(out);
    assert_non_null(strstr(e.msg, "/f32_lzf cannot be read"));
    assert_non_null(strstr(e.msg, "filter 32000 (lzf); pocket reads deflate and shuffle only"));
    H5Fclose(f);
}

// A deflated 1-D float dataset of 64 values in chunks of 16 whose chunk 1 is
// replaced by `stored` raw bytes, with filter mask `mask` (1: deflate skipped).
static void write_damaged(const char *path, const uint8_t *stored, size_t n, uint32_t mask) {
    PtError e;
    H5Output out;
    assert_int_equal(h5_output_create(&out, path, &e), 0);
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i;
    hsize_t dims[1] = {64}, chunk[1] = {16}, at[1] = {16};
    hid_t space = H5Screate_simple(1, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    H5Pset_deflate(dcpl, 1);
    hid_t ds = H5Dcreate2(out.file, "x", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    assert_true(H5Dwrite_chunk(ds, H5P_DEFAULT, mask, at, n, stored) >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    assert_int_equal(h5_output_commit(&out, &e), 0);
}

static void expect_refused(const char *path, const char *want) {
    PtError e;
    hid_t f = h5_open_read(path, &e);
    if (f < 0) fail_msg("%s", e.msg);
    float got[64];
    hsize_t dims[1] = {64};
    assert_int_equal(h5_read_dataset(f, "x", H5T_NATIVE_FLOAT, 1, dims, got, path, &e), -1);
    if (!strstr(e.msg, "/x cannot be read") || !strstr(e.msg, want)) fail_msg("got [%s], want [%s]", e.msg, want);
    H5Fclose(f);
}

static void test_chunks_that_do_not_make_a_chunk(void **s) {
    (void)s;
    char path[] = "/tmp/pocket_h5read_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    float half[8];
    for (int i = 0; i < 8; i++) half[i] = 1.5f;
    uint8_t z[256];
    uLongf zn = sizeof z;
    assert_int_equal(compress2(z, &zn, (const Bytef *)half, sizeof half, 1), Z_OK);
    write_damaged(path, z, zn, 0);   // deflate stream of 32 bytes for a 64-byte chunk
    expect_refused(path, "a chunk inflates to 32 bytes, want 64");
    write_damaged(path, (const uint8_t *)half, sizeof half, 1);   // deflate skipped, 32 raw bytes
    expect_refused(path, "a chunk holds 32 bytes, want 64");
    uint8_t junk[40];
    memset(junk, 0x5a, sizeof junk);
    write_damaged(path, junk, sizeof junk, 0);
    expect_refused(path, "deflate stream is corrupt");
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h5py_datasets),
        cmocka_unit_test(test_chunks_that_do_not_make_a_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
