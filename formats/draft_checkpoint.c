// draft_checkpoint.c: speculative draft checkpoints (draft_checkpoint.h).
#include "draft_checkpoint.h"
#include <string.h>
#include "checkpoint_parts.h"

static int write_attrs(hid_t f, const void *ctx) {
    const Draft *d = ctx;
    hid_t g = h5_create_group(f, "draft");
    if (g < 0) return -1;
    char layers[128];
    draft_layers_format(&d->cfg, layers, sizeof layers);
    int rc = h5_write_attr(g, "layers", H5T_NATIVE_INT, &d->cfg.n_layer, 1) ||
             h5_write_attr(g, "block", H5T_NATIVE_INT, &d->cfg.block, 1) ||
             h5_write_attr(g, "mask_token", H5T_NATIVE_INT, &d->cfg.mask_token, 1) ||
             h5_write_attr(g, "d_ff", H5T_NATIVE_INT, &d->cfg.d_ff, 1) ||
             h5_write_str_attr(g, "target_layers", layers) ||
             h5_write_str_attr(g, "base_sha256", d->base_sha256) ||
             h5_write_attr(g, "vocab", H5T_NATIVE_INT, &d->n_vocab, 1);
    if (!rc && d->n_vocab) {
        hsize_t n = (hsize_t)d->n_vocab;
        rc = h5_write_dataset(g, "vocab", H5T_NATIVE_INT32, 1, &n, d->vocab);
    }
    H5Gclose(g);
    return rc ? -1 : 0;
}

int draft_checkpoint_save(const char *path, const Draft *d, const MomentSource *moments, const TrainState *st,
                          PtError *e) {
    return checkpoint_save_part(path, write_attrs, d, &d->tt, d->params, moments, st, "the draft", e);
}

// /draft's attributes: the configuration, the base's hash (not yet checked
// against a target) and the size of its vocabulary (0 when the attribute is
// absent: drafts from before it propose any token).
static int read_attrs(hid_t f, DraftConfig *dc, char hash[65], int *n_vocab, const char *path, PtError *e) {
    memset(dc, 0, sizeof *dc);
    hid_t g = h5_exists(f, "draft") ? h5_open_group(f, "draft", path, e)
                                    : pt_fail(e, "%s: no /draft group: not a speculative draft checkpoint", path);
    char layers[128];
    int rc = g < 0 ? -1 : 0;
    if (!rc)
        rc = h5_read_attr(g, "layers", H5T_NATIVE_INT, &dc->n_layer, 1, path, e) ||
             h5_read_attr(g, "block", H5T_NATIVE_INT, &dc->block, 1, path, e) ||
             h5_read_attr(g, "mask_token", H5T_NATIVE_INT, &dc->mask_token, 1, path, e) ||
             h5_read_attr(g, "d_ff", H5T_NATIVE_INT, &dc->d_ff, 1, path, e) ||
             checkpoint_read_str(g, "draft", "target_layers", layers, sizeof layers, path, e) ||
             checkpoint_read_str(g, "draft", "base_sha256", hash, 65, path, e);
    *n_vocab = 0;
    if (!rc && h5_has_attr(g, "vocab")) rc = h5_read_attr(g, "vocab", H5T_NATIVE_INT, n_vocab, 1, path, e);
    if (g >= 0) H5Gclose(g);
    if (!rc) rc = draft_layers_parse(layers, dc, path, e);
    return rc ? -1 : 0;
}

// /draft/vocab: the n ids the draft proposes (n from the "vocab" attribute).
static int read_vocab(hid_t f, Draft *d, int n, int V, const char *path, PtError *e) {
    if (n == 0) return 0;
    if (n < 0 || n > V)
        return pt_fail(e, "%s: /draft: a draft vocabulary of %d tokens, outside [1, %d]", path, n, V);
    hsize_t dims = (hsize_t)n;
    if (h5_read_dataset_alloc(f, "draft/vocab", H5T_NATIVE_INT32, 1, &dims, (void **)&d->vocab, path, e)) return -1;
    d->n_vocab = n;
    char src[1100];
    snprintf(src, sizeof src, "%s: /draft", path);
    return draft_vocab_check(d->vocab, n, V, src, e);
}

int draft_checkpoint_read_config(const char *path, DraftConfig *dc, char *hash, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    int n_vocab, rc = read_attrs(f, dc, hash, &n_vocab, path, e);
    H5Fclose(f);
    return rc;
}

int draft_check_base(const char *path, const char *hash, const char *base_hash, const char *base_name, PtError *e) {
    if (!strcmp(hash, base_hash)) return 0;
    return pt_fail(e, "%s: a draft for the target with sha256 %s, but %s has sha256 %s (a draft serves only the "
                   "target weights it was trained on)", path, hash, base_name, base_hash);
}

int draft_checkpoint_load(const char *path, const ModelConfig *tc, const char *base_hash, const char *base_name,
                          Draft *d, PtError *e) {
    memset(d, 0, sizeof *d);
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    DraftConfig dc;
    char hash[65];
    int n_vocab, rc = read_attrs(f, &dc, hash, &n_vocab, path, e) || draft_config_check(&dc, tc, path, e);
    if (!rc && base_hash) rc = draft_check_base(path, hash, base_hash, base_name, e);
    if (!rc) {   // the draft's size from /draft and the target's config, before room is made for it
        TensorTable tt;
        draft_table_build(&tt, tc, &dc);
        rc = h5_check_declared(f, (double)tt.total * sizeof(float), "/draft", path, e);
        tensor_table_free(&tt);
    }
    if (!rc) {
        draft_alloc(d, tc, &dc);
        strcpy(d->base_sha256, hash);
        rc = checkpoint_read_tensors(f, "params", &d->tt, d->params, path, e) ||
             read_vocab(f, d, n_vocab, tc->vocab_size, path, e);
    }
    H5Fclose(f);
    if (rc) draft_free(d);
    return rc ? -1 : 0;
}

int draft_checkpoint_is(const char *path) { return checkpoint_has_group(path, "draft"); }

int draft_checkpoint_inspect(const char *path, FILE *out, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    DraftConfig dc;
    char hash[65], layers[128];
    int n, rc = read_attrs(f, &dc, hash, &n, path, e);
    if (!rc) {
        draft_layers_format(&dc, layers, sizeof layers);
        fprintf(out, "%s: DFlash speculative draft, %d layer(s), block %d, mask token %d, d_ff %d, target layers %s\n",
                path, dc.n_layer, dc.block, dc.mask_token, dc.d_ff, layers);
        fprintf(out, "target: int4 weights with sha256 %s\n", hash);
        if (n) fprintf(out, "vocabulary: the %d tokens the training responses held most (/draft/vocab)\n", n);
        else fprintf(out, "vocabulary: every token of the target's\n");
        rc = checkpoint_print_params(f, 48, out, path, e);
    }
    H5Fclose(f);
    return rc ? -1 : 0;
}
