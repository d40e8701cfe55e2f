// h5.h: the one HDF5 layer of the project (checkpoints and token datasets).
// Opening or creating a file turns HDF5's own error printing off; a function
// that can fail on bad input fills a PtError with one line naming the file
// (`path`) and the object's path inside it. Writers just return -1: their
// callers say what was being written.
//
// Stored types: a function taking one `type` uses it both in memory and in
// the file, so native types are stored as their little-endian equivalents
// (H5T_NATIVE_FLOAT is stored as H5T_IEEE_F32LE, as h5py expects).
#pragma once
#include <hdf5.h>
#include "util.h"

// Every dataset is chunked along its first dimension, shuffled and deflated:
#define H5_CHUNK_BYTES (128u << 10)   // zlib's window is 32 KiB: bigger chunks compress barely better
#define H5_DEFLATE_LEVEL 1            // levels 4-6 shrink shuffled floats and ids 1-3% more, in up to 2.5x the time
#define H5_MAX_RANK 4   // the most dimensions H5DatasetInfo describes

// ---- files
int h5_is_file(const char *path);                  // an existing regular file in HDF5 format
// Read-only; <0 on error (no such file, not HDF5, corrupt). The file is first
// walked by h5_probe, so a header crafted against libhdf5 is refused here.
hid_t h5_open_read(const char *path, PtError *e);
// Walks the file's structure in a child process (h5_in_child): its links,
// objects, attributes and their values, datasets' types, shapes and chunk
// indexes. A file on which libhdf5 crashes or loops, or whose headers declare
// what libhdf5 would read past its buffers, is one error here.
int h5_probe(const char *path, PtError *e);

// libhdf5 work on `path` in a child process (util/h5_child.c), bounded to
// 0.3 s of CPU plus 10 s per GB of the file, 60 s + 20 times that of wall
// clock and, outside sanitizer builds, 4 GB of memory over this process's.
// work(ctx, out) runs in the child, may write up to `cap` bytes to the file
// descriptor out (returned malloc'd and NUL-terminated in *out, *len) and
// returns 0, or non-zero to refuse. Returns 0 or 1 (refused) with *out, or -1
// with e naming the file and `doing` ("reading the file's structure") when
// the child crashed, looped or could not start.
typedef int (*H5ChildWork)(void *ctx, int out);
#define H5_CHILD_REFUSED 3   // the child's exit status when work refused
int h5_in_child(const char *path, const char *doing, H5ChildWork work, void *ctx, char **out, size_t *len,
                size_t cap, PtError *e);
// In a work function: the n bytes of data to `out`, all of them; 0, or -1.
int h5_child_write(int out, const void *data, size_t n);

// An output file is written as PATH.tmp.PID and renamed over PATH by commit,
// so a crash or an error never leaves a half-written PATH behind.
typedef struct { hid_t file; char *path, *tmp; } H5Output;
int h5_output_create(H5Output *out, const char *path, PtError *e);
// Closes the file (close its datasets and groups first), fsyncs, renames.
int h5_output_commit(H5Output *out, PtError *e);
void h5_output_abort(H5Output *out);   // closes and removes the temporary file, as a failed commit does

// Refuses data no file of obj's size can store, before room is made for it:
// `bytes` of data take at least bytes / 1032 bytes of file (deflate's bound),
// so a header or attribute declaring more (`what`: "/config", "/tokens") is
// one error naming the file rather than gigabytes allocated.
int h5_check_declared(hid_t obj, double bytes, const char *what, const char *path, PtError *e);
#define H5_DEFLATE_MAX_RATIO 1032.0   // zlib's most bytes out per byte in
double h5_file_bytes(hid_t obj);      // the size of the file obj lies in (0 when unknown)
// Refuses an integer or float type wider than 8 bytes, or whose bit fields
// (precision, offset; sign, exponent, mantissa) do not fit its bytes (a
// damaged header's): libhdf5 1.10 converts from one by reading past its buffers.
int h5_check_number_type(hid_t type, const char *what, const char *path, PtError *e);

// ---- groups and links; a name may be a path ("optim/m") relative to loc
int h5_exists(hid_t loc, const char *name);         // 1 when every part of the path exists
hid_t h5_create_group(hid_t loc, const char *name);
hid_t h5_open_group(hid_t loc, const char *name, const char *path, PtError *e);   // "is missing", "is not a group"
int h5_child_count(hid_t group);
// The name of the i-th link of a group in name order, in buf (truncated to size); NULL on error.
const char *h5_child_name(hid_t group, int i, char *buf, size_t size);

// ---- attributes of a group or file (obj)
// `count` values: a scalar when 1, else a 1-D array.
int h5_write_attr(hid_t obj, const char *name, hid_t type, const void *value, size_t count);
int h5_write_str_attr(hid_t obj, const char *name, const char *s);    // fixed-length ASCII
int h5_write_utf8_attr(hid_t obj, const char *name, const char *s);   // variable-length UTF-8 (h5py: str)
int h5_has_attr(hid_t obj, const char *name);
// Reads exactly `count` values, converted to type: an integer type needs an
// integer attribute, a float type takes an integer or a float.
int h5_read_attr(hid_t obj, const char *name, hid_t type, void *value, size_t count, const char *path, PtError *e);
// A fixed- or variable-length string, malloc'd into *s.
int h5_read_str_attr(hid_t obj, const char *name, char **s, const char *path, PtError *e);
// The scalar string value, fixed or variable length, of an attribute or a
// dataset (is_attr says which obj is) of string type `type`, malloc'd; NULL
// when it cannot be read. A variable-length one is read in a child process
// (h5_in_child); h5_read_string_here reads it in this process (for code that
// already runs in a child).
char *h5_read_string(hid_t obj, hid_t type, int is_attr);
char *h5_read_string_here(hid_t obj, hid_t type, int is_attr);

// ---- datasets
// A new chunked, shuffled, deflated dataset of the given shape holding data.
int h5_write_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, const void *data);
// A 1-D dataset that starts empty and grows by h5_append, n elements at a time.
hid_t h5_create_growing(hid_t loc, const char *name, hid_t type);
int h5_append(hid_t dataset, hid_t type, const void *data, size_t n);
int h5_write_bytes(hid_t loc, const char *name, const void *data, size_t len);   // 1-D uint8

typedef struct {
    char dtype[16];          // "uint16", "float32", "string", ... ("other" for the rest)
    int rank;
    hsize_t dims[H5_MAX_RANK];
    hsize_t stored_bytes;    // on disk, after compression
} H5DatasetInfo;
int h5_dataset_info(hid_t loc, const char *name, H5DatasetInfo *info, const char *path, PtError *e);
// Reads a whole dataset after checking it has exactly `rank` and `dims` and a
// dtype that `type` can hold: the same integer type, or any float for a float
// type. Errors name the dataset: "/params/x has shape [4, 8], expected [8, 4]".
int h5_read_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, void *out,
                    const char *path, PtError *e);
// The same into a malloc'd *out, allocated only once the checks pass, so a
// wrong count from a corrupt file is an error, not a huge allocation.
int h5_read_dataset_alloc(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, void **out,
                          const char *path, PtError *e);
// The whole dataset converted to `mem` into out (room for all of it). Chunked
// data is read without libhdf5's filter pipeline (util/h5_chunks.c): the
// stored chunks, inflated and unshuffled here with every size checked; other
// filters are refused. On error, why holds the reason.
int h5_read_all(hid_t ds, hid_t mem, void *out, char why[200]);
// A 1-D uint8/int8 dataset or a scalar string into a malloc'd, NUL-terminated buffer.
int h5_read_bytes(hid_t loc, const char *name, char **data, size_t *len, const char *path, PtError *e);
