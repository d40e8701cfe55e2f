// h5.c: HDF5 helpers (see h5.h).
#include "h5.h"
#include <errno.h>
#include <fcntl.h>
#ifdef __linux__
#include <sys/mman.h>   // memfd_create
#endif
#include <string.h>
#include <unistd.h>

// HDF5 prints its error stack by default; we report errors ourselves.
static void quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

// The most specific message on HDF5's error stack, for the tail of ours.
static herr_t first_error(unsigned n, const H5E_error2_t *err, void *data) {
    if (n == 0 && err->desc) snprintf(data, 200, "%s", err->desc);
    return 0;
}
// A failed system call names its errno ("No space left on device"); HDF5's
// own text for it spans lines.
static const char *reason(char buf[200]) {
    strcpy(buf, "HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_error, buf);
    if (strstr(buf, "errno = ") && errno) snprintf(buf, 200, "%s", strerror(errno));
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

// "/params/x" for messages: the path of loc ("/" for the file) joined with
// name, unless name is absolute.
static const char *object_path(hid_t loc, const char *name, char *buf, size_t size) {
    char parent[512] = "";
    if (name[0] != '/') H5Iget_name(loc, parent, sizeof parent);
    snprintf(buf, size, "%s/%s", strcmp(parent, "/") ? parent : "", name + (name[0] == '/'));
    return buf;
}

static void dtype_name(hid_t type, char buf[16]) {
    size_t bits = H5Tget_size(type) * 8;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER: snprintf(buf, 16, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits); break;
    case H5T_FLOAT: snprintf(buf, 16, "float%zu", bits); break;
    case H5T_STRING: snprintf(buf, 16, "string"); break;
    default: snprintf(buf, 16, "other");
    }
}

// ---------------------------------------------------------------- files

double h5_file_bytes(hid_t obj) {
    hid_t f = H5Iget_file_id(obj);
    hsize_t size = 0;
    if (f >= 0) {
        H5Fget_filesize(f, &size);
        H5Fclose(f);
    }
    return (double)size;
}

int h5_check_declared(hid_t obj, double bytes, const char *what, const char *path, PtError *e) {
    const double deflate_max = H5_DEFLATE_MAX_RATIO, have = h5_file_bytes(obj);
    if (bytes <= have * deflate_max) return 0;
    return pt_fail(e, "%s: %s declares %.3g GB of data, more than a file of %.0f bytes holds even deflated (damaged?)",
                   path, what, bytes / 1e9, have);
}

int h5_check_number_type(hid_t type, const char *what, const char *path, PtError *e) {
    H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) return 0;
    // A number wider than 8 bytes is a damaged datatype (a 32-bit float declared 524292 bytes wide): libhdf5
    // 1.10 converts from it by reading that many bytes per value past its buffers (later releases refuse it)
    size_t width = H5Tget_size(type), bits = width * 8;
    if (width > 8) return pt_fail(e, "%s: %s holds numbers of %zu bytes each (damaged datatype)", path, what, width);
    // Its bit fields must lie inside those bytes: 1.10 converts from fields past them too (SIGSEGV in H5T__bit_find)
    size_t precision = H5Tget_precision(type), spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    int offset = H5Tget_offset(type);
    int bad = precision == 0 || offset < 0 || (size_t)offset + precision > bits;
    if (!bad && cls == H5T_FLOAT) {
        bad = H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0 || spos >= bits || esize == 0 ||
              msize == 0 || esize > 16 || epos + esize > bits || mpos + msize > bits;
    }
    if (bad) return pt_fail(e, "%s: %s has a %zu-byte number type whose bit fields do not fit it (damaged datatype)",
                            path, what, width);
    return 0;
}

int h5_is_file(const char *path) {
    quiet();
    return path_exists(path) && !path_is_dir(path) && H5Fis_hdf5(path) > 0;
}

hid_t h5_open_read(const char *path, PtError *e) {
    quiet();
    if (!path_exists(path)) return pt_fail(e, "%s: no such file", path);
    if (!h5_is_file(path)) return pt_fail(e, "%s: not an HDF5 file (or truncated)", path);
    if (h5_probe(path, e)) return -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char why[200];
    if (f < 0) return pt_fail(e, "%s: cannot open as HDF5 (corrupt or truncated?): %s", path, reason(why));
    return f;
}

int h5_output_create(H5Output *out, const char *path, PtError *e) {
    quiet();
    out->path = xstrdup(path);
    out->tmp = temp_path_for(path);
    out->file = H5Fcreate(out->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (out->file >= 0) return 0;
    char why[200];
    pt_fail(e, "%s: cannot create %s: %s", path, out->tmp, reason(why));
    h5_output_abort(out);
    return -1;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

#ifdef __linux__
// The file descriptor of a file of HDF5's default (sec2) driver, or -1.
static int sec2_fd(hid_t file) {
    hid_t fapl = H5Fget_access_plist(file);
    int sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
    if (fapl >= 0) H5Pclose(fapl);
    void *handle = NULL;
    if (!sec2 || H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle) return -1;
    return *(int *)handle;
}
#endif

// The disk space the close's metadata flush writes into, reserved before it:
// libhdf5 1.10 cannot close a file whose flush failed (its metadata cache is
// left half-flushed) and crashes at exit, so a full disk must show here,
// where abort can still close the file. The file's size is unchanged
// (KEEP_SIZE); the close truncates it to its end. 0, or the errno of a disk
// that has not the room; a filesystem without fallocate reserves nothing.
static int reserve_for_close(hid_t file) {
#ifdef __linux__
    hsize_t size = 0;
    int fd = sec2_fd(file);
    if (fd < 0 || H5Fget_filesize(file, &size) < 0) return 0;
    const off_t margin = 4 << 20;   // metadata the flush may still allocate
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)size + margin) == 0) return 0;
    return errno == ENOSPC || errno == EDQUOT || errno == EFBIG ? errno : 0;
#else   // no fallocate (macOS): nothing reserved
    (void)file;
    return 0;
#endif
}

int h5_output_commit(H5Output *out, PtError *e) {
    char why[200];
    int rc = 0, full = reserve_for_close(out->file);
    if (full) {
        pt_fail(e, "%s: writing failed: %s", out->path, strerror(full));
        h5_output_abort(out);
        return -1;
    }
    if (H5Fclose(out->file) < 0) rc = pt_fail(e, "%s: writing failed: %s", out->path, reason(why));
    if (!rc && fsync_path(out->tmp) != 0) rc = pt_fail(e, "%s: fsync failed: %s", out->path, strerror(errno));
    if (!rc && rename(out->tmp, out->path) != 0)
        rc = pt_fail(e, "%s: rename failed: %s", out->path, strerror(errno));
    out->file = -1;   // closed, even when H5Fclose failed
    if (!rc) {        // renamed: no temporary file to remove
        free(out->tmp);
        out->tmp = NULL;
    }
    h5_output_abort(out);
    return rc;
}

// The writes left in a file being thrown away go to an anonymous file in
// memory, so that HDF5 can close it after a write failed (a full disk):
// libhdf5 1.10 crashes at exit on a file whose close failed. The file is
// sparse, and no more data is written to it than the writes since the failure.
static void discard_writes(hid_t file) {
#ifdef __linux__
    int fd = sec2_fd(file), sink = fd >= 0 ? memfd_create("discarded-h5", 0) : -1;
    if (sink < 0) return;
    dup2(sink, fd);
    close(sink);
#else   // no memfd (macOS): the writes go where they went
    (void)file;
#endif
}

void h5_output_abort(H5Output *out) {
    if (out->file >= 0) {
        discard_writes(out->file);
        H5Fclose(out->file);
    }
    if (out->tmp) unlink(out->tmp);
    free(out->path);
    free(out->tmp);
    out->file = -1;
    out->path = out->tmp = NULL;
}

// ---------------------------------------------------------------- groups and links

int h5_exists(hid_t loc, const char *name) {
    // Checks "a", then "a/b", ...: H5Lexists on "a/b" is an error when "a" is missing.
    char prefix[1024];
    size_t n = strlen(name);
    if (n >= sizeof prefix) return 0;
    for (size_t i = 1; i <= n; i++) {
        if (name[i] != '/' && name[i] != 0) continue;
        memcpy(prefix, name, i);
        prefix[i] = 0;
        if (H5Lexists(loc, prefix, H5P_DEFAULT) <= 0) return 0;
    }
    return n > 0;
}

hid_t h5_create_group(hid_t loc, const char *name) {
    return H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

// Opens a group or a dataset, or fills e: "/a/b is missing", "/a/b is not a group".
static hid_t open_object(hid_t loc, const char *name, int group, const char *path, PtError *e) {
    char where[512];
    object_path(loc, name, where, sizeof where);
    if (!h5_exists(loc, name)) return pt_fail(e, "%s: %s is missing", path, where);
    hid_t id = group ? H5Gopen2(loc, name, H5P_DEFAULT) : H5Dopen2(loc, name, H5P_DEFAULT);
    if (id < 0) return pt_fail(e, "%s: %s is not a %s", path, where, group ? "group" : "dataset");
    return id;
}

hid_t h5_open_group(hid_t loc, const char *name, const char *path, PtError *e) {
    return open_object(loc, name, 1, path, e);
}

int h5_child_count(hid_t group) {
    H5G_info_t info;
    return H5Gget_info(group, &info) < 0 ? -1 : (int)info.nlinks;
}

const char *h5_child_name(hid_t group, int i, char *buf, size_t size) {
    ssize_t n = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, buf, size, H5P_DEFAULT);
    return n < 0 ? NULL : buf;
}

// ---------------------------------------------------------------- attributes

static int write_attr_typed(hid_t obj, const char *name, hid_t type, hid_t space, const void *value) {
    hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (attr >= 0 && H5Awrite(attr, type, value) >= 0) ? 0 : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    return rc;
}

int h5_write_attr(hid_t obj, const char *name, hid_t type, const void *value, size_t count) {
    hsize_t dims[1] = {count};
    return write_attr_typed(obj, name, type, count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL),
                            value);
}

int h5_write_str_attr(hid_t obj, const char *name, const char *s) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(s) + 1);
    int rc = write_attr_typed(obj, name, type, H5Screate(H5S_SCALAR), s);
    H5Tclose(type);
    return rc;
}

int h5_write_utf8_attr(hid_t obj, const char *name, const char *s) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    int rc = write_attr_typed(obj, name, type, H5Screate(H5S_SCALAR), &s);
    H5Tclose(type);
    return rc;
}

int h5_has_attr(hid_t obj, const char *name) { return H5Aexists(obj, name) > 0; }

// Opens an attribute, or fills e when it is missing.
static hid_t open_attr(hid_t obj, const char *name, char *where, size_t size, const char *path, PtError *e) {
    if (H5Iget_name(obj, where, size) <= 0) snprintf(where, size, "?");
    if (!h5_has_attr(obj, name)) return pt_fail(e, "%s: attribute '%s' of %s is missing", path, name, where);
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0) return pt_fail(e, "%s: attribute '%s' of %s cannot be opened", path, name, where);
    return attr;
}

int h5_read_attr(hid_t obj, const char *name, hid_t type, void *value, size_t count, const char *path, PtError *e) {
    char where[512], got[16], want[16];
    hid_t attr = open_attr(obj, name, where, sizeof where, path, e);
    if (attr < 0) return -1;
    hid_t ftype = H5Aget_type(attr), space = H5Aget_space(attr);
    H5T_class_t fclass = H5Tget_class(ftype), mclass = H5Tget_class(type);
    hssize_t n = H5Sget_simple_extent_npoints(space);
    dtype_name(ftype, got);
    dtype_name(type, want);
    H5Sclose(space);
    H5Tclose(ftype);
    int rc = 0;
    if (fclass != mclass && !(mclass == H5T_FLOAT && fclass == H5T_INTEGER))
        rc = pt_fail(e, "%s: attribute '%s' of %s is %s, want %s", path, name, where, got, want);
    else if (n != (hssize_t)count)
        rc = pt_fail(e, "%s: attribute '%s' of %s holds %lld values, want %zu", path, name, where, (long long)n, count);
    else if (H5Aread(attr, type, value) < 0)
        rc = pt_fail(e, "%s: attribute '%s' of %s cannot be read", path, name, where);
    H5Aclose(attr);
    return rc;
}

char *h5_read_string_here(hid_t obj, hid_t type, int is_attr) {
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mem, H5Tget_cset(type));   // HDF5 does not convert between charsets
    char *s = NULL, *v = NULL;
    if (H5Tis_variable_str(type) > 0) {
        H5Tset_size(mem, H5T_VARIABLE);
        herr_t st = is_attr ? H5Aread(obj, mem, &v) : H5Dread(obj, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
        if (st >= 0 && v) s = xstrdup(v);
        H5free_memory(v);
    } else {
        size_t n = H5Tget_size(type);   // stored as it is: a length past the file's is a damaged header
        if ((double)n > h5_file_bytes(obj)) {
            H5Tclose(mem);
            return NULL;
        }
        v = xcalloc(n + 1, 1, "string");
        H5Tset_size(mem, n + 1);
        herr_t st = is_attr ? H5Aread(obj, mem, v) : H5Dread(obj, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        if (st >= 0) s = v;
        else free(v);
    }
    H5Tclose(mem);
    return s;
}

typedef struct {
    hid_t obj, type;
    int is_attr;
} StringRead;

static int read_string_work(void *ctx, int out) {
    const StringRead *r = ctx;
    char *s = h5_read_string_here(r->obj, r->type, r->is_attr);
    const int rc = s && h5_child_write(out, s, strlen(s)) == 0 ? 0 : -1;
    free(s);
    return rc;
}

char *h5_read_string(hid_t obj, hid_t type, int is_attr) {
    if (H5Tis_variable_str(type) <= 0) return h5_read_string_here(obj, type, is_attr);
    // libhdf5 1.10 copies a variable-length string's global-heap object into a buffer sized by the string's
    // declared length: a crafted heap overruns it (a corrupt malloc heap that aborts the process later), so
    // the string is read in a child, which hands over only its bytes
    char path[4096], *s = NULL;
    size_t len = 0;
    StringRead r = {obj, type, is_attr};
    if (H5Fget_name(obj, path, sizeof path) <= 0) return NULL;
    int rc = h5_in_child(path, "reading a string", read_string_work, &r, &s, &len, (size_t)h5_file_bytes(obj) + 1, NULL);
    if (rc == 0 && strlen(s) == len) return s;   // (a NUL inside: not a string pocket wrote)
    free(s);
    return NULL;
}

int h5_read_str_attr(hid_t obj, const char *name, char **s, const char *path, PtError *e) {
    char where[512];
    hid_t attr = open_attr(obj, name, where, sizeof where, path, e);
    if (attr < 0) return -1;
    hid_t type = H5Aget_type(attr);
    *s = H5Tget_class(type) == H5T_STRING ? h5_read_string(attr, type, 1) : NULL;
    H5Tclose(type);
    H5Aclose(attr);
    return *s ? 0 : pt_fail(e, "%s: attribute '%s' of %s is not a readable string", path, name, where);
}

// ---------------------------------------------------------------- datasets

static hsize_t element_count(int rank, const hsize_t *dims) {
    hsize_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    return n;
}

// maxdims NULL: fixed shape. Empty datasets stay contiguous: a chunk cannot
// be larger than a fixed dimension of 0.
static hid_t create_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims,
                            const hsize_t *maxdims) {
    hsize_t chunk[H5_MAX_RANK];
    size_t row_bytes = H5Tget_size(type);
    for (int d = 1; d < rank; d++) {
        chunk[d] = dims[d];
        row_bytes *= dims[d];
    }
    chunk[0] = row_bytes && H5_CHUNK_BYTES / row_bytes ? H5_CHUNK_BYTES / row_bytes : 1;
    if (!maxdims && chunk[0] > dims[0]) chunk[0] = dims[0];
    hid_t space = H5Screate_simple(rank, dims, maxdims);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (maxdims || element_count(rank, dims) > 0) {
        H5Pset_chunk(dcpl, rank, chunk);
        H5Pset_shuffle(dcpl);   // byte-shuffling roughly doubles deflate's ratio on small integers
        H5Pset_deflate(dcpl, H5_DEFLATE_LEVEL);
    }
    H5Pset_obj_track_times(dcpl, 0);   // no timestamps: the same input gives the same bytes
    hid_t ds = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(space);
    return ds;
}

int h5_write_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, const void *data) {
    hid_t ds = create_dataset(loc, name, type, rank, dims, NULL);
    if (ds < 0) return -1;
    herr_t st = element_count(rank, dims) ? H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : 0;
    if (H5Dclose(ds) < 0) st = -1;   // the chunk cache's last writes
    return st < 0 ? -1 : 0;
}

hid_t h5_create_growing(hid_t loc, const char *name, hid_t type) {
    hsize_t zero = 0, unlimited = H5S_UNLIMITED;
    return create_dataset(loc, name, type, 1, &zero, &unlimited);
}

int h5_append(hid_t dataset, hid_t type, const void *data, size_t n) {
    if (n == 0) return 0;
    hsize_t at = 0, count = n;
    hid_t fspace = H5Dget_space(dataset);
    H5Sget_simple_extent_dims(fspace, &at, NULL);
    H5Sclose(fspace);
    hsize_t size = at + count;
    if (H5Dset_extent(dataset, &size) < 0) return -1;
    fspace = H5Dget_space(dataset);
    hid_t mspace = H5Screate_simple(1, &count, NULL);
    herr_t rc = H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &at, NULL, &count, NULL);
    if (rc >= 0) rc = H5Dwrite(dataset, type, mspace, fspace, H5P_DEFAULT, data);
    H5Sclose(mspace);
    H5Sclose(fspace);
    return rc < 0 ? -1 : 0;
}

int h5_write_bytes(hid_t loc, const char *name, const void *data, size_t len) {
    hsize_t dims[1] = {len};
    return h5_write_dataset(loc, name, H5T_NATIVE_UINT8, 1, dims, data);
}

// Opens a dataset and describes it, or fills e.
static hid_t open_dataset(hid_t loc, const char *name, H5DatasetInfo *info, const char *path, PtError *e) {
    hid_t ds = open_object(loc, name, 0, path, e);
    if (ds < 0) return -1;
    hid_t type = H5Dget_type(ds), space = H5Dget_space(ds);
    memset(info, 0, sizeof *info);
    dtype_name(type, info->dtype);
    info->rank = H5Sget_simple_extent_ndims(space);
    if (info->rank >= 0 && info->rank <= H5_MAX_RANK) H5Sget_simple_extent_dims(space, info->dims, NULL);
    info->stored_bytes = H5Dget_storage_size(ds);
    char where[512];
    int rc = h5_check_number_type(type, object_path(loc, name, where, sizeof where), path, e);
    H5Sclose(space);
    H5Tclose(type);
    if (rc) H5Dclose(ds);
    return rc ? -1 : ds;
}

int h5_dataset_info(hid_t loc, const char *name, H5DatasetInfo *info, const char *path, PtError *e) {
    hid_t ds = open_dataset(loc, name, info, path, e);
    if (ds < 0) return -1;
    H5Dclose(ds);
    return 0;
}

static void format_shape(char *buf, size_t size, int rank, const hsize_t *dims) {
    size_t n = snprintf(buf, size, "[");
    for (int d = 0; d < rank && d < H5_MAX_RANK && n < size; d++)
        n += snprintf(buf + n, size - n, "%s%llu", d ? ", " : "", (unsigned long long)dims[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

// The checks of h5_read_dataset; reads into *out, allocating it first when alloc is set.
static int read_checked(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, void **out, int alloc,
                        const char *path, PtError *e) {
    H5DatasetInfo info;
    hid_t ds = open_dataset(loc, name, &info, path, e);
    if (ds < 0) return -1;
    char where[512], want[16], got[96], expect[96];
    object_path(loc, name, where, sizeof where);
    dtype_name(type, want);
    int same_shape = info.rank == rank;
    for (int d = 0; d < rank && same_shape; d++) same_shape = info.dims[d] == dims[d];
    hsize_t n = element_count(rank, dims);
    int rc = 0;
    if (!same_shape && rank == 1 && info.rank == 1) {
        rc = pt_fail(e, "%s: %s has %llu entries, expected %llu", path, where, (unsigned long long)info.dims[0],
                     (unsigned long long)dims[0]);
    } else if (!same_shape) {
        format_shape(got, sizeof got, info.rank, info.dims);
        format_shape(expect, sizeof expect, rank, dims);
        rc = pt_fail(e, "%s: %s has shape %s, expected %s", path, where, got, expect);
    } else if (H5Tget_class(type) == H5T_FLOAT ? strncmp(info.dtype, "float", 5) : strcmp(info.dtype, want)) {
        rc = pt_fail(e, "%s: %s has the wrong dtype (%s, want %s)", path, where, info.dtype, want);
    } else if (!alloc || !(rc = h5_check_declared(ds, (double)n * (double)H5Tget_size(type), where, path, e))) {
        void *buf = alloc ? xmalloc(n * H5Tget_size(type), name) : *out;
        char why[200];
        if (n && h5_read_all(ds, type, buf, why) < 0)
            rc = pt_fail(e, "%s: %s cannot be read (corrupt or truncated?): %s", path, where, why);
        if (alloc && rc) free(buf);
        else if (alloc) *out = buf;
    }
    H5Dclose(ds);
    return rc;
}

int h5_read_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, void *out,
                    const char *path, PtError *e) {
    return read_checked(loc, name, type, rank, dims, &out, 0, path, e);
}

int h5_read_dataset_alloc(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, void **out,
                          const char *path, PtError *e) {
    return read_checked(loc, name, type, rank, dims, out, 1, path, e);
}

int h5_read_bytes(hid_t loc, const char *name, char **data, size_t *len, const char *path, PtError *e) {
    H5DatasetInfo info;
    hid_t ds = open_dataset(loc, name, &info, path, e);
    if (ds < 0) return -1;
    int rc = -1;
    *data = NULL;
    char where[512], why[200] = "";
    object_path(loc, name, where, sizeof where);
    if (info.rank == 1 && (!strcmp(info.dtype, "uint8") || !strcmp(info.dtype, "int8"))) {
        if (h5_check_declared(ds, (double)info.dims[0], where, path, e)) {
            H5Dclose(ds);
            return -1;
        }
        *len = info.dims[0];
        *data = xmalloc(*len + 1, name);
        (*data)[*len] = 0;
        if (*len == 0 || h5_read_all(ds, H5T_NATIVE_UCHAR, *data, why) >= 0) rc = 0;
    } else if (info.rank == 0 && !strcmp(info.dtype, "string")) {
        hid_t type = H5Dget_type(ds);
        *data = h5_read_string(ds, type, 0);
        H5Tclose(type);
        if (*data) {
            *len = strlen(*data);
            rc = 0;
        }
    }
    H5Dclose(ds);
    if (rc == 0) return 0;
    free(*data);
    *data = NULL;
    if (why[0]) return pt_fail(e, "%s: %s cannot be read (corrupt or truncated?): %s", path, where, why);
    return pt_fail(e, "%s: %s is neither bytes nor a string", path, where);
}
