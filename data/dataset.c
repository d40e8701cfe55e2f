// dataset.c: HDF5 token datasets (layout in dataset.h): streaming writer,
// validating reader, inspect.
#include "dataset.h"
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

enum { FORMAT_VERSION = 1, TOKEN_CHUNK = 1 << 16, OFFSET_CHUNK = 1 << 14, DEFLATE_LEVEL = 4 };

static const char *kind_name(DatasetKind k) { return k == DATASET_SFT ? "sft" : "cpt"; }

// HDF5 prints its error stack by default; we report errors ourselves.
static void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

// The most specific message on HDF5's error stack, for the tail of ours.
static herr_t first_error(unsigned n, const H5E_error2_t *err, void *data) {
    char *buf = data;
    if (n == 0 && err->desc) snprintf(buf, 200, "%s", err->desc);
    return 0;
}
static const char *h5_reason(char buf[200]) {
    strcpy(buf, "HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_error, buf);
    return buf;
}

// ---------------------------------------------------------------- writer

struct DatasetWriter {
    char *path, *tmp, *hash;
    DatasetKind kind;
    int vocab_size, token_bytes;
    hid_t file, tokens, offsets, mask;
    void *tok_buf;             // TOKEN_CHUNK tokens in the stored width
    uint8_t *mask_buf;         // TOKEN_CHUNK
    uint64_t *off_buf;         // OFFSET_CHUNK
    size_t tok_fill, off_fill;
    uint64_t n_tokens, n_docs, tok_written, off_written;
    uint64_t n_dropped, n_truncated, n_skipped;
};

static hid_t create_growing(hid_t file, const char *name, hid_t type, hsize_t chunk) {
    hsize_t zero = 0, unlimited = H5S_UNLIMITED;
    hid_t space = H5Screate_simple(1, &zero, &unlimited);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_shuffle(dcpl);   // byte-shuffling small integers roughly doubles deflate's ratio
    H5Pset_deflate(dcpl, DEFLATE_LEVEL);
    H5Pset_obj_track_times(dcpl, 0);   // no timestamps: the same input gives the same bytes
    hid_t ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(space);
    return ds;
}

// Writes n elements at [at, at+n) of a growing 1-D dataset.
static int append_block(hid_t ds, hid_t memtype, const void *buf, uint64_t at, size_t n) {
    if (n == 0) return 0;
    hsize_t start = at, count = n, size = at + n;
    if (H5Dset_extent(ds, &size) < 0) return -1;
    hid_t fspace = H5Dget_space(ds);
    hid_t mspace = H5Screate_simple(1, &count, NULL);
    herr_t rc = H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (rc >= 0) rc = H5Dwrite(ds, memtype, mspace, fspace, H5P_DEFAULT, buf);
    H5Sclose(mspace);
    H5Sclose(fspace);
    return rc < 0 ? -1 : 0;
}

static int flush_tokens(DatasetWriter *w, PtError *e) {
    char why[200];
    hid_t memtype = w->token_bytes == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
    if (append_block(w->tokens, memtype, w->tok_buf, w->tok_written, w->tok_fill))
        return pt_fail(e, "%s: writing /tokens: %s", w->path, h5_reason(why));
    if (w->kind == DATASET_SFT && append_block(w->mask, H5T_NATIVE_UINT8, w->mask_buf, w->tok_written, w->tok_fill))
        return pt_fail(e, "%s: writing /loss_mask: %s", w->path, h5_reason(why));
    w->tok_written += w->tok_fill;
    w->tok_fill = 0;
    return 0;
}

static int flush_offsets(DatasetWriter *w, PtError *e) {
    char why[200];
    if (append_block(w->offsets, H5T_NATIVE_UINT64, w->off_buf, w->off_written, w->off_fill))
        return pt_fail(e, "%s: writing /doc_offsets: %s", w->path, h5_reason(why));
    w->off_written += w->off_fill;
    w->off_fill = 0;
    return 0;
}

static void push_offset(DatasetWriter *w, uint64_t off, PtError *e, int *rc) {
    w->off_buf[w->off_fill++] = off;
    if (w->off_fill == OFFSET_CHUNK && flush_offsets(w, e)) *rc = -1;
}

static void writer_free(DatasetWriter *w) {
    free(w->path);
    free(w->tmp);
    free(w->hash);
    free(w->tok_buf);
    free(w->mask_buf);
    free(w->off_buf);
    free(w);
}

static void close_handles(DatasetWriter *w) {
    if (w->tokens >= 0) H5Dclose(w->tokens);
    if (w->offsets >= 0) H5Dclose(w->offsets);
    if (w->mask >= 0) H5Dclose(w->mask);
    if (w->file >= 0) H5Fclose(w->file);
    w->tokens = w->offsets = w->mask = w->file = -1;
}

int dataset_writer_open(DatasetWriter **out, const char *path, DatasetKind kind, int vocab_size,
                        const char *tokenizer_hash, PtError *e) {
    h5_quiet();
    if (vocab_size <= 0) return pt_fail(e, "%s: vocab_size %d must be positive", path, vocab_size);
    DatasetWriter *w = xcalloc(1, sizeof *w, "dataset writer");
    w->path = xstrdup(path);
    w->tmp = temp_path_for(path);
    w->hash = xstrdup(tokenizer_hash ? tokenizer_hash : "");
    w->kind = kind;
    w->vocab_size = vocab_size;
    w->token_bytes = vocab_size <= 65536 ? 2 : 4;
    w->tokens = w->offsets = w->mask = -1;
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        char why[200];
        pt_fail(e, "%s: cannot create %s: %s", path, w->tmp, h5_reason(why));
        writer_free(w);
        return -1;
    }
    w->tokens = create_growing(w->file, "tokens", w->token_bytes == 2 ? H5T_STD_U16LE : H5T_STD_U32LE, TOKEN_CHUNK);
    w->offsets = create_growing(w->file, "doc_offsets", H5T_STD_U64LE, OFFSET_CHUNK);
    if (kind == DATASET_SFT) w->mask = create_growing(w->file, "loss_mask", H5T_STD_U8LE, TOKEN_CHUNK);
    if (w->tokens < 0 || w->offsets < 0 || (kind == DATASET_SFT && w->mask < 0)) {
        char why[200];
        pt_fail(e, "%s: cannot create datasets: %s", path, h5_reason(why));
        dataset_writer_abort(w);
        return -1;
    }
    w->tok_buf = xmalloc((size_t)TOKEN_CHUNK * w->token_bytes, "token buffer");
    w->mask_buf = xmalloc(TOKEN_CHUNK, "mask buffer");
    w->off_buf = xmalloc(OFFSET_CHUNK * sizeof(uint64_t), "offset buffer");
    w->off_buf[w->off_fill++] = 0;
    *out = w;
    return 0;
}

int dataset_writer_add(DatasetWriter *w, const int *ids, const uint8_t *mask, size_t n, PtError *e) {
    if (w->kind == DATASET_SFT && !mask) return pt_fail(e, "%s: an SFT document needs a loss mask", w->path);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->vocab_size)
            return pt_fail(e, "%s: document %" PRIu64 ": token id %d outside the vocabulary [0, %d)", w->path,
                           w->n_docs, ids[i], w->vocab_size);
    for (size_t i = 0; i < n; i++) {
        if (w->token_bytes == 2) ((uint16_t *)w->tok_buf)[w->tok_fill] = (uint16_t)ids[i];
        else ((uint32_t *)w->tok_buf)[w->tok_fill] = (uint32_t)ids[i];
        if (w->kind == DATASET_SFT) w->mask_buf[w->tok_fill] = mask[i] ? 1 : 0;
        if (++w->tok_fill == TOKEN_CHUNK && flush_tokens(w, e)) return -1;
    }
    w->n_tokens += n;
    w->n_docs++;
    int rc = 0;
    push_offset(w, w->n_tokens, e, &rc);
    return rc;
}

void dataset_writer_set_counts(DatasetWriter *w, uint64_t n_dropped, uint64_t n_truncated, uint64_t n_skipped) {
    w->n_dropped = n_dropped;
    w->n_truncated = n_truncated;
    w->n_skipped = n_skipped;
}

uint64_t dataset_writer_tokens(const DatasetWriter *w) { return w->n_tokens; }
uint64_t dataset_writer_docs(const DatasetWriter *w) { return w->n_docs; }

static int write_u64_attr(hid_t file, const char *name, uint64_t v) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_UINT64, &v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    return rc < 0 ? -1 : 0;
}

// Variable-length UTF-8 strings: h5py reads them as str.
static int write_str_attr(hid_t file, const char *name, const char *v) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, type, &v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    return rc < 0 ? -1 : 0;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int dataset_writer_commit(DatasetWriter *w, PtError *e) {
    char why[200];
    int rc = 0;
    if (flush_tokens(w, e) || flush_offsets(w, e)) rc = -1;
    if (!rc && (write_str_attr(w->file, "kind", kind_name(w->kind)) ||
                write_str_attr(w->file, "tokenizer_hash", w->hash) ||
                write_u64_attr(w->file, "vocab_size", (uint64_t)w->vocab_size) ||
                write_u64_attr(w->file, "n_tokens", w->n_tokens) || write_u64_attr(w->file, "n_docs", w->n_docs) ||
                write_u64_attr(w->file, "n_dropped", w->n_dropped) ||
                write_u64_attr(w->file, "n_truncated", w->n_truncated) ||
                write_u64_attr(w->file, "n_skipped", w->n_skipped) ||
                write_u64_attr(w->file, "format_version", FORMAT_VERSION)))
        rc = pt_fail(e, "%s: writing attributes: %s", w->path, h5_reason(why));
    if (!rc && H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0)
        rc = pt_fail(e, "%s: flush failed: %s", w->path, h5_reason(why));
    close_handles(w);
    if (!rc && fsync_path(w->tmp) != 0) rc = pt_fail(e, "%s: fsync failed: %s", w->path, strerror(errno));
    if (!rc && rename(w->tmp, w->path) != 0) rc = pt_fail(e, "%s: rename failed: %s", w->path, strerror(errno));
    if (rc) unlink(w->tmp);
    writer_free(w);
    return rc;
}

void dataset_writer_abort(DatasetWriter *w) {
    if (!w) return;
    close_handles(w);
    unlink(w->tmp);
    writer_free(w);
}

// ---------------------------------------------------------------- reader

static int read_u64_attr(hid_t file, const char *path, const char *name, uint64_t *v, PtError *e) {
    if (H5Aexists(file, name) <= 0) return pt_fail(e, "%s: attribute '%s' is missing", path, name);
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    hid_t type = a < 0 ? -1 : H5Aget_type(a);
    hid_t space = a < 0 ? -1 : H5Aget_space(a);
    int ok = a >= 0 && H5Tget_class(type) == H5T_INTEGER && H5Sget_simple_extent_npoints(space) == 1 &&
             H5Aread(a, H5T_NATIVE_UINT64, v) >= 0;
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (a >= 0) H5Aclose(a);
    return ok ? 0 : pt_fail(e, "%s: attribute '%s' is not a readable integer", path, name);
}

// Reads a fixed- or variable-length string attribute (malloc'd).
static int read_str_attr(hid_t file, const char *path, const char *name, char **v, PtError *e) {
    if (H5Aexists(file, name) <= 0) return pt_fail(e, "%s: attribute '%s' is missing", path, name);
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    hid_t type = a < 0 ? -1 : H5Aget_type(a);
    int ok = 0;
    if (type >= 0 && H5Tget_class(type) == H5T_STRING) {
        hid_t mem = H5Tcopy(H5T_C_S1);
        H5Tset_cset(mem, H5Tget_cset(type));   // HDF5 does not convert between charsets
        if (H5Tis_variable_str(type) > 0) {
            char *s = NULL;
            H5Tset_size(mem, H5T_VARIABLE);
            if (H5Aread(a, mem, &s) >= 0 && s) {
                *v = xstrdup(s);
                H5free_memory(s);
                ok = 1;
            }
        } else {
            size_t n = H5Tget_size(type);
            char *s = xcalloc(n + 1, 1, "string attribute");
            H5Tset_size(mem, n + 1);
            if (H5Aread(a, mem, s) >= 0) { *v = s; ok = 1; }
            else free(s);
        }
        H5Tclose(mem);
    }
    if (type >= 0) H5Tclose(type);
    if (a >= 0) H5Aclose(a);
    return ok ? 0 : pt_fail(e, "%s: attribute '%s' is not a readable string", path, name);
}

// Opens a 1-D unsigned integer dataset of one of the allowed element sizes
// (sizes: bitmask of 1, 2, 4, 8) and reads it whole.
static int read_uint_dataset(hid_t file, const char *path, const char *name, unsigned sizes, uint64_t expect_len,
                             void **data, int *elem_size, PtError *e) {
    char why[200];
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return pt_fail(e, "%s: dataset /%s is missing", path, name);
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (ds < 0) return pt_fail(e, "%s: /%s is not a dataset: %s", path, name, h5_reason(why));
    hid_t type = H5Dget_type(ds), space = H5Dget_space(ds);
    int rc = 0;
    size_t size = H5Tget_size(type);
    hsize_t len = 0;
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_sign(type) != H5T_SGN_NONE || size > 8 || !(sizes & size)) {
        rc = pt_fail(e, "%s: /%s has the wrong dtype (want %s)", path, name,
                     sizes == 1 ? "uint8" : sizes == 8 ? "uint64" : "uint16 or uint32");
    } else if (H5Sget_simple_extent_ndims(space) != 1) {
        rc = pt_fail(e, "%s: /%s must be one-dimensional", path, name);
    } else {
        H5Sget_simple_extent_dims(space, &len, NULL);
        if (len != expect_len)
            rc = pt_fail(e, "%s: /%s has %llu entries, the attributes say %" PRIu64, path, name,
                         (unsigned long long)len, expect_len);
    }
    if (!rc) {
        hid_t mem = size == 1 ? H5T_NATIVE_UINT8 : size == 2 ? H5T_NATIVE_UINT16 : size == 4 ? H5T_NATIVE_UINT32
                                                                                               : H5T_NATIVE_UINT64;
        *data = xmalloc(len * size, name);
        *elem_size = (int)size;
        if (len && H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) < 0) {
            free(*data);
            *data = NULL;
            rc = pt_fail(e, "%s: /%s cannot be read (corrupt or truncated file?): %s", path, name, h5_reason(why));
        }
    }
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(ds);
    return rc;
}

static int read_header(hid_t f, Dataset *d, PtError *e) {
    const char *p = d->path;
    char *kind = NULL;
    uint64_t vocab;
    if (read_str_attr(f, p, "kind", &kind, e)) return -1;
    int bad_kind = strcmp(kind, "cpt") && strcmp(kind, "sft");
    d->kind = !strcmp(kind, "sft") ? DATASET_SFT : DATASET_CPT;
    if (bad_kind) {
        pt_fail(e, "%s: attribute 'kind' is '%s' (want cpt or sft)", p, kind);
        free(kind);
        return -1;
    }
    free(kind);
    if (read_str_attr(f, p, "tokenizer_hash", &d->tokenizer_hash, e) ||
        read_u64_attr(f, p, "vocab_size", &vocab, e) || read_u64_attr(f, p, "n_tokens", &d->n_tokens, e) ||
        read_u64_attr(f, p, "n_docs", &d->n_docs, e))
        return -1;
    if (vocab == 0 || vocab > INT32_MAX) return pt_fail(e, "%s: attribute vocab_size %" PRIu64 " is out of range", p, vocab);
    d->vocab_size = (int)vocab;
    // Counts of what tokenize left out are informational; older writers may lack them.
    if (H5Aexists(f, "n_dropped") > 0 && read_u64_attr(f, p, "n_dropped", &d->n_dropped, e)) return -1;
    if (H5Aexists(f, "n_truncated") > 0 && read_u64_attr(f, p, "n_truncated", &d->n_truncated, e)) return -1;
    if (H5Aexists(f, "n_skipped") > 0 && read_u64_attr(f, p, "n_skipped", &d->n_skipped, e)) return -1;
    return 0;
}

static int validate(const Dataset *d, PtError *e) {
    const char *p = d->path;
    const uint64_t *off = d->doc_offsets;
    if (off[0] != 0) return pt_fail(e, "%s: /doc_offsets[0] is %" PRIu64 ", want 0", p, off[0]);
    for (uint64_t i = 0; i < d->n_docs; i++)
        if (off[i + 1] < off[i])
            return pt_fail(e, "%s: /doc_offsets is not monotonic at entry %" PRIu64 " (%" PRIu64 " after %" PRIu64 ")",
                           p, i + 1, off[i + 1], off[i]);
    if (off[d->n_docs] != d->n_tokens)
        return pt_fail(e, "%s: /doc_offsets ends at %" PRIu64 ", want n_tokens = %" PRIu64, p, off[d->n_docs],
                       d->n_tokens);
    for (uint64_t i = 0; i < d->n_tokens; i++)
        if (dataset_token(d, i) >= (uint32_t)d->vocab_size)
            return pt_fail(e, "%s: /tokens[%" PRIu64 "] = %u is not below vocab_size %d", p, i, dataset_token(d, i),
                           d->vocab_size);
    if (d->loss_mask)
        for (uint64_t i = 0; i < d->n_tokens; i++)
            if (d->loss_mask[i] > 1)
                return pt_fail(e, "%s: /loss_mask[%" PRIu64 "] = %u (want 0 or 1)", p, i, d->loss_mask[i]);
    return 0;
}

int dataset_open(Dataset *d, const char *path, PtError *e) {
    memset(d, 0, sizeof *d);
    h5_quiet();
    if (!path_exists(path)) return pt_fail(e, "%s: no such file", path);
    char why[200];
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return pt_fail(e, "%s: not a readable HDF5 file: %s", path, h5_reason(why));
    d->path = xstrdup(path);
    int esize = 0, rc = read_header(f, d, e);
    if (!rc) rc = read_uint_dataset(f, path, "tokens", 2 | 4, d->n_tokens, &d->tokens, &d->token_bytes, e);
    if (!rc) {
        void *off = NULL;
        rc = read_uint_dataset(f, path, "doc_offsets", 8, d->n_docs + 1, &off, &esize, e);
        d->doc_offsets = off;
    }
    if (!rc && d->kind == DATASET_SFT) {
        void *mask = NULL;
        rc = read_uint_dataset(f, path, "loss_mask", 1, d->n_tokens, &mask, &esize, e);
        d->loss_mask = mask;
    }
    H5Fclose(f);
    if (!rc) rc = validate(d, e);
    if (rc) dataset_close(d);
    return rc;
}

void dataset_close(Dataset *d) {
    free(d->path);
    free(d->tokenizer_hash);
    free(d->tokens);
    free(d->doc_offsets);
    free(d->loss_mask);
    memset(d, 0, sizeof *d);
}

int dataset_check_tokenizer(const Dataset *d, const char *model_tokenizer_hash, PtError *e) {
    if (model_tokenizer_hash && !strcmp(d->tokenizer_hash, model_tokenizer_hash)) return 0;
    return pt_fail(e, "%s: tokenized with tokenizer %s but the model's tokenizer is %s (re-run pocket tokenize with "
                      "the model's tokenizer)", d->path, d->tokenizer_hash,
                   model_tokenizer_hash ? model_tokenizer_hash : "(none)");
}

int dataset_is_token_file(const char *path) {
    h5_quiet();
    if (!path_exists(path) || H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    int yes = H5Lexists(f, "tokens", H5P_DEFAULT) > 0;
    H5Fclose(f);
    return yes;
}

// ---------------------------------------------------------------- tokenizer from a checkpoint

// The checkpoint stores tokenizer.json as a 1-D uint8/int8 dataset or as a
// string; accept either.
static int read_bytes_dataset(hid_t f, const char *path, const char *name, char **out, size_t *len, PtError *e) {
    char why[200];
    if (H5Lexists(f, "tokenizer", H5P_DEFAULT) <= 0 || H5Lexists(f, name, H5P_DEFAULT) <= 0)
        return pt_fail(e, "%s: no %s in this checkpoint (pass --tokenizer tokenizer.json)", path, name);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return pt_fail(e, "%s: %s: %s", path, name, h5_reason(why));
    hid_t type = H5Dget_type(ds), space = H5Dget_space(ds);
    int rc = -1;
    hssize_t npoints = H5Sget_simple_extent_npoints(space);
    if (H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 1 && npoints >= 0) {
        *out = xmalloc((size_t)npoints + 1, name);
        if (H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) >= 0) {
            (*out)[npoints] = 0;
            *len = (size_t)npoints;
            rc = 0;
        } else free(*out);
    } else if (H5Tget_class(type) == H5T_STRING && npoints == 1) {
        hid_t mem = H5Tcopy(H5T_C_S1);
        H5Tset_cset(mem, H5Tget_cset(type));   // HDF5 does not convert between charsets
        if (H5Tis_variable_str(type) > 0) {
            char *s = NULL;
            H5Tset_size(mem, H5T_VARIABLE);
            if (H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s) >= 0 && s) {
                *out = xstrdup(s);
                *len = strlen(s);
                H5free_memory(s);
                rc = 0;
            }
        } else {
            size_t n = H5Tget_size(type);
            *out = xcalloc(n + 1, 1, name);
            H5Tset_size(mem, n);
            if (H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) >= 0) {
                *len = strnlen(*out, n);
                rc = 0;
            } else free(*out);
        }
        H5Tclose(mem);
    }
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(ds);
    return rc ? pt_fail(e, "%s: %s is neither bytes nor a string", path, name) : 0;
}

int dataset_load_tokenizer(const char *json_or_ckpt, Tokenizer **out, PtError *e) {
    h5_quiet();
    if (!path_exists(json_or_ckpt)) return pt_fail(e, "%s: no such file", json_or_ckpt);
    if (H5Fis_hdf5(json_or_ckpt) <= 0) return tokenizer_load_file(out, json_or_ckpt, e);
    char why[200], *json = NULL;
    size_t len = 0;
    hid_t f = H5Fopen(json_or_ckpt, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return pt_fail(e, "%s: not a readable HDF5 file: %s", json_or_ckpt, h5_reason(why));
    int rc = read_bytes_dataset(f, json_or_ckpt, "/tokenizer/tokenizer.json", &json, &len, e);
    H5Fclose(f);
    if (rc) return -1;
    size_t n = strlen(json_or_ckpt) + 32;
    char *src = xmalloc(n, "name");
    snprintf(src, n, "%s:/tokenizer/tokenizer.json", json_or_ckpt);
    rc = tokenizer_load(out, json, len, src, e);
    free(src);
    free(json);
    return rc;
}

// ---------------------------------------------------------------- inspect

enum { SAMPLE_TOKENS = 256 };

// Prints tokens [a, b) of the sample: text when a tokenizer is given, ids otherwise.
static void print_span(FILE *out, const Dataset *d, const Tokenizer *tok, uint64_t a, uint64_t b) {
    if (a >= b) return;
    if (tok) {
        int *ids = xmalloc((b - a) * sizeof(int), "sample");
        for (uint64_t i = a; i < b; i++) ids[i - a] = (int)dataset_token(d, i);
        char *text = tokenizer_decode(tok, ids, b - a, 0);
        fputs(text, out);
        free(text);
        free(ids);
    } else {
        for (uint64_t i = a; i < b; i++) fprintf(out, "%s%u", i > a ? " " : "", dataset_token(d, i));
    }
}

int dataset_inspect(const char *path, const Tokenizer *tok, FILE *out, PtError *e) {
    Dataset d;
    if (dataset_open(&d, path, e)) return -1;
    uint64_t min_len = UINT64_MAX, max_len = 0, masked = 0;
    for (uint64_t i = 0; i < d.n_docs; i++) {
        uint64_t n = dataset_doc_len(&d, i);
        if (n < min_len) min_len = n;
        if (n > max_len) max_len = n;
    }
    if (d.loss_mask)
        for (uint64_t i = 0; i < d.n_tokens; i++) masked += d.loss_mask[i];
    fprintf(out, "%s: token dataset (%s)\n", path, kind_name(d.kind));
    fprintf(out, "  tokenizer_hash  %s\n", d.tokenizer_hash);
    if (tok && strcmp(tokenizer_hash(tok), d.tokenizer_hash))
        fprintf(out, "  WARNING         the given tokenizer's hash is %s: the sample below is decoded wrongly\n",
                tokenizer_hash(tok));
    fprintf(out, "  vocab_size      %d (tokens stored as uint%d)\n", d.vocab_size, d.token_bytes * 8);
    fprintf(out, "  documents       %" PRIu64 "\n", d.n_docs);
    fprintf(out, "  tokens          %" PRIu64, d.n_tokens);
    if (d.n_docs)
        fprintf(out, " (per document: mean %.1f, min %" PRIu64 ", max %" PRIu64 ")", (double)d.n_tokens / d.n_docs,
                min_len, max_len);
    fputc('\n', out);
    if (d.loss_mask)
        fprintf(out, "  loss mask       %" PRIu64 " tokens trained (%.1f%%)\n", masked,
                d.n_tokens ? 100.0 * masked / d.n_tokens : 0.0);
    fprintf(out, "  left out        %" PRIu64 " dropped (too long), %" PRIu64 " truncated, %" PRIu64 " skipped (bad)\n",
            d.n_dropped, d.n_truncated, d.n_skipped);
    if (d.n_docs) {
        uint64_t a = d.doc_offsets[0], b = d.doc_offsets[1];
        int cut = b - a > SAMPLE_TOKENS;
        if (cut) b = a + SAMPLE_TOKENS;
        fprintf(out, "  sample (document 0, %" PRIu64 " tokens", dataset_doc_len(&d, 0));
        if (cut) fprintf(out, ", the first %d", SAMPLE_TOKENS);
        fprintf(out, "%s):\n", d.loss_mask ? "; [[ ]] marks the loss mask" : "");
        // Contiguous runs of equal mask value, the trained runs in [[ ]].
        uint64_t i = a;
        while (i < b) {
            int m = d.loss_mask ? d.loss_mask[i] : 0;
            uint64_t j = i;
            while (j < b && (d.loss_mask ? d.loss_mask[j] : 0) == m) j++;
            if (m) fputs("[[", out);
            else if (!tok && i > a) fputc(' ', out);
            print_span(out, &d, tok, i, j);
            if (m) fputs("]]", out);
            else if (!tok && j < b) fputc(' ', out);
            i = j;
        }
        fputc('\n', out);
    }
    dataset_close(&d);
    return 0;
}
