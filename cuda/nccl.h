// nccl.h: the collectives of a data-parallel run between GPUs (NCCL), on
// buffers of a CUDA device (cuda.h). The same contract as dist/comm.h's host
// collectives, so train/data_parallel.c calls either: rank r owns the shard
// [lo[r], hi[r]) of a flat buffer. Which process is which rank, and the
// communicator's id, come from the caller (over MPI): cuda/ knows no MPI.
// Only built with `make CUDA=1`.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "../model/backend.h"

enum { CUDA_NCCL_ID_BYTES = 128 };
typedef struct CudaNccl CudaNccl;

// A new communicator id (rank 0 makes it, every rank receives it).
int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], PtError *e);
// Joins the communicator `id` as rank of world, on d's GPU and stream.
// bf16_floats > 0: a buffer of that many bf16 values for reductions in bf16.
// timeout_s: the longest a collective may take before the run ends.
int cuda_nccl_open(CudaNccl **out, Device *d, const unsigned char id[CUDA_NCCL_ID_BYTES], int rank, int world,
                   size_t bf16_floats, double timeout_s, PtError *e);
void cuda_nccl_close(CudaNccl *n);
// buf[lo[r], hi[r]) of rank r becomes the sum over ranks of that range. With
// bf16 each rank's values are rounded to bf16 and summed in bf16 (half the
// bytes); the sums come back as fp32. Returns when the GPU has finished.
void cuda_nccl_reduce_scatter(CudaNccl *n, float *buf, const size_t *lo, const size_t *hi, int bf16,
                              const char *what);
// Every rank's elements [lo[r], hi[r]) of buf (elements of `size` bytes) are
// copied into every other rank's buf.
void cuda_nccl_allgather(CudaNccl *n, void *buf, size_t size, const size_t *lo, const size_t *hi, const char *what);
// The NCCL library's version, e.g. 22809.
int cuda_nccl_version(void);

#ifdef __cplusplus
}
#endif
