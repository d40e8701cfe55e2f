// checkpoint_parts.c: what the adapter and draft checkpoints share (checkpoint_parts.h).
#include "checkpoint_parts.h"
#include <string.h>

int checkpoint_save_part(const char *path, int (*write_attrs)(hid_t f, const void *ctx), const void *ctx,
                         const TensorTable *tt, const float *params, const MomentSource *moments, const TrainState *st,
                         const char *what, PtError *e) {
    H5Output out;
    if (h5_output_create(&out, path, e)) return -1;
    int rc = write_attrs(out.file, ctx) || checkpoint_write_tensors(out.file, "params", tt, params, NULL, 0) ||
             (st && checkpoint_write_train_state(out.file, moments, tt, st));
    if (rc) {
        h5_output_abort(&out);
        return pt_fail(e, "%s: writing %s failed (disk full or not writable?)", path, what);
    }
    return h5_output_commit(&out, e);
}

int checkpoint_read_str(hid_t g, const char *group, const char *name, char *buf, size_t cap, const char *path,
                        PtError *e) {
    char *s;
    if (h5_read_str_attr(g, name, &s, path, e)) return -1;
    int rc = strlen(s) < cap ? 0
                             : pt_fail(e, "%s: attribute '%s' of /%s is over %zu bytes", path, name, group, cap - 1);
    if (!rc) strcpy(buf, s);
    free(s);
    return rc;
}

int checkpoint_print_params(hid_t f, int width, FILE *out, const char *path, PtError *e) {
    hid_t p = h5_open_group(f, "params", path, e);
    if (p < 0) return -1;
    const int n = h5_child_count(p);
    double floats = 0;
    for (int i = 0; i < n; i++) {
        char name[256];
        H5DatasetInfo info;
        if (!h5_child_name(p, i, name, sizeof name) || h5_dataset_info(p, name, &info, path, e)) {
            H5Gclose(p);
            return -1;
        }
        const double rows = (double)info.dims[0], cols = info.rank > 1 ? (double)info.dims[1] : 1;
        fprintf(out, "%-*s [%llu, %llu]\n", width, name, (unsigned long long)rows, (unsigned long long)cols);
        floats += rows * cols;
    }
    H5Gclose(p);
    fprintf(out, "%d tensors, %.0f parameters (%.2f MB f32)%s\n", n, floats, floats * 4 / 1e6,
            h5_exists(f, "optim") ? "; AdamW moments and training state (a run's checkpoint)" : "");
    return 0;
}

int checkpoint_has_group(const char *path, const char *group) {
    if (!h5_is_file(path)) return 0;
    PtError e;
    hid_t f = h5_open_read(path, &e);
    if (f < 0) return 0;
    int yes = h5_exists(f, group) > 0;
    H5Fclose(f);
    return yes;
}
