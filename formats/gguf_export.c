// gguf_export.c: a whole model as a GGUF file for llama.cpp; see gguf_export.h.
#include "gguf_export.h"
#include <string.h>
#include "gguf_names.h"
#include "gguf_tokenizer.h"

static const struct { const char *name; uint32_t type; uint32_t file_type; } QUANTS[] = {
    {"f32", GGML_TYPE_F32, 0},   {"f16", GGML_TYPE_F16, 1},   {"bf16", GGML_TYPE_BF16, 32},
    {"q8_0", GGML_TYPE_Q8_0, 7}, {"q4_0", GGML_TYPE_Q4_0, 2}, {"q4_1", GGML_TYPE_Q4_1, 3},
};
#define N_QUANTS (int)(sizeof QUANTS / sizeof QUANTS[0])

int gguf_quant_type(const char *quant) {
    for (int i = 0; i < N_QUANTS; i++)
        if (strcmp(QUANTS[i].name, quant) == 0) return (int)QUANTS[i].type;
    return -1;
}

static void put_hparams(GgufWriter *w, const ModelConfig *c, const char *arch, uint32_t file_type) {
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_kv_str(w, "general.architecture", arch);
    gguf_kv_str(w, "general.type", "model");
    gguf_kv_str(w, "general.name", c->name[0] ? c->name : "pocket");
    gguf_kv_u32(w, "general.file_type", file_type);
    gguf_kv_u32(w, "general.quantization_version", 2);
    gguf_kv_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size);
    gguf_kv_u32(w, KEY("context_length"), (uint32_t)c->max_seq);
    gguf_kv_u32(w, KEY("embedding_length"), (uint32_t)c->d_model);
    gguf_kv_u32(w, KEY("block_count"), (uint32_t)c->n_layer);
    gguf_kv_u32(w, KEY("feed_forward_length"), (uint32_t)c->d_ff);
    gguf_kv_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_head);
    gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    gguf_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    gguf_kv_f32(w, KEY("rope.freq_base"), c->rope_theta);
    gguf_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->norm_eps);
    // The Dec decision head (model/choice_head.h): the token whose logit is a candidate's score.
    if (c->choice_id > 0) gguf_kv_u32(w, "pocket.choice_token_id", (uint32_t)c->choice_id);
#undef KEY
}

// Q4 blocks hold 32 weights of one int4 group.
static int check_group(int group, uint32_t type, const char *path, PtError *e) {
    if (group > 0 && group % GGML_QK == 0) return 0;
    return pt_fail(e, "%s: int4 group size %d is not a multiple of 32: %s blocks hold 32 weights of one group "
                      "(quantize with group 32, 64 or 128)", path, group, ggml_type_name(type));
}

// The int4 state must describe this model's table: every quantized tensor a
// 2-D row of it with the same shape.
static int check_int4(const ModelBundle *b, const QatState *q, uint32_t type, const char *path, PtError *e) {
    if (!q)
        return pt_fail(e, "%s: a %s export needs the int4 quantizer state (QAT scales or RTN from the weights)", path,
                       ggml_type_name(type));
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        if (qt->tensor < 0 || qt->tensor >= b->tt.n || b->tt.t[qt->tensor].ndim != 2 ||
            b->tt.t[qt->tensor].shape[0] != qt->rows || b->tt.t[qt->tensor].shape[1] != qt->cols)
            return pt_fail(e, "%s: the int4 quantizer state does not match the model's tensor table (tensor %d)", path,
                           qt->tensor);
    }
    return check_group(q->spec.group, type, path, e);
}

// Whether every block of 32 values is exactly a Q8_0 block (d * q with d the
// block's fp16 scale): then Q8_0 stores the matrix without loss, as it was
// stored in a GGUF it came from (a Q4_1 file's Q8_0 token embedding).
static int is_q8_0_exact(const float *x, uint64_t n) {
    if (n % GGML_QK) return 0;
    uint8_t block[GGML_Q8_0_BYTES];
    for (uint64_t b = 0; b < n; b += GGML_QK) {
        if (ggml_quant_q8_0(x + b, block)) return 0;
        uint16_t h;
        memcpy(&h, block, 2);
        float d = f16_to_f32(h);
        for (int j = 0; j < GGML_QK; j++)
            if ((float)(int8_t)block[2 + j] * d != x[b + (uint64_t)j]) return 0;
    }
    return 1;
}

// One matrix of a q4 export: its int4 blocks (int4 quantizes it) or floats
// (BF16 when bf16 is set, else F32; Q8_0 when its values are exactly Q8_0's). scale/zero rows follow the weights' rows
// (permuted with them for llama). The fp16 zero point of each group is
// appended to zero_hint (Q4_1).
static int add_int4_tensor(GgufWriter *w, const char *path, const char *name, const int64_t ne[2], uint32_t type,
                           const QatState *q, const QatTensor *qt, int bf16, const float *src, const float *scale,
                           const float *zero, uint8_t **bytes_out, uint16_t *zero_hint, uint64_t *n_hint,
                           GgufExportStats *st, PtError *e) {
    if (!qt) {   // as int4 mode runs it (cli/open_model.c): an untied embedding at bf16, the rest fp32
        st->n_int4_float++;
        int q8 = !bf16 && is_q8_0_exact(src, (uint64_t)ne[0] * (uint64_t)ne[1]);
        st->n_int4_q8_0 += q8;
        return gguf_add_tensor(w, name, 2, ne, q8 ? GGML_TYPE_Q8_0 : bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32, src, e);
    }
    uint64_t nbytes = ggml_row_bytes(type, (uint64_t)ne[0]) * (uint64_t)ne[1];
    uint8_t *bytes = xmalloc((size_t)nbytes, "Q4 blocks");
    char what[512];
    snprintf(what, sizeof what, "%s: tensor %s", path, name);
    if (gguf_encode_int4(type, &q->spec, src, ne[1], ne[0], scale, zero, bytes, &st->inexact_offset_blocks, what, e) ||
        gguf_add_tensor_bytes(w, name, 2, ne, type, bytes, nbytes, e)) {
        free(bytes);
        return -1;
    }
    *bytes_out = bytes;
    if (type == GGML_TYPE_Q4_1)
        for (size_t k = 0; k < qt->n_groups; k++) zero_hint[(*n_hint)++] = f32_to_f16(q->spec.symmetric ? 0.0f : zero[k]);
    st->n_quant++;
    st->int4_blocks += nbytes / (type == GGML_TYPE_Q4_1 ? GGML_Q4_1_BYTES : GGML_Q4_0_BYTES);
    return 0;
}

int gguf_export(const ModelBundle *b, const char *path, const char *quant, const QatState *int4,
                GgufExportStats *st, PtError *e) {
    int q = 0;
    while (q < N_QUANTS && strcmp(QUANTS[q].name, quant) != 0) q++;
    if (q == N_QUANTS) return pt_fail(e, "unknown GGUF quantization '%s' (f32, f16, bf16, q8_0, q4_0, q4_1)", quant);
    const ModelConfig *c = &b->cfg;
    const char *arch;
    if (gguf_arch(c, &arch, e)) return -1;
    int llama = strcmp(arch, "llama") == 0;
    const uint32_t qtype = QUANTS[q].type;
    const int is_int4 = qtype == GGML_TYPE_Q4_0 || qtype == GGML_TYPE_Q4_1;
    if (is_int4 && check_int4(b, int4, qtype, path, e)) return -1;
    GgufExportStats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    GgufWriter *w = gguf_writer_new();
    put_hparams(w, c, arch, QUANTS[q].file_type);
    float *permuted = NULL, *perm_scale = NULL, *perm_zero = NULL;
    uint8_t **blocks = xcalloc((size_t)b->tt.n, sizeof *blocks, "Q4 tensor list");
    uint16_t *zero_hint = is_int4 ? xmalloc((int4->total + 1) * sizeof(uint16_t), "zero points") : NULL;
    uint64_t n_hint = 0;
    int rc = gguf_tokenizer_put(w, b, e);
    if (rc) goto out;
    // llama.cpp's llama graph rotates interleaved pairs: q and k rows go in
    // permuted, and with them the rows of their int4 scales and zero points.
    size_t perm_floats = 0, perm_groups = 0;
    if (llama)
        for (int i = 0; i < b->tt.n; i++)
            if (b->tt.t[i].kind == T_WQ || b->tt.t[i].kind == T_WK) {
                perm_floats += b->tt.t[i].numel;
                const QatTensor *qt = is_int4 ? qat_find(int4, i) : NULL;
                if (qt) perm_groups += qt->n_groups;
            }
    permuted = perm_floats ? xmalloc(perm_floats * sizeof(float), "permuted q/k") : NULL;
    if (perm_groups) {
        perm_scale = xmalloc(perm_groups * sizeof(float), "permuted q/k scales");
        perm_zero = xmalloc(perm_groups * sizeof(float), "permuted q/k zero points");
    }
    size_t perm_used = 0, groups_used = 0;
    for (int i = 0; i < b->tt.n && rc == 0; i++) {
        const TensorInfo *ti = &b->tt.t[i];
        char name[GGUF_MAX_NAME];
        gguf_tensor_name(ti, name);
        int64_t ne[2] = {ti->ndim == 2 ? ti->shape[1] : ti->shape[0], ti->shape[0]};
        const float *src = b->params + ti->offset;
        const QatTensor *qt = is_int4 && ti->ndim == 2 ? qat_find(int4, i) : NULL;
        const float *scale = qt ? int4->scale + qt->offset : NULL, *zero = qt ? int4->zero + qt->offset : NULL;
        if (llama && (ti->kind == T_WQ || ti->kind == T_WK)) {
            int heads = ti->kind == T_WQ ? c->n_head : c->n_kv_head;
            gguf_llama_permute(src, permuted + perm_used, heads, c->head_dim, ne[0], 1);
            src = permuted + perm_used;
            perm_used += ti->numel;
            if (qt) {
                int64_t ng = qt->cols / int4->spec.group;
                gguf_llama_permute(scale, perm_scale + groups_used, heads, c->head_dim, ng, 1);
                gguf_llama_permute(zero, perm_zero + groups_used, heads, c->head_dim, ng, 1);
                scale = perm_scale + groups_used, zero = perm_zero + groups_used;
                groups_used += qt->n_groups;
            }
        }
        if (ti->ndim == 1) {
            st->n_norm++;
            rc = gguf_add_tensor(w, name, 1, ne, GGML_TYPE_F32, src, e);
        } else if (is_int4) {
            int bf16 = ti->kind == T_EMBED && !c->tied_embeddings;
            rc = add_int4_tensor(w, path, name, ne, qtype, int4, qt, bf16, src, scale, zero, &blocks[i], zero_hint, &n_hint,
                                 st, e);
        } else {
            uint32_t type = qtype;
            int block, block_bytes;
            ggml_type_geometry(type, &block, &block_bytes);
            if (ne[0] % block) type = GGML_TYPE_F16, st->n_fallback++;
            else st->n_quant++;
            rc = gguf_add_tensor(w, name, 2, ne, type, src, e);
        }
    }
    st->n_tensors = b->tt.n;
    if (rc == 0 && is_int4) {
        st->int4_group = int4->spec.group;
        gguf_kv_u32(w, "pocket.quantization.group_size", (uint32_t)int4->spec.group);
        gguf_kv_bool(w, "pocket.quantization.symmetric", int4->spec.symmetric);
        gguf_kv_u64(w, "pocket.quantization.inexact_offset_blocks", st->inexact_offset_blocks);
        if (st->inexact_offset_blocks) gguf_kv_arr_u16(w, "pocket.quantization.zero", zero_hint, n_hint);
    }
    if (rc == 0) rc = gguf_writer_save(w, path, e);
    if (rc == 0) st->bytes = gguf_writer_saved_bytes(w);
out:
    for (int i = 0; i < b->tt.n; i++) free(blocks[i]);
    free(blocks);
    free(zero_hint);
    free(permuted);
    free(perm_scale);
    free(perm_zero);
    gguf_writer_free(w);
    return rc;
}

int gguf_export_check(const ModelBundle *b, const char *path, const char *quant, const QuantSpec *int4, PtError *e) {
    const int type = gguf_quant_type(quant);
    if (type < 0) return pt_fail(e, "unknown GGUF quantization '%s' (f32, f16, bf16, q8_0, q4_0, q4_1)", quant);
    const char *arch;
    if (gguf_arch(&b->cfg, &arch, e)) return -1;
    if ((type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1) && int4 && check_group(int4->group, (uint32_t)type, path, e))
        return -1;
    GgufWriter *w = gguf_writer_new();   // the tokenizer's keys, made and dropped
    int rc = gguf_tokenizer_put(w, b, e);
    gguf_writer_free(w);
    return rc;
}
