// optim.cu: AdamW over the flat buffers of the tensor table, the global
// gradient norm and gradient scaling (adamw.c).
//
// AdamW: one launch per tensor (its floats only, as the CPU updates them),
// the per-element update km_adamw (kernel_math.h) with the scalars formed on
// the host exactly as adamw.c forms them, so each element gets the CPU's bits.
// The norm: squares summed in double over the chunks of GRAD_NORM_CHUNK
// floats (each thread its share in index order, then a fixed tree over the
// block); the host adds the chunk partials in order (dev_grad_norm): the
// same bits on every run (not the CPU's: it sums inside a chunk in another
// order).
#include "cuda_impl.cuh"

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, KmAdamW k) {
    CU_FOR(i, n) km_adamw(&p[i], g[i], &m[i], &v[i], &k);
}

void cu_adamw_step(Device *d, float *params, const float *grads, float *m, float *v, const TensorTable *tt,
                   const AdamWConfig *c, float lr, long step) {
    const KmAdamW decayed = km_adamw_scalars(lr, c->weight_decay, c->beta1, c->beta2, c->eps, step, 1);
    const KmAdamW plain = km_adamw_scalars(lr, c->weight_decay, c->beta1, c->beta2, c->eps, step, 0);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        if (!t->numel) continue;
        const size_t o = t->offset;
        adamw_kernel<<<cu_blocks(t->numel, 256), 256, 0, cu_stream(d)>>>(params + o, grads + o, m + o, v + o,
                                                                         t->numel,
                                                                         (t->flags & TF_DECAY) ? decayed : plain);
        CU_LAUNCHED();
    }
}

enum { NORM_THREADS = 256 };

__global__ void __launch_bounds__(NORM_THREADS) norm_chunks_kernel(double *partial, const float *g, size_t total) {
    __shared__ double red[NORM_THREADS];
    const size_t lo = (size_t)blockIdx.x * GRAD_NORM_CHUNK, hi = lo + GRAD_NORM_CHUNK < total ? lo + GRAD_NORM_CHUNK : total;
    double acc = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += NORM_THREADS) {
        const double x = g[i];
        acc += x * x;
    }
    const double s = cu_block_reduce<NORM_THREADS>(acc, red, CuAdd());
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

size_t cu_grad_norm_workspace_bytes(size_t n_params) {
    return (n_params / GRAD_NORM_CHUNK + 2) * sizeof(double) + 128;
}

// One block per chunk of GRAD_NORM_CHUNK floats: the chunk partials the host
// adds in chunk order (dev_grad_norm), as for every backend.
void cu_grad_sumsq(Device *d, const float *grads, size_t n, double *partials) {
    const size_t chunks = (n + GRAD_NORM_CHUNK - 1) / GRAD_NORM_CHUNK;
    if (!chunks) return;
    norm_chunks_kernel<<<(unsigned)chunks, NORM_THREADS, 0, cu_stream(d)>>>(partials, grads, n);
    CU_LAUNCHED();
}

__global__ void scale_kernel(float *g, size_t n, float s) { CU_FOR(i, n) g[i] *= s; }

void cu_grad_scale(Device *d, float *grads, size_t n, float s) {
    if (!n) return;
    scale_kernel<<<cu_blocks(n, 256), 256, 0, cu_stream(d)>>>(grads, n, s);
    CU_LAUNCHED();
}
