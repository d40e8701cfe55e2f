// hf_export.c: ModelBundle -> HF model directory; see hf_export.h.
#include "hf_export.h"
#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <strings.h>
#include "safetensors.h"
#include "../util/out_dir.h"

// The shortest decimal that reads back as the same float: the config holds
// floats, and 1e-6 should not be written as 9.9999999747524271e-07.
static double shortest_float(double x) {
    float f = (float)x;
    char buf[32];
    for (int digits = 1; digits < 10; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if ((float)strtod(buf, NULL) == f) return strtod(buf, NULL);
    }
    return x;
}

// config_to_hf_json with torch_dtype naming the storage type.
static int write_config(const ModelBundle *b, const OutDir *dir, const char *torch_dtype, PtError *e) {
    char *text = config_to_hf_json(&b->cfg);
    json_t *o = json_loads(text, 0, NULL);
    free(text);
    if (!o) die("config_to_hf_json produced invalid JSON");
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
        if (json_is_real(v)) json_real_set(v, shortest_float(json_real_value(v)));
    json_object_set_new(o, "torch_dtype", json_string(torch_dtype));
    text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) die("out of memory serialising config.json");
    int rc = out_dir_write(dir, "config.json", text, strlen(text), e);
    free(text);
    return rc;
}

static int write_weights(const ModelBundle *b, const OutDir *dir, const char *dtype, PtError *e) {
    const TensorTable *tt = &b->tt;
    StWriteTensor *w = xcalloc(tt->n, sizeof(StWriteTensor), "export tensor list");
    uint16_t *half = NULL;   // BF16/F16 copies of all tensors, back to back
    int to_bf16 = strcmp(dtype, "BF16") == 0, to_f16 = strcmp(dtype, "F16") == 0;
    if (to_bf16 || to_f16) {
        size_t numel = 0;
        for (int i = 0; i < tt->n; i++) numel += tt->t[i].numel;
        half = xmalloc(numel * sizeof(uint16_t), "half-precision export copy");
    }
    size_t at = 0;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *ti = &tt->t[i];
        const float *src = b->params + ti->offset;
        w[i].name = ti->name;
        w[i].dtype = dtype;
        w[i].ndim = ti->ndim;
        w[i].shape[0] = ti->shape[0];
        w[i].shape[1] = ti->shape[1];
        if (half) {
            uint16_t *dst = half + at;
            int64_t n = (int64_t)ti->numel;
#pragma omp parallel for schedule(static) if (n > (1 << 20))
            for (int64_t j = 0; j < n; j++) dst[j] = to_bf16 ? f32_to_bf16(src[j]) : f32_to_f16(src[j]);
            w[i].data = dst;
            at += ti->numel;
        } else {
            w[i].data = src;
        }
    }
    char *path = out_dir_path(dir, "model.safetensors");
    int rc = st_write(path, w, tt->n, e);
    free(path);
    free(half);
    free(w);
    return rc;
}

// The safetensors and torch names of a --dtype.
static int dtype_of(const char *dtype_arg, const char **dtype, const char **torch_dtype, PtError *e) {
    if (!strcasecmp(dtype_arg, "f32") || !strcasecmp(dtype_arg, "fp32") || !strcasecmp(dtype_arg, "float32"))
        *dtype = "F32", *torch_dtype = "float32";
    else if (!strcasecmp(dtype_arg, "bf16") || !strcasecmp(dtype_arg, "bfloat16"))
        *dtype = "BF16", *torch_dtype = "bfloat16";
    else if (!strcasecmp(dtype_arg, "f16") || !strcasecmp(dtype_arg, "fp16") || !strcasecmp(dtype_arg, "float16"))
        *dtype = "F16", *torch_dtype = "float16";
    else
        return pt_fail(e, "dtype \"%s\" is not supported for HF export (f32, bf16, f16)", dtype_arg);
    return 0;
}

int hf_export_check(const char *dir, const char *dtype_arg, int force, PtError *e) {
    const char *dtype = NULL, *torch_dtype = NULL;
    return dtype_of(dtype_arg, &dtype, &torch_dtype, e) || out_dir_check(dir, force, e) ? -1 : 0;
}

int hf_export(const ModelBundle *b, const char *dir_arg, const char *dtype_arg, int force, PtError *e) {
    const char *dtype = NULL, *torch_dtype = NULL;
    if (dtype_of(dtype_arg, &dtype, &torch_dtype, e)) return -1;
    OutDir d;
    if (out_dir_begin(&d, dir_arg, force, e)) return -1;
    if (write_config(b, &d, torch_dtype, e) || write_weights(b, &d, dtype, e) ||
        (b->tokenizer_json && out_dir_write(&d, "tokenizer.json", b->tokenizer_json, b->tokenizer_json_len, e)) ||
        (b->tokenizer_config_json &&
         out_dir_write(&d, "tokenizer_config.json", b->tokenizer_config_json, b->tokenizer_config_json_len, e))) {
        out_dir_abort(&d);
        return -1;
    }
    return out_dir_commit(&d, e);
}
