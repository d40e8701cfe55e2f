// safetensors.c: reader (mmap + validation) and atomic writer; see safetensors.h.
#include "safetensors.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (F32 data is copied as is)"
#endif

// The reference implementation refuses headers above this size.
#define ST_MAX_HEADER 100000000ull

typedef struct { const char *name; int size; } DtypeInfo;

// Byte-sized dtypes of the format. Sub-byte ones (F4, F6_*) are not supported.
static const DtypeInfo DTYPES[] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
    {"I32", 4}, {"U32", 4}, {"F32", 4},
    {"F64", 8}, {"I64", 8}, {"U64", 8}, {"C64", 8},
};
#define N_DTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

static const DtypeInfo *dtype_lookup(const char *name) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(DTYPES[i].name, name) == 0) return &DTYPES[i];
    return NULL;
}

int st_dtype_size(const char *dtype) {
    const DtypeInfo *d = dtype ? dtype_lookup(dtype) : NULL;
    return d ? d->size : 0;
}

// "[2, 3]" into buf (truncated with "..." when long).
static const char *shape_str(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t k = 0;
    k += snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

static void free_tensors(StFile *f) {
    for (int i = 0; i < f->n; i++) {
        free(f->t[i].name);
        free(f->t[i].shape);
    }
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_key[i]);
        free(f->meta_value[i]);
    }
    free(f->meta_key);
    free(f->meta_value);
    f->t = NULL;
    f->n = f->n_meta = 0;
    f->meta_key = f->meta_value = NULL;
}

void st_close(StFile *f) {
    free_tensors(f);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

// A JSON integer in [0, 2^63) as uint64_t; -1 when it is not one.
static int get_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

// Fills one StTensor from its header entry; checks its dtype, shape and
// that the byte size matches. Offsets are checked later, all together.
static int parse_entry(const char *path, const char *name, json_t *v, StTensor *t, PtError *e) {
    t->name = xstrdup(name);
    if (!json_is_object(v)) return pt_fail(e, "%s: tensor \"%s\": header entry is not a JSON object", path, name);
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) return pt_fail(e, "%s: tensor \"%s\": missing or non-string \"dtype\"", path, name);
    const DtypeInfo *d = dtype_lookup(json_string_value(dt));
    if (!d) return pt_fail(e, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name, json_string_value(dt));
    t->dtype = d->name;
    t->dtype_size = d->size;
    if (!json_is_array(sh)) return pt_fail(e, "%s: tensor \"%s\": missing or non-array \"shape\"", path, name);
    t->ndim = (int)json_array_size(sh);
    t->shape = t->ndim ? xmalloc(t->ndim * sizeof(int64_t), "tensor shape") : NULL;
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t dim;
        if (get_u64(json_array_get(sh, i), &dim))
            return pt_fail(e, "%s: tensor \"%s\": shape entry %d is not a non-negative integer", path, name, i);
        t->shape[i] = (int64_t)dim;
        if (__builtin_mul_overflow(t->numel, dim, &t->numel))
            return pt_fail(e, "%s: tensor \"%s\": shape overflows 64 bits", path, name);
    }
    if (!json_is_array(off) || json_array_size(off) != 2 || get_u64(json_array_get(off, 0), &t->begin) ||
        get_u64(json_array_get(off, 1), &t->end))
        return pt_fail(e, "%s: tensor \"%s\": \"data_offsets\" must be two non-negative integers", path, name);
    uint64_t bytes;
    if (__builtin_mul_overflow(t->numel, (uint64_t)t->dtype_size, &bytes))
        return pt_fail(e, "%s: tensor \"%s\": byte size overflows 64 bits", path, name);
    return 0;
}

static int parse_metadata(const char *path, json_t *v, StFile *f, PtError *e) {
    if (json_is_null(v)) return 0;
    if (!json_is_object(v)) return pt_fail(e, "%s: \"__metadata__\" is not a JSON object of strings", path);
    size_t n = json_object_size(v);
    f->meta_key = xcalloc(n, sizeof(char *), "metadata");
    f->meta_value = xcalloc(n, sizeof(char *), "metadata");
    const char *k;
    json_t *s;
    json_object_foreach(v, k, s) {
        if (!json_is_string(s)) return pt_fail(e, "%s: \"__metadata__\" value of \"%s\" is not a string", path, k);
        f->meta_key[f->n_meta] = xstrdup(k);
        f->meta_value[f->n_meta] = xstrdup(json_string_value(s));
        f->n_meta++;
    }
    return 0;
}

static int by_offsets(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// Sorted by offsets, tensors must tile the data buffer exactly.
static int check_layout(const StFile *f, PtError *e) {
    uint64_t expect = 0;
    for (int i = 0; i < f->n; i++) {
        const StTensor *t = &f->t[i];
        if (t->begin < expect)
            return pt_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor \"%s\""
                              " which ends at data byte %" PRIu64,
                           f->path, t->name, t->begin, t->end, f->t[i - 1].name, expect);
        if (t->begin > expect)
            return pt_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] leave a gap: data bytes"
                              " %" PRIu64 "..%" PRIu64 " belong to no tensor",
                           f->path, t->name, t->begin, t->end, expect, t->begin);
        if (t->end < t->begin)
            return pt_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                           f->path, t->name, t->begin, t->end);
        uint64_t bytes = t->numel * (uint64_t)t->dtype_size;   // overflow checked by parse_entry
        if (t->end - t->begin != bytes) {
            char sbuf[160];
            return pt_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                              " bytes but shape %s of %s needs %" PRIu64,
                           f->path, t->name, t->begin, t->end, t->end - t->begin,
                           shape_str(sbuf, sizeof sbuf, t->shape, t->ndim), t->dtype, bytes);
        }
        expect = t->end;
    }
    if (expect > f->data_len)
        return pt_fail(e, "%s: tensor \"%s\": data_offsets end at data byte %" PRIu64 " but the data buffer has only"
                          " %" PRIu64 " bytes (file truncated?)",
                       f->path, f->t[f->n - 1].name, expect, f->data_len);
    if (expect < f->data_len)
        return pt_fail(e, "%s: %" PRIu64 " bytes after the last tensor's data (data buffer is %" PRIu64
                          " bytes, tensors cover %" PRIu64 ")",
                       f->path, f->data_len - expect, f->data_len, expect);
    return 0;
}

static int parse_header(StFile *f, const char *text, size_t len, PtError *e) {
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_duplicate_key)
            return pt_fail(e, "%s: header byte %d: duplicate tensor name (%s)", f->path, 8 + je.position, je.text);
        return pt_fail(e, "%s: header is not valid JSON: %s at header line %d column %d (file byte %d)", f->path,
                       je.text, je.line, je.column, 8 + je.position);
    }
    int rc = -1;
    if (!json_is_object(root)) {
        pt_fail(e, "%s: header is not a JSON object", f->path);
        goto out;
    }
    size_t cap = json_object_size(root);
    f->t = xcalloc(cap, sizeof(StTensor), "safetensors entries");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_metadata(f->path, v, f, e)) goto out;
            continue;
        }
        // Count the entry before parsing so st_close frees what it allocated.
        if (parse_entry(f->path, key, v, &f->t[f->n++], e)) goto out;
    }
    qsort(f->t, f->n, sizeof(StTensor), by_offsets);
    rc = check_layout(f, e);
out:
    json_decref(root);
    return rc;
}

int st_open(StFile *f, const char *path, PtError *e) {
    memset(f, 0, sizeof *f);
    f->path = xstrdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        pt_fail(e, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        pt_fail(e, "%s: not a regular file", path);
        goto fail;
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        pt_fail(e, "%s: file is %zu bytes, too short for the 8-byte header length (truncated?)", path, size);
        goto fail;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        pt_fail(e, "%s: cannot map: %s", path, strerror(map_errno));
        goto fail;
    }
    f->map = map;
    f->map_len = size;
    const uint8_t *bytes = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | bytes[i];
    if (n > ST_MAX_HEADER) {
        pt_fail(e, "%s: byte 0: header length %" PRIu64 " exceeds the 100000000-byte limit (not a safetensors file?)",
                path, n);
        goto fail;
    }
    if (8 + n > size) {
        pt_fail(e, "%s: byte 0: header length %" PRIu64 " runs past the end of the %zu-byte file (truncated?)", path,
                n, size);
        goto fail;
    }
    f->header_len = n;
    f->data = bytes + 8 + n;
    f->data_len = size - 8 - n;
    if (parse_header(f, (const char *)bytes + 8, n, e)) goto fail;
    return 0;
fail:
    st_close(f);
    return -1;
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *st_metadata(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_value[i];
    return NULL;
}

const void *st_data(const StFile *f, const StTensor *t) { return f->data + t->begin; }

int st_read_f32(const StFile *f, const StTensor *t, float *out, PtError *e) {
    const uint8_t *src = f->data + t->begin;
    int64_t n = (int64_t)t->numel;
    if (strcmp(t->dtype, "F32") == 0) {
        memcpy(out, src, (size_t)n * 4);   // little-endian host, any alignment
    } else if (strcmp(t->dtype, "BF16") == 0) {
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
    } else if (strcmp(t->dtype, "F16") == 0) {
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
    } else {
        return pt_fail(e, "%s: tensor \"%s\": dtype %s cannot be read as floating point (supported: F32, F16, BF16)",
                       f->path, t->name, t->dtype);
    }
    return 0;
}

// ---------------------------------------------------------------- writer

static int check_write_args(const char *path, const StWriteTensor *t, int n, PtError *e) {
    if (n < 0) return pt_fail(e, "%s: negative tensor count %d", path, n);
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !*name) return pt_fail(e, "%s: tensor %d has an empty name", path, i);
        if (strcmp(name, "__metadata__") == 0) return pt_fail(e, "%s: \"__metadata__\" is not a tensor name", path);
        if (!t[i].dtype || !dtype_lookup(t[i].dtype))
            return pt_fail(e, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name, t[i].dtype ? t[i].dtype : "");
        if (t[i].ndim < 0 || t[i].ndim > ST_WRITE_MAX_DIMS)
            return pt_fail(e, "%s: tensor \"%s\": ndim %d outside 0..%d", path, name, t[i].ndim, ST_WRITE_MAX_DIMS);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0) return pt_fail(e, "%s: tensor \"%s\": negative dimension", path, name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, name) == 0) return pt_fail(e, "%s: tensor \"%s\" is listed twice", path, name);
    }
    return 0;
}

static uint64_t write_bytes(const StWriteTensor *t) {
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
    return numel * (uint64_t)st_dtype_size(t->dtype);
}

int st_write(const char *path, const StWriteTensor *t, int n, PtError *e) {
    if (check_write_args(path, t, n, e)) return -1;
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        uint64_t bytes = write_bytes(&t[i]);
        json_t *entry = json_object();
        json_object_set_new(entry, "dtype", json_string(t[i].dtype));
        json_object_set_new(entry, "shape", shape);
        json_object_set_new(entry, "data_offsets",
                            json_pack("[I,I]", (json_int_t)offset, (json_int_t)(offset + bytes)));
        json_object_set_new(root, t[i].name, entry);
        offset += bytes;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!header) die("out of memory serialising a safetensors header");
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) / 8 * 8;   // the data buffer starts 8-byte aligned
    uint8_t len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (uint8_t)((uint64_t)padded >> (8 * i));

    AtomicFile af;
    if (atomic_open(&af, path, e)) {
        free(header);
        return -1;
    }
    int ok = fwrite(len_le, 1, 8, af.f) == 8 && fwrite(header, 1, hlen, af.f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', af.f) != EOF;
    free(header);
    for (int i = 0; ok && i < n; i++) {
        uint64_t bytes = write_bytes(&t[i]);
        if (bytes && !t[i].data) {
            atomic_abort(&af);
            return pt_fail(e, "%s: tensor \"%s\" has no data", path, t[i].name);
        }
        ok = bytes == 0 || fwrite(t[i].data, 1, bytes, af.f) == bytes;
    }
    if (!ok) {
        int err = errno;
        atomic_abort(&af);
        return pt_fail(e, "%s: write failed: %s", path, strerror(err));
    }
    return atomic_commit(&af, e);
}

// ---------------------------------------------------------------- inspect

int st_inspect(const char *path, FILE *out, PtError *e) {
    StFile f;
    if (st_open(&f, path, e)) return -1;
    fprintf(out, "%s: safetensors, %d tensors, header %" PRIu64 " bytes, data %" PRIu64 " bytes\n", path, f.n,
            f.header_len, f.data_len);
    for (int i = 0; i < f.n_meta; i++) fprintf(out, "  metadata %s = %s\n", f.meta_key[i], f.meta_value[i]);
    int width = 4;
    for (int i = 0; i < f.n; i++) {
        int len = (int)strlen(f.t[i].name);
        if (len > width) width = len;
    }
    if (width > 80) width = 80;
    fprintf(out, "  %-*s  %-7s  %-20s  %14s\n", width, "name", "dtype", "shape", "bytes");
    uint64_t numel = 0, bytes_per[N_DTYPES] = {0};
    int count_per[N_DTYPES] = {0};
    for (int i = 0; i < f.n; i++) {
        const StTensor *t = &f.t[i];
        char sbuf[160];
        fprintf(out, "  %-*s  %-7s  %-20s  %14" PRIu64 "\n", width, t->name, t->dtype,
                shape_str(sbuf, sizeof sbuf, t->shape, t->ndim), t->end - t->begin);
        numel += t->numel;
        int d = (int)(dtype_lookup(t->dtype) - DTYPES);
        bytes_per[d] += t->end - t->begin;
        count_per[d]++;
    }
    fprintf(out, "total: %d tensors, %" PRIu64 " elements, %" PRIu64 " bytes", f.n, numel, f.data_len);
    for (int d = 0; d < N_DTYPES; d++)
        if (count_per[d]) fprintf(out, "; %s: %d tensors, %" PRIu64 " bytes", DTYPES[d].name, count_per[d], bytes_per[d]);
    fprintf(out, "\n");
    st_close(&f);
    return 0;
}
