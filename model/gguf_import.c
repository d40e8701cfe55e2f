// gguf_import.c: GGUF file -> ModelBundle; see gguf_import.h.
#include "gguf_import.h"
#include <string.h>
#include "../data/tokenizer.h"
#include "../export/gguf_tokenizer.h"

// An <arch>.<suffix> integer in [lo, 1<<30]; 0 when absent (then *out keeps its default).
static int arch_int(const GgufFile *f, const char *arch, const char *suffix, int lo, int required, int *out,
                    PtError *e) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    int found = gguf_get_int(f, key, &v, e);
    if (found < 0) return -1;
    if (!found) return required ? pt_fail(e, "%s: metadata key %s is missing", f->path, key) : 0;
    if (v < lo || v > (1 << 30))
        return pt_fail(e, "%s: metadata key %s = %lld is out of range [%d, 2^30]", f->path, key, (long long)v, lo);
    *out = (int)v;
    return 0;
}

static int arch_float(const GgufFile *f, const char *arch, const char *suffix, int required, float *out, PtError *e) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    int found = gguf_get_float(f, key, &v, e);
    if (found < 0) return -1;
    if (!found) return required ? pt_fail(e, "%s: metadata key %s is missing", f->path, key) : 0;
    if (!(v > 0 && v < 1e30)) return pt_fail(e, "%s: metadata key %s = %g must be positive", f->path, key, v);
    *out = (float)v;
    return 0;
}

// A token id key, -1 when absent.
static int token_id(const GgufFile *f, const char *key, int *out, PtError *e) {
    int64_t v;
    int found = gguf_get_int(f, key, &v, e);
    if (found < 0) return -1;
    *out = found ? (v >= 0 && v < (1 << 30) ? (int)v : -2) : -1;
    if (*out == -2) return pt_fail(e, "%s: %s = %lld is not a token id", f->path, key, (long long)v);
    return 0;
}

int gguf_config(const GgufFile *f, ModelConfig *c, PtError *e) {
    memset(c, 0, sizeof *c);
    const char *arch, *name;
    size_t len, name_len;
    int found = gguf_get_str(f, "general.architecture", &arch, &len, e);
    if (found < 0) return -1;
    if (!found) return pt_fail(e, "%s: metadata key general.architecture is missing", f->path);
    if (!(len == 5 && memcmp(arch, "qwen3", 5) == 0) && !(len == 5 && memcmp(arch, "llama", 5) == 0))
        return pt_fail(e, "%s: general.architecture \"%.*s\" is not supported (qwen3, llama)", f->path,
                       (int)(len > 40 ? 40 : len), arch);
    snprintf(c->model_type, sizeof c->model_type, "%.*s", (int)len, arch);
    const char *a = c->model_type;
    c->qk_norm = strcmp(a, "qwen3") == 0;
    found = gguf_get_str(f, "general.name", &name, &name_len, e);
    if (found < 0) return -1;
    snprintf(c->name, sizeof c->name, "%.*s", found ? (int)(name_len < 63 ? name_len : 63) : 4, found ? name : "gguf");
    c->max_seq = 2048;
    c->rope_theta = 10000.0f;
    c->init_std = 0.02f;
    c->n_kv_head = c->head_dim = c->vocab_size = -1;
    int value_len = -1, rot = -1;
    if (arch_int(f, a, "block_count", 1, 1, &c->n_layer, e) || arch_int(f, a, "embedding_length", 1, 1, &c->d_model, e) ||
        arch_int(f, a, "feed_forward_length", 1, 1, &c->d_ff, e) ||
        arch_int(f, a, "attention.head_count", 1, 1, &c->n_head, e) ||
        arch_int(f, a, "attention.head_count_kv", 1, 0, &c->n_kv_head, e) ||
        arch_int(f, a, "attention.key_length", 1, 0, &c->head_dim, e) ||
        arch_int(f, a, "attention.value_length", 1, 0, &value_len, e) ||
        arch_int(f, a, "rope.dimension_count", 1, 0, &rot, e) || arch_int(f, a, "context_length", 1, 0, &c->max_seq, e) ||
        arch_int(f, a, "vocab_size", 2, 0, &c->vocab_size, e) || arch_float(f, a, "rope.freq_base", 0, &c->rope_theta, e) ||
        arch_float(f, a, "attention.layer_norm_rms_epsilon", 1, &c->norm_eps, e))
        return -1;
    if (c->n_kv_head < 0) c->n_kv_head = c->n_head;
    if (c->head_dim < 0) c->head_dim = c->d_model / c->n_head;
    if (value_len >= 0 && value_len != c->head_dim)
        return pt_fail(e, "%s: %s.attention.value_length %d differs from key_length %d (not supported)", f->path, a,
                       value_len, c->head_dim);
    if (rot >= 0 && rot != c->head_dim)
        return pt_fail(e, "%s: %s.rope.dimension_count %d differs from the head size %d (partial RoPE is not supported)",
                       f->path, a, rot, c->head_dim);
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const char *scaling;
    size_t scaling_len;
    found = gguf_get_str(f, key, &scaling, &scaling_len, e);
    if (found < 0) return -1;
    if (found && !(scaling_len == 4 && memcmp(scaling, "none", 4) == 0))
        return pt_fail(e, "%s: %s \"%.*s\" is not supported (no RoPE scaling)", f->path, key,
                       (int)(scaling_len > 40 ? 40 : scaling_len), scaling);
    if (c->vocab_size < 0) {
        const GgufKV *tokens = gguf_find_kv(f, "tokenizer.ggml.tokens");
        const GgufTensor *emb = gguf_find_tensor(f, "token_embd.weight");
        if (tokens && tokens->type == GGUF_TYPE_ARRAY && tokens->arr_n <= (1u << 30)) c->vocab_size = (int)tokens->arr_n;
        else if (emb && emb->n_dims >= 2 && emb->ne[1] <= (1 << 30)) c->vocab_size = (int)emb->ne[1];
        else return pt_fail(e, "%s: the vocabulary size is unknown (no %s.vocab_size, tokens or token_embd)", f->path, a);
    }
    c->tied_embeddings = gguf_find_tensor(f, "output.weight") == NULL;
    if (token_id(f, "tokenizer.ggml.bos_token_id", &c->bos_id, e) ||
        token_id(f, "tokenizer.ggml.eos_token_id", &c->eos_id, e) ||
        token_id(f, "tokenizer.ggml.padding_token_id", &c->pad_id, e))
        return -1;
    return config_validate(c, f->path, e);
}

// The GGUF tensor of a table row, checked for shape and a convertible type.
static int match_tensor(const GgufFile *f, const TensorInfo *ti, const GgufTensor **out, PtError *e) {
    char name[GGUF_MAX_NAME];
    gguf_tensor_name(ti, name);
    const GgufTensor *t = gguf_find_tensor(f, name);
    if (!t) return pt_fail(e, "%s: tensor \"%s\" (%s) is missing", f->path, name, ti->name);
    int64_t want[GGUF_MAX_DIMS] = {1, 1, 1, 1};
    want[0] = ti->ndim == 2 ? ti->shape[1] : ti->shape[0];
    if (ti->ndim == 2) want[1] = ti->shape[0];
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (t->ne[d] != want[d])
            return pt_fail(e, "%s: tensor \"%s\" has ne [%lld, %lld, %lld, %lld], the metadata implies [%lld, %lld]",
                           f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3], (long long)want[0], (long long)want[1]);
    if (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16 &&
        t->type != GGML_TYPE_Q8_0 && t->type != GGML_TYPE_Q4_0 && t->type != GGML_TYPE_Q4_1)
        return pt_fail(e, "%s: tensor \"%s\" has type %s; import supports F32, F16, BF16, Q8_0, Q4_0 and Q4_1", f->path,
                       name, ggml_type_name(t->type));
    *out = t;
    return 0;
}

int gguf_import_file(const GgufFile *f, ModelBundle *b, PtError *e) {
    memset(b, 0, sizeof *b);
    ModelConfig cfg;
    if (gguf_config(f, &cfg, e)) return -1;
    TensorTable tt;
    tensor_table_build(&tt, &cfg);
    const GgufTensor **src = xcalloc((size_t)tt.n, sizeof *src, "tensor map");
    int rc = 0;
    for (int i = 0; i < tt.n && rc == 0; i++) rc = match_tensor(f, &tt.t[i], &src[i], e);
    // Every tensor in the file must be one of the table's.
    for (int64_t k = 0; k < f->n_tensors && rc == 0; k++) {
        int used = 0;
        for (int i = 0; i < tt.n && !used; i++) used = src[i] == &f->t[k];
        if (!used)
            rc = pt_fail(e, "%s: unexpected tensor \"%s\": not a parameter of the %s model the metadata describes "
                            "(refusing to drop weights)", f->path, f->t[k].name, cfg.model_type);
    }
    tensor_table_free(&tt);
    if (rc == 0) {
        char *tok = NULL, *tok_cfg = NULL;
        size_t tok_len = 0, tok_cfg_len = 0;
        rc = gguf_tokenizer_rebuild(f, cfg.vocab_size, &tok, &tok_len, &tok_cfg, &tok_cfg_len, e);
        Tokenizer *check = NULL;
        // The rebuilt file must load: a bad merge or token shows up here, naming the GGUF file.
        if (rc == 0 && tok && tokenizer_load(&check, tok, tok_len, f->path, e)) rc = -1;
        tokenizer_free(check);
        if (rc == 0) {
            bundle_alloc(b, &cfg);
            b->tokenizer_json = tok, b->tokenizer_json_len = tok_len;
            b->tokenizer_config_json = tok_cfg, b->tokenizer_config_json_len = tok_cfg_len;
        } else {
            free(tok);
            free(tok_cfg);
        }
    }
    float *scratch = NULL;
    for (int i = 0; rc == 0 && i < b->tt.n; i++) {
        const TensorInfo *ti = &b->tt.t[i];
        float *dst = b->params + ti->offset;
        int llama_qk = !cfg.qk_norm && (ti->kind == T_WQ || ti->kind == T_WK);
        if (llama_qk) scratch = xmalloc(ti->numel * sizeof(float), "q/k rows");
        rc = gguf_read_f32(f, src[i], llama_qk ? scratch : dst, e);
        if (rc == 0 && llama_qk)
            gguf_llama_permute(scratch, dst, ti->kind == T_WQ ? cfg.n_head : cfg.n_kv_head, cfg.head_dim,
                               ti->shape[1], 0);
        free(scratch);
        scratch = NULL;
    }
    free(src);
    if (rc) bundle_free(b);
    return rc;
}

int gguf_import(const char *path, ModelBundle *b, PtError *e) {
    memset(b, 0, sizeof *b);
    GgufFile f;
    if (gguf_open(&f, path, e)) return -1;
    int rc = gguf_import_file(&f, b, e);
    gguf_close(&f);
    return rc;
}
