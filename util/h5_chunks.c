// h5_chunks.c: a dataset's data read without libhdf5's filter pipeline (see
// h5_read_all in h5.h).
//
// Why: libhdf5 1.10 trusts the size a chunk inflates to and copies a whole
// chunk out of whatever buffer the filters returned, so a crafted deflate
// stream that inflates short is a heap over-read inside H5Dread (found by
// fuzz_checkpoint). pocket reads each chunk's stored bytes (H5Dread_chunk),
// undoes deflate and shuffle itself with every size checked, places the chunk
// (edge chunks clipped) and only then converts types (H5Tconvert, on memory).
#include "h5.h"
#include "h5_chunk_grid.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

// why = the reason; -1.
static int fail(char why[200], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(char why[200], const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, 200, fmt, ap);
    va_end(ap);
    return -1;
}

// The filters of a dataset, in the order they were applied on writing.
typedef struct {
    int n;
    H5Z_filter_t id[8];
} Pipeline;

static int read_pipeline(hid_t dcpl, Pipeline *p, char why[200]) {
    p->n = H5Pget_nfilters(dcpl);
    if (p->n < 0 || p->n > 8) return fail(why, "unreadable filter pipeline");
    for (int i = 0; i < p->n; i++) {
        unsigned flags, cd[8], config;
        size_t n_cd = 8;
        char name[64] = "";
        p->id[i] = H5Pget_filter2(dcpl, (unsigned)i, &flags, &n_cd, cd, sizeof name, name, &config);
        if (p->id[i] != H5Z_FILTER_DEFLATE && p->id[i] != H5Z_FILTER_SHUFFLE) {
            return fail(why, "stored with filter %d (%.40s); pocket reads deflate and shuffle only", (int)p->id[i], name);
        }
    }
    return 0;
}

// zlib's stream into exactly `want` bytes.
static int inflate_exact(const uint8_t *src, size_t n, uint8_t *dst, size_t want, char why[200]) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK) return fail(why, "zlib: out of memory");
    z.next_in = (Bytef *)src;
    z.next_out = dst;
    int rc = Z_OK;
    // zlib counts in 32 bits: feed and drain in pieces
    while (rc == Z_OK) {
        size_t in_left = n - (size_t)(z.next_in - src), out_left = want - (size_t)(z.next_out - dst);
        z.avail_in = (uInt)(in_left < (1u << 30) ? in_left : (1u << 30));
        z.avail_out = (uInt)(out_left < (1u << 30) ? out_left : (1u << 30));
        if (z.avail_out == 0) break;
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc == Z_BUF_ERROR && z.avail_in == 0) break;   // the stream ended early
    }
    size_t got = (size_t)(z.next_out - dst);
    int ended = rc == Z_STREAM_END;
    inflateEnd(&z);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        return fail(why, "a chunk's deflate stream is corrupt (zlib error %d)", rc);
    if (!ended || got != want)
        return fail(why, "a chunk inflates to %s%zu bytes, want %zu", ended ? "" : "at least ", got, want);
    return 0;
}

// HDF5's shuffle stores byte b of every element together; this puts them back.
static void unshuffle(const uint8_t *src, uint8_t *dst, size_t bytes, size_t elem) {
    size_t n = bytes / elem;
    for (size_t b = 0; b < elem; b++)
        for (size_t i = 0; i < n; i++) dst[i * elem + b] = src[b * n + i];
    memcpy(dst + n * elem, src + n * elem, bytes - n * elem);   // a tail shorter than an element stays as it is
}

// Undoes the filters a chunk went through (those its mask does not skip),
// last applied first. Returns the chunk (a or b), NULL with why on error.
static uint8_t *unfilter(const Pipeline *p, unsigned mask, const uint8_t *raw, size_t raw_n, uint8_t *a, uint8_t *b,
                         size_t chunk_bytes, size_t elem, char why[200]) {
    const uint8_t *cur = raw;
    size_t cur_n = raw_n;
    for (int i = p->n - 1; i >= 0; i--) {
        if (mask & (1u << i)) continue;
        uint8_t *dst = cur == a ? b : a;
        if (p->id[i] == H5Z_FILTER_DEFLATE) {
            if (inflate_exact(cur, cur_n, dst, chunk_bytes, why)) return NULL;
        } else {
            if (cur_n != chunk_bytes) break;
            unshuffle(cur, dst, chunk_bytes, elem);
        }
        cur = dst;
        cur_n = chunk_bytes;
    }
    if (cur_n != chunk_bytes) {
        fail(why, "a chunk holds %zu bytes, want %zu", cur_n, chunk_bytes);
        return NULL;
    }
    if (cur == raw) memcpy(a, raw, chunk_bytes);
    return cur == raw ? a : (uint8_t *)cur;
}

// Copies the part of a chunk at `offset` that lies inside the dataset into
// `dense` (the whole dataset, row-major); fill: the chunk is one element repeated.
static void place_chunk(const uint8_t *chunk, int fill, int rank, const hsize_t *dims, const hsize_t *cdims,
                        const hsize_t *offset, size_t elem, uint8_t *dense) {
    hsize_t extent[H5S_MAX_RANK], idx[H5S_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) extent[d] = dims[d] - offset[d] < cdims[d] ? dims[d] - offset[d] : cdims[d];
    size_t run = (size_t)extent[rank - 1] * elem;
    for (;;) {
        size_t from = 0, to = 0;
        for (int d = 0; d < rank; d++) {
            from = from * cdims[d] + idx[d];
            to = to * dims[d] + offset[d] + idx[d];
        }
        if (fill) {
            for (size_t k = 0; k < run; k += elem) memcpy(dense + to * elem + k, chunk, elem);
        } else {
            memcpy(dense + to * elem, chunk + from * elem, run);
        }
        int d = rank - 2;
        while (d >= 0 && ++idx[d] == extent[d]) idx[d--] = 0;
        if (d < 0) break;
    }
}

// The fill value in the file's type, read in a child process: libhdf5 1.10
// converts a damaged fill message's value through a NULL type (found by
// fuzz_checkpoint: SIGSEGV in H5T_path_find under H5Pget_fill_value).
typedef struct {
    hid_t dcpl, ftype;
    size_t elem;
} FillJob;

static int fill_in_child(void *ctx, int out) {
    const FillJob *j = ctx;
    uint8_t *v = calloc(j->elem, 1);
    const int rc = v && H5Pget_fill_value(j->dcpl, j->ftype, v) >= 0 && h5_child_write(out, v, j->elem) == 0 ? 0 : 1;
    free(v);
    return rc;
}

// NULL with why set when it cannot be read; zeros when the file declares none.
static uint8_t *fill_value(hid_t ds, hid_t dcpl, hid_t ftype, size_t elem, char why[200]) {
    H5D_fill_value_t kind = H5D_FILL_VALUE_DEFAULT;
    if (H5Pfill_value_defined(dcpl, &kind) < 0) return fail(why, "unreadable fill value"), NULL;
    if (kind != H5D_FILL_VALUE_USER_DEFINED) return xcalloc(elem ? elem : 1, 1, "fill value");
    char path[1024];
    if (H5Fget_name(ds, path, sizeof path) < 0) return fail(why, "unreadable file name"), NULL;
    FillJob job = {dcpl, ftype, elem};
    char *out = NULL;
    size_t len = 0;
    PtError e;
    int rc = h5_in_child(path, "reading a fill value", fill_in_child, &job, &out, &len, elem, &e);
    if (rc == 0 && len == elem) return (uint8_t *)out;
    free(out);
    fail(why, "%s", rc < 0 ? e.msg : "its fill value cannot be read (damaged?)");
    return NULL;
}

// The chunked case of h5_read_all, into dense in the file's type.
static int read_chunks(hid_t ds, hid_t dcpl, hid_t ftype, int rank, const hsize_t *dims, uint8_t *dense,
                       char why[200]) {
    Pipeline p;
    hsize_t cdims[H5S_MAX_RANK], offset[H5S_MAX_RANK];
    if (read_pipeline(dcpl, &p, why)) return -1;
    if (H5Pget_chunk(dcpl, rank, cdims) != rank) return fail(why, "unreadable chunk layout");
    size_t elem = H5Tget_size(ftype);
    double chunk_bytes = (double)elem;
    for (int d = 0; d < rank; d++) {
        if (cdims[d] == 0) return fail(why, "a chunk dimension of 0");
        chunk_bytes *= (double)cdims[d];
    }
    if (chunk_bytes > 4294967295.0 || chunk_bytes > h5_file_bytes(ds) * H5_DEFLATE_MAX_RATIO)
        return fail(why, "chunks of %.0f bytes, more than HDF5 or this file holds", chunk_bytes);
    size_t cb = (size_t)chunk_bytes, raw_cap = (size_t)chunk_stored_max(chunk_bytes);
    uint8_t *fill = NULL, *raw = xmalloc(raw_cap, "chunk"), *a = xmalloc(cb, "chunk"), *b = xmalloc(cb, "chunk");
    ChunkGrid g;
    chunk_grid_start(&g, rank, dims, cdims);
    int rc = 0;
    while (!rc && chunk_grid_next(&g, offset)) {
        unsigned mask = 0;
        uint32_t read_mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(ds, offset, &mask, &addr, &size) < 0) {
            rc = fail(why, "unreadable chunk index");
        } else if (addr == HADDR_UNDEF) {   // never written: the fill value
            if (!fill) fill = fill_value(ds, dcpl, ftype, elem, why);
            if (fill) place_chunk(fill, 1, rank, dims, cdims, offset, elem, dense);
            else rc = -1;
        } else if (size > raw_cap) {
            rc = fail(why, "a chunk stored in %llu bytes, more than its %zu of data", (unsigned long long)size, cb);
        } else if (H5Dread_chunk(ds, H5P_DEFAULT, offset, &read_mask, raw) < 0) {
            rc = fail(why, "a chunk cannot be read (truncated?)");
        } else {
            uint8_t *chunk = unfilter(&p, read_mask, raw, (size_t)size, a, b, cb, elem, why);
            if (chunk) place_chunk(chunk, 0, rank, dims, cdims, offset, elem, dense);
            else rc = -1;
        }
    }
    free(fill);
    free(raw);
    free(a);
    free(b);
    return rc;
}

int h5_read_all(hid_t ds, hid_t mem, void *out, char why[200]) {
    hid_t ftype = H5Dget_type(ds), space = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    hsize_t dims[H5S_MAX_RANK];
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    int rc = ftype < 0 || dcpl < 0 || rank < 0 || rank > H5S_MAX_RANK ? -1 : 0;
    if (rc) fail(why, "unreadable header");
    if (!rc && H5Pget_layout(dcpl) != H5D_CHUNKED) {
        if (H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) rc = fail(why, "libhdf5 cannot read it");
    } else if (!rc) {
        H5Sget_simple_extent_dims(space, dims, NULL);
        size_t n = 1, fsize = H5Tget_size(ftype), msize = H5Tget_size(mem);
        for (int d = 0; d < rank; d++) n *= (size_t)dims[d];
        int same = H5Tequal(ftype, mem) > 0;   // most reads: no conversion, straight into out
        uint8_t *dense = same ? out : xmalloc(n * (fsize > msize ? fsize : msize) + 1, "dataset");
        rc = n ? read_chunks(ds, dcpl, ftype, rank, dims, dense, why) : 0;
        if (!rc && !same && n && H5Tconvert(ftype, mem, n, dense, NULL, H5P_DEFAULT) < 0)
            rc = fail(why, "cannot convert its type");
        if (!rc && !same) memcpy(out, dense, n * msize);
        if (!same) free(dense);
    }
    if (ftype >= 0) H5Tclose(ftype);
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    return rc;
}
