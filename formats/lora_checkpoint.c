// lora_checkpoint.c: adapter checkpoints and the base hash (lora_checkpoint.h).
#include "lora_checkpoint.h"
#include <string.h>
#include "../data/sha256.h"
#include "checkpoint_parts.h"

void lora_base_hash(const TensorTable *tt, const float *weights, char hex[65]) {
    Sha256 s;
    sha256_init(&s);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        sha256_update(&s, t->name, strlen(t->name) + 1);
        sha256_update(&s, weights + t->offset, t->numel * sizeof(float));   // little-endian hosts only
    }
    uint8_t d[32];
    sha256_final(&s, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static int write_attrs(hid_t f, const void *ctx) {
    const LoraAdapter *a = ctx;
    hid_t g = h5_create_group(f, "lora");
    if (g < 0) return -1;
    char targets[64];
    lora_targets_format(a->cfg.targets, targets, sizeof targets);
    int rc = h5_write_attr(g, "rank", H5T_NATIVE_INT, &a->cfg.rank, 1) ||
             h5_write_attr(g, "alpha", H5T_NATIVE_FLOAT, &a->cfg.alpha, 1) ||
             h5_write_attr(g, "dropout", H5T_NATIVE_FLOAT, &a->cfg.dropout, 1) ||
             h5_write_str_attr(g, "targets", targets) || h5_write_str_attr(g, "base", a->base_int4 ? "int4" : "fp32") ||
             h5_write_str_attr(g, "base_sha256", a->base_sha256);
    H5Gclose(g);
    return rc ? -1 : 0;
}

int lora_checkpoint_save(const char *path, const LoraAdapter *a, const MomentSource *moments, const TrainState *st,
                         PtError *e) {
    return checkpoint_save_part(path, write_attrs, a, &a->tt, a->params, moments, st, "the adapter", e);
}

// /lora's attributes, checked: the configuration, base ("fp32" or "int4") and its hash.
static int read_attrs(hid_t f, LoraConfig *lc, char base[16], char hash[65], const char *path, PtError *e) {
    memset(lc, 0, sizeof *lc);
    hid_t g = h5_exists(f, "lora") ? h5_open_group(f, "lora", path, e)
                                   : pt_fail(e, "%s: no /lora group: not a LoRA adapter checkpoint", path);
    char targets[128];
    int rc = g < 0 ? -1 : 0;
    if (!rc)
        rc = h5_read_attr(g, "rank", H5T_NATIVE_INT, &lc->rank, 1, path, e) ||
             h5_read_attr(g, "alpha", H5T_NATIVE_FLOAT, &lc->alpha, 1, path, e) ||
             h5_read_attr(g, "dropout", H5T_NATIVE_FLOAT, &lc->dropout, 1, path, e) ||
             checkpoint_read_str(g, "lora", "targets", targets, sizeof targets, path, e) ||
             checkpoint_read_str(g, "lora", "base", base, 16, path, e) ||
             checkpoint_read_str(g, "lora", "base_sha256", hash, 65, path, e);
    if (g >= 0) H5Gclose(g);
    if (!rc) rc = lora_targets_parse(targets, &lc->targets, path, e) || lora_config_check(lc, path, e);
    if (!rc && strcmp(base, "fp32") && strcmp(base, "int4"))
        rc = pt_fail(e, "%s: /lora base '%s' is not fp32 or int4", path, base);
    return rc ? -1 : 0;
}

int lora_check_base(const char *path, int base_int4, const char *hash, const char *base_hash, const char *base_name,
                    PtError *e) {
    if (!strcmp(hash, base_hash)) return 0;
    return pt_fail(e, "%s: trained on the %s base with sha256 %s, but %s has sha256 %s (an adapter applies only to "
                   "the base it was trained on)", path, base_int4 ? "int4" : "fp32", hash, base_name, base_hash);
}

int lora_checkpoint_load(const char *path, const ModelConfig *mc, const char *base_hash, const char *base_name,
                         LoraAdapter *a, PtError *e) {
    memset(a, 0, sizeof *a);
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    LoraConfig lc;
    char base[16], hash[65];
    int rc = read_attrs(f, &lc, base, hash, path, e);
    if (!rc && base_hash) rc = lora_check_base(path, !strcmp(base, "int4"), hash, base_hash, base_name, e);
    if (!rc) {   // the adapter's size from /lora and the base's config, before room is made for it
        TensorTable tt;
        lora_table_build(&tt, mc, &lc);
        rc = h5_check_declared(f, (double)tt.total * sizeof(float), "/lora", path, e);
        tensor_table_free(&tt);
    }
    if (!rc) {
        lora_adapter_alloc(a, mc, &lc);
        strcpy(a->base_sha256, hash);
        a->base_int4 = !strcmp(base, "int4");
        rc = checkpoint_read_tensors(f, "params", &a->tt, a->params, path, e);
    }
    H5Fclose(f);
    if (rc) lora_adapter_free(a);
    return rc ? -1 : 0;
}

int lora_checkpoint_is(const char *path) { return checkpoint_has_group(path, "lora"); }

int lora_checkpoint_base_int4(const char *path, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    LoraConfig lc;
    char base[16], hash[65];
    int rc = read_attrs(f, &lc, base, hash, path, e);
    H5Fclose(f);
    return rc ? -1 : !strcmp(base, "int4");
}

int lora_checkpoint_inspect(const char *path, FILE *out, PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    LoraConfig lc;
    char targets[64], base[16], hash[65];
    int rc = read_attrs(f, &lc, base, hash, path, e);
    if (!rc) {
        lora_targets_format(lc.targets, targets, sizeof targets);
        fprintf(out, "%s: LoRA adapter, rank %d, alpha %g (scale %g), dropout %g, targets %s\n", path, lc.rank,
                lc.alpha, lc.alpha / lc.rank, lc.dropout, targets);
        fprintf(out, "base: %s weights with sha256 %s\n", base, hash);
        rc = checkpoint_print_params(f, 72, out, path, e);
    }
    H5Fclose(f);
    return rc ? -1 : 0;
}
