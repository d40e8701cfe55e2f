// lora_view.c: the adapter view's checks against a base and the merge; see
// lora_view.h.
#include "lora_view.h"
#include <math.h>
#include <stdlib.h>

int lora_view_row(const TensorTable *tt, int layer, int t) {
    for (int i = 0; i < tt->n; i++)
        if (tt->t[i].layer == layer && tt->t[i].kind == lora_target_kind(t)) return i;
    return -1;
}

static int first_bad(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int)(i < (size_t)INT32_MAX ? i : INT32_MAX);
    return -1;
}

int lora_view_check(const LoraWeightsView *v, const ModelBundle *b, const char *src, PtError *e) {
    const ModelConfig *c = &b->cfg;
    if (v->rank < 1) return pt_fail(e, "%s: rank %d (must be >= 1)", src, v->rank);
    if (v->alpha == 0 || !isfinite(v->alpha)) return pt_fail(e, "%s: LoRA alpha %g is zero or not finite", src, v->alpha);
    if (!(v->targets & ((1u << LORA_N_TARGETS) - 1)) || (v->targets >> LORA_N_TARGETS))
        return pt_fail(e, "%s: target mask 0x%x names no projection or an unknown one", src, v->targets);
    if (v->n_layer != c->n_layer)
        return pt_fail(e, "%s: %d layers, the base has %d (an adapter for another base)", src, v->n_layer, c->n_layer);
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        const char *nm = lora_target_name(t);
        int on = (v->targets >> t) & 1;
        int row = lora_view_row(&b->tt, 0, t);
        if (on && row < 0) return pt_fail(e, "%s: targets %s, which the base does not have", src, nm);
        if (on && (v->out[t] != b->tt.t[row].shape[0] || v->in[t] != b->tt.t[row].shape[1]))
            return pt_fail(e, "%s: %s_proj adapter is [%lld, %lld] (out, in), the base's projection is [%lld, %lld]",
                           src, nm, (long long)v->out[t], (long long)v->in[t], (long long)b->tt.t[row].shape[0],
                           (long long)b->tt.t[row].shape[1]);
        for (int l = 0; l < c->n_layer; l++) {
            if (!on) {
                if (v->a[l][t] || v->b[l][t])
                    return pt_fail(e, "%s: layer %d has %s_proj weights but %s is not a target", src, l, nm, nm);
                continue;
            }
            if (!v->a[l][t] || !v->b[l][t])
                return pt_fail(e, "%s: layer %d %s_proj lacks its lora_%s", src, l, nm, v->a[l][t] ? "B" : "A");
            int bad = first_bad(v->a[l][t], (size_t)v->rank * (size_t)v->in[t]);
            if (bad >= 0) return pt_fail(e, "%s: layer %d %s_proj lora_A value %d is not finite", src, l, nm, bad);
            bad = first_bad(v->b[l][t], (size_t)v->out[t] * (size_t)v->rank);
            if (bad >= 0) return pt_fail(e, "%s: layer %d %s_proj lora_B value %d is not finite", src, l, nm, bad);
        }
    }
    return 0;
}

void lora_view_merge(const LoraWeightsView *v, const TensorTable *tt, float *params) {
    double s = (double)v->alpha / v->rank;
    for (int l = 0; l < v->n_layer; l++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!((v->targets >> t) & 1)) continue;
            const TensorInfo *ti = &tt->t[lora_view_row(tt, l, t)];
            int64_t out = ti->shape[0], in = ti->shape[1], r = v->rank;
            float *w = params + ti->offset;
            const float *A = v->a[l][t], *B = v->b[l][t];
#pragma omp parallel for schedule(static)
            for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < in; i++) {
                    double acc = 0;
                    for (int64_t k = 0; k < r; k++) acc += (double)B[o * r + k] * A[k * in + i];
                    w[o * in + i] = (float)(w[o * in + i] + s * acc);
                }
        }
}
