// data_parallel.c: the gradient sum and the sharded optimizer of
// data_parallel.h.
#include "data_parallel.h"
#include <math.h>
#include <string.h>
#include "../model/ops/ops.h"
#ifdef POCKET_CUDA
#include "../cuda/nccl.h"
#endif

void dp_init(DataParallel *p, Comm *c, Device *d, const TensorTable *tt, size_t qat_entries) {
    memset(p, 0, sizeof *p);
    p->comm = c;
    p->dev = d;
    p->tt = tt;
    p->lo = xmalloc(4 * (size_t)c->world * sizeof(size_t), "shards");
    p->hi = p->lo + c->world;
    p->glo = p->hi + c->world;
    p->ghi = p->glo + c->world;
    // Shards of whole norm chunks: the ranks' partial sums are then the one
    // rank's, added in the same order.
    comm_shards(c, tt->total, GRAD_NORM_CHUNK, p->lo, p->hi);
    comm_shards(c, qat_entries, 16, p->glo, p->ghi);
    tensor_table_slice(tt, dp_lo(p), dp_hi(p), &p->shard);
    size_t n = dp_hi(p) - dp_lo(p);
    p->m_host = xaligned(n * sizeof(float), "Adam m (this rank's shard)");
    p->v_host = xaligned(n * sizeof(float), "Adam v (this rank's shard)");
    p->m = dev_mirror(d, p->m_host, n * sizeof(float), "Adam m");
    p->v = dev_mirror(d, p->v_host, n * sizeof(float), "Adam v");
}

void dp_free(DataParallel *p) {
    if (!p->comm) return;
#ifdef POCKET_CUDA
    cuda_nccl_close(p->nccl);
#endif
    dev_unmirror(p->dev, p->m, p->m_host);
    dev_unmirror(p->dev, p->v, p->v_host);
    free(p->m_host);
    free(p->v_host);
    free(p->gather);
    free(p->lo);
    tensor_table_free(&p->shard);
    memset(p, 0, sizeof *p);
}

int dp_use_nccl(DataParallel *p, int grad_bf16, PtError *e) {
#ifdef POCKET_CUDA
    unsigned char id[CUDA_NCCL_ID_BYTES] = {0};
    int32_t rc = p->comm->rank == 0 ? cuda_nccl_unique_id(id, e) : 0;
    comm_broadcast(p->comm, &rc, sizeof rc, 0, "making the NCCL communicator");
    if (rc) return p->comm->rank == 0 ? -1 : pt_fail(e, "rank 0 could not make the NCCL communicator id");
    comm_broadcast(p->comm, id, sizeof id, 0, "sharing the NCCL communicator id");
    p->grad_bf16 = grad_bf16;
    return cuda_nccl_open(&p->nccl, p->dev, id, p->comm->rank, p->comm->world, grad_bf16 ? p->tt->total : 0,
                          p->comm->timeout_s, e);
#else
    (void)p, (void)grad_bf16;
    return pt_fail(e, "NCCL: this pocket was built without CUDA (make CUDA=1)");
#endif
}

// The collectives on the device's buffers: NCCL between GPUs, else the host
// ring of dist/comm.c. NCCL's time counts as the host ring's does.
static void reduce_scatter(DataParallel *p, float *buf, const char *what) {
#ifdef POCKET_CUDA
    if (p->nccl) {
        double t0 = now_seconds();
        cuda_nccl_reduce_scatter(p->nccl, buf, p->lo, p->hi, p->grad_bf16, what);
        p->comm->seconds += now_seconds() - t0;
        return;
    }
#endif
    comm_reduce_scatter(p->comm, buf, p->lo, p->hi, what);
}

static void allgather(DataParallel *p, void *buf, size_t size, const size_t *lo, const size_t *hi,
                      const char *what) {
#ifdef POCKET_CUDA
    if (p->nccl) {
        double t0 = now_seconds();
        cuda_nccl_allgather(p->nccl, buf, size, lo, hi, what);
        p->comm->seconds += now_seconds() - t0;
        return;
    }
#endif
    comm_allgather(p->comm, buf, size, lo, hi, what);
}

int dp_load(DataParallel *p, const char *path, TrainState *st, PtError *e) {
    int rc = checkpoint_load_train(path, p->tt, dp_lo(p), dp_hi(p), p->m_host, p->v_host, st, e);
    size_t bytes = (dp_hi(p) - dp_lo(p)) * sizeof(float);
    if (rc == 0) {
        OP(p->dev, upload, p->m, p->m_host, bytes);
        OP(p->dev, upload, p->v, p->v_host, bytes);
    }
    return rc;
}

// ---- checkpoints: rank 0 asks for each tensor's moment in the writer's
// order (MomentSource), and every rank takes part in its gather.
typedef struct {
    DataParallel *p;
    int next;   // gathers done so far: tensor next % n of moment next / n
} Gathers;

static const float *gather_tensor(void *ctx, int i, int which) {
    Gathers *g = ctx;
    DataParallel *p = g->p;
    if (g->next != which * p->tt->n + i) die("checkpoint moments asked out of order (%d, %d)", which, i);
    g->next++;
    const TensorInfo *t = &p->tt->t[i];
    if (p->comm->world == 1) return (which ? p->v_host : p->m_host) + t->offset;
    comm_gather_range(p->comm, which ? p->v_host : p->m_host, p->lo, p->hi, t->offset, t->numel, p->gather,
                      "writing a checkpoint");
    return p->gather;
}

typedef struct { const ModelBundle *b; const TrainState *st; QatState *qat; } ModelWrite;
static int write_model(void *ctx, const char *path, const MomentSource *src, PtError *e) {
    const ModelWrite *w = ctx;
    return checkpoint_save_train(path, w->b, src, w->st, w->qat, e);
}

int dp_save(DataParallel *p, const char *path, const ModelBundle *b, const TrainState *st, QatState *qat,
            PtError *e) {
    if (qat && p->comm->world > 1) dp_gather_qat_moments(p, qat);
    ModelWrite w = {b, st, qat};
    return dp_save_with(p, path, write_model, &w, e);
}

int dp_save_with(DataParallel *p, const char *path, DpWriter write, void *ctx, PtError *e) {
    const int n = p->tt->n, all = 2 * n;
    size_t bytes = (dp_hi(p) - dp_lo(p)) * sizeof(float);
    OP(p->dev, download, p->m_host, p->m, bytes);
    OP(p->dev, download, p->v_host, p->v, bytes);
    Gathers g = {p, 0};
    int rc = 0;
    if (p->comm->rank == 0) {
        if (!p->gather && p->comm->world > 1) {
            size_t most = 0;
            for (int i = 0; i < n; i++) most = p->tt->t[i].numel > most ? p->tt->t[i].numel : most;
            p->gather = xmalloc(most * sizeof(float), "checkpoint gather buffer");
        }
        MomentSource src = {gather_tensor, &g};
        rc = write(ctx, path, &src, e);
    }
    // The gathers the writer did not ask for (it failed, or this is not rank
    // 0): every rank makes all of them, so none waits for a partner.
    while (g.next < all) gather_tensor(&g, g.next % n, g.next / n);
    int32_t shared = rc;
    comm_broadcast(p->comm, &shared, sizeof shared, 0, "writing a checkpoint");
    if (shared && p->comm->rank != 0) pt_fail(e, "%s: rank 0 could not write the checkpoint", path);
    return shared;
}

void dp_gather_qat_moments(DataParallel *p, QatState *q) {
    if (p->comm->world == 1 || !q->m_scale) return;
    const size_t lo = p->glo[p->comm->rank];
    float *arrays[4] = {q->m_scale, q->v_scale, q->m_zero, q->v_zero};
    for (int i = 0; i < 4; i++)
        comm_gather_range(p->comm, arrays[i] + lo, p->glo, p->ghi, 0, q->total, arrays[i], "gathering QAT moments");
}

// ---- the step

void dp_reduce_grads(DataParallel *p, float *grads) { reduce_scatter(p, grads, "summing gradients"); }

void dp_gather_grads(DataParallel *p, float *grads) {
    allgather(p, grads, sizeof(float), p->lo, p->hi, "sharing the summed gradients");
}

double dp_grad_norm(DataParallel *p, const float *grads) {
    Comm *c = p->comm;
    if (c->world == 1) return dev_grad_norm(p->dev, grads, p->tt->total);
    // Every rank's chunk partials, then each rank adds all of them in chunk order.
    const size_t n_chunks = (p->tt->total + GRAD_NORM_CHUNK - 1) / GRAD_NORM_CHUNK;
    size_t *clo = xmalloc(2 * (size_t)c->world * sizeof(size_t), "chunk ranges"), *chi = clo + c->world;
    for (int r = 0; r < c->world; r++) {
        clo[r] = p->lo[r] / GRAD_NORM_CHUNK;
        chi[r] = (p->hi[r] + GRAD_NORM_CHUNK - 1) / GRAD_NORM_CHUNK;
    }
    double *all = xcalloc(n_chunks ? n_chunks : 1, sizeof(double), "gradient norm partials");
    const size_t mark = dev_scratch_mark(p->dev), mine = chi[c->rank] - clo[c->rank];
    double *partials = dev_scratch(p->dev, (mine ? mine : 1) * sizeof(double), "gradient norm partials");
    OP(p->dev, grad_sumsq, grads + dp_lo(p), dp_hi(p) - dp_lo(p), partials);
    OP(p->dev, download, all + clo[c->rank], partials, mine * sizeof(double));
    dev_scratch_release(p->dev, mark);
    comm_allgather(c, all, sizeof(double), clo, chi, "the gradient norm");
    double sum = 0;
    for (size_t k = 0; k < n_chunks; k++) sum += all[k];
    free(all);
    free(clo);
    return sqrt(sum);
}

void dp_update(DataParallel *p, float *params, float *grads, float clip, const AdamWConfig *c, float lr, long step) {
    const size_t lo = dp_lo(p);
    OP(p->dev, grad_scale, grads + lo, p->shard.total, clip);
    OP(p->dev, adamw_step, params + lo, grads + lo, p->m, p->v, &p->shard, c, lr, step);
    allgather(p, params, sizeof(float), p->lo, p->hi, "sharing the updated parameters");
}

void dp_share_qat_scales(DataParallel *p, QatState *q) {
    if (p->comm->world == 1 && !p->nccl) return;
    allgather(p, q->scale, sizeof(float), p->glo, p->ghi, "sharing QAT scales");
    allgather(p, q->zero, sizeof(float), p->glo, p->ghi, "sharing QAT zeros");
}
