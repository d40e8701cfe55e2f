// preference_train.c: the dpo objective and its reference log-probabilities
// (preference_train.h).
#include "preference_train.h"
#include <math.h>
#include <string.h>
#include "../data/sha256.h"
#include "../formats/lora_checkpoint.h"
#include "../model/preference.h"
#include "../util/h5.h"
#include "evaluate.h"
#include "objective.h"

void pref_dataset_hash(const Dataset *d, char hex[65]) {
    Sha256 s;
    sha256_init(&s);
    sha256_update(&s, d->tokens, (size_t)d->n_tokens * (size_t)d->token_bytes);
    sha256_update(&s, d->doc_offsets, (size_t)(d->n_docs + 1) * sizeof(uint64_t));
    if (d->loss_mask) sha256_update(&s, d->loss_mask, (size_t)d->n_tokens);
    uint8_t digest[32];
    sha256_final(&s, digest);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

// The head's arrays for a batch's pairs (host; the batch's B*T bounds them).
typedef struct {
    int *row0, *last, *n_tokens;
    double *ref, *logps;
} PairArrays;

static void pair_arrays_alloc(PairArrays *a, size_t n) {
    a->row0 = xmalloc(n * sizeof(int), "pair rows");
    a->last = xmalloc(n * sizeof(int), "pair rows");
    a->n_tokens = xmalloc(n * sizeof(int), "pair token counts");
    a->ref = xmalloc(n * sizeof(double), "reference log-probabilities");
    a->logps = xmalloc(n * sizeof(double), "log-probabilities");
}

static void pair_arrays_free(PairArrays *a) {
    free(a->row0);
    free(a->last);
    free(a->n_tokens);
    free(a->ref);
    free(a->logps);
}

// The head over b's pairs; ref_of_doc (NULL: none) gives each candidate's reference.
static PrefHead batch_head(const PrefLoss *l, const Batch *b, PairArrays *a, const double *ref_of_doc, int measure) {
    const int n = b->group_first[b->n_groups];
    for (int k = 0; k < n; k++) {
        a->row0[k] = b->cand_row0[k];
        a->last[k] = b->group_last[k];
        a->ref[k] = ref_of_doc ? ref_of_doc[b->cand_doc[k]] : 0;
    }
    return (PrefHead){.loss = *l, .measure_only = measure, .n_pairs = b->n_groups, .row0 = a->row0,
                      .last = a->last, .ref = ref_of_doc ? a->ref : NULL, .logps = a->logps, .n_tokens = a->n_tokens};
}

int pref_measure_logps(Model *m, const Dataset *d, Comm *comm, double *out, FILE *log, PtError *e) {
    if (d->kind != DATASET_PAIRS) return pt_fail(e, "%s: not a pairs dataset (pocket tokenize --pairs)", d->path);
    Loader l;
    if (loader_open(&l, d, m->B, m->T, 4242, comm->rank, comm->world, e)) return -1;
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, m->B, m->T);
    PairArrays a;
    pair_arrays_alloc(&a, (size_t)m->B * m->T);
    memset(out, 0, (size_t)d->n_docs * sizeof(double));
    const PrefLoss none = {PREF_SIGMOID, 1, 0, 0, 0};
    double t0 = now_seconds(), last_print = t0;
    uint64_t done = 0;
    while (!loader_done(&l)) {
        loader_next(&l, &b);
        PrefHead ph = batch_head(&none, &b, &a, NULL, 1);
        LossHead head = pref_loss_head(&ph);
        ModelInput in = batch_input(&b);
        model_forward_head(m, &in, &head, NULL);
        for (int k = 0; k < 2 * b.n_groups; k++) out[b.cand_doc[k]] = a.logps[k];
        done = l.cur.index;
        if (log && now_seconds() - last_print >= 10) {
            fprintf(log, "reference log-probabilities: %llu of %llu pairs of %s (%.0f s)\n", (unsigned long long)done,
                    (unsigned long long)d->n_pairs, d->path, now_seconds() - t0);
            fflush(log);
            last_print = now_seconds();
        }
    }
    pair_arrays_free(&a);
    batch_free(&b);
    loader_close(&l);
    if (comm->world == 1) return 0;
    // Each document was measured by one rank: every rank's array, in rank order, added up.
    double *part = xmalloc((size_t)d->n_docs * sizeof(double), "reference log-probabilities of a rank");
    double *sum = xcalloc((size_t)d->n_docs, sizeof(double), "reference log-probabilities");
    for (int r = 0; r < comm->world; r++) {
        if (r == comm->rank) memcpy(part, out, (size_t)d->n_docs * sizeof(double));
        comm_broadcast(comm, part, (size_t)d->n_docs * sizeof(double), r, "the reference log-probabilities");
        for (uint64_t i = 0; i < d->n_docs; i++) sum[i] += part[i];
    }
    memcpy(out, sum, (size_t)d->n_docs * sizeof(double));
    free(part);
    free(sum);
    return 0;
}

// ---- the objective

typedef struct {
    PrefLoss loss;
    PrefHead head;
    LossHead inner;           // pref_loss_head(&head)
    PairArrays a;
    const Dataset *train, *val;
    double *ref_train, *ref_val;   // per document of each set; NULL for a loss without a reference
    char tokenizer_hash[65];
} PrefObjective;

static int pref_open(Objective *o, const ObjectiveData *d, PtError *e) {
    PrefObjective *x = o->impl;
    // One set of each: the reference log-probabilities are kept per document of
    // one training and one validation set (recipe_load refuses more).
    if (d->n_train != 1 || d->n_val > 1)
        return pt_fail(e, "train.mode = dpo takes one training set and at most one validation set");
    const Dataset *val = d->n_val ? d->val[0] : NULL;
    if (val && val->kind != DATASET_PAIRS)
        return pt_fail(e, "%s: train.mode is dpo but this is not a pairs dataset (pocket tokenize --pairs)",
                       val->path);
    x->train = d->train[0];
    x->val = val;
    snprintf(x->tokenizer_hash, sizeof x->tokenizer_hash, "%s", d->tokenizer_hash);
    pair_arrays_alloc(&x->a, (size_t)d->B * d->T);
    // Each response's lm_head runs forward once more than the model's count has it (its log-probability,
    // then its backward): 2 V H per response token, the training set's share of them per token.
    uint64_t responses = 0;
    for (uint64_t i = 0; i < x->train->n_tokens; i++) responses += x->train->loss_mask[i];
    o->flops_per_token = x->train->n_tokens ? 2.0 * d->cfg->vocab_size * d->cfg->d_model * (double)responses /
                                                  (double)x->train->n_tokens : 0.0;
    if (d->log)
        fprintf(d->log, "preference loss: %s, beta %g%s%s\n", pref_loss_name(x->loss.kind), x->loss.beta,
                pref_loss_uses_reference(x->loss.kind) ? ", against the start model's log-probabilities" : "",
                x->loss.sft_weight > 0 ? ", plus sft_weight x the chosen responses' next-token loss" : "");
    return 0;
}

// The reference file's identity: what it must match to be this run's.
typedef struct {
    char train[65], val[65], tokenizer[65], weights[65];
} RefIdentity;

static void weights_hash(Model *m, char hex[65]) {
    const size_t n = m->tt->total;
    float *host = m->dev->be->host_memory ? m->weights : xmalloc(n * sizeof(float), "start weights");
    if (host != m->weights) OP(m->dev, download, host, m->weights, n * sizeof(float));
    lora_base_hash(m->tt, host, hex);
    if (host != m->weights) free(host);
}

static int write_reference(const char *path, const PrefObjective *x, const RefIdentity *id, const char *model,
                           PtError *e) {
    H5Output out;
    if (h5_output_create(&out, path, e)) return -1;
    hsize_t n = x->train->n_docs;
    int ok = h5_write_dataset(out.file, "train", H5T_NATIVE_DOUBLE, 1, &n, x->ref_train) == 0;
    if (x->val) {
        n = x->val->n_docs;
        ok = ok && h5_write_dataset(out.file, "val", H5T_NATIVE_DOUBLE, 1, &n, x->ref_val) == 0;
    }
    ok = ok && h5_write_str_attr(out.file, "train_sha256", id->train) == 0 &&
         h5_write_str_attr(out.file, "val_sha256", id->val) == 0 &&
         h5_write_str_attr(out.file, "tokenizer_sha256", id->tokenizer) == 0 &&
         h5_write_str_attr(out.file, "weights_sha256", id->weights) == 0 &&
         h5_write_utf8_attr(out.file, "model", model) == 0;
    if (!ok) {
        h5_output_abort(&out);
        return pt_fail(e, "%s: could not write the reference log-probabilities", path);
    }
    return h5_output_commit(&out, e);
}

// reference.h5 read back into x, its identity checked against id (the
// weights' only when check_weights: a resumed run no longer has its start).
static int read_reference(const char *path, PrefObjective *x, const RefIdentity *id, int check_weights,
                          PtError *e) {
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    int rc = 0;
    static const char *const keys[4] = {"train_sha256", "val_sha256", "tokenizer_sha256", "weights_sha256"};
    static const char *const what[4] = {"another training set", "another validation set", "another tokenizer",
                                        "another start model"};
    const char *want[4] = {id->train, id->val, id->tokenizer, id->weights};
    for (int k = 0; k < 4 && rc == 0; k++) {
        if (k == 3 && !check_weights) break;
        char *have = NULL;
        if (h5_read_str_attr(f, keys[k], &have, path, e)) rc = -1;
        else if (strcmp(have, want[k]))
            rc = pt_fail(e, "%s: the reference log-probabilities were computed with %s (%s %.12s..., this run's "
                            "%.12s...); delete the file to compute them again from this run's start", path, what[k],
                         keys[k], have, want[k]);
        free(have);
    }
    hsize_t n = x->train->n_docs;
    if (rc == 0 && h5_read_dataset(f, "train", H5T_NATIVE_DOUBLE, 1, &n, x->ref_train, path, e)) rc = -1;
    n = x->val ? x->val->n_docs : 0;
    if (rc == 0 && x->val && h5_read_dataset(f, "val", H5T_NATIVE_DOUBLE, 1, &n, x->ref_val, path, e)) rc = -1;
    H5Fclose(f);
    return rc;
}

static int pref_start(Objective *o, Model *m, Comm *comm, const char *run_dir, long resumed_at, PtError *e) {
    PrefObjective *x = o->impl;
    const int resumed = resumed_at > 0;
    if (!pref_loss_uses_reference(x->loss.kind)) return 0;
    x->ref_train = xmalloc((size_t)x->train->n_docs * sizeof(double), "reference log-probabilities");
    if (x->val) x->ref_val = xmalloc((size_t)x->val->n_docs * sizeof(double), "reference log-probabilities");
    RefIdentity id = {.val = "none"};
    pref_dataset_hash(x->train, id.train);
    if (x->val) pref_dataset_hash(x->val, id.val);
    snprintf(id.tokenizer, sizeof id.tokenizer, "%s", x->tokenizer_hash);
    if (!resumed) weights_hash(m, id.weights);
    char *path = path_join(run_dir, "reference.h5");
    FILE *log = comm->rank == 0 ? stdout : NULL;
    int rc;
    if (h5_is_file(path)) {
        rc = read_reference(path, x, &id, !resumed, e);
        if (rc == 0 && log) fprintf(log, "reference log-probabilities: read from %s\n", path);
    } else if (resumed) {
        rc = pt_fail(e, "%s is missing: a resumed run cannot compute its start model's log-probabilities again; "
                        "restore the file, or start the run anew in another run_dir", path);
    } else {
        const double t0 = now_seconds();
        rc = pref_measure_logps(m, x->train, comm, x->ref_train, log, e);
        if (rc == 0 && x->val) rc = pref_measure_logps(m, x->val, comm, x->ref_val, log, e);
        if (rc == 0 && comm->rank == 0) rc = write_reference(path, x, &id, o->r->model.init, e);
        if (rc == 0 && log)
            fprintf(log, "reference log-probabilities of %llu pairs computed in %.1f s, kept in %s\n",
                    (unsigned long long)(x->train->n_pairs + (x->val ? x->val->n_pairs : 0)), now_seconds() - t0,
                    path);
    }
    free(path);
    return rc;
}

// A pass's metrics reach the objective's sums.
static double pref_objective_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale,
                                  int *count) {
    Objective *o = h->ctx;
    PrefObjective *x = o->impl;
    memset(x->head.metrics, 0, sizeof x->head.metrics);
    const double loss = x->inner.loss(&x->inner, m, in, dh, grad_scale, count);
    for (int k = 0; k < PREF_METRICS; k++) o->sums[k] += x->head.metrics[k];
    return loss;
}

static const LossHead *pref_head(Objective *o, const Batch *b, const ModelInput *in, int training) {
    (void)in;
    PrefObjective *x = o->impl;
    const double *ref = !pref_loss_uses_reference(x->loss.kind) ? NULL : training ? x->ref_train : x->ref_val;
    x->head = batch_head(&x->loss, b, &x->a, ref, 0);
    x->inner = pref_loss_head(&x->head);
    o->head = (LossHead){pref_objective_pass, o};
    return &o->head;
}

static void pref_free(Objective *o) {
    PrefObjective *x = o->impl;
    if (!x) return;
    if (x->a.row0) pair_arrays_free(&x->a);
    free(x->ref_train);
    free(x->ref_val);
    free(x);
}

static const ObjectiveOps objective_preference = {.name = "preference", .open = pref_open, .start = pref_start,
                                                  .head = pref_head, .free = pref_free};

int preference_objective_open(Objective *o, PtError *e) {
    (void)e;
    PrefObjective *x = xcalloc(1, sizeof *x, "preference objective");
    recipe_preference(o->r, &x->loss);
    o->ops = &objective_preference;
    o->impl = x;
    o->n_metrics = PREF_METRICS;
    for (int k = 0; k < PREF_METRICS; k++) o->metric[k] = pref_metric_names[k];
    o->eval_metrics = 1;
    o->plotted[PREF_ACCURACY] = o->plotted[PREF_MARGIN] = 1;
    return 0;
}
