// checkpoint_qat.c: /qat in HDF5 checkpoints (layout in checkpoint_qat.h).
#include "checkpoint_qat.h"
#include <math.h>
#include <string.h>

#define QAT_FORMAT "int4 w=(u-8)*scale+zero"

static int write_int_attr(hid_t obj, const char *name, int v) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(obj, name, H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT, &v) >= 0) ? 0 : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    return rc;
}

static int write_str_attr(hid_t obj, const char *name, const char *s) {
    hid_t space = H5Screate(H5S_SCALAR), type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(s) + 1);
    hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (attr >= 0 && H5Awrite(attr, type, s) >= 0) ? 0 : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Tclose(type);
    H5Sclose(space);
    return rc;
}

// float32 [rows, ngroup], deflated like the params.
static int write_groups(hid_t g, const char *name, const float *data, int64_t rows, int64_t ngroup) {
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)ngroup}, chunk[2];
    chunk[1] = dims[1];
    chunk[0] = (1u << 18) / dims[1] ? (1u << 18) / dims[1] : 1;
    if (chunk[0] > dims[0]) chunk[0] = dims[0];
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 1);
    hid_t ds = H5Dcreate2(g, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = (ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0) ? 0 : -1;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    return rc;
}

// uint8 [rows, cols] codes, deflated (4 bits of information per byte).
static int write_codes(hid_t g, const uint8_t *codes, int64_t rows, int64_t cols) {
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols}, chunk[2];
    chunk[1] = dims[1];
    chunk[0] = (1u << 20) / dims[1] ? (1u << 20) / dims[1] : 1;
    if (chunk[0] > dims[0]) chunk[0] = dims[0];
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 1);
    hid_t ds = H5Dcreate2(g, "codes", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = (ds >= 0 && H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, codes) >= 0) ? 0 : -1;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    return rc;
}

int qat_save(hid_t file, const QatState *q, const TensorTable *tt, const char *path, PtError *e) {
    hid_t root = H5Gcreate2(file, "qat", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (root < 0) return pt_fail(e, "%s: cannot create /qat (already there, or the file is read-only)", path);
    int rc = write_int_attr(root, "group", q->spec.group);
    rc |= write_int_attr(root, "symmetric", q->spec.symmetric);
    rc |= write_int_attr(root, "quant_embedding", q->quant_embedding);
    rc |= write_str_attr(root, "format", QAT_FORMAT);
    for (int i = 0; i < q->n && rc == 0; i++) {
        const QatTensor *qt = &q->t[i];
        const char *name = tt->t[qt->tensor].name;
        int64_t ng = qt->cols / q->spec.group;
        size_t o = qt->offset;
        hid_t g = H5Gcreate2(root, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) {
            rc = -1;
            break;
        }
        rc |= write_groups(g, "scale", q->scale + o, qt->rows, ng);
        rc |= write_groups(g, "zero", q->zero + o, qt->rows, ng);
        if (q->codes) rc |= write_codes(g, qat_codes_of(q, qt), qt->rows, qt->cols);
        if (q->m_scale) {
            rc |= write_groups(g, "scale_m", q->m_scale + o, qt->rows, ng);
            rc |= write_groups(g, "scale_v", q->v_scale + o, qt->rows, ng);
            rc |= write_groups(g, "zero_m", q->m_zero + o, qt->rows, ng);
            rc |= write_groups(g, "zero_v", q->v_zero + o, qt->rows, ng);
        }
        H5Gclose(g);
    }
    H5Gclose(root);
    if (rc) return pt_fail(e, "%s: writing /qat failed (disk full or not writable?)", path);
    return 0;
}

static int read_int_attr(hid_t obj, const char *name, int *v, const char *path, PtError *e) {
    if (H5Aexists(obj, name) <= 0) return pt_fail(e, "%s: /qat has no attribute '%s'", path, name);
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t st = attr >= 0 ? H5Aread(attr, H5T_NATIVE_INT, v) : -1;
    if (attr >= 0) H5Aclose(attr);
    if (st < 0) return pt_fail(e, "%s: /qat attribute '%s' is not an integer", path, name);
    return 0;
}

int qat_read_spec(hid_t file, QuantSpec *spec, int *quant_embedding, const char *path, PtError *e) {
    if (H5Lexists(file, "qat", H5P_DEFAULT) <= 0) return 1;
    hid_t root = H5Gopen2(file, "qat", H5P_DEFAULT);
    if (root < 0) return pt_fail(e, "%s: /qat is not a group", path);
    int rc = read_int_attr(root, "group", &spec->group, path, e);
    if (!rc) rc = read_int_attr(root, "symmetric", &spec->symmetric, path, e);
    if (!rc) rc = read_int_attr(root, "quant_embedding", quant_embedding, path, e);
    H5Gclose(root);
    if (rc) return -1;
    if (spec->group < 2 || spec->group % 2 || (spec->symmetric != 0 && spec->symmetric != 1))
        return pt_fail(e, "%s: /qat attributes group=%d symmetric=%d are not a valid int4 spec", path, spec->group,
                       spec->symmetric);
    return 0;
}

// Reads one [rows, ngroup] float dataset of a tensor's group; `optional`
// makes a missing dataset return 1 instead of an error.
static int read_groups(hid_t g, const char *tname, const char *name, float *dst, int64_t rows, int64_t ngroup,
                       int optional, const char *path, PtError *e) {
    if (H5Lexists(g, name, H5P_DEFAULT) <= 0) {
        if (optional) return 1;
        return pt_fail(e, "%s: /qat/%s/%s is missing", path, tname, name);
    }
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) return pt_fail(e, "%s: /qat/%s/%s is not a dataset", path, tname, name);
    hid_t space = H5Dget_space(ds);
    hsize_t dims[4] = {0};
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd >= 1 && nd <= 4) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    if (nd != 2 || dims[0] != (hsize_t)rows || dims[1] != (hsize_t)ngroup) {
        H5Dclose(ds);
        return pt_fail(e, "%s: /qat/%s/%s has shape [%llu, %llu] (rank %d), expected [%lld, %lld]", path, tname,
                       name, (unsigned long long)dims[0], (unsigned long long)dims[1], nd, (long long)rows,
                       (long long)ngroup);
    }
    herr_t st = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst);
    H5Dclose(ds);
    if (st < 0) return pt_fail(e, "%s: /qat/%s/%s cannot be read (corrupt or not numeric)", path, tname, name);
    return 0;
}

// Every value finite and fp16-exact; scale >= 0; zero == 0 when symmetric.
static int check_values(const float *v, size_t n, int64_t ngroup, int is_scale, int symmetric, const char *tname,
                        const char *path, PtError *e) {
    for (size_t k = 0; k < n; k++) {
        float x = v[k];
        const char *bad = NULL;
        if (!isfinite(x)) bad = "is not finite";
        else if (f16_to_f32(f32_to_f16(x)) != x) bad = "is not representable in fp16";
        else if (is_scale && x < 0.0f) bad = "is a negative scale";
        else if (!is_scale && symmetric && x != 0.0f) bad = "is a non-zero zero point in a symmetric spec";
        if (bad)
            return pt_fail(e, "%s: /qat/%s/%s[%lld, %lld] = %.9g %s", path, tname, is_scale ? "scale" : "zero",
                           (long long)(k / (size_t)ngroup), (long long)(k % (size_t)ngroup), (double)x, bad);
    }
    return 0;
}

// Reads /qat/<tname>/codes into dst[rows * cols] and checks each code is in lo..15.
static int read_codes(hid_t g, const char *tname, uint8_t *dst, int64_t rows, int64_t cols, int lo,
                      const char *path, PtError *e) {
    hid_t ds = H5Dopen2(g, "codes", H5P_DEFAULT);
    if (ds < 0) return pt_fail(e, "%s: /qat/%s/codes is not a dataset", path, tname);
    hid_t space = H5Dget_space(ds);
    hsize_t dims[4] = {0};
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd >= 1 && nd <= 4) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    if (nd != 2 || dims[0] != (hsize_t)rows || dims[1] != (hsize_t)cols) {
        H5Dclose(ds);
        return pt_fail(e, "%s: /qat/%s/codes has shape [%llu, %llu] (rank %d), expected [%lld, %lld]", path, tname,
                       (unsigned long long)dims[0], (unsigned long long)dims[1], nd, (long long)rows,
                       (long long)cols);
    }
    herr_t st = H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst);
    H5Dclose(ds);
    if (st < 0) return pt_fail(e, "%s: /qat/%s/codes cannot be read (corrupt or not numeric)", path, tname);
    size_t n = (size_t)rows * (size_t)cols;
    for (size_t i = 0; i < n; i++)
        if (dst[i] < lo || dst[i] > QUANT_CODE_MAX)
            return pt_fail(e, "%s: /qat/%s/codes[%lld, %lld] = %d is not an int4 code %d..%d", path, tname,
                           (long long)(i / (size_t)cols), (long long)(i % (size_t)cols), dst[i], lo, QUANT_CODE_MAX);
    return 0;
}

typedef struct { int count; } ChildCount;

static herr_t count_child(hid_t g, const char *name, const H5L_info_t *info, void *op) {
    (void)g;
    (void)name;
    (void)info;
    ((ChildCount *)op)->count++;
    return 0;
}

int qat_load(hid_t file, QatState *q, const TensorTable *tt, const char *path, PtError *e) {
    QuantSpec spec;
    int qemb = 0;
    int rc = qat_read_spec(file, &spec, &qemb, path, e);
    if (rc) return rc;
    if (spec.group != q->spec.group || spec.symmetric != q->spec.symmetric || qemb != q->quant_embedding)
        return pt_fail(e,
                       "%s: /qat holds group %d %s%s, but this run asks for group %d %s%s; "
                       "change the recipe's [qat] section to match",
                       path, spec.group, spec.symmetric ? "symmetric" : "asymmetric",
                       qemb ? " with the embedding" : "", q->spec.group,
                       q->spec.symmetric ? "symmetric" : "asymmetric", q->quant_embedding ? " with the embedding" : "");
    hid_t root = H5Gopen2(file, "qat", H5P_DEFAULT);
    ChildCount cc = {0};
    H5Literate(root, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, count_child, &cc);
    if (cc.count != q->n) {
        H5Gclose(root);
        return pt_fail(e, "%s: /qat holds %d tensors, this model quantizes %d", path, cc.count, q->n);
    }
    // Frozen codes: the first tensor decides, every other must agree.
    int frozen = 0;
    if (q->n > 0) {
        const char *first = tt->t[q->t[0].tensor].name;
        char link[600];
        snprintf(link, sizeof link, "%s/codes", first);
        frozen = H5Lexists(root, first, H5P_DEFAULT) > 0 && H5Lexists(root, link, H5P_DEFAULT) > 0;
    }
    if (frozen) {
        qat_alloc_frozen(q);
    } else if (q->codes) {
        free(q->codes);
        q->codes = NULL;
    }
    rc = 0;
    for (int i = 0; i < q->n && rc == 0; i++) {
        const QatTensor *qt = &q->t[i];
        const char *name = tt->t[qt->tensor].name;
        int64_t ng = qt->cols / q->spec.group;
        size_t o = qt->offset;
        if (H5Lexists(root, name, H5P_DEFAULT) <= 0) {
            rc = pt_fail(e, "%s: /qat/%s is missing", path, name);
            break;
        }
        hid_t g = H5Gopen2(root, name, H5P_DEFAULT);
        if (g < 0) {
            rc = pt_fail(e, "%s: /qat/%s is not a group", path, name);
            break;
        }
        rc = read_groups(g, name, "scale", q->scale + o, qt->rows, ng, 0, path, e);
        if (!rc) rc = read_groups(g, name, "zero", q->zero + o, qt->rows, ng, 0, path, e);
        if (!rc) rc = check_values(q->scale + o, qt->n_groups, ng, 1, q->spec.symmetric, name, path, e);
        if (!rc) rc = check_values(q->zero + o, qt->n_groups, ng, 0, q->spec.symmetric, name, path, e);
        if (!rc) {
            int has = H5Lexists(g, "codes", H5P_DEFAULT) > 0;
            if (has != frozen)
                rc = pt_fail(e, "%s: /qat/%s %s frozen codes but /qat/%s %s; a checkpoint has them on every "
                             "quantized tensor or none", path, name, has ? "has" : "has no",
                             tt->t[q->t[0].tensor].name, frozen ? "has" : "has none");
            else if (frozen)
                rc = read_codes(g, name, q->codes + o * (size_t)q->spec.group, qt->rows, qt->cols,
                                quant_code_min(&q->spec), path, e);
        }
        if (!rc && q->m_scale) {
            float *dst[4] = {q->m_scale + o, q->v_scale + o, q->m_zero + o, q->v_zero + o};
            const char *nm[4] = {"scale_m", "scale_v", "zero_m", "zero_v"};
            for (int j = 0; j < 4 && rc == 0; j++) {
                int got = read_groups(g, name, nm[j], dst[j], qt->rows, ng, 1, path, e);
                if (got == 1) memset(dst[j], 0, qt->n_groups * sizeof(float));
                else rc = got;
            }
        }
        H5Gclose(g);
    }
    H5Gclose(root);
    return rc ? -1 : 0;
}
