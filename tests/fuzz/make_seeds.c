// make_seeds.c: writes the seed corpora of the fuzz targets into
// tests/fuzz/corpus/<target>/ (`make fuzz-seeds`, from the repo root): small
// valid files, most of them written by the project's own writers (checkpoints
// with /qat and training state, adapters, token datasets, an HF directory,
// an MNN package, safetensors) for a micro model, the rest taken from
// tests/fixtures (tokenizers, chat templates, SFT formats, recipes, PEFT
// folders, GGUF files). Kilobytes each; the committed corpora are these
// seeds plus what a campaign's merge kept (docs/fuzzing.md).
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include <zlib.h>
#include "../../data/dataset.h"
#include "../../export/mnn_export.h"
#include "../../formats/checkpoint.h"
#include "../../formats/hf_export.h"
#include "../../formats/draft_checkpoint.h"
#include "../../formats/lora_checkpoint.h"
#include "../../formats/safetensors.h"
#include "../../model/ops/ops.h"
#include "fuzz_util.h"

#define OUT "tests/fuzz/corpus/"
#define CHECK(call)                                                  \
    do {                                                             \
        if (call) die("make_seeds: %s: %s", #call, e.msg);           \
    } while (0)

static PtError e;

static void put(const char *target, const char *name, const void *data, size_t len) {
    char dir[256], path[512];
    snprintf(dir, sizeof dir, OUT "%s", target);
    mkdir(OUT, 0755);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f)) die("make_seeds: cannot write %s", path);
}

static uint8_t *slurp(const char *path, size_t *len) {
    uint8_t *data;
    CHECK(read_whole_file(path, &data, len, &e));
    return data;
}

static void put_file(const char *target, const char *name, const char *path) {
    size_t len;
    uint8_t *data = slurp(path, &len);
    put(target, name, data, len);
    free(data);
}

// A seed of several files, joined at FUZZ_PART_MARK (a NULL path: an empty part, the file absent).
static void put_parts(const char *target, const char *name, const char *const *paths, int n) {
    char *joined = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&joined, &len);
    for (int i = 0; i < n; i++) {
        if (i) fputs(FUZZ_PART_MARK, f);
        if (!paths[i]) continue;
        size_t n_bytes;
        uint8_t *data = slurp(paths[i], &n_bytes);
        fwrite(data, 1, n_bytes, f);
        free(data);
    }
    fclose(f);
    put(target, name, joined, len);
    free(joined);
}

// A seed whose first bytes pick a target's mode, then a file.
static void put_with_prefix(const char *target, const char *name, const char *prefix, size_t prefix_len,
                            const void *data, size_t len) {
    uint8_t *joined = xmalloc(prefix_len + len, "seed");
    memcpy(joined, prefix, prefix_len);
    memcpy(joined + prefix_len, data, len);
    put(target, name, joined, prefix_len + len);
    free(joined);
}

static void put_file_with_prefix(const char *target, const char *name, char prefix, const char *path) {
    size_t len;
    uint8_t *data = slurp(path, &len);
    put_with_prefix(target, name, &prefix, 1, data, len);
    free(data);
}

static void gzip_bytes(const void *data, size_t len, uint8_t **out, size_t *out_len) {
    uLong cap = compressBound(len) + 32;
    *out = xmalloc(cap, "gzip");
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) die("make_seeds: deflateInit2");
    z.next_in = (Bytef *)data, z.avail_in = (uInt)len, z.next_out = *out, z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) die("make_seeds: deflate");
    *out_len = z.total_out;
    deflateEnd(&z);
}

static char *scratch(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "build-fuzz/seeds/%s", name);
    return path;
}

// ---- a tokenizer small enough to seed with: the fixture's 256 byte tokens, its first merges, its added tokens

enum { SMALL_VOCAB = 320 };

static char *small_tokenizer(size_t *len) {
    json_error_t je;
    json_t *t = json_load_file("tests/fixtures/tok/tokenizer.json", 0, &je);
    if (!t) die("make_seeds: tokenizer fixture: %s", je.text);
    json_t *model = json_object_get(t, "model"), *vocab = json_object_get(model, "vocab"), *kept = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) if (json_integer_value(v) < SMALL_VOCAB) json_object_set(kept, k, v);
    json_t *merges = json_object_get(model, "merges"), *kept_merges = json_array();
    size_t i;
    json_array_foreach(merges, i, v) {
        char joined[256];
        snprintf(joined, sizeof joined, "%s%s", json_string_value(json_array_get(v, 0)),
                 json_string_value(json_array_get(v, 1)));
        if (json_object_get(kept, joined)) json_array_append(kept_merges, v);
    }
    json_object_set_new(model, "vocab", kept);
    json_object_set_new(model, "merges", kept_merges);
    json_array_foreach(json_object_get(t, "added_tokens"), i, v)
        json_object_set_new(v, "id", json_integer(SMALL_VOCAB + (json_int_t)i));
    char *s = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    *len = strlen(s);
    return s;
}

// ---- a micro model: one layer, hidden 16, groups of 16 for the int4 state

static void micro_config(ModelConfig *c, int vocab) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "hf");
    snprintf(c->model_type, sizeof c->model_type, "qwen3");
    c->n_layer = 1, c->d_model = 16, c->n_head = 2, c->n_kv_head = 1, c->head_dim = 8, c->d_ff = 32;
    c->vocab_size = vocab, c->max_seq = 64, c->rope_theta = 10000, c->norm_eps = 1e-6f, c->init_std = 0.02f;
    c->tied_embeddings = 1, c->qk_norm = 1, c->bos_id = -1, c->eos_id = vocab - 1, c->pad_id = vocab - 2;
    CHECK(config_validate(c, "micro", &e));
}

static void micro_bundle(ModelBundle *b, int vocab) {
    ModelConfig c;
    micro_config(&c, vocab);
    bundle_alloc(b, &c);
    bundle_init_random(b, 7);
}

static void put_h5(const char *target, const char *name, const char *path) {
    put_file(target, name, path);
    unlink(path);
}

static void checkpoints(const char *tok_json, size_t tok_len) {
    const char *T = "fuzz_checkpoint";
    ModelBundle b;
    micro_bundle(&b, 32);
    b.tokenizer_json = xstrdup(tok_json);
    b.tokenizer_json_len = tok_len;
    b.tokenizer_config_json = xstrdup("{\"eos_token\": \"<|im_end|>\"}");
    b.tokenizer_config_json_len = strlen(b.tokenizer_config_json);
    CHECK(checkpoint_save(scratch("plain.h5"), &b, &e));
    put_h5(T, "plain.h5", scratch("plain.h5"));
    // A run's checkpoint: AdamW moments and the training state.
    float *m = xcalloc(b.tt.total, sizeof(float), "m"), *v = xcalloc(b.tt.total, sizeof(float), "v");
    for (size_t i = 0; i < b.tt.total; i++) m[i] = 0.001f * (float)(i % 7), v[i] = 1e-6f * (float)(i % 5);
    MomentBuffers mb = {&b.tt, m, v};
    MomentSource src = {moment_buffers, &mb};
    TrainState st = {.step = 3, .tokens = 96, .best_val_loss = 4.5, .cursor = {1, 2, {1, 2, 3, 4}}};
    CHECK(checkpoint_save_train(scratch("train.h5"), &b, &src, &st, NULL, &e));
    put_h5(T, "train.h5", scratch("train.h5"));
    free(m);
    free(v);
    // /qat with learned scales (their moments) and frozen codes: every dataset /qat can hold.
    QatState q;
    QuantSpec spec = {16, 0};
    CHECK(qat_init(&q, &b.tt, &spec, 1, 1, "seed", &e));
    CHECK(qat_init_from_weights(&q, &b.tt, b.params, QAT_INIT_RTN, NULL, NULL, "seed", &e));
    Device dev;
    cpu_device_init(&dev, 1, NULL);
    qat_freeze(&dev, &q, &b.tt, b.params);
    dev_free(&dev);
    CHECK(checkpoint_save_qat(scratch("frozen.h5"), &b, &q, &e));
    put_h5(T, "qat-frozen.h5", scratch("frozen.h5"));
    qat_free(&q);
    bundle_free(&b);
}

static void adapters(void) {
    const char *T = "fuzz_lora_checkpoint";
    ModelConfig base;
    CHECK(config_load(&base, "tests/fixtures/hf/qwen3-tied", &e));
    LoraConfig lc = {.rank = 2, .alpha = 4, .dropout = 0.1f, .targets = 1u << LORA_Q | 1u << LORA_V};
    LoraAdapter a;
    lora_adapter_alloc(&a, &base, &lc);
    lora_init(a.params, &a.tt, &lc, LORA_INIT_GAUSSIAN, 3);
    snprintf(a.base_sha256, sizeof a.base_sha256, "%064d", 0);
    CHECK(lora_checkpoint_save(scratch("a.h5"), &a, NULL, NULL, &e));
    put_h5(T, "adapter-qv.h5", scratch("a.h5"));
    float *m = xcalloc(a.tt.total, sizeof(float), "m"), *v = xcalloc(a.tt.total, sizeof(float), "v");
    MomentBuffers mb = {&a.tt, m, v};
    MomentSource src = {moment_buffers, &mb};
    TrainState st = {.step = 5, .tokens = 160, .best_val_loss = 3.25};
    a.base_int4 = 1;
    CHECK(lora_checkpoint_save(scratch("t.h5"), &a, &src, &st, &e));
    put_h5(T, "adapter-int4-train.h5", scratch("t.h5"));
    free(m);
    free(v);
    lora_adapter_free(&a);
    // One target on every projection kind, rank 1.
    lc = (LoraConfig){.rank = 1, .alpha = 1, .targets = 1u << LORA_O | 1u << LORA_GATE | 1u << LORA_DOWN};
    lora_adapter_alloc(&a, &base, &lc);
    lora_init(a.params, &a.tt, &lc, LORA_INIT_PEFT, 3);
    CHECK(lora_checkpoint_save(scratch("o.h5"), &a, NULL, NULL, &e));
    put_h5(T, "adapter-o-gate-down.h5", scratch("o.h5"));
    lora_adapter_free(&a);
}

static void drafts(void) {
    const char *T = "fuzz_draft_checkpoint";
    ModelConfig target;
    CHECK(config_load(&target, "tests/fixtures/hf/qwen3-tied", &e));
    DraftConfig dc = {.n_layer = 1, .block = 4, .n_target = 2, .target_layers = {0, 1}, .mask_token = 1, .d_ff = 8};
    Draft d;
    draft_alloc(&d, &target, &dc);
    draft_init(&d, 3);
    snprintf(d.base_sha256, sizeof d.base_sha256, "%064d", 0);
    CHECK(draft_checkpoint_save(scratch("d.h5"), &d, NULL, NULL, &e));
    put_h5(T, "draft-1-layer.h5", scratch("d.h5"));
    float *m = xcalloc(d.tt.total, sizeof(float), "m"), *v = xcalloc(d.tt.total, sizeof(float), "v");
    MomentBuffers mb = {&d.tt, m, v};
    MomentSource src = {moment_buffers, &mb};
    TrainState st = {.step = 3, .tokens = 96, .best_val_loss = 2.5};
    CHECK(draft_checkpoint_save(scratch("t.h5"), &d, &src, &st, &e));
    put_h5(T, "draft-train.h5", scratch("t.h5"));
    uint64_t *counts = xcalloc((size_t)target.vocab_size, sizeof(uint64_t), "counts");
    for (int i = 0; i < target.vocab_size; i += 7) counts[i] = (uint64_t)(i % 5 + 1);
    draft_pick_vocab(&d, counts, target.vocab_size, 12);   // a vocabulary of its own: /draft/vocab
    free(counts);
    CHECK(draft_checkpoint_save(scratch("v.h5"), &d, NULL, NULL, &e));
    put_h5(T, "draft-vocab.h5", scratch("v.h5"));
    free(m);
    free(v);
    draft_free(&d);
}

static void datasets(const Tokenizer *tok) {
    const char *T = "fuzz_dataset";
    const int ids[] = {5, 17, 300, 1500, 1502, 42, 7, 1499, 0, 1};
    const uint8_t mask[] = {0, 0, 0, 1, 1, 1, 0, 1, 1, 0};
    for (int kind = 0; kind < 3; kind++) {
        DatasetWriter *w;
        CHECK(dataset_writer_open(&w, scratch("d.h5"), (DatasetKind)kind, tokenizer_vocab_size(tok),
                                  tokenizer_hash(tok), &e));
        for (int doc = 0; doc < 4; doc++) CHECK(dataset_writer_add(w, ids + doc, mask + doc, 6 - doc, &e));
        if (kind == DATASET_CHOICE) {
            CHECK(dataset_writer_end_group(w, 1, &e));
            for (int doc = 0; doc < 3; doc++) CHECK(dataset_writer_add(w, ids, mask + 3, 5 + doc, &e));
            CHECK(dataset_writer_end_group(w, 2, &e));
        }
        dataset_writer_set_counts(w, 1, 2, 3);
        CHECK(dataset_writer_commit(w, &e));
        static const char *const NAMES[] = {"cpt.h5", "sft.h5", "choice.h5"};
        put_h5(T, NAMES[kind], scratch("d.h5"));
    }
    // Pairs: two pairs, each prompt + chosen and prompt + rejected with the mask on the response.
    DatasetWriter *w;
    CHECK(dataset_writer_open(&w, scratch("d.h5"), DATASET_PAIRS, tokenizer_vocab_size(tok), tokenizer_hash(tok), &e));
    for (int doc = 0; doc < 4; doc++) CHECK(dataset_writer_add(w, ids, mask + 1, 5 + (size_t)doc, &e));
    const uint64_t drops[PAIR_DROP_REASONS] = {1, 2, 3, 4};
    dataset_writer_set_pair_drops(w, drops);
    CHECK(dataset_writer_commit(w, &e));
    put_h5(T, "pairs.h5", scratch("d.h5"));
    // uint32 tokens: a vocabulary past 65536.
    const int big[] = {70000, 3, 99999, 12};
    CHECK(dataset_writer_open(&w, scratch("d.h5"), DATASET_CPT, 100000, tokenizer_hash(tok), &e));
    CHECK(dataset_writer_add(w, big, NULL, 4, &e));
    CHECK(dataset_writer_commit(w, &e));
    put_h5(T, "cpt-uint32.h5", scratch("d.h5"));
}

static void safetensors(void) {
    const char *T = "fuzz_safetensors";
    float f[6] = {1, -2, 0.5f, 3e-8f, 65504, -0.0f};
    uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    int64_t i64[2] = {-1, 1LL << 40};
    uint8_t u8[3] = {0, 1, 255};
    StWriteTensor t[] = {
        {.name = "w", .dtype = "F32", .ndim = 2, .shape = {2, 3}, .data = f},
        {.name = "h", .dtype = "F16", .ndim = 1, .shape = {4}, .data = h},
        {.name = "b", .dtype = "BF16", .ndim = 2, .shape = {2, 2}, .data = h},
        {.name = "scalar", .dtype = "F32", .ndim = 0, .data = f},
        {.name = "empty", .dtype = "F32", .ndim = 2, .shape = {0, 3}, .data = f},
        {.name = "i", .dtype = "I64", .ndim = 1, .shape = {2}, .data = i64},
        {.name = "mask", .dtype = "BOOL", .ndim = 1, .shape = {3}, .data = u8},
    };
    CHECK(st_write(scratch("t.safetensors"), t, (int)(sizeof t / sizeof t[0]), &e));
    put_h5(T, "dtypes.safetensors", scratch("t.safetensors"));
    put_file(T, "peft-adapter.safetensors", "tests/fixtures/lora/qwen3-tied-qvdown/adapter_model.safetensors");
}

// An HF directory and an MNN package of the micro model over the small tokenizer.
static void model_dirs(const char *tok_json, size_t tok_len) {
    ModelBundle b;
    micro_bundle(&b, SMALL_VOCAB + 8);
    b.tokenizer_json = xmalloc(tok_len + 1, "tokenizer");
    memcpy(b.tokenizer_json, tok_json, tok_len + 1);
    b.tokenizer_json_len = tok_len;
    b.tokenizer_config_json = xstrdup("{\"chat_template\": \"{{ messages[0].content }}\", \"eos_token\": \"<|im_end|>\"}");
    b.tokenizer_config_json_len = strlen(b.tokenizer_config_json);
    CHECK(hf_export(&b, scratch("hf"), "F32", 1, &e));
    char model[256], tcfg[256];
    snprintf(model, sizeof model, "%s", scratch("hf/model.safetensors"));
    snprintf(tcfg, sizeof tcfg, "%s", scratch("hf/tokenizer_config.json"));
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s", scratch("hf/config.json"));
    const char *single[] = {cfg, model, NULL, tcfg};
    put_parts("fuzz_hf_import", "micro-single", single, 4);
    // The same weights as one shard named by an index.
    FILE *f = fopen(scratch("index.json"), "w");
    json_t *map = json_object();
    for (int i = 0; i < b.tt.n; i++)
        if (b.tt.t[i].kind != T_LMHEAD || !b.cfg.tied_embeddings)
            json_object_set_new(map, b.tt.t[i].name, json_string("model.safetensors"));
    json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
    json_dumpf(index, f, JSON_INDENT(1));
    json_decref(index);
    fclose(f);
    char idx[256];
    snprintf(idx, sizeof idx, "%s", scratch("index.json"));
    const char *sharded[] = {cfg, NULL, idx, NULL};
    put_parts("fuzz_hf_import", "micro-index-no-shard", sharded, 4);
    put_file("fuzz_hf_config", "micro.json", cfg);
    // The MNN package: the micro model's RTN int4 state, group 16.
    QatState q;
    QuantSpec spec = {16, 0};
    CHECK(qat_init(&q, &b.tt, &spec, 1, 0, "seed", &e));
    CHECK(qat_init_from_weights(&q, &b.tt, b.params, QAT_INIT_RTN, NULL, NULL, "seed", &e));
    MnnExportOptions o = {.fused = 1, .memory = "low", .force = 1};
    MnnExportStats st;
    CHECK(mnn_export(&b, &q, scratch("mnn"), &o, &st, &e));
    char files[4][256];
    const char *names[4] = {"llm.mnn", "llm.mnn.weight", "config.json", "llm_config.json"};
    const char *paths[4];
    for (int i = 0; i < 4; i++) {
        snprintf(files[i], sizeof files[i], "build-fuzz/seeds/mnn/%s", names[i]);
        paths[i] = files[i];
    }
    put_parts("fuzz_mnn_inspect", "micro-fused", paths, 4);
    o.fused = 0;
    CHECK(mnn_export(&b, &q, scratch("mnn"), &o, &st, &e));
    put_parts("fuzz_mnn_inspect", "micro-plain", paths, 4);
    qat_free(&q);
    bundle_free(&b);
}

static void text_seeds(const char *small_tok, size_t small_len) {
    // Tokenizers: the fixtures (merges as pairs and as "a b" strings, split variants) and the small one.
    const char *toks[] = {"tokenizer.json", "tokenizer_legacy.json", "tokenizer_prefix_split.json", "tokenizer_gpt2ish.json"};
    for (int i = 0; i < 4; i++) {
        char p[128];
        snprintf(p, sizeof p, "tests/fixtures/tok/%s", toks[i]);
        put_file("fuzz_tokenizer", toks[i], p);
    }
    put("fuzz_tokenizer", "small.json", small_tok, small_len);
    // Chat templates: the bundled one, the eight families, and tokenizer_config.json parts.
    static const char *const FAMILIES[] = {"qwen2.5", "qwen3", "llama3", "smollm2", "mistral", "gemma", "deepseek", "phi"};
    const char *bundled = chat_bundled_template();
    put("fuzz_chat_template", "bundled.jinja", bundled, strlen(bundled));
    for (int i = 0; i < 8; i++) {
        char p[128], n[64];
        snprintf(p, sizeof p, "tests/fixtures/chat/%s.jinja", FAMILIES[i]);
        snprintf(n, sizeof n, "%s.jinja", FAMILIES[i]);
        put_file("fuzz_chat_template", n, p);
    }
    json_t *cfg = json_pack("{s:s, s:{s:s}, s:s}", "chat_template", bundled, "eos_token", "content", "<|im_end|>",
                            "bos_token", "<s>");
    char *cfg_text = json_dumps(cfg, 0);
    json_t *named = json_pack("{s:[{s:s, s:s}, {s:s, s:s}]}", "chat_template", "name", "default", "template",
                              "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
                              "name", "tool_use", "template", "{{ raise_exception('no tools') }}");
    char *named_text = json_dumps(named, 0);
    char *joined;
    size_t len;
    FILE *f = open_memstream(&joined, &len);
    fprintf(f, "{{ bos_token }}{{ messages | length }}%s%s", FUZZ_PART_MARK, cfg_text);
    fclose(f);
    put("fuzz_chat_template", "with-config", joined, len);
    free(joined);
    f = open_memstream(&joined, &len);
    fprintf(f, "{%% for m in messages %%}{{ m.content }}{%% endfor %%}%s%s", FUZZ_PART_MARK, named_text);
    fclose(f);
    put("fuzz_chat_template", "named-templates", joined, len);
    free(joined);
    free(cfg_text), free(named_text);
    json_decref(cfg), json_decref(named);
    // Conversations: template, flags, then role NUL content NUL ...
    static const char CONV1[] = "\x00\x01system\0Be brief.\0user\0Hi\0assistant\0Hello!\0";
    static const char CONV2[] = "\x01\x02user\0Q\0assistant\0<think>\nhm\n</think>\n\nA\0user\0again?\0";
    static const char CONV3[] = "\x02\x03user\0\xe4\xbd\xa0\xe5\xa5\xbd\0assistant\0 <|im_end|> \0tool\0{}\0";
    put("fuzz_chat_messages", "system-user-assistant", CONV1, sizeof CONV1 - 1);
    put("fuzz_chat_messages", "think", CONV2, sizeof CONV2 - 1);
    put("fuzz_chat_messages", "special-and-tool", CONV3, sizeof CONV3 - 1);
    // HF configs.
    put_file("fuzz_hf_config", "qwen3-tied.json", "tests/fixtures/hf/qwen3-tied/config.json");
    put_file("fuzz_hf_config", "qwen3-untied.json", "tests/fixtures/hf/qwen3-untied/config.json");
    put_file("fuzz_hf_config", "llama-noqk.json", "tests/fixtures/hf/llama-noqk/config.json");
    // SFT formats: mode byte (file kind), then the file.
    const struct { const char *file, *name; char mode; } SFT[] = {
        {"tests/fixtures/data/chat.jsonl", "openai.jsonl", 0},
        {"tests/fixtures/data/formats/sharegpt.jsonl", "sharegpt.jsonl", 0},
        {"tests/fixtures/data/formats/alpaca.jsonl", "alpaca.jsonl", 3},
        {"tests/fixtures/data/formats/table.csv", "table.csv", 4},
        {"tests/fixtures/data/formats/table.tsv", "table.tsv", 5},
        {"tests/fixtures/data/formats/named.csv", "named-as-txt.csv", 6},
        {"tests/fixtures/data/bad/mixed_formats.jsonl", "mixed.jsonl", 0x10},
    };
    for (size_t i = 0; i < sizeof SFT / sizeof SFT[0]; i++) put_file_with_prefix("fuzz_sft", SFT[i].name, SFT[i].mode, SFT[i].file);
    uint8_t *gz, *raw;
    size_t gz_len, raw_len;
    raw = slurp("tests/fixtures/data/chat.jsonl", &raw_len);
    gzip_bytes(raw, raw_len, &gz, &gz_len);
    put_with_prefix("fuzz_sft", "chat.jsonl.gz", "\x07", 1, gz, gz_len);
    free(gz), free(raw);
    // Choice lines.
    static const char CHOICE[] =
        "{\"prompt\": \"Which colour?\", \"candidates\": [\"red\", \"blue\", \"green\"], \"label\": 1}\n"
        "{\"system\": \"Pick.\", \"prompt\": \"2+2\", \"candidates\": [\"3\", \"4\"], \"label\": \"4\"}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yes?\"}, "
        "{\"role\": \"user\", \"content\": \"a or b\"}], \"candidates\": [\"a\", \"b\"], \"label\": 0}\n";
    put_with_prefix("fuzz_choice", "choice.jsonl", "\x00", 1, CHOICE, sizeof CHOICE - 1);
    put_with_prefix("fuzz_choice", "choice-qwen.jsonl", "\x01", 1, CHOICE, sizeof CHOICE - 1);
    // Preference pairs: each sample; byte 0 = template, --truncate, --max-len / 4.
    const struct { const char *name; char mode; } PAIR_SAMPLES[] = {
        {"standard", 0}, {"conversational", 1}, {"implicit", 0x23}, {"implicit_text", 0x0a}, {"drops", 0}, {"bad", 0},
    };
    for (size_t i = 0; i < sizeof PAIR_SAMPLES / sizeof *PAIR_SAMPLES; i++) {
        char file[128], name[64];
        snprintf(file, sizeof file, "tests/fixtures/data/pairs/%s.jsonl", PAIR_SAMPLES[i].name);
        snprintf(name, sizeof name, "%s.jsonl", PAIR_SAMPLES[i].name);
        put_file_with_prefix("fuzz_pairs", name, PAIR_SAMPLES[i].mode, file);
    }
    // Pre-training text.
    put_file_with_prefix("fuzz_corpus", "intro.txt", 0, "tests/fixtures/data/corpus/01_intro.txt");
    put_file_with_prefix("fuzz_corpus", "mixed.jsonl", 1, "tests/fixtures/data/corpus/02_mixed.jsonl");
    raw = slurp("tests/fixtures/data/corpus/02_mixed.jsonl", &raw_len);
    gzip_bytes(raw, raw_len, &gz, &gz_len);
    put_with_prefix("fuzz_corpus", "mixed.jsonl.gz", "\x03", 1, gz, gz_len);
    free(gz), free(raw);
    // Recipes: the repository's, and one with --set arguments (NUL-ended) after the mark.
    DIR *d = opendir("recipes");
    struct dirent *ent;
    while (d && (ent = readdir(d))) {
        size_t n = strlen(ent->d_name);
        if (n < 5 || strcmp(ent->d_name + n - 4, ".ini")) continue;
        char p[600];
        snprintf(p, sizeof p, "recipes/%s", ent->d_name);
        put_file("fuzz_recipe", ent->d_name, p);
    }
    if (d) closedir(d);
    static const char SETS[] = "[model]\ninit = tiny\n[data]\ntrain = d.h5\n[lora]\nenabled = 1\ntargets = q, v\n"
                               FUZZ_PART_MARK "train.steps=10\0optim.warmup=2\0lora.rank=4\0qat.a16=bf16\0";
    put("fuzz_recipe", "with-sets", SETS, sizeof SETS - 1);
    // PEFT folders.
    const char *lora[] = {"qwen3-tied-qvdown", "qwen3-tied-qvdown-dropout", "qwen3-untied-all"};
    for (int i = 0; i < 3; i++) {
        char c[160], w[160];
        snprintf(c, sizeof c, "tests/fixtures/lora/%s/adapter_config.json", lora[i]);
        snprintf(w, sizeof w, "tests/fixtures/lora/%s/adapter_model.safetensors", lora[i]);
        const char *parts[] = {c, w};
        put_parts("fuzz_peft", lora[i], parts, 2);
    }
    // GGUF: the small fixture written by gguf-py (its Q4_0/Q4_1/Q8_0 blocks); the model-sized ones stay in
    // tests/fixtures/gguf, and `make fuzz-run` seeds from them too.
    put_file("fuzz_gguf", "quant_ref.gguf", "tests/fixtures/gguf/quant_ref.gguf");
    put_file("fuzz_gguf_import", "quant_ref.gguf", "tests/fixtures/gguf/quant_ref.gguf");
}

int main(void) {
    mkdir("build-fuzz", 0755);
    mkdir("build-fuzz/seeds", 0755);
    size_t tok_len;
    char *tok_json = small_tokenizer(&tok_len);
    Tokenizer *tok;
    CHECK(tokenizer_load_file(&tok, "tests/fixtures/tok/tokenizer.json", &e));
    checkpoints(tok_json, tok_len);
    adapters();
    drafts();
    datasets(tok);
    safetensors();
    model_dirs(tok_json, tok_len);
    text_seeds(tok_json, tok_len);
    tokenizer_free(tok);
    free(tok_json);
    printf("seeds written under " OUT "\n");
    return 0;
}
