// gguf_lora.c: the llama.cpp LoRA adapter GGUF; see gguf_lora.h.
#include "gguf_lora.h"
#include <string.h>
#include "gguf_names.h"
#include "gguf_writer.h"

int gguf_lora_export(const ModelBundle *b, const LoraWeightsView *v, const char *src, const char *path,
                     const char *type, GgufLoraStats *st, PtError *e) {
    memset(st, 0, sizeof *st);
    const ModelConfig *c = &b->cfg;
    const char *arch;
    if (strcmp(type, "f32") != 0 && strcmp(type, "f16") != 0)
        return pt_fail(e, "a GGUF adapter is f32 or f16 (got --quant %s)", type);
    if (gguf_arch(c, &arch, e) || lora_view_check(v, b, src, e)) return -1;
    uint32_t gtype = strcmp(type, "f16") == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    int llama = strcmp(arch, "llama") == 0;
    GgufWriter *w = gguf_writer_new();
    gguf_kv_str(w, "general.architecture", arch);
    gguf_kv_str(w, "general.type", "adapter");
    gguf_kv_str(w, "general.name", c->name[0] ? c->name : "pocket");
    gguf_kv_str(w, "adapter.type", "lora");
    gguf_kv_f32(w, "adapter.lora.alpha", v->alpha);
    // The permuted lora_B copies of q and k (llama) live until the save.
    float **held = xcalloc((size_t)v->n_layer * 2, sizeof *held, "permuted lora_B list");
    int rc = 0;
    for (int l = 0; l < v->n_layer && rc == 0; l++)
        for (int t = 0; t < LORA_N_TARGETS && rc == 0; t++) {
            if (!((v->targets >> t) & 1)) continue;
            const TensorInfo *ti = &b->tt.t[lora_view_row(&b->tt, l, t)];
            char base[GGUF_MAX_NAME], name[GGUF_MAX_NAME + 8];
            gguf_tensor_name(ti, base);
            int64_t r = v->rank, out = ti->shape[0], in = ti->shape[1];
            const float *B = v->b[l][t];
            TensorKind kind = lora_target_kind(t);
            if (llama && (kind == T_WQ || kind == T_WK)) {
                float *p = xmalloc((size_t)out * (size_t)r * sizeof(float), "permuted lora_B");
                gguf_llama_permute(B, p, kind == T_WQ ? c->n_head : c->n_kv_head, c->head_dim, r, 1);
                held[2 * l + (kind == T_WK)] = p;
                B = p;
            }
            int64_t ne_a[2] = {in, r}, ne_b[2] = {r, out};
            snprintf(name, sizeof name, "%s.lora_a", base);
            rc = gguf_add_tensor(w, name, 2, ne_a, gtype, v->a[l][t], e);
            snprintf(name, sizeof name, "%s.lora_b", base);
            if (rc == 0) rc = gguf_add_tensor(w, name, 2, ne_b, gtype, B, e);
            st->n_tensors += 2;
        }
    if (rc == 0) rc = gguf_writer_save(w, path, e);
    if (rc == 0) st->bytes = gguf_writer_saved_bytes(w);
    for (int i = 0; i < v->n_layer * 2; i++) free(held[i]);
    free(held);
    gguf_writer_free(w);
    return rc;
}
