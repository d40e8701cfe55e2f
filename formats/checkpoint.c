#include "checkpoint.h"
#include <string.h>
#include "../util/h5.h"
#include "checkpoint_parts.h"
#include "checkpoint_qat.h"

// ---- attributes: one table per group so save and load cannot drift apart.
typedef struct {
    const char *name;
    size_t offset;
    char type;     // 'i' int, 'f' float, 'l' int64, 'u' uint64, 'd' double, 's' string
    size_t size;   // a string's buffer size, else the number of values
    int optional;  // an int written only when not 0, read as 0 when absent (older checkpoints lack it)
} AttrField;

#define FI(f) {#f, offsetof(ModelConfig, f), 'i', 1, 0}
#define FF(f) {#f, offsetof(ModelConfig, f), 'f', 1, 0}
#define FS(f) {#f, offsetof(ModelConfig, f), 's', sizeof(((ModelConfig *)0)->f), 0}
static const AttrField CONFIG_FIELDS[] = {
    FS(name), FS(model_type), FI(n_layer), FI(d_model), FI(n_head), FI(n_kv_head), FI(head_dim), FI(d_ff),
    FI(vocab_size), FI(max_seq), FF(rope_theta), FF(norm_eps), FF(init_std), FI(tied_embeddings), FI(qk_norm),
    FI(bos_id), FI(eos_id), FI(pad_id), {"choice_id", offsetof(ModelConfig, choice_id), 'i', 1, 1},
};
static const AttrField STATE_FIELDS[] = {
    {"step", offsetof(TrainState, step), 'l', 1, 0},
    {"tokens", offsetof(TrainState, tokens), 'l', 1, 0},
    {"bad_steps", offsetof(TrainState, bad_steps), 'l', 1, 0},
    {"best_val_loss", offsetof(TrainState, best_val_loss), 'd', 1, 0},
    {"loader_epoch", offsetof(TrainState, cursor.epoch), 'u', 1, 0},
    {"loader_index", offsetof(TrainState, cursor.index), 'u', 1, 0},
    {"loader_rng", offsetof(TrainState, cursor.rng), 'u', 4, 0},
};
#define COUNT(a) (int)(sizeof a / sizeof a[0])

static hid_t field_type(char type) {
    hid_t types[] = {H5T_NATIVE_INT, H5T_NATIVE_FLOAT, H5T_NATIVE_INT64, H5T_NATIVE_UINT64, H5T_NATIVE_DOUBLE};
    return types[strchr("iflud", type) - "iflud"];
}

// Writes the fields of base as the attributes of a new group.
static int write_fields(hid_t parent, const char *group, const AttrField *fields, int n, const void *base) {
    hid_t g = h5_create_group(parent, group);
    int rc = g < 0 ? -1 : 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const AttrField *f = &fields[i];
        const char *p = (const char *)base + f->offset;
        if (f->optional && !*(const int *)p) continue;
        if (f->type == 's') rc = h5_write_str_attr(g, f->name, p);
        else rc = h5_write_attr(g, f->name, field_type(f->type), p, f->size);
    }
    if (g >= 0) H5Gclose(g);
    return rc;
}

static int read_fields(hid_t parent, const char *group, const AttrField *fields, int n, void *base, const char *path,
                       PtError *e) {
    hid_t g = h5_open_group(parent, group, path, e);
    int rc = g < 0 ? -1 : 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const AttrField *f = &fields[i];
        char *p = (char *)base + f->offset, *s;
        if (f->optional && !h5_has_attr(g, f->name)) continue;
        if (f->type != 's') {
            rc = h5_read_attr(g, f->name, field_type(f->type), p, f->size, path, e);
        } else if ((rc = h5_read_str_attr(g, f->name, &s, path, e)) == 0) {
            if (strlen(s) < f->size) strcpy(p, s);
            else rc = pt_fail(e, "%s: attribute '%s' of /%s is over %zu bytes", path, f->name, group, f->size - 1);
            free(s);
        }
    }
    if (g >= 0) H5Gclose(g);
    return rc;
}

// ---- tensors: /params, /optim/m and /optim/v hold one dataset per tensor of the table.
static void tensor_dims(const TensorInfo *t, hsize_t dims[2]) {
    dims[0] = (hsize_t)t->shape[0];
    dims[1] = t->ndim > 1 ? (hsize_t)t->shape[1] : 1;
}

// Tensor i's data: from base, or (base NULL) from the moment source.
static int write_tensor_group(hid_t parent, const char *name, const TensorTable *tt, const float *base,
                              const MomentSource *src, int which) {
    hid_t g = h5_create_group(parent, name);
    if (g < 0) return -1;
    int rc = 0;
    for (int i = 0; i < tt->n && rc == 0; i++) {
        hsize_t dims[2];
        tensor_dims(&tt->t[i], dims);
        const float *data = base ? base + tt->t[i].offset : src->tensor(src->ctx, i, which);
        rc = h5_write_dataset(g, tt->t[i].name, H5T_NATIVE_FLOAT, tt->t[i].ndim, dims, data);
    }
    H5Gclose(g);
    return rc;
}

const float *moment_buffers(void *ctx, int tensor, int which) {
    const MomentBuffers *mb = ctx;
    return (which ? mb->v : mb->m) + mb->tt->t[tensor].offset;
}

// Reads the floats [lo, hi) of the flat buffer the tensors of the table make
// into out[0, hi - lo) (a tensor cut by the range goes through a scratch
// buffer); a dataset the table does not know is an error too.
static int read_tensor_range(hid_t f, const char *name, const TensorTable *tt, size_t lo, size_t hi, float *out,
                             const char *path, PtError *e) {
    hid_t g = h5_open_group(f, name, path, e);
    if (g < 0) return -1;
    int rc = 0, n = h5_child_count(g);
    char child[256] = "";
    for (int i = 0; i < n && rc == 0; i++)
        if (!h5_child_name(g, i, child, sizeof child) || !tensor_table_find(tt, child))
            rc = pt_fail(e, "%s: /%s/%s is not a parameter of this config", path, name, child);
    float *cut = NULL;
    for (int i = 0; i < tt->n && rc == 0; i++) {
        const TensorInfo *t = &tt->t[i];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;
        hsize_t dims[2];
        tensor_dims(t, dims);
        int whole = a == t->offset && b == t->offset + t->numel;
        float *dst = whole ? out + (t->offset - lo) : (cut = realloc(cut, t->numel * sizeof(float)));
        if (!dst) die("out of memory reading %s", path);
        rc = h5_read_dataset(g, t->name, H5T_NATIVE_FLOAT, t->ndim, dims, dst, path, e);
        if (!rc && !whole) memcpy(out + (a - lo), cut + (a - t->offset), (b - a) * sizeof(float));
    }
    free(cut);
    H5Gclose(g);
    return rc;
}

// A mixture's cursor (data/mixture.h), as attributes of /state beside the
// plain loader's: mix_sets, and per set (n of them) mix_tokens, mix_epoch,
// mix_index and mix_rng (4 each). Written only for a mixture, so a one-set
// run's checkpoint is what it was before mixtures; read only when present.
enum { MIX_ARRAYS = 4 };
static const char *const MIX_NAMES[MIX_ARRAYS] = {"mix_tokens", "mix_epoch", "mix_index", "mix_rng"};
static const size_t MIX_WIDTH[MIX_ARRAYS] = {1, 1, 1, 4};

// Value i of array a of the cursor.
static uint64_t *mix_value(MixCursor *c, int a, size_t i) {
    LoaderCursor *l = &c->set[i / MIX_WIDTH[a]];
    uint64_t *field[MIX_ARRAYS] = {&c->tokens[i], &l->epoch, &l->index, &l->rng[i % 4]};
    return field[a];
}

static int write_mix_cursor(hid_t f, const MixCursor *mc) {
    if (!mc->n_sets) return 0;
    MixCursor c = *mc;
    hid_t g = H5Gopen2(f, "state", H5P_DEFAULT);
    int rc = g < 0 ? -1 : h5_write_attr(g, "mix_sets", H5T_NATIVE_UINT64, &c.n_sets, 1);
    uint64_t flat[4 * MIX_MAX_SETS];
    for (int a = 0; a < MIX_ARRAYS && rc == 0; a++) {
        const size_t n = (size_t)c.n_sets * MIX_WIDTH[a];
        for (size_t i = 0; i < n; i++) flat[i] = *mix_value(&c, a, i);
        rc = h5_write_attr(g, MIX_NAMES[a], H5T_NATIVE_UINT64, flat, n);
    }
    if (g >= 0) H5Gclose(g);
    return rc;
}

static int read_mix_cursor(hid_t f, MixCursor *c, const char *path, PtError *e) {
    memset(c, 0, sizeof *c);
    hid_t g = h5_open_group(f, "state", path, e);
    if (g < 0) return -1;
    int rc = 0;
    if (h5_has_attr(g, "mix_sets")) {
        rc = h5_read_attr(g, "mix_sets", H5T_NATIVE_UINT64, &c->n_sets, 1, path, e);
        if (rc == 0 && (c->n_sets < 1 || c->n_sets > MIX_MAX_SETS))
            rc = pt_fail(e, "%s: /state mix_sets is %llu (1 to %d)", path, (unsigned long long)c->n_sets, MIX_MAX_SETS);
        uint64_t flat[4 * MIX_MAX_SETS];
        for (int a = 0; a < MIX_ARRAYS && rc == 0; a++) {
            const size_t n = (size_t)c->n_sets * MIX_WIDTH[a];
            rc = h5_read_attr(g, MIX_NAMES[a], H5T_NATIVE_UINT64, flat, n, path, e);
            for (size_t i = 0; rc == 0 && i < n; i++) *mix_value(c, a, i) = flat[i];
        }
    }
    H5Gclose(g);
    return rc;
}

static int write_state(hid_t f, const MomentSource *src, const TensorTable *tt, const TrainState *st) {
    hid_t g = h5_create_group(f, "optim");
    if (g < 0) return -1;
    int rc = write_tensor_group(g, "m", tt, NULL, src, 0) || write_tensor_group(g, "v", tt, NULL, src, 1);
    H5Gclose(g);
    return rc || write_fields(f, "state", STATE_FIELDS, COUNT(STATE_FIELDS), st) || write_mix_cursor(f, &st->mix)
               ? -1
               : 0;
}

static int write_tokenizer(hid_t f, const ModelBundle *b) {
    hid_t g = h5_create_group(f, "tokenizer");
    if (g < 0) return -1;
    int rc = (b->tokenizer_json && h5_write_bytes(g, "tokenizer.json", b->tokenizer_json, b->tokenizer_json_len)) ||
             (b->tokenizer_config_json && h5_write_bytes(g, "tokenizer_config.json", b->tokenizer_config_json,
                                                         b->tokenizer_config_json_len));
    H5Gclose(g);
    return rc ? -1 : 0;
}

static int save(const char *path, const ModelBundle *b, const MomentSource *moments, const TrainState *st,
                const QatState *qat, PtError *e) {
    H5Output out;
    if (h5_output_create(&out, path, e)) return -1;
    hid_t f = out.file;
    int rc = write_fields(f, "config", CONFIG_FIELDS, COUNT(CONFIG_FIELDS), &b->cfg) ||
             write_tensor_group(f, "params", &b->tt, b->params, NULL, 0) || (st && write_state(f, moments, &b->tt, st)) ||
             ((b->tokenizer_json || b->tokenizer_config_json) && write_tokenizer(f, b));
    if (rc) pt_fail(e, "%s: writing the checkpoint failed (disk full or not writable?)", path);
    else if (qat) rc = qat_save(f, qat, &b->tt, path, e);   // fills e itself
    if (rc) {
        h5_output_abort(&out);
        return -1;
    }
    return h5_output_commit(&out, e);
}

int checkpoint_save(const char *path, const ModelBundle *b, PtError *e) { return save(path, b, NULL, NULL, NULL, e); }

int checkpoint_save_qat(const char *path, const ModelBundle *b, const QatState *qat, PtError *e) {
    return save(path, b, NULL, NULL, qat, e);
}

int checkpoint_save_train(const char *path, const ModelBundle *b, const MomentSource *moments, const TrainState *st,
                          const QatState *qat, PtError *e) {
    return save(path, b, moments, st, qat, e);
}

int checkpoint_read_qat_spec(const char *path, QuantSpec *spec, int *quant_embedding, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    int rc = qat_read_spec(f, spec, quant_embedding, path, e);
    H5Fclose(f);
    return rc;
}

int checkpoint_load_qat(const char *path, QatState *q, const TensorTable *tt, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    int rc = qat_load(f, q, tt, path, e);
    H5Fclose(f);
    return rc;
}

// A file of /tokenizer as a NUL-terminated buffer; NULL when absent.
static int read_tokenizer_file(hid_t f, const char *name, char **out, size_t *len, const char *path, PtError *e) {
    char link[64];
    snprintf(link, sizeof link, "tokenizer/%s", name);
    return h5_exists(f, link) ? h5_read_bytes(f, link, out, len, path, e) : 0;
}

// The checkpoint into b: its config and table, the weights when `params`
// (else b->params stays NULL), the tokenizer files.
static int load(const char *path, ModelBundle *b, int params, PtError *e) {
    memset(b, 0, sizeof *b);
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    ModelConfig cfg = {0};
    int rc = h5_exists(f, "config") ? read_fields(f, "config", CONFIG_FIELDS, COUNT(CONFIG_FIELDS), &cfg, path, e)
                                    : pt_fail(e, "%s: no /config group: not a pocket checkpoint", path);
    if (!rc) rc = config_validate(&cfg, path, e);
    if (!rc) rc = h5_check_declared(f, (double)config_param_count(&cfg) * sizeof(float), "/config", path, e);
    if (!rc && params) {
        bundle_alloc(b, &cfg);
        rc = read_tensor_range(f, "params", &b->tt, 0, b->tt.total, b->params, path, e);
    } else if (!rc) {
        b->cfg = cfg;
        tensor_table_build(&b->tt, &cfg);
    }
    if (!rc) rc = read_tokenizer_file(f, "tokenizer.json", &b->tokenizer_json, &b->tokenizer_json_len, path, e);
    if (!rc)
        rc = read_tokenizer_file(f, "tokenizer_config.json", &b->tokenizer_config_json, &b->tokenizer_config_json_len,
                                 path, e);
    H5Fclose(f);
    if (rc) bundle_free(b);
    return rc;
}

int checkpoint_load(const char *path, ModelBundle *b, PtError *e) { return load(path, b, 1, e); }

int checkpoint_load_meta(const char *path, ModelBundle *b, PtError *e) { return load(path, b, 0, e); }

int checkpoint_is_hdf5(const char *path) { return h5_is_file(path); }

// The stored int4 state: its grid, what it quantizes, what it leaves in float.
static int inspect_qat(hid_t f, const ModelBundle *b, const char *path, FILE *out, PtError *e) {
    QuantSpec spec;
    int quant_embedding, rc = qat_read_spec(f, &spec, &quant_embedding, path, e);
    if (rc < 0) return -1;
    if (rc == 1) {
        fprintf(out, "int4 state: none (--int4 and the exporters use round-to-nearest, group %d, asymmetric%s)\n",
                QUANT_GROUP_DEFAULT, b->cfg.tied_embeddings ? ", the tied embedding included" : "");
        return 0;
    }
    int n = 0, frozen = 0, learned = 0;
    char floats[600] = "";
    for (int i = 0; i < b->tt.n; i++) {
        const TensorInfo *t = &b->tt.t[i];
        if (t->ndim != 2) continue;
        char g[200], sub[240];
        snprintf(g, sizeof g, "qat/%s", t->name);
        if (!h5_exists(f, g)) {
            if (strlen(floats) + strlen(t->name) + 3 < sizeof floats) strcat(strcat(floats, floats[0] ? ", " : ""), t->name);
            continue;
        }
        n++;
        snprintf(sub, sizeof sub, "%s/codes", g);
        frozen += h5_exists(f, sub) > 0;
        snprintf(sub, sizeof sub, "%s/scale_m", g);
        learned += h5_exists(f, sub) > 0;
    }
    fprintf(out, "int4 state: group %d, %s, %d matrices%s%s%s; left in float: %s\n", spec.group,
            spec.symmetric ? "symmetric" : "asymmetric", n, quant_embedding ? ", embedding quantized" : "",
            frozen ? ", codes frozen" : "", learned ? ", learned scales" : "", floats[0] ? floats : "none");
    return 0;
}

int checkpoint_inspect(const char *path, FILE *out, PtError *e) {
    ModelBundle b;
    if (checkpoint_load(path, &b, e)) return -1;
    hid_t f = h5_open_read(path, e);
    if (f < 0) {
        bundle_free(&b);
        return -1;
    }
    fprintf(out, "%s: pocket checkpoint\n", path);
    config_print(&b.cfg, out);
    double raw = 0, stored = 0;
    fprintf(out, "%-52s %-14s %8s %12s\n", "tensor", "shape", "dtype", "bytes");
    for (int i = 0; i < b.tt.n; i++) {
        const TensorInfo *t = &b.tt.t[i];
        char name[160], shape[48];
        H5DatasetInfo info;
        snprintf(name, sizeof name, "params/%s", t->name);
        if (h5_dataset_info(f, name, &info, path, e) == 0) stored += (double)info.stored_bytes;
        raw += t->numel * 4.0;
        if (t->ndim == 2) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t->shape[0], (long long)t->shape[1]);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)t->shape[0]);
        fprintf(out, "%-52s %-14s %8s %12zu\n", t->name, shape, "f32", t->numel * 4);
    }
    fprintf(out, "%d tensors, %zu parameters, %.1f MB as f32, %.1f MB stored (deflate)\n", b.tt.n,
            config_param_count(&b.cfg), raw / 1e6, stored / 1e6);
    fprintf(out, "tokenizer.json: %s\n", b.tokenizer_json ? "stored" : "absent");
    int rc = inspect_qat(f, &b, path, out, e);
    H5Fclose(f);
    bundle_free(&b);
    return rc;
}

int checkpoint_load_train(const char *path, const TensorTable *tt, size_t lo, size_t hi, float *adam_m,
                          float *adam_v, TrainState *st, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    if (!h5_exists(f, "state") || !h5_exists(f, "optim")) {
        H5Fclose(f);
        return 1;
    }
    int rc = read_fields(f, "state", STATE_FIELDS, COUNT(STATE_FIELDS), st, path, e);
    if (!rc) rc = read_mix_cursor(f, &st->mix, path, e);
    if (!rc) rc = read_tensor_range(f, "optim/m", tt, lo, hi, adam_m, path, e);
    if (!rc) rc = read_tensor_range(f, "optim/v", tt, lo, hi, adam_v, path, e);
    H5Fclose(f);
    return rc ? -1 : 0;
}

// ---- the pieces other HDF5 files of this folder are made of (checkpoint_parts.h)

int checkpoint_write_tensors(hid_t parent, const char *group, const TensorTable *tt, const float *base,
                             const MomentSource *src, int which) {
    return write_tensor_group(parent, group, tt, base, src, which);
}

int checkpoint_read_tensors(hid_t f, const char *group, const TensorTable *tt, float *out, const char *path,
                            PtError *e) {
    return read_tensor_range(f, group, tt, 0, tt->total, out, path, e);
}

int checkpoint_write_train_state(hid_t f, const MomentSource *src, const TensorTable *tt, const TrainState *st) {
    return write_state(f, src, tt, st);
}
