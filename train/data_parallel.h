// data_parallel.h: the parts of a training step that span the ranks of a
// data-parallel run (dist/comm.h): the gradient sum and the optimizer with
// its state sharded (ZeRO-1). Rank r owns the floats [lo[r], hi[r]) of the
// flat parameter buffer: it keeps the AdamW moments of those floats only,
// updates them, and the ranks then share the updated parameters. With QAT
// it likewise updates the scales and zeros of the (row, group) entries
// [glo[r], ghi[r]). With one rank every call reduces to the plain step.
//
// A step on each rank:
//     ... forward/backward of this rank's micro-batches into grads ...
//     dp_reduce_grads(p, grads);                   (this rank's shard summed over the ranks)
//     with QAT: dp_gather_grads(p, grads); qat_run_backward(...)   (on the whole summed gradient)
//     double norm = dp_grad_norm(p, grads);
//     dp_update(p, params, grads, clip, &adamw, lr, step);
//     if (qat_run_update(...)) dp_share_qat_scales(p, q);  then qat_run_sync(...)
// Two ranks give the bits of one rank accumulating their two micro-batches:
// a sum of two gradients is the same in either order, the norm adds the
// same chunk partials in the same order, and QAT's scale gradients are taken
// from the summed gradient, as on one rank.
#pragma once
#include "../dist/comm.h"
#include "../formats/checkpoint.h"
#include "../model/backend.h"
#include "../qat/qat.h"

typedef struct {
    Comm *comm;
    Device *dev;
    const TensorTable *tt;
    size_t *lo, *hi;          // every rank's shard of the parameters
    TensorTable shard;        // this rank's part of the table, offsets from lo[rank]
    float *m_host, *v_host;   // this rank's AdamW moments, [hi - lo] floats
    float *m, *v;             // the same on the device (dev_mirror)
    size_t *glo, *ghi;        // with QAT: every rank's share of the (row, group) entries
    float *gather;            // rank 0: one tensor's moment while a checkpoint is written
    struct CudaNccl *nccl;    // GPUs: the collectives on device buffers (dp_use_nccl); NULL: comm's host ring
    int grad_bf16;            // with NCCL: the gradient sum in bf16
} DataParallel;

// qat_entries: the QAT state's (row, group) entries, 0 without QAT.
void dp_init(DataParallel *p, Comm *c, Device *d, const TensorTable *tt, size_t qat_entries);
void dp_free(DataParallel *p);
// GPUs: the collectives on the device's buffers go through NCCL (a
// communicator whose id rank 0 makes and broadcasts over comm), the gradient
// sum in bf16 when grad_bf16. Every rank calls it; fails without CUDA.
int dp_use_nccl(DataParallel *p, int grad_bf16, PtError *e);
static inline size_t dp_lo(const DataParallel *p) { return p->lo[p->comm->rank]; }
static inline size_t dp_hi(const DataParallel *p) { return p->hi[p->comm->rank]; }

// This rank's shard of a training checkpoint's moments, and its /state:
// 1 when the file holds weights only, 0 when read, -1 on error.
int dp_load(DataParallel *p, const char *path, TrainState *st, PtError *e);
// A training checkpoint with every rank's moments. Every rank calls it; rank
// 0 writes the file while the others send it their shards tensor by tensor,
// so no rank ever holds all of the optimizer state. Returns rank 0's result
// on every rank.
int dp_save(DataParallel *p, const char *path, const ModelBundle *b, const TrainState *st, QatState *qat,
            PtError *e);
// The same for another file of the parameters of p's table: rank 0 calls
// write(ctx, path, moments, e) with the moments gathered tensor by tensor
// (the adapter checkpoint of a LoRA run).
typedef int (*DpWriter)(void *ctx, const char *path, const MomentSource *moments, PtError *e);
int dp_save_with(DataParallel *p, const char *path, DpWriter write, void *ctx, PtError *e);
// Rank 0 gets the whole scale Adam state (the other ranks' entries), before
// it writes a checkpoint holding /qat. Every rank calls it.
void dp_gather_qat_moments(DataParallel *p, QatState *q);

// grads[lo, hi) of this rank becomes the sum over the ranks (the rest of
// grads is left as scratch), and dp_gather_grads gives every rank all of it.
void dp_reduce_grads(DataParallel *p, float *grads);
void dp_gather_grads(DataParallel *p, float *grads);
// The norm of the summed gradient of all ranks, from each rank's shard (NaN
// or Inf when one is not finite), the same on every rank.
double dp_grad_norm(DataParallel *p, const float *grads);
// Scales this rank's summed gradients by clip, runs AdamW on its shard and
// gives every rank the updated parameters.
void dp_update(DataParallel *p, float *params, float *grads, float clip, const AdamWConfig *c, float lr, long step);
// QAT: after each rank's scale Adam on its entries, everyone's scales.
void dp_share_qat_scales(DataParallel *p, QatState *q);
