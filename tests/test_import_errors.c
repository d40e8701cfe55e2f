// test_import_errors.c: `pocket import` and `pocket export` through the CLI.
// Each bad HF directory (built here from a good tiny model, then corrupted in
// one way) must give exit status != 0, one stderr line naming the file, and
// leave no checkpoint (nor a temporary one). Good directories (single file
// and sharded; F32, BF16, F16) must import, and exporting them back must give
// the original tensors bit for bit.
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "../model/bundle.h"
#include "../formats/safetensors.h"
#include "test_cli_util.h"

typedef struct {
    char root[64];
    const char *pocket;
    int serial;          // numbers the per-case directories
} Ctx;

static int setup(void **state) {
    Ctx *c = xcalloc(1, sizeof *c, "ctx");
    snprintf(c->root, sizeof c->root, "/tmp/pt-imp-XXXXXX");
    if (!mkdtemp(c->root)) return -1;
    c->pocket = getenv("POCKET") ? getenv("POCKET") : "./pocket";
    *state = c;
    return 0;
}

static int teardown(void **state) {
    Ctx *c = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->root);
    if (system(cmd) != 0) return -1;
    free(c);
    return 0;
}

// A fresh directory under the test root; malloc'd path.
static char *new_dir(Ctx *c, const char *tag) {
    char name[64];
    snprintf(name, sizeof name, "%02d-%s", c->serial++, tag);
    char *dir = path_join(c->root, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    return dir;
}

// ------------------------------------------------------------ running pocket

typedef struct {
    int status;          // exit code, or -1 when killed by a signal
    char err[4096];      // stderr
} Run;

static void run_pocket(Ctx *c, Run *r, const char *a1, const char *a2, const char *a3, const char *a4,
                       const char *a5, const char *a6, const char *a7, const char *a8, const char *a9) {
    char *errpath = path_join(c->root, "stderr.txt");
    char *argv[11] = {(char *)c->pocket, (char *)a1, (char *)a2, (char *)a3, (char *)a4,
                      (char *)a5, (char *)a6, (char *)a7, (char *)a8, (char *)a9, NULL};
    r->status = run_capture(argv, errpath, r->err, sizeof r->err);
    if (r->status == -2) fail_msg("cannot run %s", c->pocket);
    free(errpath);
}

// No entry of dir starts with prefix (catches OUT.h5 and OUT.h5.tmp.PID).
// `pocket import DIR --out OUT` must fail with one line naming `file_part` and
// saying `must_say`, and leave nothing named OUT.h5*.
static void expect_import_fails(Ctx *c, const char *dir, const char *file_part, const char *must_say) {
    char *out = path_join(c->root, "OUT.h5");
    Run r;
    run_pocket(c, &r, "import", dir, "--out", out, NULL, NULL, NULL, NULL, NULL);
    if (r.status <= 0) fail_msg("import of %s: exit %d, expected failure (stderr: %s)", dir, r.status, r.err);
    size_t len = strlen(r.err);
    char *nl = strchr(r.err, '\n');
    if (len == 0 || !nl || nl != r.err + len - 1) fail_msg("import of %s: stderr is not one line: [%s]", dir, r.err);
    if (strncmp(r.err, "pocket import: ", 15) != 0) fail_msg("stderr lacks the command prefix: %s", r.err);
    if (!strstr(r.err, file_part)) fail_msg("stderr does not name %s: %s", file_part, r.err);
    if (must_say && !strstr(r.err, must_say)) fail_msg("stderr lacks \"%s\": %s", must_say, r.err);
    if (!no_entry_with_prefix(c->root, "OUT.h5")) fail_msg("import of %s left an OUT.h5 file behind", dir);
    free(out);
}

// ------------------------------------------------------------ model writing

typedef enum {
    M_NONE,
    M_DROP,            // leave `target` out
    M_TRANSPOSE,       // store `target` with its two dims swapped
    M_AS_I32,          // store `target` as I32 (same byte size, not a float)
    M_EXTRA_BIAS,      // add a q_proj bias
    M_LM_HEAD_SAME,    // tied model: also store lm_head.weight == embedding
    M_LM_HEAD_DIFF,    // tied model: store an lm_head.weight that differs
} Mutation;

typedef struct {
    const char *preset;
    const char *dtype;   // F32, BF16, F16
    int shards;          // 0: model.safetensors; n: n shards + index
    Mutation mut;
    const char *target;
    const char *tokenizer_json;   // written verbatim when set
} ModelSpec;

static void write_text(const char *dir, const char *name, const char *text) {
    char *path = path_join(dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    free(path);
}

// Random tiny model; the bundle is returned so tests can compare values.
static void write_model(const char *dir, const ModelSpec *s, ModelBundle *b) {
    ModelConfig cfg;
    PtError e;
    assert_int_equal(config_preset(&cfg, s->preset, &e), 0);
    bundle_alloc(b, &cfg);
    bundle_init_random(b, 1234);
    // Norm weights away from 1 so a norm mix-up would show.
    for (int i = 0; i < b->tt.n; i++)
        if (b->tt.t[i].flags & TF_NORM)
            for (size_t j = 0; j < b->tt.t[i].numel; j++) b->params[b->tt.t[i].offset + j] = 1.0f + 0.01f * j;
    char *cfg_text = config_to_hf_json(&cfg);
    write_text(dir, "config.json", cfg_text);
    free(cfg_text);
    if (s->tokenizer_json) write_text(dir, "tokenizer.json", s->tokenizer_json);

    int esize = st_dtype_size(s->dtype), max = b->tt.n + 2, n = 0;
    StWriteTensor *w = xcalloc(max, sizeof *w, "tensors");
    uint8_t *data = xmalloc(b->tt.total * esize + 64, "model data");
    static const float bias[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    for (int i = 0; i < b->tt.n; i++) {
        const TensorInfo *t = &b->tt.t[i];
        int is_target = s->target && strcmp(t->name, s->target) == 0;
        if (s->mut == M_DROP && is_target) continue;
        uint8_t *dst = data + t->offset * esize;
        const float *src = b->params + t->offset;
        for (size_t j = 0; j < t->numel; j++) {
            if (esize == 4) memcpy(dst + 4 * j, &src[j], 4);
            else {
                uint16_t h = strcmp(s->dtype, "BF16") == 0 ? f32_to_bf16(src[j]) : f32_to_f16(src[j]);
                memcpy(dst + 2 * j, &h, 2);
            }
        }
        StWriteTensor *x = &w[n++];
        *x = (StWriteTensor){.name = t->name, .dtype = s->dtype, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]},
                             .data = dst};
        if (is_target && s->mut == M_TRANSPOSE) x->shape[0] = t->shape[1], x->shape[1] = t->shape[0];
        if (is_target && s->mut == M_AS_I32) x->dtype = "I32";
    }
    if (s->mut == M_EXTRA_BIAS)
        w[n++] = (StWriteTensor){.name = "model.layers.0.self_attn.q_proj.bias", .dtype = "F32", .ndim = 1,
                                 .shape = {4}, .data = bias};
    float *head = NULL;
    if (s->mut == M_LM_HEAD_SAME || s->mut == M_LM_HEAD_DIFF) {
        assert_true(cfg.tied_embeddings && strcmp(s->dtype, "F32") == 0);
        const TensorInfo *emb = &b->tt.t[0];
        head = xmalloc(emb->numel * sizeof(float), "head");
        memcpy(head, b->params + emb->offset, emb->numel * sizeof(float));
        if (s->mut == M_LM_HEAD_DIFF) head[7] += 1.0f;
        w[n++] = (StWriteTensor){.name = "lm_head.weight", .dtype = "F32", .ndim = 2,
                                 .shape = {emb->shape[0], emb->shape[1]}, .data = head};
    }
    if (s->shards == 0) {
        char *path = path_join(dir, "model.safetensors");
        assert_int_equal(st_write(path, w, n, &e), 0);
        free(path);
    } else {
        // Tensors dealt out to shards in order; the index maps each name.
        json_t *map = json_object();
        int per = (n + s->shards - 1) / s->shards;
        for (int k = 0; k < s->shards; k++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, s->shards);
            int lo = k * per, hi = lo + per < n ? lo + per : n;
            for (int i = lo; i < hi; i++) json_object_set_new(map, w[i].name, json_string(name));
            char *path = path_join(dir, name);
            assert_int_equal(st_write(path, w + lo, hi - lo, &e), 0);
            free(path);
        }
        json_t *index = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
        char *text = json_dumps(index, JSON_INDENT(2));
        write_text(dir, "model.safetensors.index.json", text);
        free(text);
        json_decref(index);
    }
    free(head);
    free(data);
    free(w);
}

static char *make_model_dir(Ctx *c, const char *tag, const ModelSpec *s) {
    char *dir = new_dir(c, tag);
    ModelBundle b;
    write_model(dir, s, &b);
    bundle_free(&b);
    return dir;
}

// Rewrites the header of DIR/model.safetensors: tensor `name` gets offsets
// [begin, end] (the data bytes stay as they are).
static void set_offsets(const char *dir, const char *name, int64_t begin_delta, int64_t absolute_begin) {
    char *path = path_join(dir, "model.safetensors");
    uint8_t *raw;
    size_t len;
    PtError e;
    assert_int_equal(read_whole_file(path, &raw, &len, &e), 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | raw[i];
    json_t *h = json_loadb((const char *)raw + 8, n, 0, NULL);
    assert_non_null(h);
    json_t *off = json_object_get(json_object_get(h, name), "data_offsets");
    assert_non_null(off);
    json_int_t b0 = json_integer_value(json_array_get(off, 0)), b1 = json_integer_value(json_array_get(off, 1));
    json_int_t nb = absolute_begin >= 0 ? absolute_begin : b0 + begin_delta;
    json_array_set_new(off, 0, json_integer(nb));
    json_array_set_new(off, 1, json_integer(nb + (b1 - b0)));
    char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t hl = strlen(text), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 8; i++) fputc((int)(padded >> (8 * i)) & 0xff, f);
    fputs(text, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    fwrite(raw + 8 + n, 1, len - 8 - n, f);
    fclose(f);
    free(text);
    json_decref(h);
    free(raw);
    free(path);
}

// ------------------------------------------------------------ bad inputs

static const ModelSpec TINY = {.preset = "tiny", .dtype = "F32"};

static void test_truncated_safetensors(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "truncated", &TINY);
    char *path = path_join(dir, "model.safetensors");
    struct stat st;
    stat(path, &st);
    assert_int_equal(truncate(path, st.st_size - 100), 0);
    expect_import_fails(c, dir, "model.safetensors", "file truncated?");
    // Cut inside the header.
    assert_int_equal(truncate(path, 20), 0);
    expect_import_fails(c, dir, "model.safetensors", "runs past the end");
    free(path);
    free(dir);
}

static void test_header_not_json(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "notjson", &TINY);
    char *path = path_join(dir, "model.safetensors");
    FILE *f = fopen(path, "r+b");
    fseek(f, 8, SEEK_SET);
    fputs("this is not JSON", f);
    fclose(f);
    expect_import_fails(c, dir, "model.safetensors", "not valid JSON");
    free(path);
    free(dir);
}

static void test_offsets_out_of_range(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "offrange", &TINY);
    set_offsets(dir, "model.norm.weight", 0, (int64_t)1 << 40);
    expect_import_fails(c, dir, "model.safetensors", "\"model.norm.weight\": data_offsets [1099511627776");
    free(dir);
}

static void test_overlapping_offsets(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "overlap", &TINY);
    set_offsets(dir, "model.layers.0.self_attn.q_proj.weight", -8, -1);
    expect_import_fails(c, dir, "model.safetensors", "overlap tensor \"model.layers.0.input_layernorm.weight\"");
    free(dir);
}

static void test_unsupported_dtype(void **state) {
    Ctx *c = *state;
    ModelSpec s = TINY;
    s.mut = M_AS_I32;
    s.target = "model.layers.1.mlp.up_proj.weight";
    char *dir = make_model_dir(c, "i32", &s);
    expect_import_fails(c, dir, "model.safetensors", "\"model.layers.1.mlp.up_proj.weight\": dtype I32");
    free(dir);
}

static void test_tensor_missing(void **state) {
    Ctx *c = *state;
    ModelSpec s = TINY;
    s.mut = M_DROP;
    s.target = "model.layers.1.self_attn.k_norm.weight";
    char *dir = make_model_dir(c, "missing", &s);
    expect_import_fails(c, dir, "model.safetensors", "\"model.layers.1.self_attn.k_norm.weight\" (shape [16]) is missing");
    free(dir);
}

static void test_shape_mismatch(void **state) {
    Ctx *c = *state;
    ModelSpec s = TINY;
    s.mut = M_TRANSPOSE;   // tiny: gate_proj is [160, 64]
    s.target = "model.layers.0.mlp.gate_proj.weight";
    char *dir = make_model_dir(c, "shape", &s);
    expect_import_fails(c, dir, "model.safetensors", "has shape [64, 160], config.json expects [160, 64]");
    free(dir);
    // config.json describing a different model than the weights.
    dir = make_model_dir(c, "cfgshape", &TINY);
    char *cfg_path = path_join(dir, "config.json");
    ModelConfig cfg;
    PtError e;
    assert_int_equal(config_preset(&cfg, "tiny", &e), 0);
    cfg.d_ff = 128;
    char *text = config_to_hf_json(&cfg);
    write_text(dir, "config.json", text);
    expect_import_fails(c, dir, "model.safetensors", "config.json expects [128, 64]");
    free(text);
    free(cfg_path);
    free(dir);
}

static void test_unknown_model_type(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "mtype", &TINY);
    ModelConfig cfg;
    PtError e;
    assert_int_equal(config_preset(&cfg, "tiny", &e), 0);
    char *text = config_to_hf_json(&cfg);
    char *at = strstr(text, "\"qwen3\"");
    assert_non_null(at);
    memcpy(at, "\"gpt_2\"", 7);
    write_text(dir, "config.json", text);
    free(text);
    expect_import_fails(c, dir, "config.json", "model_type \"gpt_2\" is not supported");
    free(dir);
}

static void test_untied_without_lm_head(void **state) {
    Ctx *c = *state;
    ModelSpec s = {.preset = "tiny-untied", .dtype = "F32", .mut = M_DROP, .target = "lm_head.weight"};
    char *dir = make_model_dir(c, "nohead", &s);
    expect_import_fails(c, dir, "model.safetensors", "tie_word_embeddings=false");
    free(dir);
}

static void test_extra_tensor(void **state) {
    Ctx *c = *state;
    ModelSpec s = TINY;
    s.mut = M_EXTRA_BIAS;
    char *dir = make_model_dir(c, "bias", &s);
    expect_import_fails(c, dir, "model.safetensors", "unexpected tensor \"model.layers.0.self_attn.q_proj.bias\"");
    free(dir);
}

static void test_tied_head_differs(void **state) {
    Ctx *c = *state;
    ModelSpec s = TINY;
    s.mut = M_LM_HEAD_DIFF;
    char *dir = make_model_dir(c, "headdiff", &s);
    expect_import_fails(c, dir, "model.safetensors", "lm_head.weight differs from model.embed_tokens.weight in 1 of");
    free(dir);
}

static void test_other_sources(void **state) {
    Ctx *c = *state;
    char *dir = new_dir(c, "empty");
    expect_import_fails(c, dir, "config.json", "missing");
    write_text(dir, "config.json", "{\"model_type\": \"qwen3\", ");
    expect_import_fails(c, dir, "config.json", "not valid JSON");
    ModelConfig cfg;
    PtError e;
    assert_int_equal(config_preset(&cfg, "tiny", &e), 0);
    char *text = config_to_hf_json(&cfg);
    write_text(dir, "config.json", text);
    free(text);
    expect_import_fails(c, dir, dir, "no model.safetensors");
    char *gguf = path_join(c->root, "model.gguf");
    write_text(c->root, "model.gguf", "GGUF");
    expect_import_fails(c, gguf, "model.gguf", "truncated");
    expect_import_fails(c, "/nonexistent/model", "/nonexistent/model", NULL);
    free(gguf);
    free(dir);
}

// A truncated tokenizer.json (or a tokenizer_config.json whose chat template
// does not parse) is refused at the door by import and by init, which store
// these files verbatim; nothing is written (issue: they used to exit 0).
static void test_bad_tokenizer_files(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "badtok", &TINY);
    uint8_t *tok;
    size_t len;
    PtError e;
    if (read_whole_file("tests/fixtures/tok/tokenizer.json", &tok, &len, &e)) fail_msg("%s", e.msg);
    char *half = path_join(dir, "tokenizer.json");
    FILE *f = fopen(half, "wb");
    fwrite(tok, 1, len / 2, f);
    fclose(f);
    expect_import_fails(c, dir, "tokenizer.json", "invalid JSON");
    char *out = path_join(c->root, "INIT.h5");
    Run r;
    run_pocket(c, &r, "init", "--model", "tiny", "--tokenizer", half, "--out", out, NULL, NULL);
    if (r.status <= 0 || !strstr(r.err, "tokenizer.json") || !strstr(r.err, "invalid JSON"))
        fail_msg("init with a truncated tokenizer.json: exit %d, %s", r.status, r.err);
    assert_true(no_entry_with_prefix(c->root, "INIT.h5"));
    unlink(half);
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"{% for m in messages %}\"}");
    expect_import_fails(c, dir, "tokenizer_config.json chat_template:1:", "never closed");
    free(out);
    free(half);
    free(tok);
    free(dir);
}

static void test_sharded_errors(void **state) {
    Ctx *c = *state;
    ModelSpec s = {.preset = "tiny-untied", .dtype = "F32", .shards = 3};
    char *dir = make_model_dir(c, "shardmiss", &s);
    char *shard = path_join(dir, "model-00002-of-00003.safetensors");
    assert_int_equal(unlink(shard), 0);
    expect_import_fails(c, dir, "model.safetensors.index.json", "\"model-00002-of-00003.safetensors\", which does not exist");
    free(shard);
    free(dir);
    // The index puts a tensor in a shard that does not hold it.
    dir = make_model_dir(c, "shardwrong", &s);
    char *index = path_join(dir, "model.safetensors.index.json");
    json_t *j = json_load_file(index, 0, NULL);
    json_object_set_new(json_object_get(j, "weight_map"), "model.norm.weight",
                        json_string("model-00001-of-00003.safetensors"));
    json_dump_file(j, index, JSON_INDENT(2));
    json_decref(j);
    expect_import_fails(c, dir, "model.safetensors.index.json", "\"model.norm.weight\" in \"model-00001-of-00003");
    free(index);
    free(dir);
}

// A config.json whose sizes the weights cannot hold is refused before room is made for the model it describes
// (found probing fuzz_hf_import: a config.json edited to a huge vocabulary made the import allocate and zero
// gigabytes); single file and sharded.
static void test_config_larger_than_weights(void **state) {
    Ctx *c = *state;
    const ModelSpec *specs[2] = {&TINY, &(ModelSpec){.preset = "tiny", .dtype = "BF16", .shards = 2}};
    const char *holder[2] = {"more than model.safetensors holds", "more than the shards of the index holds"};
    for (int k = 0; k < 2; k++) {
        char *dir = make_model_dir(c, k ? "hugevocab-sharded" : "hugevocab", specs[k]);
        ModelConfig cfg;
        PtError e;
        assert_int_equal(config_preset(&cfg, "tiny", &e), 0);
        cfg.vocab_size = 1 << 28;
        char *text = config_to_hf_json(&cfg);
        write_text(dir, "config.json", text);
        free(text);
        expect_import_fails(c, dir, "config.json", "describes 17179955584 parameters");
        expect_import_fails(c, dir, "config.json", holder[k]);
        free(dir);
    }
}

// ------------------------------------------------------------ good inputs

// Every table tensor of b is in DIR/model.safetensors with `dtype`, and its
// raw bytes equal b's values converted to that dtype.
static void expect_exported(const char *dir, const ModelBundle *b, const char *dtype) {
    char *path = path_join(dir, "model.safetensors");
    StFile f;
    PtError e;
    if (st_open(&f, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(f.n, b->tt.n);   // tied: no lm_head.weight
    for (int i = 0; i < b->tt.n; i++) {
        const TensorInfo *ti = &b->tt.t[i];
        const StTensor *t = st_find(&f, ti->name);
        if (!t) fail_msg("%s: %s not exported", path, ti->name);
        assert_string_equal(t->dtype, dtype);
        assert_int_equal(t->ndim, ti->ndim);
        for (int d = 0; d < ti->ndim; d++) assert_int_equal(t->shape[d], ti->shape[d]);
        const uint8_t *raw = st_data(&f, t);
        const float *src = b->params + ti->offset;
        for (size_t j = 0; j < ti->numel; j++) {
            int same;
            if (strcmp(dtype, "F32") == 0) {
                same = memcmp(raw + 4 * j, &src[j], 4) == 0;
            } else {
                uint16_t want = strcmp(dtype, "BF16") == 0 ? f32_to_bf16(src[j]) : f32_to_f16(src[j]);
                same = (raw[2 * j] | raw[2 * j + 1] << 8) == want;
            }
            if (!same) fail_msg("%s: %s[%zu] differs", path, ti->name, j);
        }
    }
    st_close(&f);
    free(path);
}

// Values as the importer must see them: the stored dtype's rounding of b.
static void round_bundle(ModelBundle *b, const char *dtype) {
    for (size_t j = 0; j < b->tt.total; j++) {
        if (strcmp(dtype, "BF16") == 0) b->params[j] = bf16_to_f32(f32_to_bf16(b->params[j]));
        if (strcmp(dtype, "F16") == 0) b->params[j] = f16_to_f32(f32_to_f16(b->params[j]));
    }
}

static void import_export_roundtrip(Ctx *c, const char *tag, const ModelSpec *s, const char *export_dtype,
                                    const char *expect_dtype) {
    char *dir = new_dir(c, tag);
    ModelBundle b;
    write_model(dir, s, &b);
    round_bundle(&b, s->dtype);
    char *ckpt = path_join(c->root, "good.h5");
    char *out = path_join(c->root, "exported");
    Run r;
    run_pocket(c, &r, "import", dir, "--out", ckpt, NULL, NULL, NULL, NULL, NULL);
    if (r.status != 0) fail_msg("import %s failed: %s", tag, r.err);
    assert_true(path_exists(ckpt));
    run_pocket(c, &r, "export", "--ckpt", ckpt, "--format", "hf", "--out", out, "--dtype", export_dtype);
    if (r.status != 0) fail_msg("export %s failed: %s", tag, r.err);
    expect_exported(out, &b, expect_dtype);
    // config.json reads back as the same model; the tokenizer travels verbatim.
    char *cfg_path = path_join(out, "config.json");
    ModelConfig cfg;
    PtError e;
    assert_int_equal(config_load(&cfg, cfg_path, &e), 0);
    assert_int_equal(cfg.tied_embeddings, b.cfg.tied_embeddings);
    assert_int_equal(cfg.head_dim, b.cfg.head_dim);
    assert_int_equal(cfg.n_kv_head, b.cfg.n_kv_head);
    assert_int_equal(cfg.qk_norm, b.cfg.qk_norm);
    assert_true(cfg.norm_eps == b.cfg.norm_eps && cfg.rope_theta == b.cfg.rope_theta);
    char *tok_path = path_join(out, "tokenizer.json");
    if (s->tokenizer_json) {
        uint8_t *text;
        size_t len;
        assert_int_equal(read_whole_file(tok_path, &text, &len, &e), 0);
        assert_string_equal((char *)text, s->tokenizer_json);
        free(text);
    } else {
        assert_false(path_exists(tok_path));
    }
    assert_true(no_entry_with_prefix(c->root, "exported.tmp"));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", out, ckpt);
    assert_int_equal(system(cmd), 0);
    free(tok_path);
    free(cfg_path);
    free(out);
    free(ckpt);
    bundle_free(&b);
    free(dir);
}

static void test_good_imports(void **state) {
    Ctx *c = *state;
    ModelSpec tied = {.preset = "tiny", .dtype = "F32", .tokenizer_json =
                         "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}\n"};
    import_export_roundtrip(c, "good-f32", &tied, "f32", "F32");
    ModelSpec bf16 = {.preset = "tiny", .dtype = "BF16"};
    import_export_roundtrip(c, "good-bf16", &bf16, "bf16", "BF16");   // bf16 -> f32 -> bf16 is lossless
    ModelSpec sharded = {.preset = "tiny-untied", .dtype = "F16", .shards = 3};
    import_export_roundtrip(c, "good-shards", &sharded, "f32", "F32");
    ModelSpec llama = {.preset = "tiny-llama", .dtype = "F32"};
    import_export_roundtrip(c, "good-llama", &llama, "f32", "F32");
    ModelSpec head_same = {.preset = "tiny", .dtype = "F32", .mut = M_LM_HEAD_SAME};
    import_export_roundtrip(c, "good-headsame", &head_same, "f32", "F32");
}

static void test_export_errors(void **state) {
    Ctx *c = *state;
    char *dir = make_model_dir(c, "exp", &TINY);
    char *ckpt = path_join(c->root, "exp.h5");
    char *out = new_dir(c, "exp-out");
    write_text(out, "keep.txt", "user data");
    Run r;
    run_pocket(c, &r, "import", dir, "--out", ckpt, NULL, NULL, NULL, NULL, NULL);
    assert_int_equal(r.status, 0);
    // A non-empty directory is refused without --force and left alone.
    run_pocket(c, &r, "export", "--ckpt", ckpt, "--format", "hf", "--out", out, NULL, NULL);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.err, "--force"));
    char *keep = path_join(out, "keep.txt");
    assert_true(path_exists(keep));
    // --force replaces it whole.
    run_pocket(c, &r, "export", "--ckpt", ckpt, "--format", "hf", "--out", out, "--force", NULL);
    if (r.status != 0) fail_msg("export --force failed: %s", r.err);
    assert_false(path_exists(keep));
    char *st = path_join(out, "model.safetensors");
    assert_true(path_exists(st));
    // A bad mnn graph form, unknown formats, a bad dtype, a missing checkpoint.
    char *out2 = path_join(c->root, "exp-out2");
    run_pocket(c, &r, "export", "--ckpt", ckpt, "--format", "mnn", "--out", out2, "--graph", "spiral");
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.err, "unknown --graph 'spiral'"));
    run_pocket(c, &r, "export", "--ckpt", ckpt, "--format", "onnx", "--out", out2, NULL, NULL);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.err, "unknown format 'onnx'"));
    run_pocket(c, &r, "export", "--ckpt", ckpt, "--format", "hf", "--out", out2, "--dtype", "int3");
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.err, "int3"));
    run_pocket(c, &r, "export", "--ckpt", "/nonexistent.h5", "--format", "hf", "--out", out2, NULL, NULL);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.err, "/nonexistent.h5"));
    assert_true(no_entry_with_prefix(c->root, "exp-out2"));
    free(out2);
    free(st);
    free(keep);
    free(out);
    free(ckpt);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_safetensors),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_offsets_out_of_range),
        cmocka_unit_test(test_overlapping_offsets),
        cmocka_unit_test(test_unsupported_dtype),
        cmocka_unit_test(test_tensor_missing),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_unknown_model_type),
        cmocka_unit_test(test_untied_without_lm_head),
        cmocka_unit_test(test_extra_tensor),
        cmocka_unit_test(test_tied_head_differs),
        cmocka_unit_test(test_other_sources),
        cmocka_unit_test(test_sharded_errors),
        cmocka_unit_test(test_config_larger_than_weights),
        cmocka_unit_test(test_bad_tokenizer_files),
        cmocka_unit_test(test_good_imports),
        cmocka_unit_test(test_export_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
