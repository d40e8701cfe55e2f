// hf_import.c: HF model directory -> ModelBundle; see hf_import.h.
#include "hf_import.h"
#include "../data/chat.h"
#include "../data/tokenizer.h"
#include <jansson.h>
#include <string.h>
#include "safetensors.h"

// model.safetensors.index.json: which shard holds each tensor.
typedef struct {
    char **file;        // distinct shard file names, in first-seen order
    int n_files;
    char **name;        // tensor names
    int *file_of;       // shard index of each name
    int *found;         // set when the tensor was read from its shard
    int n_names;
} WeightMap;

// State of one import: the bundle being filled and what has been seen.
typedef struct {
    const char *dir;
    ModelBundle *b;
    unsigned char *loaded;   // one flag per table row
    float *tied_head;        // a stored lm_head.weight of a tied model, to compare
    char *tied_head_file;
} Import;

static void weight_map_free(WeightMap *w) {
    for (int i = 0; i < w->n_files; i++) free(w->file[i]);
    for (int i = 0; i < w->n_names; i++) free(w->name[i]);
    free(w->file);
    free(w->name);
    free(w->file_of);
    free(w->found);
    memset(w, 0, sizeof *w);
}

json_t *hf_read_json(const char *path, PtError *e) {
    uint8_t *text;
    size_t len;
    if (read_whole_file(path, &text, &len, e)) return NULL;
    json_error_t je;
    json_t *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) pt_fail(e, "%s:%d:%d: not valid JSON: %s", path, je.line, je.column, je.text);
    return root;
}

static int weight_map_load(WeightMap *w, const char *path, PtError *e) {
    memset(w, 0, sizeof *w);
    json_t *root = hf_read_json(path, e);
    if (!root) return -1;
    int rc = -1;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        pt_fail(e, "%s: missing \"weight_map\" object", path);
        goto out;
    }
    size_t n = json_object_size(map);
    w->file = xcalloc(n, sizeof(char *), "shard names");
    w->name = xcalloc(n, sizeof(char *), "tensor names");
    w->file_of = xcalloc(n, sizeof(int), "weight map");
    w->found = xcalloc(n, sizeof(int), "weight map");
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!json_is_string(v)) {
            pt_fail(e, "%s: weight_map entry \"%s\" is not a file name", path, key);
            goto out;
        }
        const char *file = json_string_value(v);
        // Shards live in the model directory; never follow a name out of it.
        if (!*file || file[0] == '/' || strstr(file, "..")) {
            pt_fail(e, "%s: weight_map entry \"%s\" names shard \"%s\" outside the model directory", path, key, file);
            goto out;
        }
        int f = 0;
        while (f < w->n_files && strcmp(w->file[f], file) != 0) f++;
        if (f == w->n_files) w->file[w->n_files++] = xstrdup(file);
        w->name[w->n_names] = xstrdup(key);
        w->file_of[w->n_names++] = f;
    }
    if (w->n_names == 0) {
        pt_fail(e, "%s: weight_map is empty", path);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    if (rc) weight_map_free(w);
    return rc;
}

static int weight_map_find(const WeightMap *w, const char *name) {
    for (int i = 0; i < w->n_names; i++)
        if (strcmp(w->name[i], name) == 0) return i;
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int shape_matches(const StTensor *t, const TensorInfo *ti) {
    if (t->ndim != ti->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != ti->shape[d]) return 0;
    return 1;
}

static const char *table_shape(char *buf, size_t cap, const TensorInfo *ti) {
    if (ti->ndim == 1) snprintf(buf, cap, "[%lld]", (long long)ti->shape[0]);
    else snprintf(buf, cap, "[%lld, %lld]", (long long)ti->shape[0], (long long)ti->shape[1]);
    return buf;
}

static const char *file_shape(char *buf, size_t cap, const StTensor *t) {
    size_t k = snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < cap; d++)
        k += snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

// Reads one tensor of a file into the bundle, after checking it belongs there.
static int import_tensor(Import *im, const StFile *f, const StTensor *t, PtError *e) {
    ModelBundle *b = im->b;
    char want[64], got[160];
    if (ends_with(t->name, "rotary_emb.inv_freq")) return 0;   // a buffer derived from rope_theta
    if (b->tt.tied && strcmp(t->name, "lm_head.weight") == 0) {
        const TensorInfo *emb = tensor_table_find(&b->tt, "model.embed_tokens.weight");
        if (!shape_matches(t, emb))
            return pt_fail(e, "%s: tensor \"lm_head.weight\" has shape %s, config.json expects %s", f->path,
                           file_shape(got, sizeof got, t), table_shape(want, sizeof want, emb));
        free(im->tied_head);
        free(im->tied_head_file);
        im->tied_head = xmalloc(emb->numel * sizeof(float), "lm_head.weight");
        im->tied_head_file = xstrdup(f->path);
        return st_read_f32(f, t, im->tied_head, e);
    }
    const TensorInfo *ti = tensor_table_find(&b->tt, t->name);
    if (!ti)
        return pt_fail(e, "%s: unexpected tensor \"%s\": not a parameter of the %s model config.json describes "
                          "(refusing to drop weights)", f->path, t->name, b->cfg.model_type);
    if (!shape_matches(t, ti))
        return pt_fail(e, "%s: tensor \"%s\" has shape %s, config.json expects %s", f->path, t->name,
                       file_shape(got, sizeof got, t), table_shape(want, sizeof want, ti));
    int row = (int)(ti - b->tt.t);
    if (im->loaded[row]) return pt_fail(e, "%s: tensor \"%s\" is stored twice", f->path, t->name);
    if (st_read_f32(f, t, b->params + ti->offset, e)) return -1;
    im->loaded[row] = 1;
    return 0;
}

// Imports every tensor of one file; with a weight map, only the tensors the
// map assigns to this shard (file_index).
static int import_file(Import *im, const StFile *f, WeightMap *w, int file_index, PtError *e) {
    int rc = 0;
    for (int i = 0; i < f->n && rc == 0; i++) {
        const StTensor *t = &f->t[i];
        if (w) {
            int k = weight_map_find(w, t->name);
            if (k < 0) {
                rc = pt_fail(e, "%s: tensor \"%s\" is not listed in the weight_map of model.safetensors.index.json",
                             f->path, t->name);
                break;
            }
            if (w->file_of[k] != file_index) continue;   // the index says another shard holds it
            w->found[k] = 1;
        }
        rc = import_tensor(im, f, t, e);
    }
    return rc;
}

// The weights, opened (their headers checked) before anything is read:
// model.safetensors, or every shard the index names, in its order.
typedef struct {
    WeightMap map;     // empty for a single file
    StFile *file;
    int n;
} Weights;

static void weights_close(Weights *w) {
    for (int i = 0; i < w->n; i++) st_close(&w->file[i]);
    free(w->file);
    weight_map_free(&w->map);
    memset(w, 0, sizeof *w);
}

static int weights_open(Weights *w, const char *dir, const char *single, const char *index, PtError *e) {
    memset(w, 0, sizeof *w);
    if (path_exists(single)) {
        w->file = xcalloc(1, sizeof *w->file, "weights");
        if (st_open(&w->file[0], single, e)) return weights_close(w), -1;
        w->n = 1;
        return 0;
    }
    if (!path_exists(index))
        return pt_fail(e, "%s: no model.safetensors or model.safetensors.index.json (only safetensors weights are "
                          "supported)", dir);
    if (weight_map_load(&w->map, index, e)) return -1;
    w->file = xcalloc((size_t)w->map.n_files, sizeof *w->file, "weights");
    for (int s = 0; s < w->map.n_files; s++) {
        char *shard = path_join(dir, w->map.file[s]);
        int rc = path_exists(shard) ? st_open(&w->file[s], shard, e)
                                    : pt_fail(e, "%s: weight_map names shard \"%s\", which does not exist", index,
                                              w->map.file[s]);
        free(shard);
        if (rc) return weights_close(w), -1;
        w->n++;
    }
    return 0;
}

static int import_weights(Import *im, Weights *w, const char *index, PtError *e) {
    int rc = 0;
    for (int s = 0; s < w->n && rc == 0; s++) rc = import_file(im, &w->file[s], w->map.n_names ? &w->map : NULL, s, e);
    for (int k = 0; k < w->map.n_names && rc == 0; k++)
        if (!w->map.found[k])
            rc = pt_fail(e, "%s: weight_map puts tensor \"%s\" in \"%s\", which does not hold it", index,
                         w->map.name[k], w->map.file[w->map.file_of[k]]);
    return rc;
}

// Every table tensor must have been read; a tied head must equal the embedding.
static int check_complete(Import *im, const char *weights_path, PtError *e) {
    const ModelBundle *b = im->b;
    char want[64];
    for (int i = 0; i < b->tt.n; i++) {
        const TensorInfo *ti = &b->tt.t[i];
        if (im->loaded[i]) continue;
        if (ti->kind == T_LMHEAD)
            return pt_fail(e, "%s: tensor \"lm_head.weight\" is missing but config.json has tie_word_embeddings=false;"
                              " refusing to leave the output head random", weights_path);
        return pt_fail(e, "%s: tensor \"%s\" (shape %s) is missing", weights_path, ti->name,
                       table_shape(want, sizeof want, ti));
    }
    if (im->tied_head) {
        const TensorInfo *emb = tensor_table_find(&b->tt, "model.embed_tokens.weight");
        const float *E = b->params + emb->offset;
        size_t differ = 0;
        for (size_t j = 0; j < emb->numel; j++) differ += E[j] != im->tied_head[j];
        if (differ)
            return pt_fail(e, "%s: config.json has tie_word_embeddings=true but lm_head.weight differs from "
                              "model.embed_tokens.weight in %zu of %zu values", im->tied_head_file, differ,
                           emb->numel);
    }
    return 0;
}

// Tokenizer files travel verbatim; absence is fine.
static int read_optional(const char *dir, const char *name, char **text, size_t *len, PtError *e) {
    char *path = path_join(dir, name);
    int rc = 0;
    if (path_exists(path)) {
        uint8_t *data;
        rc = read_whole_file(path, &data, len, e);
        if (rc == 0) *text = (char *)data;
    }
    free(path);
    return rc;
}

int hf_is_model_dir(const char *dir) {
    char *cfg = path_join(dir, "config.json");
    int yes = path_is_dir(dir) && path_exists(cfg);
    free(cfg);
    return yes;
}

// The tokenizer files are stored verbatim: a truncated or unusable one is
// refused here, before anything is written, not when it is first used.
static int check_tokenizer_files(const char *dir, const ModelBundle *b, PtError *e) {
    char src[1100];
    if (b->tokenizer_json) {
        snprintf(src, sizeof src, "%s/tokenizer.json", dir);
        Tokenizer *t;
        if (tokenizer_load(&t, b->tokenizer_json, b->tokenizer_json_len, src, e)) return -1;
        int n = tokenizer_vocab_size(t);
        tokenizer_free(t);
        if (n > b->cfg.vocab_size)
            return pt_fail(e, "%s: the tokenizer has ids up to %d, beyond the model's vocab_size %d", src, n - 1,
                           b->cfg.vocab_size);
    }
    if (b->tokenizer_config_json) {
        snprintf(src, sizeof src, "%s/tokenizer_config.json", dir);
        ChatTemplate *t;
        if (chat_template_load(&t, b->tokenizer_config_json, b->tokenizer_config_json_len, src, e)) return -1;
        chat_template_free(t);
    }
    return 0;
}

int hf_import(const char *dir, ModelBundle *b, PtError *e) {
    memset(b, 0, sizeof *b);
    if (!path_is_dir(dir)) return pt_fail(e, "%s: not a directory (expected an HF model directory)", dir);
    char *cfg_path = path_join(dir, "config.json");
    char *single = path_join(dir, "model.safetensors");
    char *index = path_join(dir, "model.safetensors.index.json");
    Import im = {.dir = dir, .b = b};
    Weights w = {0};
    int rc = -1;
    ModelConfig cfg;
    uint8_t *text = NULL;
    size_t len;
    if (!path_exists(cfg_path)) {
        pt_fail(e, "%s: missing (an HF model directory holds config.json)", cfg_path);
        goto out;
    }
    if (read_whole_file(cfg_path, &text, &len, e) || config_from_hf_json(&cfg, (const char *)text, cfg_path, e))
        goto out;
    // Like transformers: a single model.safetensors wins over an index.
    if (weights_open(&w, dir, single, index, e)) goto out;
    const char *weights = w.map.n_names ? index : single;
    // The weights hold 2 bytes a parameter at least (bf16, f16): a config.json they cannot fill is refused
    // before room is made for the model it describes.
    uint64_t bytes = 0;
    for (int s = 0; s < w.n; s++) bytes += w.file[s].data_len;
    if ((double)config_param_count(&cfg) * 2 > (double)bytes) {
        pt_fail(e, "%s: describes %zu parameters, more than %s holds (%llu bytes of tensors; 2 a parameter at least)",
                cfg_path, config_param_count(&cfg), w.map.n_names ? "the shards of the index" : "model.safetensors",
                (unsigned long long)bytes);
        goto out;
    }
    bundle_alloc(b, &cfg);
    im.loaded = xcalloc(b->tt.n, 1, "import flags");
    if (import_weights(&im, &w, index, e)) goto out;
    if (check_complete(&im, weights, e)) goto out;
    if (read_optional(dir, "tokenizer.json", &b->tokenizer_json, &b->tokenizer_json_len, e) ||
        read_optional(dir, "tokenizer_config.json", &b->tokenizer_config_json, &b->tokenizer_config_json_len, e) ||
        check_tokenizer_files(dir, b, e))
        goto out;
    rc = 0;
out:
    if (rc) bundle_free(b);
    weights_close(&w);
    free(text);
    free(im.loaded);
    free(im.tied_head);
    free(im.tied_head_file);
    free(cfg_path);
    free(single);
    free(index);
    return rc;
}
