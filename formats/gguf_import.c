// gguf_import.c: GGUF file -> ModelBundle; see gguf_import.h.
#include "gguf_import.h"
#include <math.h>
#include <string.h>
#include "../data/tokenizer.h"
#include "gguf_names.h"
#include "gguf_tokenizer.h"

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
        token_id(f, "tokenizer.ggml.padding_token_id", &c->pad_id, e) ||
        token_id(f, "pocket.choice_token_id", &c->choice_id, e))
        return -1;
    if (c->choice_id < 0) c->choice_id = 0;   // absent: no decision head
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

// ---- the int4 quantizer state of Q4_0 / Q4_1 matrices -------------------------------

static int is_q4(const GgufTensor *t) { return t->type == GGML_TYPE_Q4_0 || t->type == GGML_TYPE_Q4_1; }
static int q4_block_bytes(const GgufTensor *t) { return t->type == GGML_TYPE_Q4_1 ? GGML_Q4_1_BYTES : GGML_Q4_0_BYTES; }

static uint16_t u16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

// 1 when in every row of t each group of G weights has one d (and m) across its G/32 blocks.
static int blocks_share_params(const GgufFile *f, const GgufTensor *t, int64_t G) {
    if (G <= 0 || G > (1 << 20) || G % GGML_QK || t->ne[0] % G) return 0;
    const int bb = q4_block_bytes(t), param_bytes = t->type == GGML_TYPE_Q4_1 ? 4 : 2;
    const uint8_t *p = f->data + f->data_offset + t->offset;
    const uint64_t per_group = (uint64_t)G / GGML_QK, n_groups = t->numel / (uint64_t)G;
    for (uint64_t g = 0; g < n_groups; g++) {
        const uint8_t *first = p + g * per_group * bb;
        for (uint64_t k = 1; k < per_group; k++)
            if (memcmp(first, first + k * bb, (size_t)param_bytes)) return 0;
    }
    return 1;
}

// fp16 patterns in value order (key 0 = zero, negative keys = negative values).
static int f16_key(uint16_t h) { return h & 0x8000 ? -(int)(h & 0x7FFF) : (int)h; }
static uint16_t f16_of_key(int k) { return k < 0 ? (uint16_t)(0x8000 | -k) : (uint16_t)k; }
#define F16_MAX_KEY 0x7BFF   // 65504
#define ZERO_SEARCH 16       // fp16 steps tried on each side of m + 8*d

static int same_offset(float d, float zero, uint16_t m) {
    int exact;
    return f16_to_f32(ggml_q4_1_offset(d, zero, &exact)) == f16_to_f32(m);
}

// The zero point of a Q4_1 group with scale d >= 0 and offset m: the fp16
// value nearest m + 8*d whose offset is m. -1 (and *zero the nearest fp16 to
// m + 8*d) when there is none.
static int zero_for_offset(float d, uint16_t m, float *zero) {
    float target = f16_to_f32(m) + 8.0f * d;
    int k0 = f16_key(f32_to_f16(target));
    if (k0 > F16_MAX_KEY) k0 = F16_MAX_KEY;
    if (k0 < -F16_MAX_KEY) k0 = -F16_MAX_KEY;
    *zero = f16_to_f32(f16_of_key(k0));
    if (same_offset(d, *zero, m)) return 0;
    float best = INFINITY;
    for (int k = k0 - ZERO_SEARCH; k <= k0 + ZERO_SEARCH; k++) {
        if (k < -F16_MAX_KEY || k > F16_MAX_KEY) continue;
        float z = f16_to_f32(f16_of_key(k));
        if (same_offset(d, z, m) && fabsf(z - target) < best) best = fabsf(z - target), *zero = z;
    }
    return best < INFINITY ? 0 : -1;
}

// One Q4 matrix (GGUF row order) into weights w, scale and zero [rows, cols/G];
// returns the number of groups no (scale, zero) reproduces. hint (may be
// NULL): the exporter's zero points of this tensor's groups, from element at.
static uint64_t decode_int4(const GgufFile *f, const GgufTensor *t, const QuantSpec *spec, const GgufKV *hint,
                            uint64_t at, float *w, float *scale, float *zero) {
    const int q4_1 = t->type == GGML_TYPE_Q4_1, bb = q4_block_bytes(t), G = spec->group;
    const uint8_t *p = f->data + f->data_offset + t->offset;
    const uint64_t n_groups = t->numel / (uint64_t)G;
    uint64_t inexact = 0;
    for (uint64_t g = 0; g < n_groups; g++) {
        const uint8_t *blk = p + g * (uint64_t)(G / GGML_QK) * bb;
        const uint16_t mh = q4_1 ? u16_at(blk + 2) : 0;
        const float d = f16_to_f32(u16_at(blk)), m = f16_to_f32(mh);
        float s = fabsf(d), z = 0.0f, hz = hint ? f16_to_f32((uint16_t)gguf_arr_int(hint, at + g)) : NAN;
        int exact = 1, flip = 0;
        if (!isfinite(d) || !isfinite(m)) {
            s = 0.0f, exact = 0;
        } else if (!q4_1) {
            // (q-8)*d; a negative d (llama.cpp's own rounding) is ((15-q)-8)*|d| + |d|.
            z = d < 0 ? s : 0.0f, flip = d < 0;
        } else if (d < 0) {
            exact = 0;
            z = f16_to_f32(f32_to_f16(fminf(fmaxf(m + 8.0f * s, -65504.0f), 65504.0f)));
        } else if (isfinite(hz) && same_offset(s, hz, mh)) {
            z = hz;
        } else {
            exact = zero_for_offset(s, mh, &z) == 0;
        }
        scale[g] = s;
        zero[g] = spec->symmetric ? 0.0f : z;
        inexact += !exact;
        for (int i = 0; i < G; i++) {
            const uint8_t *qs = blk + (i / GGML_QK) * bb + (q4_1 ? 4 : 2);
            int j = i % GGML_QK, q = j < GGML_QK / 2 ? qs[j] & 15 : qs[j - GGML_QK / 2] >> 4;
            float x;
            if (!exact) x = q4_1 ? (float)q * d + m : (float)(q - 8) * d;   // GGUF's own formula
            else {
                x = ((float)(flip ? 15 - q : q) - (float)QUANT_CODE_MID) * s;   // the quantizer's formula
                if (!spec->symmetric) x += z;
            }
            w[g * (uint64_t)G + (uint64_t)i] = x;
        }
    }
    return inexact;
}

// The exporter's zero points (pocket.quantization.zero, one per group of
// every Q4_1 tensor in file order); NULL when absent or not of that length.
static const GgufKV *zero_hints(const GgufFile *f, int G) {
    const GgufKV *kv = gguf_find_kv(f, "pocket.quantization.zero");
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_UINT16) return NULL;
    uint64_t n = 0;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (f->t[i].type == GGML_TYPE_Q4_1) n += f->t[i].numel / (uint64_t)G;
    return kv->arr_n == n ? kv : NULL;
}

// Index of tensor t's first group in that array.
static uint64_t hint_start(const GgufFile *f, const GgufTensor *t, int G) {
    uint64_t at = 0;
    for (int64_t i = 0; i < f->n_tensors && &f->t[i] != t; i++)
        if (f->t[i].type == GGML_TYPE_Q4_1) at += f->t[i].numel / (uint64_t)G;
    return at;
}

// A symmetric state (zero = 0, codes 1..15) fits when every block has d >= 0,
// no code 0 and, for Q4_1, the offset of zero 0: m = fp16(-8d).
static int fits_symmetric(const GgufFile *f, const GgufTensor **q4, int n) {
    for (int k = 0; k < n; k++) {
        const int q4_1 = q4[k]->type == GGML_TYPE_Q4_1, bb = q4_block_bytes(q4[k]), qs = q4_1 ? 4 : 2;
        const uint8_t *p = f->data + f->data_offset + q4[k]->offset;
        for (uint64_t b = 0; b < q4[k]->numel / GGML_QK; b++, p += bb) {
            float d = f16_to_f32(u16_at(p));
            int exact;
            if (u16_at(p) & 0x8000 || !isfinite(d) || (q4_1 && u16_at(p + 2) != ggml_q4_1_offset(d, 0.0f, &exact)))
                return 0;
            for (int j = 0; j < GGML_QK / 2; j++)
                if (!(p[qs + j] & 0x0F) || !(p[qs + j] & 0xF0)) return 0;
        }
    }
    return 1;
}

// Symmetric when pocket.quantization.symmetric says so, or (without it) when
// every Q4 matrix is Q4_0 - and in both cases the blocks fit.
static int int4_symmetric(const GgufFile *f, const GgufTensor **q4, int n, PtError *e) {
    int sym;
    int found = gguf_get_bool(f, "pocket.quantization.symmetric", &sym, e);
    if (found < 0) return -1;
    if (!found) {
        sym = 1;
        for (int k = 0; k < n; k++) sym &= q4[k]->type == GGML_TYPE_Q4_0;
    }
    return sym && fits_symmetric(f, q4, n);
}

// The group size (see gguf_import.h).
static int int4_group(const GgufFile *f, const GgufTensor **q4, int n, int *from_metadata, PtError *e) {
    int64_t g;
    int found = gguf_get_int(f, "pocket.quantization.group_size", &g, e);
    if (found < 0) return -1;
    static const int64_t TRY[] = {128, 64, 32};
    for (int c = found ? -1 : 0; c < 3; c++) {
        int64_t G = c < 0 ? g : TRY[c];
        int ok = 1;
        for (int k = 0; k < n && ok; k++) ok = blocks_share_params(f, q4[k], G);
        if (ok) {
            *from_metadata = c < 0;
            return (int)G;
        }
    }
    *from_metadata = 0;
    return GGML_QK;
}

// Restores the state of the Q4 matrices of b (already read as d*q + m) and
// rewrites their weights by the quantizer's formula.
static int restore_int4(const GgufFile *f, ModelBundle *b, const GgufTensor **src, GgufInt4Import *out,
                        PtError *e) {
    memset(out, 0, sizeof *out);
    const TensorTable *tt = &b->tt;
    const GgufTensor **q4 = xcalloc((size_t)tt->n, sizeof *q4, "Q4 tensors");
    int quant_embedding = 0;
    for (int i = 0; i < tt->n; i++)
        if (tt->t[i].ndim == 2 && is_q4(src[i])) {
            q4[out->n_q4++] = src[i];
            if (tt->t[i].flags & TF_EMBED) quant_embedding = 1;
        }
    int rc = 0;
    if (out->n_q4 == 0) goto done;
    QuantSpec spec = {.symmetric = int4_symmetric(f, q4, out->n_q4, e)};
    spec.group = spec.symmetric < 0 ? -1 : int4_group(f, q4, out->n_q4, &out->group_from_metadata, e);
    if (spec.group < 0 || qat_init(&out->q, tt, &spec, quant_embedding, 0, f->path, e)) {
        rc = -1;
        goto done;
    }
    const GgufKV *hint = zero_hints(f, spec.group);
    float *scratch = NULL, *scratch_s = NULL, *scratch_z = NULL;
    for (int k = 0; k < out->q.n && rc == 0; k++) {
        const QatTensor *qt = &out->q.t[k];
        const TensorInfo *ti = &tt->t[qt->tensor];
        float *w = b->params + ti->offset, *s = out->q.scale + qt->offset, *z = out->q.zero + qt->offset;
        if (!is_q4(src[qt->tensor])) {
            char what[256];
            snprintf(what, sizeof what, "%s: tensor %s", f->path, ti->name);
            rc = quant_init_rtn(&spec, w, qt->rows, qt->cols, s, z, what, e);
            out->n_rtn++;
            continue;
        }
        int llama_qk = !b->cfg.qk_norm && (ti->kind == T_WQ || ti->kind == T_WK);
        if (llama_qk) {   // decode in GGUF row order, then un-permute like the weights
            scratch = xmalloc(ti->numel * sizeof(float), "q/k rows");
            scratch_s = xmalloc(qt->n_groups * sizeof(float), "q/k scales");
            scratch_z = xmalloc(qt->n_groups * sizeof(float), "q/k zero points");
        }
        out->inexact_groups += decode_int4(f, src[qt->tensor], &spec, hint, hint_start(f, src[qt->tensor], spec.group),
                                           llama_qk ? scratch : w, llama_qk ? scratch_s : s, llama_qk ? scratch_z : z);
        out->groups += qt->n_groups;
        if (llama_qk) {
            int heads = ti->kind == T_WQ ? b->cfg.n_head : b->cfg.n_kv_head;
            int64_t ng = qt->cols / spec.group;
            gguf_llama_permute(scratch, w, heads, b->cfg.head_dim, qt->cols, 0);
            gguf_llama_permute(scratch_s, s, heads, b->cfg.head_dim, ng, 0);
            gguf_llama_permute(scratch_z, z, heads, b->cfg.head_dim, ng, 0);
            free(scratch), free(scratch_s), free(scratch_z);
            scratch = scratch_s = scratch_z = NULL;
        }
    }
    if (rc) qat_free(&out->q);
    else out->restored = 1;
done:
    free(q4);
    return rc;
}

// ---- the whole file -------------------------------------------------------------------

int gguf_import_file_int4(const GgufFile *f, ModelBundle *b, GgufInt4Import *int4, PtError *e) {
    memset(b, 0, sizeof *b);
    if (int4) memset(int4, 0, sizeof *int4);
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
    GgufInt4Import local = {0};
    if (!int4) int4 = &local;
    if (rc == 0) rc = restore_int4(f, b, src, int4, e);
    if (int4 == &local && local.restored) qat_free(&local.q);
    free(src);
    if (rc) bundle_free(b);
    return rc;
}


int gguf_import_int4(const char *path, ModelBundle *b, GgufInt4Import *int4, PtError *e) {
    memset(b, 0, sizeof *b);
    if (int4) memset(int4, 0, sizeof *int4);
    GgufFile f;
    if (gguf_open(&f, path, e)) return -1;
    int rc = gguf_import_file_int4(&f, b, int4, e);
    gguf_close(&f);
    return rc;
}

int gguf_import(const char *path, ModelBundle *b, PtError *e) { return gguf_import_int4(path, b, NULL, e); }
