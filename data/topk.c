// topk.c: a teacher's top-k logits in a token dataset (topk.h).
#include "topk.h"
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../util/h5.h"

void topk_close(TopkData *t) {
    free(t->teacher);
    free(t->teacher_sha256);
    free(t->ids);
    free(t->logits);
    free(t->lse);
    memset(t, 0, sizeof *t);
}

int topk_open(TopkData *t, const char *path, PtError *e) {
    memset(t, 0, sizeof *t);
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    if (!h5_exists(f, "topk")) {
        H5Fclose(f);
        return 1;
    }
    int rc = -1;
    hid_t g = h5_open_group(f, "topk", path, e);
    if (g < 0) goto out;
    uint64_t n_tokens, covered;
    if (h5_read_attr(g, "k", H5T_NATIVE_INT, &t->k, 1, path, e) ||
        h5_read_attr(g, "temperature", H5T_NATIVE_FLOAT, &t->temperature, 1, path, e) ||
        h5_read_attr(g, "seq_len", H5T_NATIVE_INT, &t->seq_len, 1, path, e) ||
        h5_read_attr(g, "doc_mask", H5T_NATIVE_INT, &t->doc_mask, 1, path, e) ||
        h5_read_attr(g, "covered", H5T_NATIVE_UINT64, &covered, 1, path, e) ||
        h5_read_str_attr(g, "teacher", &t->teacher, path, e) ||
        h5_read_str_attr(g, "teacher_sha256", &t->teacher_sha256, path, e))
        goto out_group;
    if (t->k < 1 || t->k > 256) {
        pt_fail(e, "%s: /topk: k = %d is outside [1, 256]", path, t->k);
        goto out_group;
    }
    H5DatasetInfo info;
    if (h5_dataset_info(g, "ids", &info, path, e)) goto out_group;
    if (info.rank != 2 || info.dims[1] != (hsize_t)t->k) {
        pt_fail(e, "%s: /topk/ids is not [tokens, %d]", path, t->k);
        goto out_group;
    }
    n_tokens = info.dims[0];
    const hsize_t dims[2] = {n_tokens, (hsize_t)t->k};
    if (h5_read_dataset_alloc(g, "ids", H5T_NATIVE_INT32, 2, dims, (void **)&t->ids, path, e) ||
        h5_read_dataset_alloc(g, "logits", H5T_NATIVE_UINT16, 2, dims, (void **)&t->logits, path, e) ||
        h5_read_dataset_alloc(g, "lse", H5T_NATIVE_FLOAT, 1, dims, (void **)&t->lse, path, e))
        goto out_group;
    t->n_tokens = n_tokens;
    t->covered = covered;
    rc = 0;
out_group:
    H5Gclose(g);
out:
    H5Fclose(f);
    if (rc) topk_close(t);
    return rc;
}

int topk_check_run(const TopkData *t, const char *path, int T, int doc_mask, int sft, float temperature, int vocab,
                   PtError *e) {
    if (t->temperature != temperature)
        return pt_fail(e, "%s: the teacher's top-k probabilities are at temperature %g; this run's "
                          "distill.temperature is %g: make them again with --temperature %g", path,
                       (double)t->temperature, (double)temperature, (double)temperature);
    if (t->seq_len != T)
        return pt_fail(e, "%s: the teacher's top-k were made over rows of %d tokens; this run's train.seq_len is %d "
                          "(each token must have the context it had for the teacher): make them again with "
                          "--seq-len %d", path, t->seq_len, T, T);
    if (!sft && t->doc_mask != doc_mask)
        return pt_fail(e, "%s: the teacher's top-k were made with doc_mask %d, this run has train.doc_mask %d", path,
                       t->doc_mask, doc_mask);
    for (size_t i = 0; i < (size_t)t->n_tokens * t->k; i++)
        if (t->ids[i] < 0 || t->ids[i] >= vocab)
            return pt_fail(e, "%s: /topk/ids row %zu holds id %d outside the model's vocabulary of %d (another "
                              "tokenizer's top-k?)", path, i / (size_t)t->k, t->ids[i], vocab);
    return 0;
}

void topk_gather(const TopkData *t, const int64_t *src, size_t n, int *ids, float *logits, float *lse) {
    const size_t k = (size_t)t->k;
    for (size_t i = 0; i < n; i++) {
        int *id = ids + i * k;
        float *lg = logits + i * k;
        if (src[i] < 0 || (uint64_t)src[i] >= t->n_tokens) {
            memset(id, 0, k * sizeof(int));
            memset(lg, 0, k * sizeof(float));
            lse[i] = 0.0f;
            continue;
        }
        lse[i] = t->lse[src[i]];
        const size_t row = (size_t)src[i] * k;
        for (size_t j = 0; j < k; j++) {
            id[j] = t->ids[row + j];
            lg[j] = f16_to_f32(t->logits[row + j]);
        }
    }
}

int topk_alloc(TopkData *t, uint64_t n_tokens, int k, float temperature, int seq_len, int doc_mask,
               const char *teacher, const char *teacher_sha256, PtError *e) {
    memset(t, 0, sizeof *t);
    if (k < 1 || k > 256) return pt_fail(e, "top-k: k = %d is outside [1, 256]", k);
    t->k = k;
    t->temperature = temperature;
    t->seq_len = seq_len;
    t->doc_mask = doc_mask;
    t->n_tokens = n_tokens;
    t->teacher = xstrdup(teacher);
    t->teacher_sha256 = xstrdup(teacher_sha256);
    const size_t n = (size_t)(n_tokens ? n_tokens : 1) * (size_t)k;
    t->ids = xcalloc(n, sizeof(int32_t), "top-k ids");
    t->logits = xcalloc(n, sizeof(uint16_t), "top-k logits");
    t->lse = xcalloc(n_tokens ? n_tokens : 1, sizeof(float), "top-k log-sum-exp");
    return 0;
}

void topk_set_row(TopkData *t, uint64_t i, const int *ids, const float *logits, float lse) {
    const size_t row = (size_t)i * (size_t)t->k;
    t->lse[i] = lse;
    for (int j = 0; j < t->k; j++) {
        t->ids[row + j] = ids[j];
        t->logits[row + j] = f32_to_f16(logits[j]);
    }
    t->covered++;
}

int topk_write(const TopkData *t, hid_t file) {
    hid_t g = h5_create_group(file, "topk");
    if (g < 0) return -1;
    const hsize_t dims[2] = {t->n_tokens, (hsize_t)t->k};
    int rc = h5_write_attr(g, "k", H5T_NATIVE_INT, &t->k, 1) ||
             h5_write_attr(g, "temperature", H5T_NATIVE_FLOAT, &t->temperature, 1) ||
             h5_write_attr(g, "seq_len", H5T_NATIVE_INT, &t->seq_len, 1) ||
             h5_write_attr(g, "doc_mask", H5T_NATIVE_INT, &t->doc_mask, 1) ||
             h5_write_attr(g, "covered", H5T_NATIVE_UINT64, &t->covered, 1) ||
             h5_write_utf8_attr(g, "teacher", t->teacher) || h5_write_str_attr(g, "teacher_sha256", t->teacher_sha256) ||
             h5_write_dataset(g, "ids", H5T_NATIVE_INT32, 2, dims, t->ids) ||
             h5_write_dataset(g, "logits", H5T_NATIVE_UINT16, 2, dims, t->logits) ||
             h5_write_dataset(g, "lse", H5T_NATIVE_FLOAT, 1, dims, t->lse);
    H5Gclose(g);
    return rc ? -1 : 0;
}

// A min-heap of the k best (value, id) pairs, the worst at the root; "better"
// is the larger value, then the lower id.
static int better(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

static void sift_down(float *v, int *id, int k, int i) {
    for (;;) {
        int w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && better(v[w], id[w], v[l], id[l])) w = l;
        if (r < k && better(v[w], id[w], v[r], id[r])) w = r;
        if (w == i) return;
        float tv = v[i];
        int ti = id[i];
        v[i] = v[w], id[i] = id[w], v[w] = tv, id[w] = ti;
        i = w;
    }
}

double topk_select(const float *logits, int V, int k, float temperature, int *ids, float *vals) {
    if (k > V) k = V;
    for (int j = 0; j < k; j++) vals[j] = logits[j], ids[j] = j;
    for (int j = k / 2 - 1; j >= 0; j--) sift_down(vals, ids, k, j);
    for (int i = k; i < V; i++)
        if (better(logits[i], i, vals[0], ids[0])) {
            vals[0] = logits[i];
            ids[0] = i;
            sift_down(vals, ids, k, 0);
        }
    // heap -> most likely first: repeatedly move the worst to the end
    for (int n = k; n > 1; n--) {
        float tv = vals[0];
        int ti = ids[0];
        vals[0] = vals[n - 1], ids[0] = ids[n - 1], vals[n - 1] = tv, ids[n - 1] = ti;
        sift_down(vals, ids, n - 1, 0);
    }
    const double mx = (double)vals[0] / temperature;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)logits[v] / temperature - mx);
    return mx + log(sum);
}
