// export_lora.c: pocket export --lora (export_lora.h).
#include "export_lora.h"
#include <string.h>
#include "../export/mnn_lora.h"
#include "../formats/gguf_lora.h"

static void view_of(const LoraAdapter *a, int n_layer, LoraWeightsView *v) {
    memset(v, 0, sizeof *v);
    v->rank = a->cfg.rank;
    v->alpha = a->cfg.alpha;
    v->targets = a->cfg.targets;
    v->n_layer = n_layer;
    v->int4_base = a->base_int4;
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        int ia = lora_table_index(&a->tt, 0, t, 0), ib = lora_table_index(&a->tt, 0, t, 1);
        if (ia < 0 || ib < 0) continue;
        v->in[t] = a->tt.t[ia].shape[1];
        v->out[t] = a->tt.t[ib].shape[0];
        for (int l = 0; l < n_layer; l++) {
            v->a[l][t] = lora_adapter_tensor(a, l, t, 0);
            v->b[l][t] = lora_adapter_tensor(a, l, t, 1);
        }
    }
}

int export_lora(const OpenModel *om, const LoraExportArgs *x, PtError *e) {
    const LoraAdapter a = om->ad;
    LoraWeightsView *v = xmalloc(sizeof *v, "adapter view");
    view_of(&a, om->b.cfg.n_layer, v);
    char targets[64];
    lora_targets_format(a.cfg.targets, targets, sizeof targets);
    int rc;
    if (!strcmp(x->format, "gguf")) {
        GgufLoraStats st;
        rc = gguf_lora_export(&om->b, v, x->adapter, x->out, x->quant ? x->quant : "f32", &st, e);
        if (rc == 0)
            printf("%s: llama.cpp LoRA adapter, rank %d, alpha %g, %s: %d tensors %s, %.1f kB\n", x->out, v->rank,
                   v->alpha, targets, st.n_tensors, x->quant ? x->quant : "f32", st.bytes / 1e3);
    } else if (x->merge) {
        MnnExportStats st;
        MnnMergeStats ms;
        rc = mnn_lora_merge(&om->b, &om->q, om->int4_host, v, x->out, x->mnn, &st, &ms, e);
        if (rc == 0)
            printf("%s: package with the adapter merged (%s base + alpha/r B A on the base's int4 grid): of the %lld "
                   "weights of the %d adapted projections %lld (%.2f%%) changed code; %lld of %lld groups (%.2f%%) "
                   "got a wider RTN grid for merged weights beyond the base's\n",
                   x->out, v->int4_base ? "int4" : "float", (long long)ms.total,
                   v->n_layer * __builtin_popcount(v->targets), (long long)ms.changed,
                   ms.total ? 100.0 * (double)ms.changed / (double)ms.total : 0.0, (long long)ms.regridded,
                   (long long)ms.groups, ms.groups ? 100.0 * (double)ms.regridded / (double)ms.groups : 0.0);
    } else {
        MnnLoraStats st;
        rc = mnn_lora_export(&om->b, &om->q, v, x->adapter, x->out, x->force, &st, e);
        if (rc == 0)
            printf("%s: MNN LoRA graph for the %s package beside it, rank %d, alpha %g, %s (%d projections), "
                   "%.1f kB\n", st.path, st.fused ? "fused" : "plain", v->rank, v->alpha, targets, st.n_adapted,
                   st.bytes / 1e3);
    }
    free(v);
    return rc;
}
