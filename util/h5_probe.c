// h5_probe.c: a file's HDF5 structure walked in a child process before this
// process trusts libhdf5 with it (see h5_probe in h5.h).
//
// Why: libhdf5 (1.10.8 here, and 2.0.0 too on two of the inputs) crashes or
// loops without end on some crafted headers; pocket cannot fix libhdf5, so it
// lets a child meet them first. The child makes the calls the loaders make
// (links in name order, objects, every attribute with its value, every
// dataset's type, shape, layout and chunk index, string datasets' values)
// and checks what libhdf5 would later trust: numbers at most 8 bytes wide,
// declared sizes a file can hold, chunks inside the dataset and the file.
// Any call that fails refuses the file: no sound file fails one, and a
// damaged file whose attribute list cannot be read may still crash on a
// lookup by name. Data chunks are not inflated: zlib bounds its own output.
#include "h5.h"
#include "h5_chunk_grid.h"
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *path;
    hsize_t file_bytes;
    char object[300];   // the path of the object walked
    PtError err;        // the refusal, empty while the walk goes on
} Walk;

// Fills w->err with "PATH: WHERE: WHAT (damaged?)"; -1.
static int refuse(Walk *w, const char *where, const char *what) {
    return pt_fail(&w->err, "%s: %s: %s (damaged?)", w->path, where, what);
}

// The shape of a dataspace; -1 when it is not simple or too large.
static int space_shape(hid_t space, hsize_t dims[H5S_MAX_RANK], double *elements) {
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0 || rank > H5S_MAX_RANK || H5Sget_simple_extent_dims(space, dims, NULL) < 0) return -1;
    *elements = H5Sget_simple_extent_type(space) == H5S_NULL ? 0 : 1;   // h5py's empty attribute
    for (int d = 0; d < rank; d++) *elements *= (double)dims[d];
    return rank;
}

// A type pocket may read: numbers at most 8 bytes wide (libhdf5 1.10 converts
// wider ones past its buffers), strings no longer than the file.
static int check_type(Walk *w, hid_t type, const char *where) {
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    if (cls < 0 || size == 0) return refuse(w, where, "unreadable datatype");
    if (h5_check_number_type(type, where, w->path, &w->err)) return -1;
    if (cls == H5T_STRING && H5Tis_variable_str(type) <= 0 && size > w->file_bytes)
        return refuse(w, where, "a string longer than the file");
    return 0;
}

// Reads a value as the loaders would (numbers converted to 8-byte ones,
// strings fixed or variable), so that the heaps behind it are walked.
static int read_value(Walk *w, hid_t obj, int is_attr, hid_t type, double elements, const char *where) {
    H5T_class_t cls = H5Tget_class(type);
    hid_t mem = -1;
    if (cls == H5T_INTEGER) mem = H5Tget_sign(type) == H5T_SGN_NONE ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
    else if (cls == H5T_FLOAT) mem = H5T_NATIVE_DOUBLE;
    else if (cls != H5T_STRING) return 0;   // compound, enum, ...: no loader reads them
    if (cls == H5T_STRING && elements != 1) return 0;   // only scalar strings are read
    if (cls != H5T_STRING && !is_attr) return 0;      // dataset numbers: the chunk index is checked instead
    if (h5_check_declared(obj, elements * 8, where, w->path, &w->err)) return -1;
    int ok = 1;
    if (cls == H5T_STRING) {
        char *v = h5_read_string_here(obj, type, is_attr);
        ok = v != NULL;
        free(v);
    } else if (elements > 0) {
        void *v = xmalloc((size_t)elements * 8, "attribute");
        ok = H5Aread(obj, mem, v) >= 0;
        free(v);
    }
    return ok ? 0 : refuse(w, where, "its value cannot be read");
}

static herr_t attribute(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
    (void)info;
    Walk *w = data;
    char where[400];
    snprintf(where, sizeof where, "%s attribute '%.80s'", w->object, name);
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0) return refuse(w, where, "cannot be opened");
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    hsize_t dims[H5S_MAX_RANK];
    double elements = 0;
    int rc = 0;
    if (type < 0 || space < 0 || space_shape(space, dims, &elements) < 0) rc = refuse(w, where, "unreadable header");
    else if (!(rc = check_type(w, type, where))) rc = read_value(w, attr, 1, type, elements, where);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    H5Aclose(attr);
    return rc < 0 ? -1 : 0;
}

// Every chunk the index holds must sit at a chunk-aligned place inside the
// dataset and inside the file: each place of the chunk grid is looked up,
// and together they must account for every chunk the index counts.
static int check_chunks(Walk *w, hid_t ds, hid_t dcpl, int rank, const hsize_t *dims, double elements,
                        size_t type_bytes, const char *where) {
    hsize_t chunk[H5S_MAX_RANK], max[H5S_MAX_RANK], n_chunks = 0, found = 0;
    if (H5Pget_chunk(dcpl, rank, chunk) != rank) return refuse(w, where, "unreadable chunk layout");
    hid_t space = H5Dget_space(ds);
    const char *bad = space < 0 || H5Sget_simple_extent_dims(space, NULL, max) != rank ? "unreadable shape" : NULL;
    double chunk_bytes = (double)type_bytes;
    for (int d = 0; d < rank && !bad; d++) {
        if (chunk[d] == 0) bad = "a chunk dimension of 0";
        // libhdf5 1.10 copies a whole chunk out of a buffer sized by the data: a heap over-read
        else if (max[d] != H5S_UNLIMITED && chunk[d] > max[d]) bad = "chunks larger than the dataset's fixed shape";
        chunk_bytes *= (double)chunk[d];
    }
    // (libhdf5 1.10 takes no H5S_ALL here)
    if (!bad && elements > 0 && H5Dget_num_chunks(ds, space, &n_chunks) < 0) bad = "unreadable chunk index";
    if (space >= 0) H5Sclose(space);
    if (bad) return refuse(w, where, bad);
    if (elements == 0) return 0;
    hsize_t offset[H5S_MAX_RANK];
    ChunkGrid g;
    chunk_grid_start(&g, rank, dims, chunk);
    while (chunk_grid_next(&g, offset)) {
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(ds, offset, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF) continue;
        found++;
        if (addr > w->file_bytes || size > w->file_bytes - addr)
            return refuse(w, where, "a chunk lies past the end of the file");
        if ((double)size > chunk_stored_max(chunk_bytes))
            return refuse(w, where, "a chunk is stored larger than its data");
    }
    if (found != n_chunks) return refuse(w, where, "the chunk index holds chunks outside the dataset");
    return 0;
}

static int check_dataset(Walk *w, hid_t ds, const char *where) {
    hid_t type = H5Dget_type(ds), space = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    hsize_t dims[H5S_MAX_RANK];
    double elements = 0;
    int rc = type < 0 || space < 0 || dcpl < 0 ? refuse(w, where, "unreadable header") : 0;
    int rank = rc ? -1 : space_shape(space, dims, &elements);
    if (!rc && rank < 0) rc = refuse(w, where, "unreadable shape");
    if (!rc) rc = check_type(w, type, where);
    size_t type_bytes = rc ? 0 : H5Tget_size(type);
    if (!rc) rc = h5_check_declared(ds, elements * (double)type_bytes, where, w->path, &w->err);
    if (!rc) {
        H5D_layout_t layout = H5Pget_layout(dcpl);
        if (layout == H5D_CHUNKED) {
            rc = check_chunks(w, ds, dcpl, rank, dims, elements, type_bytes, where);
        } else if (layout == H5D_CONTIGUOUS) {
            haddr_t addr = H5Dget_offset(ds);
            double bytes = elements * (double)type_bytes;
            if (addr != HADDR_UNDEF && (addr > w->file_bytes || bytes > (double)(w->file_bytes - addr)))
                rc = refuse(w, where, "its data lies past the end of the file");
        } else if (layout == H5D_COMPACT) {   // in the header: it must hold every element
            if (H5Tis_variable_str(type) <= 0 && (double)H5Dget_storage_size(ds) < elements * (double)type_bytes)
                rc = refuse(w, where, "its data is shorter than its shape");
        } else {
            rc = refuse(w, where, "an unknown storage layout");
        }
    }
    if (!rc) rc = read_value(w, ds, 0, type, elements, where);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    return rc;
}

static int check_object(Walk *w, hid_t loc, const char *name) {
    char *where = w->object;
    snprintf(where, sizeof w->object, "%s%s", name[0] == '/' ? "" : "/", name);
    hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    if (obj < 0) return refuse(w, where, "cannot be opened");
    H5I_type_t kind = H5Iget_type(obj);
    int rc = 0;
    if (kind == H5I_DATASET) rc = check_dataset(w, obj, where);
    if (!rc && H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, NULL, attribute, w) < 0)
        rc = w->err.msg[0] ? -1 : refuse(w, where, "its attributes cannot be read");
    H5Oclose(obj);
    return rc;
}

static herr_t link_visit(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    Walk *w = data;
    if (info->type == H5L_TYPE_EXTERNAL || info->type >= H5L_TYPE_UD_MIN) {
        snprintf(w->object, sizeof w->object, "/%s", name);
        return refuse(w, w->object, "a link to another file");
    }
    if (info->type != H5L_TYPE_HARD) return 0;   // a soft link names an object walked under its own name
    return check_object(w, group, name) ? -1 : 0;
}

// The walk, in the child: 0, or -1 with w->err.
static int walk_file(Walk *w) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(w->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;   // h5_open_read reports it
    int rc = check_object(w, f, "/");
    if (!rc && H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, link_visit, w) < 0)
        rc = w->err.msg[0] ? -1 : refuse(w, "/", "its links cannot be read");
    H5Fclose(f);
    return rc;
}

static int walk_work(void *ctx, int out) {
    Walk *w = ctx;
    int rc = walk_file(w);
    if (rc && w->err.msg[0]) {
        ssize_t n = write(out, w->err.msg, strlen(w->err.msg));
        (void)n;
    }
    return rc;
}

int h5_probe(const char *path, PtError *e) {
    int64_t bytes = file_size(path);
    if (bytes < 0) return pt_fail(e, "%s: no such file", path);
    Walk w = {path, (hsize_t)bytes, "", {""}};
    char *said;
    size_t len;
    int rc = h5_in_child(path, "reading the file's structure", walk_work, &w, &said, &len, sizeof e->msg, e);
    if (rc == 1 && len) pt_fail(e, "%s", said);
    else if (rc == 1) pt_fail(e, "%s: its structure cannot be read (damaged?)", path);
    free(said);
    return rc ? -1 : 0;
}
