// draft.c: a DFlash draft's configuration, tensor table and weights (draft.h).
// The pass itself is draft_model.c.
#include "draft.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int draft_config_check(const DraftConfig *dc, const ModelConfig *tc, const char *src, PtError *e) {
    if (dc->n_layer < 1 || dc->n_layer > DRAFT_MAX_LAYERS)
        return pt_fail(e, "%s: the draft's layers must be 1..%d, not %d", src, DRAFT_MAX_LAYERS, dc->n_layer);
    if (dc->block < 2 || dc->block > DRAFT_MAX_BLOCK)
        return pt_fail(e, "%s: the draft's block must be 2..%d tokens, not %d", src, DRAFT_MAX_BLOCK, dc->block);
    if (dc->block > tc->max_seq)
        return pt_fail(e, "%s: a block of %d tokens is longer than the target's context (%d)", src, dc->block,
                       tc->max_seq);
    if (dc->n_target < 1 || dc->n_target > DRAFT_MAX_TARGETS)
        return pt_fail(e, "%s: the draft reads 1..%d target layers, not %d", src, DRAFT_MAX_TARGETS, dc->n_target);
    for (int k = 0; k < dc->n_target; k++) {
        int l = dc->target_layers[k];
        if (l < 0 || l >= tc->n_layer)
            return pt_fail(e, "%s: target layer %d is outside the target's %d layers (0..%d)", src, l, tc->n_layer,
                           tc->n_layer - 1);
        if (k && l <= dc->target_layers[k - 1])
            return pt_fail(e, "%s: the target layers must increase (%d after %d)", src, l, dc->target_layers[k - 1]);
    }
    if (dc->mask_token < 0 || dc->mask_token >= tc->vocab_size)
        return pt_fail(e, "%s: mask token %d is outside the target's vocabulary (0..%d)", src, dc->mask_token,
                       tc->vocab_size - 1);
    if (dc->d_ff < 1 || dc->d_ff > 1 << 20) return pt_fail(e, "%s: the draft's d_ff %d is out of range", src, dc->d_ff);
    return 0;
}

int draft_layers_parse(const char *list, DraftConfig *dc, const char *src, PtError *e) {
    dc->n_target = 0;
    const char *p = list;
    while (*p) {
        while (isspace((unsigned char)*p)) p++;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1 << 16)
            return pt_fail(e, "%s: target layers \"%s\": expected comma-separated layer numbers at \"%s\"", src, list,
                           p);
        if (dc->n_target == DRAFT_MAX_TARGETS)
            return pt_fail(e, "%s: target layers \"%s\": at most %d", src, list, DRAFT_MAX_TARGETS);
        dc->target_layers[dc->n_target++] = (int)v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (*p) return pt_fail(e, "%s: target layers \"%s\": unexpected \"%s\"", src, list, p);
    }
    if (!dc->n_target) return pt_fail(e, "%s: target layers: the list is empty", src);
    return 0;
}

void draft_layers_format(const DraftConfig *dc, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int k = 0; k < dc->n_target && n < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", k ? "," : "", dc->target_layers[k]);
}

void draft_layers_default(DraftConfig *dc, int n_target, int target_n_layer) {
    if (n_target > target_n_layer) n_target = target_n_layer;
    if (n_target > DRAFT_MAX_TARGETS) n_target = DRAFT_MAX_TARGETS;
    if (n_target < 1) n_target = 1;
    dc->n_target = n_target;
    if (n_target == 1) {
        dc->target_layers[0] = target_n_layer / 2;
        return;
    }
    // DFlash's span, 1 .. L-3; a target too short for it spreads over all its layers
    double start = 1, end = target_n_layer - 3;
    if (end - start < n_target - 1) start = 0, end = target_n_layer - 1;
    for (int k = 0; k < n_target; k++) dc->target_layers[k] = (int)lround(start + k * (end - start) / (n_target - 1));
}

void draft_table_build(TensorTable *tt, const ModelConfig *tc, const DraftConfig *dc) {
    tt->t = xcalloc(3 + dc->n_layer * 11, sizeof(TensorInfo), "draft tensor table");
    tt->n = 0;
    tt->total = 0;
    tt->tied = 0;
    int64_t H = tc->d_model, Q = (int64_t)tc->n_head * tc->head_dim, KV = (int64_t)tc->n_kv_head * tc->head_dim;
    int64_t F = dc->d_ff, D = tc->head_dim;
    char nm[96];
    tensor_table_add(tt, T_WQ, -1, "fc.weight", H, (int64_t)dc->n_target * H, TF_DECAY);
    tensor_table_add(tt, T_LNF, -1, "hidden_norm.weight", H, 0, TF_NORM);
    for (int l = 0; l < dc->n_layer; l++) {
#define NAME(suffix) (snprintf(nm, sizeof nm, "layers.%d.%s", l, suffix), nm)
        tensor_table_add(tt, T_LN1, l, NAME("input_layernorm.weight"), H, 0, TF_NORM);
        tensor_table_add(tt, T_WQ, l, NAME("self_attn.q_proj.weight"), Q, H, TF_DECAY);
        tensor_table_add(tt, T_WK, l, NAME("self_attn.k_proj.weight"), KV, H, TF_DECAY);
        tensor_table_add(tt, T_WV, l, NAME("self_attn.v_proj.weight"), KV, H, TF_DECAY);
        tensor_table_add(tt, T_WO, l, NAME("self_attn.o_proj.weight"), H, Q, TF_DECAY);
        tensor_table_add(tt, T_QNORM, l, NAME("self_attn.q_norm.weight"), D, 0, TF_NORM);
        tensor_table_add(tt, T_KNORM, l, NAME("self_attn.k_norm.weight"), D, 0, TF_NORM);
        tensor_table_add(tt, T_LN2, l, NAME("post_attention_layernorm.weight"), H, 0, TF_NORM);
        tensor_table_add(tt, T_WGATE, l, NAME("mlp.gate_proj.weight"), F, H, TF_DECAY);
        tensor_table_add(tt, T_WUP, l, NAME("mlp.up_proj.weight"), F, H, TF_DECAY);
        tensor_table_add(tt, T_WDOWN, l, NAME("mlp.down_proj.weight"), H, F, TF_DECAY);
#undef NAME
    }
    tensor_table_add(tt, T_LNF, -1, "norm.weight", H, 0, TF_NORM);
}

void draft_views(DraftViews *v, const TensorTable *tt, float *base) {
    memset(v, 0, sizeof *v);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        float *p = base ? base + t->offset : NULL;
        if (t->layer < 0) {
            if (!strcmp(t->name, "fc.weight")) v->fc = p;
            else if (!strcmp(t->name, "hidden_norm.weight")) v->hidden_norm = p;
            else v->norm = p;
            continue;
        }
        layer_view_set(&v->layer[t->layer], t->kind, p);
    }
}

void draft_alloc(Draft *d, const ModelConfig *tc, const DraftConfig *dc) {
    memset(d, 0, sizeof *d);
    d->cfg = *dc;
    d->target = *tc;
    draft_table_build(&d->tt, tc, dc);
    d->params = xaligned(d->tt.total * sizeof(float), "draft weights");
}

void draft_free(Draft *d) {
    tensor_table_free(&d->tt);
    free(d->params);
    free(d->vocab);
    memset(d, 0, sizeof *d);
}

void draft_init(Draft *d, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < d->tt.n; i++) {
        const TensorInfo *t = &d->tt.t[i];
        float *p = d->params + t->offset;
        for (size_t j = 0; j < t->numel; j++)
            p[j] = t->flags & TF_NORM ? 1.0f : (float)(rng_normal(&rng) * d->target.init_std);
    }
}

void draft_pos_weights(float *w, int blk, float decay) {
    w[0] = 0;
    for (int i = 1; i < blk; i++) w[i] = decay > 0 ? expf(-(float)(i - 1) / decay) : 1.0f;
}

// Counts rank ids: more first, then the lower id (a strict order, so the pick is the same on any qsort).
typedef struct {
    uint64_t count;
    int id;
} Ranked;

static int by_count(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int by_id(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

void draft_pick_vocab(Draft *d, const uint64_t *counts, int V, int n) {
    free(d->vocab);
    d->vocab = NULL;
    d->n_vocab = 0;
    Ranked *r = xmalloc((size_t)V * sizeof *r, "token ranking");
    int seen = 0;
    for (int i = 0; i < V; i++)
        if (counts[i]) r[seen++] = (Ranked){counts[i], i};
    qsort(r, (size_t)seen, sizeof *r, by_count);
    const int k = n < seen ? n : seen;
    if (k > 0) {
        d->vocab = xmalloc((size_t)k * sizeof(int), "draft vocabulary");
        for (int i = 0; i < k; i++) d->vocab[i] = r[i].id;
        qsort(d->vocab, (size_t)k, sizeof(int), by_id);
        d->n_vocab = k;
    }
    free(r);
}

int draft_vocab_check(const int *ids, int n, int V, const char *src, PtError *e) {
    if (n < 1 || n > V) return pt_fail(e, "%s: a draft vocabulary of %d tokens, outside [1, %d]", src, n, V);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V)
            return pt_fail(e, "%s: draft vocabulary entry %d is token %d, outside [0, %d)", src, i, ids[i], V);
        if (i && ids[i] <= ids[i - 1])
            return pt_fail(e, "%s: draft vocabulary entry %d (%d) does not follow %d in increasing order", src, i,
                           ids[i], ids[i - 1]);
    }
    return 0;
}
