// lora_peft.c: PEFT adapter folders in and out (lora_peft.h).
#include "lora_peft.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include "../util/out_dir.h"
#include "hf_import.h"
#include "safetensors.h"

#define CONFIG_NAME "adapter_config.json"
#define WEIGHTS_NAME "adapter_model.safetensors"

int lora_peft_is_dir(const char *dir) {
    char *p = path_join(dir, CONFIG_NAME);
    int yes = path_is_dir(dir) && path_exists(p);
    free(p);
    return yes;
}

// A key whose presence with a "set" value means an option we do not run:
// absent, null, false, an empty string, list or object are all "unset".
static int is_set(const json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    return 1;
}

static const struct { const char *key, *what; } UNSUPPORTED[] = {
    {"use_dora", "DoRA (use_dora)"},
    {"use_rslora", "rank-stabilised LoRA (use_rslora)"},
    {"modules_to_save", "fully trained extra modules (modules_to_save)"},
    {"layers_to_transform", "adapting some layers only (layers_to_transform)"},
    {"layers_pattern", "layers_pattern"},
    {"rank_pattern", "per-module ranks (rank_pattern)"},
    {"alpha_pattern", "per-module alphas (alpha_pattern)"},
    {"fan_in_fan_out", "fan_in_fan_out (Conv1D layouts)"},
    {"lora_bias", "a bias on lora_B (lora_bias)"},
    {"target_parameters", "target_parameters"},
    {"layer_replication", "layer_replication"},
    {"trainable_token_indices", "trainable_token_indices"},
    {"use_qalora", "QA-LoRA (use_qalora)"},
    {"use_bdlora", "use_bdlora"},
    {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"},
    {"exclude_modules", "exclude_modules"},
};

static int read_config(const char *path, LoraConfig *lc, PtError *e) {
    json_t *root = hf_read_json(path, e);
    if (!root) return -1;
    if (!json_is_object(root)) {
        json_decref(root);
        return pt_fail(e, "%s: not a JSON object", path);
    }
    int rc = 0;
    const json_t *type = json_object_get(root, "peft_type"), *bias = json_object_get(root, "bias");
    const json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    const json_t *dropout = json_object_get(root, "lora_dropout"), *targets = json_object_get(root, "target_modules");
    if (!json_is_string(type) || strcmp(json_string_value(type), "LORA"))
        rc = pt_fail(e, "%s: peft_type is %s, not \"LORA\"", path,
                     json_is_string(type) ? json_string_value(type) : "missing");
    for (size_t i = 0; !rc && i < sizeof UNSUPPORTED / sizeof UNSUPPORTED[0]; i++)
        if (is_set(json_object_get(root, UNSUPPORTED[i].key)))
            rc = pt_fail(e, "%s: %s is not supported", path, UNSUPPORTED[i].what);
    if (!rc && bias && !json_is_null(bias) && (!json_is_string(bias) || strcmp(json_string_value(bias), "none")))
        rc = pt_fail(e, "%s: bias \"%s\" is not supported (only \"none\")", path,
                     json_is_string(bias) ? json_string_value(bias) : "?");
    if (!rc && (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 65536))
        rc = pt_fail(e, "%s: r is missing or not a positive integer", path);
    if (!rc && !json_is_number(alpha)) rc = pt_fail(e, "%s: lora_alpha is missing or not a number", path);
    if (!rc && dropout && !json_is_null(dropout) && !json_is_number(dropout))
        rc = pt_fail(e, "%s: lora_dropout is not a number", path);
    if (!rc && json_is_string(targets))
        rc = pt_fail(e, "%s: target_modules \"%s\" is a pattern; only a list of module names is supported", path,
                     json_string_value(targets));
    else if (!rc && !json_is_array(targets))
        rc = pt_fail(e, "%s: target_modules is missing or not a list", path);
    if (!rc) {
        lc->rank = (int)json_integer_value(r);
        lc->alpha = (float)json_number_value(alpha);
        lc->dropout = dropout && json_is_number(dropout) ? (float)json_number_value(dropout) : 0.0f;
        lc->targets = 0;
        size_t i;
        const json_t *m;
        json_array_foreach(targets, i, m) {
            const char *name = json_is_string(m) ? json_string_value(m) : "?";
            int t = json_is_string(m) && strstr(name, "_proj") ? lora_target_find(name) : -1;
            if (t < 0) {
                rc = pt_fail(e, "%s: target module \"%s\" is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, "
                             "up_proj, down_proj", path, name);
                break;
            }
            lc->targets |= 1u << t;
        }
    }
    if (!rc) rc = lora_config_check(lc, path, e);
    json_decref(root);
    return rc;
}

// Every tensor of the file is one of the table, with its shape, and every
// one of the table is there.
static int read_weights(const char *path, LoraAdapter *a, PtError *e) {
    StFile f;
    if (st_open(&f, path, e)) return -1;
    int rc = 0;
    for (int i = 0; i < f.n && !rc; i++) {
        const StTensor *s = &f.t[i];
        const TensorInfo *t = tensor_table_find(&a->tt, s->name);
        if (!t) {
            rc = pt_fail(e, "%s: tensor %s is not an adapter tensor of this base (r %d, targets of "
                         "adapter_config.json, its layers)", path, s->name, a->cfg.rank);
        } else if (s->ndim != 2 || s->shape[0] != t->shape[0] || s->shape[1] != t->shape[1]) {
            rc = pt_fail(e, "%s: tensor %s has shape [%lld, %lld], the base and r = %d imply [%lld, %lld]", path,
                         s->name, s->ndim > 0 ? (long long)s->shape[0] : 0LL,
                         s->ndim > 1 ? (long long)s->shape[1] : 0LL, a->cfg.rank, (long long)t->shape[0],
                         (long long)t->shape[1]);
        } else {
            rc = st_read_f32(&f, s, a->params + t->offset, e);
        }
    }
    for (int i = 0; i < a->tt.n && !rc; i++)
        if (!st_find(&f, a->tt.t[i].name)) rc = pt_fail(e, "%s: tensor %s is missing", path, a->tt.t[i].name);
    for (size_t i = 0; i < a->tt.total && !rc; i++)
        if (!isfinite(a->params[i])) rc = pt_fail(e, "%s: a weight is not finite", path);
    st_close(&f);
    return rc;
}

int lora_peft_import(const char *dir, const ModelConfig *mc, LoraAdapter *a, PtError *e) {
    memset(a, 0, sizeof *a);
    char *cfg_path = path_join(dir, CONFIG_NAME), *w_path = path_join(dir, WEIGHTS_NAME);
    LoraConfig lc;
    int rc = read_config(cfg_path, &lc, e);
    if (!rc) {   // r and the targets against what the weights file can hold (2 bytes a weight at least)
        TensorTable tt;
        lora_table_build(&tt, mc, &lc);
        int64_t bytes = file_size(w_path);
        if (bytes >= 0 && (double)tt.total * 2 > (double)bytes)
            rc = pt_fail(e, "%s: r = %d on these targets makes %zu weights, more than the %lld bytes of %s hold",
                         cfg_path, lc.rank, tt.total, (long long)bytes, WEIGHTS_NAME);
        tensor_table_free(&tt);
    }
    if (!rc) {
        lora_adapter_alloc(a, mc, &lc);
        rc = read_weights(w_path, a, e);
        if (rc) lora_adapter_free(a);
    }
    free(cfg_path);
    free(w_path);
    return rc;
}

static char *config_json(const LoraAdapter *a, const char *base_name) {
    json_t *targets = json_array();
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (a->cfg.targets & (1u << t)) json_array_append_new(targets, json_string(lora_target_module(t)));
    json_t *j = json_pack("{s:s, s:s?, s:s, s:i, s:f, s:f, s:o, s:s, s:b, s:b, s:b, s:b, s:n, s:n, s:n, s:{}, s:{}, "
                          "s:b}",
                          "peft_type", "LORA", "base_model_name_or_path", base_name, "task_type", "CAUSAL_LM", "r",
                          a->cfg.rank, "lora_alpha", (double)a->cfg.alpha, "lora_dropout", (double)a->cfg.dropout,
                          "target_modules", targets, "bias", "none", "use_dora", 0, "use_rslora", 0,
                          "fan_in_fan_out", 0, "init_lora_weights", 1, "modules_to_save", "layers_to_transform",
                          "layers_pattern", "rank_pattern", "alpha_pattern", "inference_mode", 1);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    return s;
}

int lora_peft_export(const LoraAdapter *a, const char *dir, const char *base_name, int force, PtError *e) {
    OutDir od;
    if (out_dir_begin(&od, dir, force, e)) return -1;
    char *cfg = config_json(a, base_name);
    StWriteTensor *w = xcalloc(a->tt.n ? a->tt.n : 1, sizeof *w, "adapter tensors");
    for (int i = 0; i < a->tt.n; i++) {
        const TensorInfo *t = &a->tt.t[i];
        w[i] = (StWriteTensor){.name = t->name, .dtype = "F32", .ndim = 2, .shape = {t->shape[0], t->shape[1]},
                               .data = a->params + t->offset};
    }
    char *wpath = out_dir_path(&od, WEIGHTS_NAME);
    int rc = out_dir_write(&od, CONFIG_NAME, cfg, strlen(cfg), e) || st_write(wpath, w, a->tt.n, e);
    free(wpath);
    free(w);
    free(cfg);
    if (rc) {
        out_dir_abort(&od);
        return -1;
    }
    return out_dir_commit(&od, e);
}
