#include "checkpoint.h"
#include <hdf5.h>
#include "checkpoint_qat.h"
#include <string.h>
#include <unistd.h>

// Rows per HDF5 chunk are chosen so a chunk holds about 1M floats: large
// enough for deflate to work well, small enough to stream.
#define CHUNK_FLOATS (1u << 20)
#define DEFLATE_LEVEL 1   // level 1 already gets most of the gain on float data

static void quiet_hdf5(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

// ---- config attributes: one table so save and load cannot drift apart.
typedef struct {
    const char *name;
    size_t offset;
    char type;   // 'i' int, 'f' float, 's' string
    size_t size;
} ConfigField;

#define FI(f) {#f, offsetof(ModelConfig, f), 'i', 0}
#define FF(f) {#f, offsetof(ModelConfig, f), 'f', 0}
#define FS(f) {#f, offsetof(ModelConfig, f), 's', sizeof(((ModelConfig *)0)->f)}
static const ConfigField CONFIG_FIELDS[] = {
    FS(name), FS(model_type), FI(n_layer), FI(d_model), FI(n_head), FI(n_kv_head), FI(head_dim), FI(d_ff),
    FI(vocab_size), FI(max_seq), FF(rope_theta), FF(norm_eps), FF(init_std), FI(tied_embeddings), FI(qk_norm),
    FI(bos_id), FI(eos_id), FI(pad_id),
};
#define N_CONFIG_FIELDS (int)(sizeof CONFIG_FIELDS / sizeof CONFIG_FIELDS[0])

static int write_attr(hid_t obj, const ConfigField *f, const ModelConfig *c) {
    const char *p = (const char *)c + f->offset;
    hid_t space = H5Screate(H5S_SCALAR), type, attr;
    int rc = -1;
    if (f->type == 's') {
        type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, strlen(p) + 1);
    } else {
        type = H5Tcopy(f->type == 'i' ? H5T_NATIVE_INT : H5T_NATIVE_FLOAT);
    }
    attr = H5Acreate2(obj, f->name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr >= 0 && H5Awrite(attr, type, p) >= 0) rc = 0;
    if (attr >= 0) H5Aclose(attr);
    H5Tclose(type);
    H5Sclose(space);
    return rc;
}

static int read_attr(hid_t obj, const ConfigField *f, ModelConfig *c, const char *path, PtError *e) {
    char *p = (char *)c + f->offset;
    if (H5Aexists(obj, f->name) <= 0) return pt_fail(e, "%s: /config has no attribute '%s'", path, f->name);
    hid_t attr = H5Aopen(obj, f->name, H5P_DEFAULT);
    if (attr < 0) return pt_fail(e, "%s: cannot open /config attribute '%s'", path, f->name);
    herr_t st;
    if (f->type == 's') {
        hid_t ftype = H5Aget_type(attr);
        size_t n = H5Tget_size(ftype);
        H5Tclose(ftype);
        if (H5Tget_class(ftype) == H5T_STRING && n > f->size) n = 0;   // too long: fail below
        hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, f->size);
        memset(p, 0, f->size);
        st = n ? H5Aread(attr, type, p) : -1;
        p[f->size - 1] = 0;
        H5Tclose(type);
    } else {
        st = H5Aread(attr, f->type == 'i' ? H5T_NATIVE_INT : H5T_NATIVE_FLOAT, p);
    }
    H5Aclose(attr);
    if (st < 0) return pt_fail(e, "%s: /config attribute '%s' has the wrong type", path, f->name);
    return 0;
}

static int write_floats(hid_t group, const char *name, const float *data, int ndim, const int64_t *shape) {
    hsize_t dims[2] = {(hsize_t)shape[0], ndim > 1 ? (hsize_t)shape[1] : 1}, chunk[2];
    size_t row = ndim > 1 ? dims[1] : 1;
    chunk[0] = CHUNK_FLOATS / row ? CHUNK_FLOATS / row : 1;
    if (chunk[0] > dims[0]) chunk[0] = dims[0];
    chunk[1] = dims[1];
    hid_t space = H5Screate_simple(ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, ndim, chunk);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, DEFLATE_LEVEL);
    hid_t ds = H5Dcreate2(group, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = (ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0) ? 0 : -1;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    return rc;
}

static int write_bytes(hid_t group, const char *name, const char *data, size_t len) {
    hsize_t dims[1] = {len};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t ds = H5Dcreate2(group, name, H5T_NATIVE_UINT8, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (ds >= 0 && (len == 0 || H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0)) ? 0 : -1;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(space);
    return rc;
}

static int write_tensor_group(hid_t parent, const char *name, const TensorTable *tt, const float *base) {
    hid_t g = H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    int rc = 0;
    for (int i = 0; i < tt->n && rc == 0; i++) {
        const TensorInfo *t = &tt->t[i];
        rc = write_floats(g, t->name, base + t->offset, t->ndim, t->shape);
    }
    H5Gclose(g);
    return rc;
}

static int write_i64(hid_t obj, const char *name, const void *v, int n, hid_t type) {
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL);
    hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (attr >= 0 && H5Awrite(attr, type, v) >= 0) ? 0 : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    return rc;
}

static int write_state(hid_t f, const float *m, const float *v, const TensorTable *tt, const TrainState *st) {
    hid_t g = H5Gcreate2(f, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (g >= 0 && write_tensor_group(g, "m", tt, m) == 0 && write_tensor_group(g, "v", tt, v) == 0) ? 0 : -1;
    if (g >= 0) H5Gclose(g);
    if (rc) return rc;
    g = H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    rc |= write_i64(g, "step", &st->step, 1, H5T_NATIVE_INT64);
    rc |= write_i64(g, "tokens", &st->tokens, 1, H5T_NATIVE_INT64);
    rc |= write_i64(g, "bad_steps", &st->bad_steps, 1, H5T_NATIVE_INT64);
    rc |= write_i64(g, "best_val_loss", &st->best_val_loss, 1, H5T_NATIVE_DOUBLE);
    rc |= write_i64(g, "loader_epoch", &st->cursor.epoch, 1, H5T_NATIVE_UINT64);
    rc |= write_i64(g, "loader_index", &st->cursor.index, 1, H5T_NATIVE_UINT64);
    rc |= write_i64(g, "loader_rng", st->cursor.rng, 4, H5T_NATIVE_UINT64);
    H5Gclose(g);
    return rc;
}

static int save(const char *path, const ModelBundle *b, const float *m, const float *v, const TrainState *st,
                const QatState *qat, PtError *e) {
    quiet_hdf5();
    char *tmp = temp_path_for(path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        free(tmp);
        return pt_fail(e, "%s: cannot create checkpoint file", path);
    }
    int rc = 0;
    hid_t g = H5Gcreate2(f, "config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; i < N_CONFIG_FIELDS && rc == 0; i++) rc = write_attr(g, &CONFIG_FIELDS[i], &b->cfg);
    H5Gclose(g);
    if (rc == 0) rc = write_tensor_group(f, "params", &b->tt, b->params);
    if (rc == 0 && st) rc = write_state(f, m, v, &b->tt, st);
    if (rc == 0 && qat && qat_save(f, qat, &b->tt, path, e)) {
        H5Fclose(f);
        unlink(tmp);
        free(tmp);
        return -1;
    }
    if (rc == 0 && (b->tokenizer_json || b->tokenizer_config_json)) {
        g = H5Gcreate2(f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (b->tokenizer_json) rc = write_bytes(g, "tokenizer.json", b->tokenizer_json, b->tokenizer_json_len);
        if (rc == 0 && b->tokenizer_config_json)
            rc = write_bytes(g, "tokenizer_config.json", b->tokenizer_config_json, b->tokenizer_config_json_len);
        H5Gclose(g);
    }
    if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) rc = -1;
    if (H5Fclose(f) < 0) rc = -1;
    if (rc == 0) {
        // fsync the data before the rename makes it the checkpoint
        FILE *fp = fopen(tmp, "rb+");
        if (!fp || fsync(fileno(fp)) != 0) rc = -1;
        if (fp) fclose(fp);
    }
    if (rc == 0 && rename(tmp, path) != 0) rc = -1;
    if (rc != 0) {
        unlink(tmp);
        pt_fail(e, "%s: writing the checkpoint failed (disk full or not writable?)", path);
    }
    free(tmp);
    return rc;
}

int checkpoint_save(const char *path, const ModelBundle *b, PtError *e) {
    return save(path, b, NULL, NULL, NULL, NULL, e);
}

int checkpoint_save_qat(const char *path, const ModelBundle *b, const QatState *qat, PtError *e) {
    return save(path, b, NULL, NULL, NULL, qat, e);
}

int checkpoint_save_train(const char *path, const ModelBundle *b, const float *adam_m, const float *adam_v,
                          const TrainState *st, const QatState *qat, PtError *e) {
    return save(path, b, adam_m, adam_v, st, qat, e);
}

int checkpoint_read_qat_spec(const char *path, QuantSpec *spec, int *quant_embedding, PtError *e) {
    quiet_hdf5();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return pt_fail(e, "%s: cannot open as HDF5", path);
    int rc = qat_read_spec(f, spec, quant_embedding, path, e);
    H5Fclose(f);
    return rc;
}

int checkpoint_load_qat(const char *path, QatState *q, const TensorTable *tt, PtError *e) {
    quiet_hdf5();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return pt_fail(e, "%s: cannot open as HDF5", path);
    int rc = qat_load(f, q, tt, path, e);
    H5Fclose(f);
    return rc;
}

// Reads a 1-D uint8 dataset into a NUL-terminated buffer; 0 if absent.
static int read_bytes(hid_t f, const char *name, char **out, size_t *len, const char *path, PtError *e) {
    *out = NULL;
    *len = 0;
    if (H5Lexists(f, "tokenizer", H5P_DEFAULT) <= 0) return 0;
    char full[128];
    snprintf(full, sizeof full, "tokenizer/%s", name);
    if (H5Lexists(f, full, H5P_DEFAULT) <= 0) return 0;
    hid_t ds = H5Dopen2(f, full, H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    hsize_t n = 0;
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd == 1) H5Sget_simple_extent_dims(space, &n, NULL);
    H5Sclose(space);
    if (nd != 1) {
        H5Dclose(ds);
        return pt_fail(e, "%s: /%s is not a 1-D byte array", path, full);
    }
    char *buf = xmalloc(n + 1, full);
    herr_t st = n ? H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0;
    H5Dclose(ds);
    if (st < 0) {
        free(buf);
        return pt_fail(e, "%s: cannot read /%s", path, full);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

static int read_param(hid_t g, const TensorInfo *t, float *dst, const char *path, PtError *e) {
    if (H5Lexists(g, t->name, H5P_DEFAULT) <= 0)
        return pt_fail(e, "%s: tensor /params/%s is missing", path, t->name);
    hid_t ds = H5Dopen2(g, t->name, H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    hsize_t dims[4] = {0};
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd >= 1 && nd <= 4) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    int ok = nd == t->ndim && dims[0] == (hsize_t)t->shape[0] && (nd == 1 || dims[1] == (hsize_t)t->shape[1]);
    if (!ok) {
        H5Dclose(ds);
        return pt_fail(e, "%s: /params/%s has shape [%llu%s%llu] (rank %d), the config needs [%lld, %lld]", path,
                       t->name, (unsigned long long)dims[0], nd > 1 ? ", " : " ", (unsigned long long)dims[1], nd,
                       (long long)t->shape[0], (long long)t->shape[1]);
    }
    herr_t st = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst);
    H5Dclose(ds);
    if (st < 0) return pt_fail(e, "%s: /params/%s cannot be read (corrupt or not numeric)", path, t->name);
    return 0;
}

typedef struct { const TensorTable *tt; const char *bad; } ExtraScan;

static herr_t find_unknown(hid_t g, const char *name, const H5L_info_t *info, void *op) {
    (void)g;
    (void)info;
    ExtraScan *s = op;
    for (int i = 0; i < s->tt->n; i++)
        if (!strcmp(s->tt->t[i].name, name)) return 0;
    s->bad = name;
    return 1;
}

int checkpoint_load(const char *path, ModelBundle *b, PtError *e) {
    quiet_hdf5();
    memset(b, 0, sizeof *b);
    if (!path_exists(path)) return pt_fail(e, "%s: no such file", path);
    if (H5Fis_hdf5(path) <= 0) return pt_fail(e, "%s: not an HDF5 file (or truncated)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return pt_fail(e, "%s: cannot open as HDF5 (corrupt or truncated?)", path);
    int rc = -1;
    ModelConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    if (H5Lexists(f, "config", H5P_DEFAULT) <= 0) {
        pt_fail(e, "%s: no /config group: not a pocket checkpoint", path);
        goto out;
    }
    hid_t g = H5Gopen2(f, "config", H5P_DEFAULT);
    rc = 0;
    for (int i = 0; i < N_CONFIG_FIELDS && rc == 0; i++) rc = read_attr(g, &CONFIG_FIELDS[i], &cfg, path, e);
    H5Gclose(g);
    if (rc || (rc = config_validate(&cfg, path, e))) goto out;
    rc = -1;
    if (H5Lexists(f, "params", H5P_DEFAULT) <= 0) {
        pt_fail(e, "%s: no /params group", path);
        goto out;
    }
    bundle_alloc(b, &cfg);
    g = H5Gopen2(f, "params", H5P_DEFAULT);
    ExtraScan scan = {&b->tt, NULL};
    H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, find_unknown, &scan);
    if (scan.bad) {
        pt_fail(e, "%s: /params/%s is not a parameter of this config", path, scan.bad);
        H5Gclose(g);
        goto out;
    }
    rc = 0;
    for (int i = 0; i < b->tt.n && rc == 0; i++) rc = read_param(g, &b->tt.t[i], b->params + b->tt.t[i].offset, path, e);
    H5Gclose(g);
    if (rc == 0) rc = read_bytes(f, "tokenizer.json", &b->tokenizer_json, &b->tokenizer_json_len, path, e);
    if (rc == 0)
        rc = read_bytes(f, "tokenizer_config.json", &b->tokenizer_config_json, &b->tokenizer_config_json_len, path, e);
out:
    H5Fclose(f);
    if (rc) bundle_free(b);
    return rc;
}

int checkpoint_is_hdf5(const char *path) {
    quiet_hdf5();
    return path_exists(path) && !path_is_dir(path) && H5Fis_hdf5(path) > 0;
}

int checkpoint_inspect(const char *path, FILE *out, PtError *e) {
    ModelBundle b;
    if (checkpoint_load(path, &b, e)) return -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    fprintf(out, "%s: pocket checkpoint\n", path);
    config_print(&b.cfg, out);
    double raw = 0, stored = 0;
    fprintf(out, "%-52s %-14s %8s %12s\n", "tensor", "shape", "dtype", "bytes");
    for (int i = 0; i < b.tt.n; i++) {
        const TensorInfo *t = &b.tt.t[i];
        char name[160], shape[48];
        snprintf(name, sizeof name, "params/%s", t->name);
        hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
        stored += (double)H5Dget_storage_size(ds);
        H5Dclose(ds);
        raw += t->numel * 4.0;
        if (t->ndim == 2) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t->shape[0], (long long)t->shape[1]);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)t->shape[0]);
        fprintf(out, "%-52s %-14s %8s %12zu\n", t->name, shape, "f32", t->numel * 4);
    }
    fprintf(out, "%d tensors, %zu parameters, %.1f MB as f32, %.1f MB stored (deflate)\n", b.tt.n,
            config_param_count(&b.cfg), raw / 1e6, stored / 1e6);
    fprintf(out, "tokenizer.json: %s\n", b.tokenizer_json ? "stored" : "absent");
    H5Fclose(f);
    bundle_free(&b);
    return 0;
}

static int read_state_attr(hid_t g, const char *name, void *v, hid_t type, const char *path, PtError *e) {
    if (H5Aexists(g, name) <= 0) return pt_fail(e, "%s: /state has no attribute '%s'", path, name);
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    herr_t st = H5Aread(a, type, v);
    H5Aclose(a);
    return st < 0 ? pt_fail(e, "%s: /state attribute '%s' cannot be read", path, name) : 0;
}

int checkpoint_load_train(const char *path, const TensorTable *tt, float *adam_m, float *adam_v, TrainState *st,
                          PtError *e) {
    quiet_hdf5();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return pt_fail(e, "%s: cannot open as HDF5", path);
    if (H5Lexists(f, "state", H5P_DEFAULT) <= 0 || H5Lexists(f, "optim", H5P_DEFAULT) <= 0) {
        H5Fclose(f);
        return 1;
    }
    int rc = 0;
    hid_t g = H5Gopen2(f, "state", H5P_DEFAULT);
    rc = rc ? rc : read_state_attr(g, "step", &st->step, H5T_NATIVE_INT64, path, e);
    rc = rc ? rc : read_state_attr(g, "tokens", &st->tokens, H5T_NATIVE_INT64, path, e);
    rc = rc ? rc : read_state_attr(g, "bad_steps", &st->bad_steps, H5T_NATIVE_INT64, path, e);
    rc = rc ? rc : read_state_attr(g, "best_val_loss", &st->best_val_loss, H5T_NATIVE_DOUBLE, path, e);
    rc = rc ? rc : read_state_attr(g, "loader_epoch", &st->cursor.epoch, H5T_NATIVE_UINT64, path, e);
    rc = rc ? rc : read_state_attr(g, "loader_index", &st->cursor.index, H5T_NATIVE_UINT64, path, e);
    rc = rc ? rc : read_state_attr(g, "loader_rng", st->cursor.rng, H5T_NATIVE_UINT64, path, e);
    H5Gclose(g);
    const char *groups[2] = {"optim/m", "optim/v"};
    float *bufs[2] = {adam_m, adam_v};
    for (int k = 0; k < 2 && rc == 0; k++) {
        g = H5Gopen2(f, groups[k], H5P_DEFAULT);
        if (g < 0) {
            rc = pt_fail(e, "%s: /%s is missing", path, groups[k]);
            break;
        }
        for (int i = 0; i < tt->n && rc == 0; i++) rc = read_param(g, &tt->t[i], bufs[k] + tt->t[i].offset, path, e);
        H5Gclose(g);
    }
    H5Fclose(f);
    return rc ? -1 : 0;
}
