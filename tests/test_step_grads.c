// test_step_grads: the file and the comparison behind make test-arm64's full
// training step check (tests/step_grads.h), on a real step of this CPU:
// - the file round-trips every bit (loss, count, names, shapes, values);
// - the comparison can fail: one gradient element moved by a relative 1e-4
//   (the largest of its tensor, so the tensor's normwise error is 1e-4) fails
//   and names that tensor, 1e-6 passes; a moved loss fails;
// - a case or tensor missing, or a tensor reshaped, is an error naming it;
// - a truncated or corrupt file is one error naming the file and the byte;
//   a failed write leaves no temporary file;
// - the whole step (loss and every gradient, fp32 and bf16) is the same bits
//   on 1, 2 and 3 threads (docs/ARCHITECTURE.md: results must not depend on
//   the thread count).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <omp.h>
#include <unistd.h>
#include "step_grads.h"

static StepFile run;         // the cases on this CPU's best kernels
static char dir[] = "/tmp/pocket_step_grads_XXXXXX";
static char path[200];       // run, written

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    snprintf(path, sizeof path, "%s/run.bin", dir);
    CpuKernels k;
    PtError e;
    if (cpu_kernels_named(&k, NULL, &e)) return -1;
    step_run_all(&k, "test", &run);
    return step_file_write(path, &run, &e);
}

static int teardown(void **state) {
    (void)state;
    step_file_free(&run);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static void read_ok(const char *p, StepFile *f) {
    PtError e;
    if (step_file_read(p, f, &e)) fail_msg("%s", e.msg);
}

static void test_round_trip(void **state) {
    (void)state;
    StepFile f;
    read_ok(path, &f);
    assert_string_equal(f.what, run.what);
    assert_int_equal(f.n, 4);
    for (int i = 0; i < f.n; i++) {
        const StepCase *a = &run.c[i], *b = &f.c[i];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->bf16, b->bf16);
        assert_memory_equal(&a->loss, &b->loss, sizeof(double));
        assert_int_equal(a->count, b->count);
        assert_true(a->count > 0 && isfinite(a->loss));
        assert_int_equal(a->tt.n, b->tt.n);
        for (int k = 0; k < a->tt.n; k++) {
            const TensorInfo *ta = &a->tt.t[k], *tb = &b->tt.t[k];
            assert_string_equal(ta->name, tb->name);
            assert_int_equal(ta->ndim, tb->ndim);
            assert_memory_equal(ta->shape, tb->shape, (size_t)ta->ndim * sizeof(int64_t));
            assert_memory_equal(a->grads + ta->offset, b->grads + tb->offset, ta->numel * sizeof(float));
        }
    }
    // The untied preset's lm_head and every kind of tensor have a gradient that is not all zero.
    const StepCase *untied = step_find_case(&f, "tiny-untied fp32");
    assert_non_null(untied);
    assert_non_null(tensor_table_find(&untied->tt, "lm_head.weight"));
    for (int k = 0; k < untied->tt.n; k++) {
        const TensorInfo *t = &untied->tt.t[k];
        double mag = 0;
        for (size_t i = 0; i < t->numel; i++) mag = fmax(mag, fabs(untied->grads[t->offset + i]));
        if (!(mag > 0)) fail_msg("%s: zero gradient", t->name);
    }
    PtError e;
    FILE *log = tmpfile();
    assert_int_equal(step_compare(path, &run, path, &f, log, &e), 0);
    fclose(log);
    step_file_free(&f);
}

// The comparison's output and result after moving b (a copy of the run read back).
static int compare_log(const StepFile *b, char *out, size_t cap, PtError *e) {
    FILE *log = tmpfile();
    const int r = step_compare("a.bin", &run, "b.bin", b, log, e);
    rewind(log);
    const size_t n = fread(out, 1, cap - 1, log);
    out[n] = 0;
    fclose(log);
    return r;
}

// The largest |value| of tensor `name` in case c.
static float *largest(StepCase *c, const char *name) {
    const TensorInfo *t = tensor_table_find(&c->tt, name);
    assert_non_null(t);
    float *p = c->grads + t->offset, *best = p;
    for (size_t i = 0; i < t->numel; i++)
        if (fabsf(p[i]) > fabsf(*best)) best = &p[i];
    return best;
}

static void test_can_fail(void **state) {
    (void)state;
    const char *name = "model.layers.1.mlp.down_proj.weight";
    char out[4096];
    PtError e;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        StepFile b;
        read_ok(path, &b);
        StepCase *c = &b.c[bf16];   // "tiny fp32", "tiny bf16"
        float *x = largest(c, name);
        const float x0 = *x;
        *x = x0 * (1.0f + 1e-6f);
        assert_int_equal(compare_log(&b, out, sizeof out, &e), 0);
        // Past each precision's bound: issue #20's 1e-4 for fp32 (bound 1e-5).
        *x = x0 * (1.0f + (bf16 ? 1.5f * (float)STEP_TOL_BF16 : 1e-4f));
        assert_int_equal(compare_log(&b, out, sizeof out, &e), 1);
        if (!strstr(out, name) || !strstr(out, "FAILED")) fail_msg("the failure names no tensor:\n%s", out);
        *x = x0;
        c->loss *= 1.0 + 2.0 * (bf16 ? STEP_TOL_BF16_LOSS : STEP_TOL_FP32);
        assert_int_equal(compare_log(&b, out, sizeof out, &e), 1);
        c->loss = run.c[bf16].loss;
        c->grads[c->tt.t[3].offset] = NAN;
        assert_int_equal(compare_log(&b, out, sizeof out, &e), 1);
        step_file_free(&b);
    }
}

static void expect_error(const StepFile *b, const char *what) {
    char out[4096];
    PtError e;
    assert_int_equal(compare_log(b, out, sizeof out, &e), -1);
    if (!strstr(e.msg, what) || !strstr(e.msg, "b.bin")) fail_msg("expected '%s' in: %s", what, e.msg);
}

static void test_mismatch(void **state) {
    (void)state;
    StepFile b;
    read_ok(path, &b);
    StepCase *c = &b.c[2];   // "tiny-untied fp32"
    // A tensor missing: renamed, so the table keeps its length.
    TensorInfo *t = (TensorInfo *)tensor_table_find(&c->tt, "model.layers.2.self_attn.k_norm.weight");
    assert_non_null(t);
    strcpy(t->name, "model.layers.2.self_attn.k_nrm.weight");
    expect_error(&b, "no tensor 'model.layers.2.self_attn.k_norm.weight'");
    strcpy(t->name, "model.layers.2.self_attn.k_norm.weight");
    // Reshaped.
    t = (TensorInfo *)tensor_table_find(&c->tt, "model.layers.0.mlp.up_proj.weight");
    int64_t s0 = t->shape[0];
    t->shape[0] = t->shape[1], t->shape[1] = s0;
    expect_error(&b, "'model.layers.0.mlp.up_proj.weight' is shaped");
    t->shape[1] = t->shape[0], t->shape[0] = s0;
    // A case missing, another precision, a tensor fewer.
    strcpy(c->name, "tiny-untied fp16");
    expect_error(&b, "no case 'tiny-untied fp32'");
    strcpy(c->name, "tiny-untied fp32");
    c->bf16 = 1;
    expect_error(&b, "case 'tiny-untied fp32' has bf16 1");
    c->bf16 = 0;
    c->tt.n--;
    expect_error(&b, "case 'tiny-untied fp32' has bf16 0");
    c->tt.n++;
    b.n--;
    expect_error(&b, "b.bin has 3");
    b.n++;
    step_file_free(&b);
}

// Writes the first n bytes of data (then `extra` if not NULL) to dir/bad.bin;
// reading it must fail with an error containing `what`.
static void expect_bad(const uint8_t *data, size_t n, const char *extra, const char *what) {
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    FILE *f = fopen(bad, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    if (extra) fputs(extra, f);
    fclose(f);
    StepFile s;
    PtError e;
    if (step_file_read(bad, &s, &e) == 0) fail_msg("%s (%zu bytes) read without an error", bad, n);
    if (!strstr(e.msg, bad) || !strstr(e.msg, what)) fail_msg("expected '%s' and the path in: %s", what, e.msg);
    assert_null(strchr(e.msg, '\n'));
}

static void test_corrupt_files(void **state) {
    (void)state;
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file(path, &data, &len, &e)) fail_msg("%s", e.msg);
    // Where things lie: the header, the first case's header, its first
    // tensor's name, ndim, shape and values.
    const size_t case_at = 8 + 4 + strlen(run.what) + 4;
    const size_t tensor_at = case_at + 4 + strlen(run.c[0].name) + 4 + 8 + 4 + 4;
    const size_t ndim_at = tensor_at + 4 + strlen(run.c[0].tt.t[0].name);
    // Truncated anywhere: in the magic, the description, a case's name, the
    // first tensor's name, shape and values, half way, one byte short.
    const size_t cuts[] = {0, 5, 10, case_at + 6, tensor_at + 9, ndim_at + 4 + 5, ndim_at + 4 + 16 + 100, len / 2,
                           len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) expect_bad(data, cuts[i], NULL, "truncated at byte");
    expect_bad(data, len, "x", "1 bytes after the last case");
    data[0] = 'Q';
    expect_bad(data, len, NULL, "byte 0: not a step-gradients file");
    data[0] = 'P';
    uint32_t three = 3;
    memcpy(data + ndim_at, &three, 4);
    expect_bad(data, len, NULL, "tensor 0 'model.embed_tokens.weight': ndim is 3, at most 2");
    free(data);
}

// The rename onto a directory fails: an error naming the path, no temporary file left.
static void test_failed_write_leaves_nothing(void **state) {
    (void)state;
    char p[300], cmd[700];
    snprintf(p, sizeof p, "%s/target", dir);
    snprintf(cmd, sizeof cmd, "mkdir %s && touch %s/keep", p, p);
    assert_int_equal(system(cmd), 0);
    PtError e;
    assert_int_equal(step_file_write(p, &run, &e), -1);
    if (!strstr(e.msg, p)) fail_msg("the error names no path: %s", e.msg);
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s | grep tmp)\"", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_thread_count(void **state) {
    (void)state;
    CpuKernels k;
    PtError e;
    if (cpu_kernels_named(&k, NULL, &e)) fail_msg("%s", e.msg);
    const int before = omp_get_max_threads();
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        StepFile f;
        step_run_all(&k, "test", &f);
        assert_int_equal(f.n, run.n);
        for (int i = 0; i < f.n; i++) {
            printf("  %d thread(s), %s: loss %.17g\n", threads, f.c[i].name, f.c[i].loss);
            assert_true(memcmp(&f.c[i].loss, &run.c[i].loss, sizeof f.c[i].loss) == 0);
            assert_memory_equal(f.c[i].grads, run.c[i].grads, f.c[i].tt.total * sizeof(float));
        }
        step_file_free(&f);
    }
    omp_set_num_threads(before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_can_fail),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_failed_write_leaves_nothing),
        cmocka_unit_test(test_thread_count),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
