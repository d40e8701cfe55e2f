// Checkpoint round trips: init -> save -> load is bit-exact; a truncated or
// foreign file is refused with a message naming it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../formats/checkpoint.h"
#include "test_fixture_util.h"

static void roundtrip(const char *preset) {
    PtError e;
    ModelConfig cfg;
    assert_int_equal(config_preset(&cfg, preset, &e), 0);
    ModelBundle a, b;
    bundle_alloc(&a, &cfg);
    bundle_init_random(&a, 42);
    a.tokenizer_json = xstrdup("{\"model\": {}}");
    a.tokenizer_json_len = strlen(a.tokenizer_json);
    char path[] = "/tmp/pocket_ckpt_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    assert_int_equal(checkpoint_save(path, &a, &e), 0);
    assert_int_equal(checkpoint_load(path, &b, &e), 0);
    assert_memory_equal(&a.cfg, &b.cfg, sizeof a.cfg);
    assert_int_equal(a.tt.total, b.tt.total);
    for (int i = 0; i < a.tt.n; i++) {
        const TensorInfo *t = &a.tt.t[i];
        assert_memory_equal(a.params + t->offset, b.params + t->offset, t->numel * sizeof(float));
    }
    assert_non_null(b.tokenizer_json);
    assert_string_equal(a.tokenizer_json, b.tokenizer_json);
    bundle_free(&a);
    bundle_free(&b);
    unlink(path);
}

static void test_roundtrip_tied(void **s) { (void)s; roundtrip("tiny"); }
static void test_roundtrip_untied(void **s) { (void)s; roundtrip("tiny-untied"); }
static void test_roundtrip_llama(void **s) { (void)s; roundtrip("tiny-llama"); }

// A "tiny" model with random weights from seed.
static void tiny_bundle(ModelBundle *a, uint64_t seed) {
    PtError e;
    ModelConfig cfg;
    assert_int_equal(config_preset(&cfg, "tiny", &e), 0);
    bundle_alloc(a, &cfg);
    bundle_init_random(a, seed);
}

static void test_random_init_statistics(void **s) {
    (void)s;
    ModelBundle a;
    tiny_bundle(&a, 7);
    const ModelConfig cfg = a.cfg;
    const TensorInfo *t = tensor_table_find(&a.tt, "model.embed_tokens.weight");
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < t->numel; i++) {
        double x = a.params[t->offset + i];
        s1 += x;
        s2 += x * x;
    }
    double mean = s1 / t->numel, sd = sqrt(s2 / t->numel - mean * mean);
    // pad row zeroed, so the std is a hair under 0.02
    assert_true(fabs(mean) < 1e-3);
    assert_true(fabs(sd - 0.02) < 1e-3);
    const float *pad = a.params + t->offset + (size_t)cfg.pad_id * cfg.d_model;
    for (int i = 0; i < cfg.d_model; i++) assert_true(pad[i] == 0.0f);
    const TensorInfo *n = tensor_table_find(&a.tt, "model.norm.weight");
    for (size_t i = 0; i < n->numel; i++) assert_true(a.params[n->offset + i] == 1.0f);
    bundle_free(&a);
}

// A random "tiny" model a, saved to a new temporary file named in path (a mkstemp template).
static void save_tiny(ModelBundle *a, char *path) {
    PtError e;
    tiny_bundle(a, 1);
    close(mkstemp(path));
    assert_int_equal(checkpoint_save(path, a, &e), 0);
}

static void test_truncated_is_refused(void **s) {
    (void)s;
    PtError e;
    ModelBundle a, b;
    char path[] = "/tmp/pocket_ckpt_XXXXXX";
    save_tiny(&a, path);
    assert_int_equal(truncate(path, 3000), 0);
    assert_int_equal(checkpoint_load(path, &b, &e), -1);
    assert_non_null(strstr(e.msg, path));
    FILE *f = fopen(path, "w");
    fputs("not hdf5 at all", f);
    fclose(f);
    assert_int_equal(checkpoint_load(path, &b, &e), -1);
    assert_non_null(strstr(e.msg, "not an HDF5 file"));
    bundle_free(&a);
    unlink(path);
}

// Sizes a /config declares are held against the file before room is made for
// them (found probing fuzz_checkpoint: a /config of a few bytes changed made
// the loader allocate and zero gigabytes, or die out of memory); and no config
// may describe more than 2^40 parameters, past which table offsets could overflow.
static void test_declared_sizes_are_backed(void **s) {
    (void)s;
    PtError e;
    ModelBundle a, b;
    char path[] = "/tmp/pocket_ckpt_XXXXXX";
    save_tiny(&a, path);
    assert_int_equal(checkpoint_load(path, &b, &e), 0);
    bundle_free(&b);
    h5_set_int_attr(path, "config", "vocab_size", 1 << 28);   // x 64 embedding floats: 64 GB, from 0.5 MB
    assert_int_equal(checkpoint_load(path, &b, &e), -1);
    if (!strstr(e.msg, "/config declares 68.7 GB of data, more than a file of"))
        fail_msg("%s", e.msg);
    ModelConfig huge = a.cfg;
    huge.d_model = huge.vocab_size = 1 << 30;
    assert_int_equal(config_validate(&huge, "huge", &e), -1);
    assert_non_null(strstr(e.msg, "huge: the sizes describe 2.31e+18 parameters, more than the 1.1e+12"));
    bundle_free(&a);
    unlink(path);
}

// A tensor whose float type is declared wider than 8 bytes is refused before it is read (found by
// fuzz_checkpoint: libhdf5 1.10 converted from a 32-bit float declared 524292 bytes wide by reading that
// many bytes per value past its buffer); the same tensor as float32 loads.
static void test_damaged_datatype_width(void **s) {
    (void)s;
    PtError e;
    ModelBundle a, b;
    char path[] = "/tmp/pocket_ckpt_XXXXXX";
    save_tiny(&a, path);
    const char *name = "/params/model.embed_tokens.weight";
    for (size_t width = 4; width <= 16; width += 12) {
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), type = H5Tcopy(H5T_IEEE_F32LE);
        hsize_t dims[2] = {(hsize_t)a.cfg.vocab_size, (hsize_t)a.cfg.d_model};
        hid_t space = H5Screate_simple(2, dims, NULL);
        assert_true(H5Tset_size(type, width) >= 0 && H5Ldelete(f, name, H5P_DEFAULT) >= 0);
        hid_t ds = H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        assert_true(ds >= 0);
        H5Dclose(ds);
        H5Sclose(space);
        H5Tclose(type);
        H5Fclose(f);
        int rc = checkpoint_load(path, &b, &e);
        if (width == 4) {
            assert_int_equal(rc, 0);
            bundle_free(&b);
        } else {
            assert_int_equal(rc, -1);
            if (!strstr(e.msg, "/params/model.embed_tokens.weight holds numbers of 16 bytes each (damaged datatype)"))
                fail_msg("%s", e.msg);
        }
    }
    bundle_free(&a);
    unlink(path);
}

// A config.json value past the float32 range is refused (found probing fuzz_hf_config: initializer_range 1e39 was
// read as infinity and dropped from the config.json written back, JSON having no infinity), and so is a
// checkpoint's non-finite one.
static void test_config_floats_finite(void **s) {
    (void)s;
    PtError e;
    ModelConfig c;
    const char *keys[] = {"initializer_range", "rope_theta", "rms_norm_eps"};
    for (int k = 0; k < 3; k++) {
        char json[300];
        snprintf(json, sizeof json, "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 1, \"hidden_size\": 8, "
                 "\"num_attention_heads\": 2, \"intermediate_size\": 8, \"vocab_size\": 16, \"%s\": -1e39}", keys[k]);
        assert_int_equal(config_from_hf_json(&c, json, "c.json", &e), -1);
        if (!strstr(e.msg, "= -1e+39 is past the float32 range")) fail_msg("%s", e.msg);
    }
    assert_int_equal(config_preset(&c, "tiny", &e), 0);
    c.init_std = INFINITY;
    assert_int_equal(config_validate(&c, "ckpt", &e), -1);
    assert_non_null(strstr(e.msg, "initializer_range inf must be finite"));
}

static void test_param_count_matches_spec(void **s) {
    (void)s;
    PtError e;
    ModelConfig cfg;
    assert_int_equal(config_preset(&cfg, "pocket-0.3b", &e), 0);
    // 28 layers x 8,718,208 + embedding 65,536 x 896 + final norm 896 = 302,830,976 (tied)
    assert_int_equal(config_param_count(&cfg), 302830976);
    TensorTable tt;
    tensor_table_build(&tt, &cfg);
    assert_int_equal(tt.n, 310);
    size_t sum = 0;
    for (int i = 0; i < tt.n; i++) sum += tt.t[i].numel;
    assert_int_equal(sum, 302830976);
    tensor_table_free(&tt);
}

// The training state round trip: a mixture's cursor (data/mixture.h) comes
// back as written; a one-set run's checkpoint (as every checkpoint before
// mixtures) has none, and reads back as n_sets 0.
static void test_train_state_with_and_without_mixture(void **s) {
    (void)s;
    PtError e;
    ModelBundle a;
    tiny_bundle(&a, 7);
    float *zero = xcalloc(a.tt.total, sizeof(float), "moments");
    MomentBuffers mb = {&a.tt, zero, zero};
    const MomentSource src = {moment_buffers, &mb};
    char path[] = "/tmp/pocket_state_XXXXXX";
    close(mkstemp(path));
    for (int mixed = 0; mixed < 2; mixed++) {
        TrainState st, back;
        memset(&st, 0, sizeof st);
        st.step = 12, st.tokens = 4096, st.best_val_loss = 2.5;
        st.cursor = (LoaderCursor){3, 17, {1, 2, 3, 4}};
        if (mixed) {
            st.mix.n_sets = 3;
            for (int k = 0; k < 3; k++) {
                st.mix.tokens[k] = 1000 * (k + 1) + 7;
                st.mix.set[k] = (LoaderCursor){(uint64_t)k, 40 + (uint64_t)k, {11u * k, 12u * k, ~0ull - k, 99}};
            }
        }
        assert_int_equal(checkpoint_save_train(path, &a, &src, &st, NULL, &e), 0);
        memset(&back, 0xab, sizeof back);
        float *m = xmalloc(a.tt.total * sizeof(float), "m"), *v = xmalloc(a.tt.total * sizeof(float), "v");
        assert_int_equal(checkpoint_load_train(path, &a.tt, 0, a.tt.total, m, v, &back, &e), 0);
        assert_memory_equal(&back.mix, &st.mix, sizeof st.mix);   // n_sets 0 and nothing else when not mixed
        assert_memory_equal(&back.cursor, &st.cursor, sizeof st.cursor);
        assert_int_equal(back.step, 12);
        free(m);
        free(v);
    }
    free(zero);
    bundle_free(&a);
    unlink(path);
}

// A dataset whose chunks were never written and whose fill value a damaged
// header left half-made (found by fuzz_checkpoint): libhdf5 1.10 crashed in
// H5Pget_fill_value (H5T_path_find on a NULL type) as the optimizer state was
// read. Now the read ends, whole ranges and a rank's shard alike: a declared
// fill value is converted in a child process, an undeclared one is zeros,
// and a refusal is one line naming the file.
static void test_damaged_fill_value(void **s) {
    (void)s;
    const char *path = "tests/fuzz/regressions/fuzz_checkpoint/libhdf5-fill-value-null-type.h5";
    ModelBundle b;
    PtError e;
    assert_int_equal(checkpoint_load(path, &b, &e), 0);
    const size_t n = b.tt.total;
    float *m = xmalloc(n * sizeof(float), "m"), *v = xmalloc(n * sizeof(float), "v");
    TrainState st;
    const size_t ranges[2][2] = {{0, n}, {n / 3, n - n / 3}};
    for (int k = 0; k < 2; k++) {
        int rc = checkpoint_load_train(path, &b.tt, ranges[k][0], ranges[k][1], m, v, &st, &e);
        printf("optimizer state [%zu, %zu): %s\n", ranges[k][0], ranges[k][1], rc ? e.msg : "read");
        if (rc) {
            assert_non_null(strstr(e.msg, path));
            assert_null(strchr(e.msg, '\n'));
        }
    }
    free(m);
    free(v);
    bundle_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_tied),         cmocka_unit_test(test_roundtrip_untied),
        cmocka_unit_test(test_roundtrip_llama),        cmocka_unit_test(test_random_init_statistics),
        cmocka_unit_test(test_truncated_is_refused),   cmocka_unit_test(test_param_count_matches_spec),
        cmocka_unit_test(test_declared_sizes_are_backed), cmocka_unit_test(test_config_floats_finite),
        cmocka_unit_test(test_damaged_datatype_width),
        cmocka_unit_test(test_train_state_with_and_without_mixture),
        cmocka_unit_test(test_damaged_fill_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
