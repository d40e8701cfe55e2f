// gguf_writer.c: GGUF writer, block encoders and the whole-model export; see
// gguf_writer.h.
#include "gguf_writer.h"
#include <math.h>
#include <string.h>
#include "gguf_names.h"
#include "gguf_tokenizer.h"
#include "../util/bytes.h"

static void put(Bytes *b, const void *src, size_t n) { bytes_put(b, src, n); }
static void put_u32(Bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(Bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(Bytes *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

typedef struct {
    char name[GGUF_MAX_NAME];
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    const float *src;       // fp32 values, encoded while writing
    const uint8_t *bytes;   // or bytes already in `type`
    uint64_t nbytes;
} PendingTensor;

struct GgufWriter {
    Bytes kv;               // the serialized pairs
    uint64_t n_kv;
    char **keys;
    PendingTensor *t;
    int n_t, cap_t;
    char err[512];          // first metadata misuse, reported by save
    uint64_t saved_bytes;   // the file's size after a successful save
};

GgufWriter *gguf_writer_new(void) { return xcalloc(1, sizeof(GgufWriter), "GGUF writer"); }

void gguf_writer_free(GgufWriter *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    free(w->kv.p);
    free(w->t);
    free(w);
}

// Starts a pair: checks the key, writes it and the value type.
static int begin_kv(GgufWriter *w, const char *key, uint32_t type) {
    if (w->err[0]) return -1;
    if (!*key) {
        snprintf(w->err, sizeof w->err, "empty metadata key");
        return -1;
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) {
            snprintf(w->err, sizeof w->err, "metadata key \"%.200s\" added twice", key);
            return -1;
        }
    char **keys = realloc(w->keys, (w->n_kv + 1) * sizeof *keys);
    if (!keys) die("out of memory for GGUF keys");
    w->keys = keys;
    w->keys[w->n_kv++] = xstrdup(key);
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, type);
    return 0;
}

void gguf_kv_u32(GgufWriter *w, const char *key, uint32_t v) {
    if (begin_kv(w, key, GGUF_TYPE_UINT32) == 0) put_u32(&w->kv, v);
}
void gguf_kv_i32(GgufWriter *w, const char *key, int32_t v) {
    if (begin_kv(w, key, GGUF_TYPE_INT32) == 0) put(&w->kv, &v, 4);
}
void gguf_kv_u64(GgufWriter *w, const char *key, uint64_t v) {
    if (begin_kv(w, key, GGUF_TYPE_UINT64) == 0) put_u64(&w->kv, v);
}
void gguf_kv_f32(GgufWriter *w, const char *key, float v) {
    if (begin_kv(w, key, GGUF_TYPE_FLOAT32) == 0) put(&w->kv, &v, 4);
}
void gguf_kv_bool(GgufWriter *w, const char *key, int v) {
    uint8_t b = v != 0;
    if (begin_kv(w, key, GGUF_TYPE_BOOL) == 0) put(&w->kv, &b, 1);
}
void gguf_kv_strn(GgufWriter *w, const char *key, const char *s, size_t len) {
    if (begin_kv(w, key, GGUF_TYPE_STRING) == 0) put_str(&w->kv, s, len);
}
void gguf_kv_str(GgufWriter *w, const char *key, const char *s) { gguf_kv_strn(w, key, s, strlen(s)); }

static int begin_array(GgufWriter *w, const char *key, uint32_t elem_type, uint64_t n) {
    if (n == 0 && !w->err[0]) snprintf(w->err, sizeof w->err, "metadata array \"%.200s\" is empty", key);
    if (begin_kv(w, key, GGUF_TYPE_ARRAY)) return -1;
    put_u32(&w->kv, elem_type);
    put_u64(&w->kv, n);
    return 0;
}

void gguf_kv_arr_str(GgufWriter *w, const char *key, const char *const *s, const size_t *lens, uint64_t n) {
    if (begin_array(w, key, GGUF_TYPE_STRING, n)) return;
    for (uint64_t i = 0; i < n; i++) put_str(&w->kv, s[i], lens ? lens[i] : strlen(s[i]));
}
void gguf_kv_arr_u16(GgufWriter *w, const char *key, const uint16_t *v, uint64_t n) {
    if (begin_array(w, key, GGUF_TYPE_UINT16, n) == 0) put(&w->kv, v, n * 2);
}
void gguf_kv_arr_i32(GgufWriter *w, const char *key, const int32_t *v, uint64_t n) {
    if (begin_array(w, key, GGUF_TYPE_INT32, n) == 0) put(&w->kv, v, n * 4);
}
void gguf_kv_arr_f32(GgufWriter *w, const char *key, const float *v, uint64_t n) {
    if (begin_array(w, key, GGUF_TYPE_FLOAT32, n) == 0) put(&w->kv, v, n * 4);
}

// Types encoded from fp32 values here; Q4_0/Q4_1 come from gguf_encode_int4.
static int is_writable_type(uint32_t type) {
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_Q8_0;
}

static int add_pending(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type, PtError *e,
                       PendingTensor **out) {
    int be, bb;
    if (!*name || strlen(name) >= GGUF_MAX_NAME)
        return pt_fail(e, "tensor name \"%s\" must be 1..%d bytes", name, GGUF_MAX_NAME - 1);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return pt_fail(e, "tensor \"%s\": %d dimensions (1..4)", name, n_dims);
    if (ggml_type_geometry(type, &be, &bb)) return pt_fail(e, "tensor \"%s\": unknown ggml type %u", name, type);
    if (ne[0] % be)
        return pt_fail(e, "tensor \"%s\": ne[0] = %lld is not a multiple of %s's block size %d", name, (long long)ne[0],
                       ggml_type_name(type), be);
    for (int i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return pt_fail(e, "tensor \"%s\" added twice", name);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = realloc(w->t, (size_t)w->cap_t * sizeof *w->t);
        if (!w->t) die("out of memory for GGUF tensor list");
    }
    PendingTensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    uint64_t numel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        numel *= (uint64_t)t->ne[d];
    }
    t->type = type;
    t->nbytes = numel / (uint64_t)be * (uint64_t)bb;
    *out = t;
    return 0;
}

int gguf_add_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type, const float *data,
                    PtError *e) {
    if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1)
        return pt_fail(e, "tensor \"%s\": %s codes come from the int4 quantizer (gguf_encode_int4), not from fp32 values",
                       name, ggml_type_name(type));
    if (!is_writable_type(type))
        return pt_fail(e, "tensor \"%s\": cannot encode fp32 values as %s", name,
                       ggml_type_name(type) ? ggml_type_name(type) : "an unknown type");
    PendingTensor *t = NULL;
    if (add_pending(w, name, n_dims, ne, type, e, &t)) return -1;
    t->src = data;
    return 0;
}

int gguf_add_tensor_bytes(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type,
                          const void *bytes, uint64_t nbytes, PtError *e) {
    PendingTensor *t = NULL;
    if (add_pending(w, name, n_dims, ne, type, e, &t)) return -1;
    if (t->nbytes != nbytes) {
        w->n_t--;
        return pt_fail(e, "tensor \"%s\": %llu bytes given, its shape and type need %llu", name,
                       (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    }
    t->bytes = bytes;
    return 0;
}

// ---- block encoders -----------------------------------------------------------------

static int store_f16(uint8_t *p, float v) {
    uint16_t h = f32_to_f16(v);
    memcpy(p, &h, 2);
    return isinf(f16_to_f32(h)) && !isinf(v) ? -1 : 0;
}

int ggml_quant_q8_0(const float *x, uint8_t *block) {
    float amax = 0;
    for (int j = 0; j < GGML_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < GGML_QK; j++) block[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    return store_f16(block, d);
}

int ggml_quant_row(uint32_t type, const float *x, uint8_t *out, uint64_t n, uint64_t *bad) {
    int (*block_fn)(const float *, uint8_t *) = NULL;
    int block_bytes = 0;
    switch (type) {
    case GGML_TYPE_F32: memcpy(out, x, n * sizeof(float)); return 0;
    case GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(x[i]);
            memcpy(out + 2 * i, &h, 2);
        }
        return 0;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; i++)
            if (store_f16(out + 2 * i, x[i])) return *bad = i, -1;
        return 0;
    case GGML_TYPE_Q8_0: block_fn = ggml_quant_q8_0, block_bytes = GGML_Q8_0_BYTES; break;
    default: return *bad = 0, -1;
    }
    for (uint64_t b = 0; b < n / GGML_QK; b++)
        if (block_fn(x + b * GGML_QK, out + b * (uint64_t)block_bytes)) return *bad = b * GGML_QK, -1;
    return 0;
}

// One group's blocks: G/32 blocks of 32 codes, each with d (and m for Q4_1).
// Byte j of a block holds element j (low nibble) and element j+16 (high).
static void put_int4_group(uint8_t *out, int block_bytes, int n_blocks, uint16_t d, int has_m, uint16_t m,
                           const uint8_t *codes) {
    for (int b = 0; b < n_blocks; b++, out += block_bytes, codes += GGML_QK) {
        memcpy(out, &d, 2);
        if (has_m) memcpy(out + 2, &m, 2);
        uint8_t *qs = out + (has_m ? 4 : 2);
        for (int j = 0; j < GGML_QK / 2; j++) qs[j] = (uint8_t)((codes[j] & 15u) | (codes[j + GGML_QK / 2] & 15u) << 4);
    }
}

int gguf_encode_int4(uint32_t type, const QuantSpec *spec, const float *w, int64_t rows, int64_t cols,
                     const float *scale, const float *zero, uint8_t *out, uint64_t *inexact_blocks,
                     const char *what, PtError *e) {
    if (type != GGML_TYPE_Q4_0 && type != GGML_TYPE_Q4_1)
        return pt_fail(e, "%s: int4 weights are written as Q4_0 or Q4_1, not %s", what,
                       ggml_type_name(type) ? ggml_type_name(type) : "an unknown type");
    if (spec->group <= 0 || spec->group % GGML_QK)
        return pt_fail(e, "%s: int4 group size %d is not a multiple of 32 (a %s block holds 32 weights of one "
                          "group; use group 32, 64 or 128)", what, spec->group, ggml_type_name(type));
    if (quant_check(spec, rows, cols, what, e)) return -1;
    const int q4_1 = type == GGML_TYPE_Q4_1, G = spec->group, per_group = G / GGML_QK;
    const int block_bytes = q4_1 ? GGML_Q4_1_BYTES : GGML_Q4_0_BYTES;
    const int64_t ng = cols / G;
    // Codes a chunk of rows at a time, so the embedding never needs a byte per weight at once.
    int64_t chunk = ((int64_t)1 << 22) / cols + 1;
    if (chunk > rows) chunk = rows;
    uint8_t *codes = xmalloc((size_t)(chunk * cols), "int4 codes");
    uint64_t inexact = 0;
    int rc = 0;
    for (int64_t r0 = 0; r0 < rows && rc == 0; r0 += chunk) {
        int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
        quant_codes(spec, w + r0 * cols, n, cols, scale + r0 * ng, zero ? zero + r0 * ng : NULL, codes);
        for (int64_t r = r0; r < r0 + n && rc == 0; r++)
            for (int64_t g = 0; g < ng; g++) {
                size_t k = (size_t)(r * ng + g);
                float s = scale[k], z = (spec->symmetric || !zero) ? 0.0f : zero[k];
                uint16_t d = f32_to_f16(s), m = 0;
                if (!(s >= 0.0f) || f16_to_f32(d) != s) {
                    rc = pt_fail(e, "%s: row %lld, group %lld: scale %g is not a non-negative fp16 value", what,
                                 (long long)r, (long long)g, s);
                    break;
                }
                if (!q4_1 && z != 0.0f) {
                    rc = pt_fail(e, "%s: row %lld, group %lld: zero point %g; Q4_0 holds w = (u-8)*d only, so it "
                                    "needs a symmetric int4 state (export q4_1 instead)", what, (long long)r,
                                 (long long)g, z);
                    break;
                }
                if (q4_1) {
                    int exact;
                    m = ggml_q4_1_offset(s, z, &exact);
                    if (isinf(f16_to_f32(m))) {
                        rc = pt_fail(e, "%s: row %lld, group %lld: offset zero - 8*scale = %g is beyond the fp16 range",
                                     what, (long long)r, (long long)g, z - 8.0f * s);
                        break;
                    }
                    if (!exact) inexact += (uint64_t)per_group;
                }
                put_int4_group(out + k * (size_t)per_group * block_bytes, block_bytes, per_group, d, q4_1, m,
                               codes + (r - r0) * cols + g * G);
            }
    }
    free(codes);
    if (rc == 0 && inexact_blocks) *inexact_blocks += inexact;
    return rc;
}

// ---- the file ---------------------------------------------------------------------

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static void write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        fwrite(zeros, 1, k, f);
        n -= k;
    }
}

// Encodes a tensor a chunk of rows at a time.
static int write_tensor(FILE *f, const PendingTensor *t, const char *path, PtError *e) {
    if (t->bytes || t->nbytes == 0) {
        if (t->nbytes) fwrite(t->bytes, 1, t->nbytes, f);
        return 0;
    }
    uint64_t row = (uint64_t)t->ne[0], rows = t->nbytes / ggml_row_bytes(t->type, row);
    uint64_t row_bytes = ggml_row_bytes(t->type, row);
    uint64_t chunk = (1u << 20) / (row_bytes ? row_bytes : 1) + 1;
    uint8_t *buf = xmalloc((size_t)(chunk * row_bytes), "GGUF encode buffer");
    int rc = 0;
    for (uint64_t r = 0; r < rows && rc == 0; r += chunk) {
        uint64_t n = rows - r < chunk ? rows - r : chunk, bad;
        if (ggml_quant_row(t->type, t->src + r * row, buf, n * row, &bad)) {
            rc = pt_fail(e, "%s: tensor \"%s\": value %g at index %llu does not fit the fp16 %s of %s", path, t->name,
                         t->src[r * row + bad], (unsigned long long)(r * row + bad),
                         t->type == GGML_TYPE_F16 ? "format" : "scale", ggml_type_name(t->type));
            break;
        }
        fwrite(buf, 1, (size_t)(n * row_bytes), f);
    }
    free(buf);
    return rc;
}

int gguf_writer_save(GgufWriter *w, const char *path, PtError *e) {
    if (w->err[0]) return pt_fail(e, "%s: %s", path, w->err);
    Bytes head = {0};
    put(&head, GGUF_MAGIC, 4);
    put_u32(&head, GGUF_VERSION);
    put_u64(&head, (uint64_t)w->n_t);
    put_u64(&head, w->n_kv);
    put(&head, w->kv.p, w->kv.len);
    uint64_t offset = 0;
    for (int i = 0; i < w->n_t; i++) {
        const PendingTensor *t = &w->t[i];
        put_str(&head, t->name, strlen(t->name));
        put_u32(&head, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(&head, (uint64_t)t->ne[d]);
        put_u32(&head, t->type);
        put_u64(&head, offset);
        offset += pad_to(t->nbytes, GGUF_DEFAULT_ALIGNMENT);
    }
    AtomicFile af;
    if (atomic_open(&af, path, e)) {
        free(head.p);
        return -1;
    }
    fwrite(head.p, 1, head.len, af.f);
    write_zeros(af.f, pad_to(head.len, GGUF_DEFAULT_ALIGNMENT) - head.len);
    const uint64_t bytes = pad_to(head.len, GGUF_DEFAULT_ALIGNMENT) + offset;
    free(head.p);
    for (int i = 0; i < w->n_t; i++) {
        if (write_tensor(af.f, &w->t[i], path, e)) {
            atomic_abort(&af);
            return -1;
        }
        write_zeros(af.f, pad_to(w->t[i].nbytes, GGUF_DEFAULT_ALIGNMENT) - w->t[i].nbytes);
    }
    if (atomic_commit(&af, e)) return -1;
    w->saved_bytes = bytes;
    return 0;
}

uint64_t gguf_writer_saved_bytes(const GgufWriter *w) { return w->saved_bytes; }

// ---- whole-model export -------------------------------------------------------------

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
    if (q->spec.group <= 0 || q->spec.group % GGML_QK)
        return pt_fail(e, "%s: int4 group size %d is not a multiple of 32: %s blocks hold 32 weights of one group "
                          "(quantize with group 32, 64 or 128)", path, q->spec.group, ggml_type_name(type));
    return 0;
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

int gguf_arch(const ModelConfig *c, const char **arch, PtError *e) {
    int llama = strcmp(c->model_type, "llama") == 0;
    if (!llama && strcmp(c->model_type, "qwen3") != 0)
        return pt_fail(e, "model_type \"%s\" has no GGUF architecture here (qwen3, llama)", c->model_type);
    if (llama && c->qk_norm) return pt_fail(e, "a llama model with q/k norms has no llama.cpp architecture");
    if (!llama && !c->qk_norm) return pt_fail(e, "a qwen3 model without q/k norms has no llama.cpp architecture");
    *arch = llama ? "llama" : "qwen3";
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
