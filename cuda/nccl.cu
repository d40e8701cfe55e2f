// nccl.cu: the GPU collectives of nccl.h. Shards of unequal length are
// grouped ncclReduce / ncclBroadcast calls, one per owner, so the shards
// need no padding and are the host collectives' own (dist/comm.c). After
// enqueueing, the host polls the stream: a collective that outlasts the
// timeout (a rank died or hangs) aborts the communicator and ends the run
// with a message, instead of waiting forever.
#include "cuda_impl.cuh"
#include "nccl.h"

#ifndef POCKET_NCCL
// A toolkit without NCCL (the Makefile looks for libnccl): GPU runs of one rank.
int cuda_nccl_version(void) { return 0; }
int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], PtError *e) {
    (void)id;
    return pt_fail(e, "NCCL: this pocket was built without it (the CUDA toolkit had no libnccl)");
}
int cuda_nccl_open(CudaNccl **out, Device *d, const unsigned char id[CUDA_NCCL_ID_BYTES], int rank, int world,
                   size_t bf16_floats, double timeout_s, PtError *e) {
    (void)d, (void)id, (void)rank, (void)world, (void)bf16_floats, (void)timeout_s;
    *out = NULL;
    return pt_fail(e, "NCCL: this pocket was built without it (the CUDA toolkit had no libnccl)");
}
void cuda_nccl_close(CudaNccl *n) { (void)n; }
void cuda_nccl_reduce_scatter(CudaNccl *n, float *buf, const size_t *lo, const size_t *hi, int bf16,
                              const char *what) {
    (void)n, (void)buf, (void)lo, (void)hi, (void)bf16;
    die("NCCL %s: built without NCCL", what);
}
void cuda_nccl_allgather(CudaNccl *n, void *buf, size_t size, const size_t *lo, const size_t *hi, const char *what) {
    (void)n, (void)buf, (void)size, (void)lo, (void)hi;
    die("NCCL %s: built without NCCL", what);
}
#else
#include <nccl.h>
#include <time.h>
#include <unistd.h>

struct CudaNccl {
    ncclComm_t comm;
    Device *dev;
    int rank, world;
    double timeout_s;
    uint16_t *bf16;   // device: the bf16 copy of a buffer reduced in bf16
    size_t bf16_floats;
};

static int nccl_fail(PtError *e, ncclResult_t r, const char *what) {
    return pt_fail(e, "NCCL: %s: %s", what, ncclGetErrorString(r));
}

int cuda_nccl_version(void) {
    int v = 0;
    ncclGetVersion(&v);
    return v;
}

int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], PtError *e) {
    static_assert(sizeof(ncclUniqueId) == CUDA_NCCL_ID_BYTES, "NCCL's id size");
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return nccl_fail(e, r, "making the communicator id");
    memcpy(id, &u, sizeof u);
    return 0;
}

int cuda_nccl_open(CudaNccl **out, Device *d, const unsigned char id[CUDA_NCCL_ID_BYTES], int rank, int world,
                   size_t bf16_floats, double timeout_s, PtError *e) {
    *out = NULL;
    CU_CHECK(cudaSetDevice(cu_state(d)->ordinal));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, world, u, rank);
    if (r != ncclSuccess) return nccl_fail(e, r, "joining the communicator");
    CudaNccl *n = (CudaNccl *)xcalloc(1, sizeof *n, "NCCL state");
    *n = (CudaNccl){comm, d, rank, world, timeout_s, NULL, bf16_floats};
    if (bf16_floats) CU_CHECK(cudaMalloc((void **)&n->bf16, bf16_floats * sizeof(uint16_t)));
    *out = n;
    return 0;
}

void cuda_nccl_close(CudaNccl *n) {
    if (!n) return;
    if (n->bf16) CU_CHECK(cudaFree(n->bf16));
    ncclCommDestroy(n->comm);
    free(n);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void check_enqueued(CudaNccl *n, ncclResult_t r, const char *what) {
    if (r != ncclSuccess)
        die("NCCL on rank %d of %d, %s: %s (%s)", n->rank, n->world, what, ncclGetErrorString(r),
            ncclGetLastError(n->comm));
}

// Waits for the stream, watching NCCL's asynchronous errors and the clock.
static void wait_done(CudaNccl *n, const char *what) {
    cudaStream_t s = cu_stream(n->dev);
    const double t0 = seconds_now();
    for (long polls = 0;; polls++) {
        cudaError_t c = cudaStreamQuery(s);
        if (c == cudaSuccess) return;
        if (c != cudaErrorNotReady) cu_fail(c, what, __FILE__, __LINE__);
        ncclResult_t async;
        if (ncclCommGetAsyncError(n->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(n->comm);
            die("NCCL on rank %d of %d, %s: %s: another rank failed or left", n->rank, n->world, what,
                ncclGetErrorString(async));
        }
        if (seconds_now() - t0 > n->timeout_s) {
            ncclCommAbort(n->comm);
            die("NCCL on rank %d of %d, %s: not finished after %.0f s: a rank died or hangs (train.comm_timeout)",
                n->rank, n->world, what, n->timeout_s);
        }
        if (polls > 1000) usleep(200);   // spin briefly, then yield the core
    }
}

__global__ void to_bf16(const float *x, uint16_t *y, size_t n) {
    CU_FOR(i, n) y[i] = km_bf16_bits(x[i]);
}
__global__ void from_bf16(const uint16_t *x, float *y, size_t n) {
    CU_FOR(i, n) y[i] = km_bf16_value(x[i]);
}

void cuda_nccl_reduce_scatter(CudaNccl *n, float *buf, const size_t *lo, const size_t *hi, int bf16,
                              const char *what) {
    cudaStream_t s = cu_stream(n->dev);
    const size_t total = hi[n->world - 1];
    if (bf16 && total > n->bf16_floats) die("NCCL %s: %zu floats, the bf16 buffer holds %zu", what, total, n->bf16_floats);
    if (bf16) {
        to_bf16<<<cu_blocks(total, 256), 256, 0, s>>>(buf, n->bf16, total);
        CU_LAUNCHED();
    }
    check_enqueued(n, ncclGroupStart(), what);
    for (int r = 0; r < n->world; r++) {
        if (hi[r] == lo[r]) continue;
        ncclResult_t res = bf16 ? ncclReduce(n->bf16 + lo[r], n->bf16 + lo[r], hi[r] - lo[r], ncclBfloat16, ncclSum, r,
                                             n->comm, s)
                                : ncclReduce(buf + lo[r], buf + lo[r], hi[r] - lo[r], ncclFloat32, ncclSum, r,
                                             n->comm, s);
        check_enqueued(n, res, what);
    }
    check_enqueued(n, ncclGroupEnd(), what);
    const size_t mine = hi[n->rank] - lo[n->rank];
    if (bf16 && mine) {
        from_bf16<<<cu_blocks(mine, 256), 256, 0, s>>>(n->bf16 + lo[n->rank], buf + lo[n->rank], mine);
        CU_LAUNCHED();
    }
    wait_done(n, what);
}

void cuda_nccl_allgather(CudaNccl *n, void *buf, size_t size, const size_t *lo, const size_t *hi, const char *what) {
    cudaStream_t s = cu_stream(n->dev);
    char *bytes = (char *)buf;
    check_enqueued(n, ncclGroupStart(), what);
    for (int r = 0; r < n->world; r++) {
        if (hi[r] == lo[r]) continue;
        char *p = bytes + lo[r] * size;
        check_enqueued(n, ncclBroadcast(p, p, (hi[r] - lo[r]) * size, ncclUint8, r, n->comm, s), what);
    }
    check_enqueued(n, ncclGroupEnd(), what);
    wait_done(n, what);
}
#endif
