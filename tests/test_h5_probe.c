// h5_probe: the child-process walk that h5_open_read runs before libhdf5
// reads a file in this process. Files of every kind pocket writes pass; the
// inputs that crash or loop libhdf5 1.10.8 itself (tests/fuzz/regressions/
// */libhdf5-*) are refused with one line, in bounded time, and this process
// keeps working afterwards.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>
#include "../util/h5.h"

#define REG "tests/fuzz/regressions/"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    strcpy(g_dir, "/tmp/pocket_probe_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd);
}

// A file with what pocket's writers make: nested groups, chunked and
// deflated tensors of several ranks and dtypes, a growing dataset, an empty
// one, bytes, string attributes fixed and variable, numeric attributes.
static void write_sample(const char *path, int external_link) {
    PtError e;
    H5Output out;
    assert_int_equal(h5_output_create(&out, path, &e), 0);
    hid_t g = h5_create_group(out.file, "params"), sub = h5_create_group(g, "layer.0");
    float w[3 * 70];
    for (int i = 0; i < 3 * 70; i++) w[i] = (float)i / 7;
    hsize_t d2[2] = {3, 70}, d1[1] = {210}, d0[1] = {0};
    assert_int_equal(h5_write_dataset(sub, "w", H5T_NATIVE_FLOAT, 2, d2, w), 0);
    assert_int_equal(h5_write_dataset(g, "flat", H5T_NATIVE_FLOAT, 1, d1, w), 0);
    assert_int_equal(h5_write_dataset(g, "empty", H5T_NATIVE_UINT32, 1, d0, w), 0);
    hid_t grow = h5_create_growing(out.file, "tokens", H5T_NATIVE_UINT16);
    uint16_t ids[500];
    for (int i = 0; i < 500; i++) ids[i] = (uint16_t)(i * 31);
    for (int k = 0; k < 3; k++) assert_int_equal(h5_append(grow, H5T_NATIVE_UINT16, ids, 500), 0);
    H5Dclose(grow);
    assert_int_equal(h5_write_bytes(out.file, "json", "{\"a\": 1}", 8), 0);
    uint64_t n = 1500;
    assert_int_equal(h5_write_attr(out.file, "n_tokens", H5T_NATIVE_UINT64, &n, 1), 0);
    assert_int_equal(h5_write_str_attr(out.file, "kind", "cpt"), 0);
    assert_int_equal(h5_write_utf8_attr(g, "note", "\xe4\xb8\xad\xe6\x96\x87 text"), 0);
    if (external_link) H5Lcreate_external("other.h5", "/params", out.file, "elsewhere", H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(sub);
    H5Gclose(g);
    assert_int_equal(h5_output_commit(&out, &e), 0);
}

static void test_files_pocket_writes_pass(void **s) {
    (void)s;
    char path[128];
    snprintf(path, sizeof path, "%s/sample.h5", g_dir);
    write_sample(path, 0);
    PtError e = {""};
    assert_int_equal(h5_probe(path, &e), 0);
    hid_t f = h5_open_read(path, &e);
    assert_true(f >= 0);
    assert_int_equal(h5_child_count(f), 3);
    H5Fclose(f);
}

static void test_link_to_another_file_is_refused(void **s) {
    (void)s;
    char path[128];
    snprintf(path, sizeof path, "%s/linked.h5", g_dir);
    write_sample(path, 1);
    PtError e;
    assert_true(h5_open_read(path, &e) < 0);
    assert_non_null(strstr(e.msg, "/elsewhere: a link to another file"));
    assert_non_null(strstr(e.msg, path));
}

// The probe's verdict on a regression input: its message holds `want`.
static void refused(const char *input, const char *want) {
    PtError e;
    double t0 = now_seconds();
    assert_true(h5_open_read(input, &e) < 0);
    double seconds = now_seconds() - t0;
    if (!strstr(e.msg, want) || strncmp(e.msg, input, strlen(input)) || strchr(e.msg, '\n'))
        fail_msg("%s: got [%s], want [%s]", input, e.msg, want);
    // 0.3 s of CPU; sanitizers and a busy machine stretch the wall clock, not past this
    if (seconds > 20) fail_msg("%s: refused after %.1f s", input, seconds);
}

static void test_libhdf5_crashes_and_loops_are_refused(void **s) {
    (void)s;
    refused(REG "fuzz_checkpoint/libhdf5-chunk-layout-sigfpe.h5", "libhdf5 crashed reading the file's structure");
    refused(REG "fuzz_dataset/libhdf5-global-heap-endless.h5", "libhdf5 did not finish reading the file's structure");
    refused(REG "fuzz_lora_checkpoint/libhdf5-heap-endless.h5", "libhdf5 did not finish reading the file's structure");
    // H5Aiterate fails on its attribute list, H5Aread of 'kind' by name overlaps memcpy's buffers (SIGSEGV natively)
    refused(REG "fuzz_dataset/libhdf5-attribute-list-unreadable.h5", "/: its attributes cannot be read");
    refused(REG "fuzz_lora_checkpoint/libhdf5-chunk-index-overread.h5",
            "/optim/m/base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight: chunks larger than the "
            "dataset's fixed shape");
    // this process's libhdf5 is untouched: a good file still reads
    char path[128];
    snprintf(path, sizeof path, "%s/after.h5", g_dir);
    write_sample(path, 0);
    PtError e;
    hid_t f = h5_open_read(path, &e);
    assert_true(f >= 0);
    char *kind = NULL;
    assert_int_equal(h5_read_str_attr(f, "kind", &kind, path, &e), 0);
    assert_string_equal(kind, "cpt");
    free(kind);
    H5Fclose(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_pocket_writes_pass),
        cmocka_unit_test(test_link_to_another_file_is_refused),
        cmocka_unit_test(test_libhdf5_crashes_and_loops_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
