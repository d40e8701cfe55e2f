// checkpoint_qat.c: /qat in HDF5 checkpoints (layout in checkpoint_qat.h).
#include "checkpoint_qat.h"
#include <math.h>
#include <string.h>

#define QAT_FORMAT "int4 w=(u-8)*scale+zero"

// The Adam moments of the learned scales, in the order of MOMENT_NAMES.
static const char *const MOMENT_NAMES[4] = {"scale_m", "scale_v", "zero_m", "zero_v"};
static void moment_arrays(const QatState *q, size_t o, float *arrays[4]) {
    float *moments[4] = {q->m_scale + o, q->v_scale + o, q->m_zero + o, q->v_zero + o};
    memcpy(arrays, moments, sizeof moments);
}

static int write_tensor(hid_t root, const QatState *q, const QatTensor *qt, const char *name) {
    hid_t g = h5_create_group(root, name);
    if (g < 0) return -1;
    hsize_t groups[2] = {(hsize_t)qt->rows, (hsize_t)(qt->cols / q->spec.group)};
    hsize_t codes[2] = {(hsize_t)qt->rows, (hsize_t)qt->cols};
    int rc = h5_write_dataset(g, "scale", H5T_NATIVE_FLOAT, 2, groups, q->scale + qt->offset) ||
             h5_write_dataset(g, "zero", H5T_NATIVE_FLOAT, 2, groups, q->zero + qt->offset) ||
             (q->codes && h5_write_dataset(g, "codes", H5T_NATIVE_UINT8, 2, codes, qat_codes_of(q, qt)));
    if (q->m_scale) {
        float *moments[4];
        moment_arrays(q, qt->offset, moments);
        for (int j = 0; j < 4 && rc == 0; j++)
            rc = h5_write_dataset(g, MOMENT_NAMES[j], H5T_NATIVE_FLOAT, 2, groups, moments[j]);
    }
    H5Gclose(g);
    return rc;
}

int qat_save(hid_t file, const QatState *q, const TensorTable *tt, const char *path, PtError *e) {
    hid_t root = h5_create_group(file, "qat");
    if (root < 0) return pt_fail(e, "%s: cannot create /qat (already there, or the file is read-only)", path);
    int rc = h5_write_attr(root, "group", H5T_NATIVE_INT, &q->spec.group, 1) ||
             h5_write_attr(root, "symmetric", H5T_NATIVE_INT, &q->spec.symmetric, 1) ||
             h5_write_attr(root, "quant_embedding", H5T_NATIVE_INT, &q->quant_embedding, 1) ||
             h5_write_str_attr(root, "format", QAT_FORMAT);
    for (int i = 0; i < q->n && rc == 0; i++) rc = write_tensor(root, q, &q->t[i], tt->t[q->t[i].tensor].name);
    H5Gclose(root);
    if (rc) return pt_fail(e, "%s: writing /qat failed (disk full or not writable?)", path);
    return 0;
}

int qat_read_spec(hid_t file, QuantSpec *spec, int *quant_embedding, const char *path, PtError *e) {
    if (!h5_exists(file, "qat")) return 1;
    hid_t root = h5_open_group(file, "qat", path, e);
    if (root < 0) return -1;
    int rc = h5_read_attr(root, "group", H5T_NATIVE_INT, &spec->group, 1, path, e) ||
             h5_read_attr(root, "symmetric", H5T_NATIVE_INT, &spec->symmetric, 1, path, e) ||
             h5_read_attr(root, "quant_embedding", H5T_NATIVE_INT, quant_embedding, 1, path, e);
    H5Gclose(root);
    if (rc) return -1;
    if (spec->group < 2 || spec->group % 2 || (spec->symmetric != 0 && spec->symmetric != 1))
        return pt_fail(e, "%s: /qat attributes group=%d symmetric=%d are not a valid int4 spec", path, spec->group,
                       spec->symmetric);
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
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    if (h5_read_dataset(g, "codes", H5T_NATIVE_UINT8, 2, dims, dst, path, e)) return -1;
    size_t n = (size_t)rows * (size_t)cols;
    for (size_t i = 0; i < n; i++)
        if (dst[i] < lo || dst[i] > QUANT_CODE_MAX)
            return pt_fail(e, "%s: /qat/%s/codes[%lld, %lld] = %d is not an int4 code %d..%d", path, tname,
                           (long long)(i / (size_t)cols), (long long)(i % (size_t)cols), dst[i], lo, QUANT_CODE_MAX);
    return 0;
}

// Reads /qat/<tname> into the entries of qt; frozen: the file must hold codes.
static int read_tensor(hid_t root, QatState *q, const QatTensor *qt, const char *tname, int frozen,
                       const char *first, const char *path, PtError *e) {
    hid_t g = h5_open_group(root, tname, path, e);
    if (g < 0) return -1;
    int64_t ng = qt->cols / q->spec.group;
    size_t o = qt->offset;
    hsize_t dims[2] = {(hsize_t)qt->rows, (hsize_t)ng};
    int rc = h5_read_dataset(g, "scale", H5T_NATIVE_FLOAT, 2, dims, q->scale + o, path, e) ||
             h5_read_dataset(g, "zero", H5T_NATIVE_FLOAT, 2, dims, q->zero + o, path, e) ||
             check_values(q->scale + o, qt->n_groups, ng, 1, q->spec.symmetric, tname, path, e) ||
             check_values(q->zero + o, qt->n_groups, ng, 0, q->spec.symmetric, tname, path, e);
    int has_codes = h5_exists(g, "codes");
    if (!rc && has_codes != frozen)
        rc = pt_fail(e, "%s: /qat/%s %s frozen codes but /qat/%s %s; a checkpoint has them on every "
                     "quantized tensor or none", path, tname, has_codes ? "has" : "has no", first,
                     frozen ? "has" : "has none");
    else if (!rc && frozen)
        rc = read_codes(g, tname, q->codes + o * (size_t)q->spec.group, qt->rows, qt->cols,
                        quant_code_min(&q->spec), path, e);
    if (!rc && q->m_scale) {
        float *moments[4];
        moment_arrays(q, o, moments);
        for (int j = 0; j < 4 && rc == 0; j++) {
            if (h5_exists(g, MOMENT_NAMES[j]))
                rc = h5_read_dataset(g, MOMENT_NAMES[j], H5T_NATIVE_FLOAT, 2, dims, moments[j], path, e);
            else memset(moments[j], 0, qt->n_groups * sizeof(float));
        }
    }
    H5Gclose(g);
    return rc ? -1 : 0;
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
    hid_t root = h5_open_group(file, "qat", path, e);
    if (root < 0) return -1;
    int count = h5_child_count(root);
    if (count != q->n) {
        H5Gclose(root);
        return pt_fail(e, "%s: /qat holds %d tensors, this model quantizes %d", path, count, q->n);
    }
    // Frozen codes: the first tensor decides, every other must agree.
    const char *first = q->n > 0 ? tt->t[q->t[0].tensor].name : "";
    char link[600];
    snprintf(link, sizeof link, "%s/codes", first);
    int frozen = q->n > 0 && h5_exists(root, link);
    if (frozen) {
        qat_alloc_frozen(q);
    } else if (q->codes) {
        free(q->codes);
        q->codes = NULL;
    }
    for (int i = 0; i < q->n && rc == 0; i++)
        rc = read_tensor(root, q, &q->t[i], tt->t[q->t[i].tensor].name, frozen, first, path, e);
    H5Gclose(root);
    return rc ? -1 : 0;
}
