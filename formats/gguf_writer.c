// gguf_writer.c: GGUF writer and block encoders; see gguf_writer.h.
#include "gguf_writer.h"
#include <math.h>
#include <string.h>
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
