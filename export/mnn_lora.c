// mnn_lora.c: lora.mnn beside an MNN package, and the merged package; see
// mnn_lora.h.
#include "mnn_lora.h"
#include <errno.h>
#include <libgen.h>
#include <string.h>
#include "../util/util.h"
#include "mnn_writer.h"

// The package directory and the adapter file of `out`.
static void split_out(const char *out, char **dir, char **file) {
    if (path_is_dir(out)) {
        *dir = xstrdup(out);
        *file = path_join(out, "lora.mnn");
        return;
    }
    char *copy = xstrdup(out);
    *dir = xstrdup(dirname(copy));
    free(copy);
    *file = xstrdup(out);
}

int mnn_lora_export_check(const char *out, int force, PtError *e) {
    static const char *const NEED[] = {"config.json", "llm.mnn", "llm.mnn.weight"};
    char *dir, *file;
    split_out(out, &dir, &file);
    int rc = path_exists(file) && !force ? pt_fail(e, "%s exists (--force replaces it)", file) : 0;
    for (int i = 0; i < 3 && !rc; i++) {
        char *p = path_join(dir, NEED[i]);
        if (!path_exists(p))
            rc = pt_fail(e, "%s: no MNN base package there (no %s; write it first with pocket export --format mnn)", dir,
                         NEED[i]);
        free(p);
    }
    free(dir);
    free(file);
    return rc;
}

// Which graph form the package in dir was written with: 1 fused, 0 plain;
// -1 (an error) when its llm.mnn is neither graph of this checkpoint, or its
// llm.mnn.weight not these weights.
static int package_form(const ModelBundle *b, const QatState *q, const char *dir, PtError *e) {
    char *graph_path = path_join(dir, "llm.mnn"), *weight_path = path_join(dir, "llm.mnn.weight");
    uint8_t *have = NULL;
    size_t have_len = 0;
    int form = -1;
    if (read_whole_file(graph_path, &have, &have_len, e) == 0) {
        for (int fused = 1; fused >= 0 && form < 0; fused--) {
            MnnWeightFile wf = {.path = weight_path};
            uint8_t *g = NULL;
            size_t len = 0;
            if (mnn_export_graph(b, q, fused, NULL, &wf, &g, &len, e)) break;
            if (len == have_len && memcmp(g, have, len) == 0) form = fused;
            free(g);
        }
        if (form < 0 && !e->msg[0])
            pt_fail(e, "%s: not the graph pocket export --format mnn writes for this checkpoint (another base, or "
                       "another pocket version): export the base package again", graph_path);
    }
    if (form >= 0) {   // the weights, byte for byte
        FILE *f = fopen(weight_path, "rb");
        MnnWeightFile wf = {.expect = f, .path = weight_path};
        uint8_t *g = NULL;
        size_t len = 0;
        if (!f) form = pt_fail(e, "%s: %s", weight_path, strerror(errno));
        else if (mnn_export_graph(b, q, form, NULL, &wf, &g, &len, e)) {
            size_t n = strlen(e->msg);
            snprintf(e->msg + n, sizeof e->msg - n, ": not the int4 weights of this checkpoint (another base?)");
            form = -1;
        } else if (fgetc(f) != EOF) {
            form = pt_fail(e, "%s: longer than the weights of this checkpoint (another base?)", weight_path);
        }
        free(g);
        if (f) fclose(f);
    }
    free(have);
    free(graph_path);
    free(weight_path);
    return form;
}

int mnn_lora_export(const ModelBundle *b, const QatState *q, const LoraWeightsView *v, const char *src,
                    const char *out, int force, MnnLoraStats *st, PtError *e) {
    memset(st, 0, sizeof *st);
    e->msg[0] = 0;
    if (lora_view_check(v, b, src, e)) return -1;
    char *dir, *file;
    split_out(out, &dir, &file);
    int rc = -1;
    uint8_t *graph = NULL;
    size_t len = 0;
    if (mnn_lora_export_check(out, force, e)) goto done;
    int form = package_form(b, q, dir, e);
    if (form < 0) goto done;
    MnnWeightFile wf = {.path = "llm.mnn.weight"};
    if (mnn_export_graph(b, q, form, v, &wf, &graph, &len, e)) goto done;
    AtomicFile af;
    if (atomic_open(&af, file, e)) goto done;
    if (fwrite(graph, 1, len, af.f) != len) {
        pt_fail(e, "%s: write failed: %s", af.tmp, strerror(errno));
        atomic_abort(&af);
        goto done;
    }
    if (atomic_commit(&af, e)) goto done;
    st->fused = form;
    for (int t = 0; t < LORA_N_TARGETS; t++) st->n_adapted += ((v->targets >> t) & 1) * v->n_layer;
    st->bytes = (int64_t)len;
    snprintf(st->path, sizeof st->path, "%s", file);
    rc = 0;
done:
    free(graph);
    free(dir);
    free(file);
    return rc;
}

int mnn_lora_merge(const ModelBundle *b, const QatState *q, const float *int4_weights, const LoraWeightsView *v,
                   const char *dir, const MnnExportOptions *o, MnnExportStats *st, MnnMergeStats *ms, PtError *e) {
    memset(ms, 0, sizeof *ms);
    if (lora_view_check(v, b, "the adapter", e)) return -1;
    if (v->int4_base && !int4_weights) return pt_fail(e, "the adapter was trained on the int4 base: its weights are needed");
    // The merged model: a copy of the bundle sharing everything but the weights.
    ModelBundle m = *b;
    m.params = xaligned(b->tt.total * sizeof(float), "merged weights");
    memcpy(m.params, b->params, b->tt.total * sizeof(float));
    for (int l = 0; l < v->n_layer && v->int4_base; l++)   // QLoRA: the adapted projections merge onto W_int4
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!((v->targets >> t) & 1)) continue;   // (a projection not adapted may have no row at all)
            const TensorInfo *ti = &b->tt.t[lora_view_row(&b->tt, l, t)];
            memcpy(m.params + ti->offset, int4_weights + ti->offset, ti->numel * sizeof(float));
        }
    lora_view_merge(v, &b->tt, m.params);
    // The base grid, but a group with a merged weight beyond its range gets
    // RTN's grid of its merged weights instead of clamping it.
    QatState mq = *q;
    mq.scale = xmalloc(q->total * sizeof(float), "merged scales");
    mq.zero = xmalloc(q->total * sizeof(float), "merged zero points");
    memcpy(mq.scale, q->scale, q->total * sizeof(float));
    memcpy(mq.zero, q->zero, q->total * sizeof(float));
    int rc = 0;
    const int64_t G = q->spec.group;
    const int lo = q->spec.symmetric ? 1 : 0;
    for (int l = 0; l < v->n_layer && rc == 0; l++)
        for (int t = 0; t < LORA_N_TARGETS && rc == 0; t++) {
            if (!((v->targets >> t) & 1)) continue;
            int row = lora_view_row(&b->tt, l, t);
            const TensorInfo *ti = &b->tt.t[row];
            const QatTensor *qt = qat_find(q, row);
            if (!qt) {
                rc = pt_fail(e, "%s: not in the int4 state", ti->name);
                break;
            }
            int64_t rows = ti->shape[0], cols = ti->shape[1];
            float *scale = mq.scale + qt->offset, *zero = mq.zero + qt->offset;
            const float *w = m.params + ti->offset;
            for (int64_t g = 0; g < rows * (cols / G) && rc == 0; g++) {
                const float *x = w + g / (cols / G) * cols + g % (cols / G) * G;
                int out = 0;   // a group of scale 0 holds one value: any other is beyond it
                for (int64_t i = 0; i < G; i++)
                    out |= scale[g] != 0 ? !quant_inside(quant_rounded(x[i], scale[g], zero[g]), lo) : x[i] != zero[g];
                if (!out) continue;
                ms->regridded++;
                rc = quant_init_rtn(&q->spec, x, 1, G, scale + g, q->spec.symmetric ? NULL : zero + g, ti->name, e);
            }
            uint8_t *before = xmalloc(ti->numel, "base codes"), *after = xmalloc(ti->numel, "merged codes");
            quant_codes(&q->spec, b->params + ti->offset, rows, cols, q->scale + qt->offset, q->zero + qt->offset, before);
            quant_codes(&q->spec, w, rows, cols, scale, zero, after);
            for (size_t i = 0; i < ti->numel; i++) ms->changed += before[i] != after[i];
            ms->total += (int64_t)ti->numel;
            ms->groups += (int64_t)qt->n_groups;
            free(before);
            free(after);
        }
    if (rc == 0) rc = mnn_export(&m, &mq, dir, o, st, e);
    free(mq.scale);
    free(mq.zero);
    free(m.params);
    return rc;
}
