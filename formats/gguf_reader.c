// gguf_reader.c: GGUF parsing, typed lookups, dequantization, inspect; see
// gguf_reader.h. Little-endian hosts only (as the files are little-endian);
// every multi-byte load goes through memcpy since nothing in a GGUF file
// needs to be aligned for the host.
#include "gguf_reader.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// ggml's own caps on one string and one array.
#define GGUF_MAX_STRING (1ull << 30)
#define GGUF_MAX_ARRAY (1ull << 30)

// ---- type tables ---------------------------------------------------------------

static const struct { const char *name; int size; } VALUE_TYPES[GGUF_TYPE_COUNT] = {
    {"UINT8", 1}, {"INT8", 1}, {"UINT16", 2}, {"INT16", 2}, {"UINT32", 4}, {"INT32", 4}, {"FLOAT32", 4},
    {"BOOL", 1}, {"STRING", 0}, {"ARRAY", 0}, {"UINT64", 8}, {"INT64", 8}, {"FLOAT64", 8},
};

const char *gguf_value_type_name(uint32_t type) { return type < GGUF_TYPE_COUNT ? VALUE_TYPES[type].name : "?"; }

// ggml types by id: name, elements per block, bytes per block. Only the first
// six convert; the rest are known so that other files parse and inspect.
static const struct { uint32_t id; const char *name; int block, bytes; } GGML_TYPES[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {8, "Q8_0", 32, 34},     {30, "BF16", 1, 2},       {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},
    {9, "Q8_1", 32, 36},     {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},
    {13, "Q5_K", 256, 176},  {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},
    {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},
    {25, "I16", 1, 2},       {26, "I32", 1, 4},        {27, "I64", 1, 8},       {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},  {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
};
#define N_GGML_TYPES (int)(sizeof GGML_TYPES / sizeof GGML_TYPES[0])

static int ggml_type_index(uint32_t type) {
    for (int i = 0; i < N_GGML_TYPES; i++)
        if (GGML_TYPES[i].id == type) return i;
    return -1;
}

const char *ggml_type_name(uint32_t type) {
    int i = ggml_type_index(type);
    return i < 0 ? NULL : GGML_TYPES[i].name;
}

int ggml_type_geometry(uint32_t type, int *block_elems, int *block_bytes) {
    int i = ggml_type_index(type);
    if (i < 0) return -1;
    *block_elems = GGML_TYPES[i].block;
    *block_bytes = GGML_TYPES[i].bytes;
    return 0;
}

uint64_t ggml_row_bytes(uint32_t type, uint64_t n) {
    int be, bb;
    if (ggml_type_geometry(type, &be, &bb)) return 0;
    return n / (uint64_t)be * (uint64_t)bb;
}

// ---- the cursor: bounds-checked reads --------------------------------------------

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *path;
    PtError *e;
} Cursor;

static int need(Cursor *c, uint64_t n, const char *what) {
    if (n > c->len - c->pos)
        return pt_fail(c->e, "%s: offset %zu: %s needs %llu bytes but the file ends after %zu more (truncated?)",
                       c->path, c->pos, what, (unsigned long long)n, c->len - c->pos);
    return 0;
}

static int rd_u32(Cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(Cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}

// A string: its bytes stay in the file; *len is checked against what is left.
static int rd_str(Cursor *c, const uint8_t **s, uint64_t *len, const char *what) {
    size_t at = c->pos;
    if (rd_u64(c, len, what)) return -1;
    if (*len > GGUF_MAX_STRING || *len > c->len - c->pos)
        return pt_fail(c->e, "%s: offset %zu: %s has length %llu, past the end of the file (%zu bytes left)", c->path,
                       at, what, (unsigned long long)*len, c->len - c->pos);
    *s = c->p + c->pos;
    c->pos += *len;
    return 0;
}

// A NUL-terminated copy of a string that must not hold NUL itself.
static int rd_name(Cursor *c, char **out, const char *what) {
    size_t at = c->pos;
    const uint8_t *s = NULL;
    uint64_t len = 0;
    if (rd_str(c, &s, &len, what)) return -1;
    if (len == 0) return pt_fail(c->e, "%s: offset %zu: %s is empty", c->path, at, what);
    if (memchr(s, 0, len)) return pt_fail(c->e, "%s: offset %zu: %s contains a NUL byte", c->path, at, what);
    *out = xmalloc(len + 1, what);
    memcpy(*out, s, len);
    (*out)[len] = 0;
    return 0;
}

static uint64_t load_scalar_u(const uint8_t *p, int size) {
    uint64_t v = 0;
    memcpy(&v, p, (size_t)size);
    return v;
}

// Fills kv->num from the bytes of one scalar of kv->type.
static void decode_scalar(GgufKV *kv, const uint8_t *p) {
    uint64_t u = load_scalar_u(p, VALUE_TYPES[kv->type].size);
    switch (kv->type) {
    case GGUF_TYPE_INT8: kv->num.i = (int8_t)u; break;
    case GGUF_TYPE_INT16: kv->num.i = (int16_t)u; break;
    case GGUF_TYPE_INT32: kv->num.i = (int32_t)u; break;
    case GGUF_TYPE_INT64: kv->num.i = (int64_t)u; break;
    case GGUF_TYPE_FLOAT32: { float f; uint32_t b = (uint32_t)u; memcpy(&f, &b, 4); kv->num.f = f; } break;
    case GGUF_TYPE_FLOAT64: memcpy(&kv->num.f, &u, 8); break;
    default: kv->num.u = u; break;   // unsigned and bool
    }
}

static int parse_kv(Cursor *c, GgufKV *kv) {
    kv->at = c->pos;
    if (rd_name(c, &kv->key, "metadata key")) return -1;
    char what[160];
    snprintf(what, sizeof what, "metadata key \"%.100s\"", kv->key);
    size_t type_at = c->pos;
    if (rd_u32(c, &kv->type, what)) return -1;
    if (kv->type >= GGUF_TYPE_COUNT)
        return pt_fail(c->e, "%s: offset %zu: %s has unknown value type %u", c->path, type_at, what, kv->type);
    if (kv->type == GGUF_TYPE_STRING) return rd_str(c, &kv->str, &kv->str_len, what);
    if (kv->type != GGUF_TYPE_ARRAY) {
        if (need(c, (uint64_t)VALUE_TYPES[kv->type].size, what)) return -1;
        decode_scalar(kv, c->p + c->pos);
        c->pos += (size_t)VALUE_TYPES[kv->type].size;
        return 0;
    }
    size_t arr_at = c->pos;
    if (rd_u32(c, &kv->arr_type, what) || rd_u64(c, &kv->arr_n, what)) return -1;
    if (kv->arr_type == GGUF_TYPE_ARRAY)
        return pt_fail(c->e, "%s: offset %zu: %s is an array of arrays (not supported)", c->path, arr_at, what);
    if (kv->arr_type >= GGUF_TYPE_COUNT)
        return pt_fail(c->e, "%s: offset %zu: %s is an array of unknown type %u", c->path, arr_at, what, kv->arr_type);
    // Each element takes at least its size (8 bytes for a string's length):
    // an absurd count fails here, before anything is allocated.
    uint64_t min_size = kv->arr_type == GGUF_TYPE_STRING ? 8 : (uint64_t)VALUE_TYPES[kv->arr_type].size;
    size_t left = c->len - c->pos;
    if (kv->arr_n > GGUF_MAX_ARRAY || kv->arr_n > left / min_size)
        return pt_fail(c->e, "%s: offset %zu: %s claims %llu %s elements, more than the %zu bytes left in the file hold",
                       c->path, arr_at, what, (unsigned long long)kv->arr_n, VALUE_TYPES[kv->arr_type].name, left);
    kv->arr = c->p + c->pos;
    if (kv->arr_type != GGUF_TYPE_STRING) {
        c->pos += (size_t)(kv->arr_n * min_size);
        return 0;
    }
    kv->arr_str_at = xmalloc((size_t)kv->arr_n * sizeof(uint64_t) + 1, "string array index");
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        kv->arr_str_at[i] = (uint64_t)(c->pos - (size_t)(kv->arr - c->p));
        const uint8_t *s;
        uint64_t n;
        char elem[200];
        snprintf(elem, sizeof elem, "%s element %llu", what, (unsigned long long)i);
        if (rd_str(c, &s, &n, elem)) return -1;
    }
    return 0;
}

static int parse_tensor_info(Cursor *c, GgufTensor *t) {
    t->at = c->pos;
    if (rd_name(c, &t->name, "tensor name")) return -1;
    char what[160];
    snprintf(what, sizeof what, "tensor \"%.100s\"", t->name);
    if (strlen(t->name) >= GGUF_MAX_NAME)
        return pt_fail(c->e, "%s: offset %llu: %s: name is %zu bytes, ggml allows at most %d", c->path,
                       (unsigned long long)t->at, what, strlen(t->name), GGUF_MAX_NAME - 1);
    uint32_t n_dims;
    size_t dims_at = c->pos;
    if (rd_u32(c, &n_dims, what)) return -1;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return pt_fail(c->e, "%s: offset %zu: %s has %u dimensions (1..%d supported)", c->path, dims_at, what, n_dims,
                       GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t numel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (rd_u64(c, &ne, what)) return -1;
        if (ne > (uint64_t)INT64_MAX || (ne && numel > (uint64_t)INT64_MAX / ne))
            return pt_fail(c->e, "%s: offset %zu: %s has an element count that overflows (ne[%d] = %llu)", c->path,
                           dims_at, what, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        numel *= ne;
    }
    t->numel = numel;
    size_t type_at = c->pos;
    if (rd_u32(c, &t->type, what)) return -1;
    int be, bb;
    if (ggml_type_geometry(t->type, &be, &bb))
        return pt_fail(c->e, "%s: offset %zu: %s has unknown ggml type %u", c->path, type_at, what, t->type);
    if (t->ne[0] % be)
        return pt_fail(c->e, "%s: offset %zu: %s: ne[0] = %lld is not a multiple of %s's block size %d", c->path,
                       dims_at, what, (long long)t->ne[0], ggml_type_name(t->type), be);
    t->nbytes = numel / (uint64_t)be * (uint64_t)bb;   // numel < 2^63 and bb <= 292 / be: no overflow for be > 1
    if (be == 1 && numel > UINT64_MAX / (uint64_t)bb)
        return pt_fail(c->e, "%s: offset %zu: %s is too large", c->path, dims_at, what);
    return rd_u64(c, &t->offset, what);
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Duplicate names, found by sorting pointers to them (n log n, for fuzzed files with many entries).
static const char *find_duplicate(char **names, int64_t n) {
    if (n < 2) return NULL;
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    for (int64_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

static int check_unique(GgufFile *f, PtError *e) {
    int64_t most = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors;
    char **names = xmalloc((size_t)most * sizeof(char *) + 1, "name index");
    for (int64_t i = 0; i < f->n_kv; i++) names[i] = f->kv[i].key;
    const char *dup = find_duplicate(names, f->n_kv);
    int rc = 0;
    if (dup) rc = pt_fail(e, "%s: metadata key \"%.200s\" appears twice", f->path, dup);
    for (int64_t i = 0; rc == 0 && i < f->n_tensors; i++) names[i] = f->t[i].name;
    if (rc == 0 && (dup = find_duplicate(names, f->n_tensors)))
        rc = pt_fail(e, "%s: tensor \"%.200s\" appears twice", f->path, dup);
    free(names);
    return rc;
}

static int parse_alignment(GgufFile *f, PtError *e) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKV *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_UINT32)
        return pt_fail(e, "%s: offset %llu: general.alignment has type %s, expected UINT32", f->path,
                       (unsigned long long)kv->at, gguf_value_type_name(kv->type));
    uint64_t a = kv->num.u;
    if (a == 0 || (a & (a - 1)))
        return pt_fail(e, "%s: offset %llu: general.alignment = %llu is not a power of two", f->path,
                       (unsigned long long)kv->at, (unsigned long long)a);
    f->alignment = (uint32_t)a;
    return 0;
}

// Makes room for entry `used` of a zero-filled array (*arr is a T **).
static void grow(void *arr, size_t *cap, size_t used, size_t elem) {
    void **p = arr;
    if (used < *cap) return;
    size_t cap2 = *cap ? 2 * *cap : 16;
    void *q = realloc(*p, cap2 * elem);
    if (!q) die("out of memory reading GGUF metadata");
    memset((char *)q + *cap * elem, 0, (cap2 - *cap) * elem);
    *p = q;
    *cap = cap2;
}

int gguf_parse(GgufFile *f, const void *data, size_t len, const char *name, PtError *e) {
    memset(f, 0, sizeof *f);
    f->path = xstrdup(name);
    f->data = data;
    f->len = len;
    Cursor c = {.p = data, .len = len, .pos = 0, .path = f->path, .e = e};
    uint64_t n_tensors, n_kv;
    if (need(&c, 4, "the magic")) goto fail;
    if (memcmp(c.p, GGUF_MAGIC, 4) != 0) {
        pt_fail(e, "%s: offset 0: bad magic %02X %02X %02X %02X (a GGUF file starts with \"GGUF\")", f->path, c.p[0],
                c.p[1], c.p[2], c.p[3]);
        goto fail;
    }
    c.pos = 4;
    if (rd_u32(&c, &f->version, "the version")) goto fail;
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xFFFF) == 0 && f->version >> 16)
            pt_fail(e, "%s: offset 4: version field 0x%08X looks byte-swapped: big-endian GGUF is not supported", f->path,
                    f->version);
        else
            pt_fail(e, "%s: offset 4: GGUF version %u is not supported (2 or 3)", f->path, f->version);
        goto fail;
    }
    if (rd_u64(&c, &n_tensors, "the tensor count") || rd_u64(&c, &n_kv, "the metadata count")) goto fail;
    // A key/value pair takes at least 8 + 1 + 4 + 1 bytes and a tensor info
    // 8 + 1 + 4 + 8 + 4 + 8: counts beyond what the file can hold are refused
    // before anything is allocated for them.
    if (n_kv > (len - c.pos) / 14) {
        pt_fail(e, "%s: offset 16: metadata count %llu is more than the %zu-byte file can hold", f->path,
                (unsigned long long)n_kv, len);
        goto fail;
    }
    if (n_tensors > (len - c.pos) / 33) {
        pt_fail(e, "%s: offset 8: tensor count %llu is more than the %zu-byte file can hold", f->path,
                (unsigned long long)n_tensors, len);
        goto fail;
    }
    // The arrays grow as entries actually parse, so a count that lies costs nothing.
    size_t cap_kv = 0, cap_t = 0;
    for (f->n_kv = 0; f->n_kv < (int64_t)n_kv; f->n_kv++) {
        grow(&f->kv, &cap_kv, (size_t)f->n_kv, sizeof *f->kv);
        if (parse_kv(&c, &f->kv[f->n_kv])) {
            f->n_kv++;   // free what the failed pair allocated
            goto fail;
        }
    }
    for (f->n_tensors = 0; f->n_tensors < (int64_t)n_tensors; f->n_tensors++) {
        grow(&f->t, &cap_t, (size_t)f->n_tensors, sizeof *f->t);
        if (parse_tensor_info(&c, &f->t[f->n_tensors])) {
            f->n_tensors++;
            goto fail;
        }
    }
    if (check_unique(f, e) || parse_alignment(f, e)) goto fail;
    uint64_t a = f->alignment;
    uint64_t data_offset = ((uint64_t)c.pos + a - 1) / a * a;
    if (n_tensors && data_offset > len) {
        pt_fail(e, "%s: offset %zu: the data section would start at %llu, past the end of the file (truncated?)",
                f->path, c.pos, (unsigned long long)data_offset);
        goto fail;
    }
    f->data_offset = data_offset > len ? len : data_offset;
    uint64_t data_len = len - f->data_offset;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const GgufTensor *t = &f->t[i];
        if (t->offset % a) {
            pt_fail(e, "%s: offset %llu: tensor \"%s\" data offset %llu is not a multiple of the alignment %llu",
                    f->path, (unsigned long long)t->at, t->name, (unsigned long long)t->offset, (unsigned long long)a);
            goto fail;
        }
        if (t->offset > data_len || t->nbytes > data_len - t->offset) {
            pt_fail(e, "%s: offset %llu: tensor \"%s\" data [%llu, +%llu) runs past the end of the file "
                       "(the data section holds %llu bytes; truncated?)",
                    f->path, (unsigned long long)t->at, t->name, (unsigned long long)t->offset,
                    (unsigned long long)t->nbytes, (unsigned long long)data_len);
            goto fail;
        }
    }
    return 0;
fail:
    gguf_close(f);
    return -1;
}

int gguf_open(GgufFile *f, const char *path, PtError *e) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return pt_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pt_fail(e, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    void *map = NULL;
    if (len) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int err = errno;
            close(fd);
            return pt_fail(e, "%s: cannot map: %s", path, strerror(err));
        }
    }
    close(fd);
    static const uint8_t empty[1];
    if (gguf_parse(f, map ? map : empty, len, path, e)) {
        if (map) munmap(map, len);
        return -1;
    }
    f->map = map;
    return 0;
}

void gguf_close(GgufFile *f) {
    for (int64_t i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].arr_str_at);
    }
    for (int64_t i = 0; i < f->n_tensors; i++) free(f->t[i].name);
    free(f->kv);
    free(f->t);
    free(f->path);
    if (f->map) munmap(f->map, f->len);
    memset(f, 0, sizeof *f);
}

int gguf_is_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    char magic[4];
    int yes = fread(magic, 1, 4, fp) == 4 && memcmp(magic, GGUF_MAGIC, 4) == 0;
    fclose(fp);
    return yes;
}

// ---- lookups ----------------------------------------------------------------------

const GgufKV *gguf_find_kv(const GgufFile *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const GgufTensor *gguf_find_tensor(const GgufFile *f, const char *name) {
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

static int is_int_type(uint32_t t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}
static int is_signed_type(uint32_t t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

static int wrong_type(const GgufFile *f, const GgufKV *kv, const char *expected, PtError *e) {
    return pt_fail(e, "%s: offset %llu: metadata key \"%s\" has type %s, expected %s", f->path,
                   (unsigned long long)kv->at, kv->key, gguf_value_type_name(kv->type), expected);
}

int gguf_get_int(const GgufFile *f, const char *key, int64_t *out, PtError *e) {
    const GgufKV *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (!is_int_type(kv->type)) return wrong_type(f, kv, "an integer", e);
    if (!is_signed_type(kv->type) && kv->num.u > (uint64_t)INT64_MAX)
        return pt_fail(e, "%s: metadata key \"%s\" = %llu is out of range", f->path, key, (unsigned long long)kv->num.u);
    *out = kv->num.i;
    return 1;
}

int gguf_get_float(const GgufFile *f, const char *key, double *out, PtError *e) {
    const GgufKV *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64) return wrong_type(f, kv, "FLOAT32", e);
    *out = kv->num.f;
    return 1;
}

int gguf_get_bool(const GgufFile *f, const char *key, int *out, PtError *e) {
    const GgufKV *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_BOOL) return wrong_type(f, kv, "BOOL", e);
    *out = kv->num.u != 0;
    return 1;
}

int gguf_get_str(const GgufFile *f, const char *key, const char **s, size_t *len, PtError *e) {
    const GgufKV *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_STRING) return wrong_type(f, kv, "STRING", e);
    *s = (const char *)kv->str;
    *len = (size_t)kv->str_len;
    return 1;
}

void gguf_arr_str(const GgufKV *kv, uint64_t i, const char **s, size_t *len) {
    const uint8_t *p = kv->arr + kv->arr_str_at[i];
    uint64_t n;
    memcpy(&n, p, 8);
    *s = (const char *)p + 8;
    *len = (size_t)n;
}

int64_t gguf_arr_int(const GgufKV *kv, uint64_t i) {
    GgufKV one = {.type = kv->arr_type};
    int size = VALUE_TYPES[kv->arr_type].size;
    decode_scalar(&one, kv->arr + i * (uint64_t)size);
    return one.type == GGUF_TYPE_FLOAT32 || one.type == GGUF_TYPE_FLOAT64 ? (int64_t)one.num.f : one.num.i;
}

// ---- dequantization --------------------------------------------------------------------

static float load_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

void ggml_dequant_q8_0(const uint8_t *block, float *out) {
    float d = load_f16(block);
    for (int j = 0; j < GGML_QK; j++) out[j] = (float)(int8_t)block[2 + j] * d;
}

void ggml_dequant_q4_0(const uint8_t *block, float *out) {
    float d = load_f16(block);
    const uint8_t *qs = block + 2;
    for (int j = 0; j < GGML_QK / 2; j++) {
        out[j] = (float)((qs[j] & 0x0F) - 8) * d;
        out[j + GGML_QK / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

void ggml_dequant_q4_1(const uint8_t *block, float *out) {
    float d = load_f16(block), m = load_f16(block + 2);
    const uint8_t *qs = block + 4;
    for (int j = 0; j < GGML_QK / 2; j++) {
        out[j] = (float)(qs[j] & 0x0F) * d + m;
        out[j + GGML_QK / 2] = (float)(qs[j] >> 4) * d + m;
    }
}

int ggml_dequant_row(uint32_t type, const uint8_t *src, float *dst, uint64_t n) {
    uint16_t h;
    switch (type) {
    case GGML_TYPE_F32: memcpy(dst, src, n * sizeof(float)); return 0;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) dst[i] = load_f16(src + 2 * i);
        return 0;
    case GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) memcpy(&h, src + 2 * i, 2), dst[i] = bf16_to_f32(h);
        return 0;
    case GGML_TYPE_Q8_0:
        for (uint64_t b = 0; b < n / GGML_QK; b++) ggml_dequant_q8_0(src + b * GGML_Q8_0_BYTES, dst + b * GGML_QK);
        return 0;
    case GGML_TYPE_Q4_0:
        for (uint64_t b = 0; b < n / GGML_QK; b++) ggml_dequant_q4_0(src + b * GGML_Q4_0_BYTES, dst + b * GGML_QK);
        return 0;
    case GGML_TYPE_Q4_1:
        for (uint64_t b = 0; b < n / GGML_QK; b++) ggml_dequant_q4_1(src + b * GGML_Q4_1_BYTES, dst + b * GGML_QK);
        return 0;
    default: return -1;
    }
}

int gguf_read_f32(const GgufFile *f, const GgufTensor *t, float *out, PtError *e) {
    const uint8_t *src = f->data + f->data_offset + t->offset;
    if (ggml_dequant_row(t->type, src, out, t->numel))
        return pt_fail(e, "%s: tensor \"%s\" has type %s; only F32, F16, BF16, Q8_0, Q4_0 and Q4_1 convert to fp32",
                       f->path, t->name, ggml_type_name(t->type));
    return 0;
}

uint16_t ggml_q4_1_offset(float scale, float zero, int *exact) {
    float m = zero - 8.0f * scale;
    uint16_t h = f32_to_f16(m);
    *exact = f16_to_f32(h) == m;
    return h;
}

// ---- inspect ---------------------------------------------------------------------------

static void print_value(FILE *out, uint32_t type, const GgufKV *kv, const uint8_t *scalar, const char *s, size_t n) {
    if (type == GGUF_TYPE_STRING) {
        fputc('"', out);
        size_t show = n > 120 ? 120 : n;
        for (size_t i = 0; i < show; i++) {
            unsigned char ch = (unsigned char)s[i];
            if (ch == '\n') fputs("\\n", out);
            else if (ch < 0x20 || ch == 0x7F) fprintf(out, "\\x%02X", ch);
            else fputc(ch, out);
        }
        fprintf(out, n > show ? "\"... (%zu bytes)" : "\"", n);
        return;
    }
    GgufKV one = {.type = type};
    if (scalar) decode_scalar(&one, scalar);   // an array element
    else one.num = kv->num;
    if (type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64) fprintf(out, "%.9g", one.num.f);
    else if (type == GGUF_TYPE_BOOL) fputs(one.num.u ? "true" : "false", out);
    else if (is_signed_type(type)) fprintf(out, "%lld", (long long)one.num.i);
    else fprintf(out, "%llu", (unsigned long long)one.num.u);
}

// The int4 summary of our Q4_0/Q4_1 exports (keys written by formats/gguf_writer.c).
static int inspect_int4(const GgufFile *f, FILE *out, PtError *e) {
    int64_t group, inexact = -1;
    int sym = -1;
    int found = gguf_get_int(f, "pocket.quantization.group_size", &group, e);
    if (found <= 0) return found;
    if (gguf_get_int(f, "pocket.quantization.inexact_offset_blocks", &inexact, e) < 0 ||
        gguf_get_bool(f, "pocket.quantization.symmetric", &sym, e) < 0)
        return -1;
    uint64_t q4_1_blocks = 0, q4_0_blocks = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (f->t[i].type == GGML_TYPE_Q4_1) q4_1_blocks += f->t[i].numel / GGML_QK;
        if (f->t[i].type == GGML_TYPE_Q4_0) q4_0_blocks += f->t[i].numel / GGML_QK;
    }
    fprintf(out, "int4 from the quantizer: group %lld%s; %llu Q4_0 and %llu Q4_1 blocks", (long long)group,
            sym < 0 ? "" : sym ? ", symmetric" : ", asymmetric", (unsigned long long)q4_0_blocks,
            (unsigned long long)q4_1_blocks);
    if (inexact >= 0)
        fprintf(out, "; %lld Q4_1 blocks (%.2f%%) have an offset m = zero - 8*scale that fp16 could not hold exactly",
                (long long)inexact, q4_1_blocks ? 100.0 * (double)inexact / (double)q4_1_blocks : 0.0);
    fputc('\n', out);
    return 0;
}

int gguf_describe(const GgufFile *f, FILE *out, PtError *e) {
    fprintf(out, "%s: GGUF v%u, %lld metadata keys, %lld tensors, alignment %u, data at offset %llu\n", f->path,
            f->version, (long long)f->n_kv, (long long)f->n_tensors, f->alignment, (unsigned long long)f->data_offset);
    for (int64_t i = 0; i < f->n_kv; i++) {
        const GgufKV *kv = &f->kv[i];
        fprintf(out, "  %-45s %-8s ", kv->key, gguf_value_type_name(kv->type));
        if (kv->type == GGUF_TYPE_ARRAY) {
            fprintf(out, "[%s x %llu]", gguf_value_type_name(kv->arr_type), (unsigned long long)kv->arr_n);
            uint64_t show = kv->arr_n < 6 ? kv->arr_n : 6;
            for (uint64_t j = 0; j < show; j++) {
                fputs(j ? ", " : " ", out);
                const char *s = NULL;
                size_t n = 0;
                if (kv->arr_type == GGUF_TYPE_STRING) gguf_arr_str(kv, j, &s, &n);
                print_value(out, kv->arr_type, kv, kv->arr + j * (uint64_t)VALUE_TYPES[kv->arr_type].size, s, n);
            }
            if (show < kv->arr_n) fputs(", ...", out);
        } else {
            print_value(out, kv->type, kv, NULL, (const char *)kv->str, (size_t)kv->str_len);
        }
        fputc('\n', out);
    }
    uint64_t bytes_of[64] = {0}, count_of[64] = {0}, total = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const GgufTensor *t = &f->t[i];
        char shape[96];
        size_t k = (size_t)snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < t->n_dims && k < sizeof shape; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
        fprintf(out, "  %-32s %-7s ne=%-16s offset %-12llu %llu bytes\n", t->name, ggml_type_name(t->type), shape,
                (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        int ti = ggml_type_index(t->type);
        bytes_of[ti] += t->nbytes;
        count_of[ti]++;
        total += t->nbytes;
    }
    fprintf(out, "tensors by type:");
    for (int i = 0; i < N_GGML_TYPES; i++)
        if (count_of[i]) fprintf(out, " %s %llu (%.2f MB)", GGML_TYPES[i].name, (unsigned long long)count_of[i], bytes_of[i] / 1e6);
    fprintf(out, "; total %.2f MB of tensor data, file %.2f MB\n", total / 1e6, f->len / 1e6);
    return inspect_int4(f, out, e);
}

int gguf_inspect(const char *path, FILE *out, PtError *e) {
    GgufFile f;
    if (gguf_open(&f, path, e)) return -1;
    int rc = gguf_describe(&f, out, e);
    gguf_close(&f);
    return rc;
}
