// matmul_kernels.h: private to model/ops/matmul*.c and tests/test_matmul.c.
// The register-tile kernels (one per instruction set) and the blocked driver
// entry points that take an explicit kernel, so tests can run every path the
// CPU supports.
#pragma once
#include <stddef.h>

// One register tile: C[mr x nr] (+)= A[mr x kc] B[kc x nr], mr <= MR, nr <= NR.
//   A(r, k) = a[r*a_rs + k*a_ks]; either a_rs == 1 (a packed panel, a_ks == MR,
//            or a strided view) or a_ks == 1 (rows read in place). All MR rows
//            must be readable (the driver zero-pads short panels).
//   B(k, j) = b[k*b_ks + j]; NR readable floats per k (packed or in place).
//   C(r, j) = c[r*c_rs + j*c_cs]; only the mr x nr corner is written.
//   accumulate: 0 overwrites C, 1 adds to it.
typedef struct {
    int kc;
    const float *a;
    ptrdiff_t a_rs, a_ks;
    const float *b;
    ptrdiff_t b_ks;
    float *c;
    ptrdiff_t c_rs, c_cs;
    int mr, nr, accumulate;
} MatmulTile;

typedef void (*MatmulTileFn)(const MatmulTile *t);

// Transposing pack: dst[k*width + j] = src[j*src_rs + k] for j < rows,
// 0 for rows <= j < width, k < kc. width is the kernel's MR or NR.
typedef void (*MatmulPackFn)(float *dst, int width, const float *src, ptrdiff_t src_rs, int rows, int kc);

typedef struct {
    const char *name;   // "avx512", "avx2+fma", "portable"
    int mr, nr;         // register tile shape
    MatmulTileFn tile;
    MatmulPackFn pack_t;   // vectorised transposing pack, or NULL for plain loops
} MatmulKernel;

// NULL when this CPU cannot run that kernel.
const MatmulKernel *matmul_kernel_avx512(void);
const MatmulKernel *matmul_kernel_avx2(void);
const MatmulKernel *matmul_kernel_portable(void);
const MatmulKernel *matmul_kernel_best(void);

// matmul_forward / matmul_backward with a chosen kernel (same semantics).
void matmul_forward_with(const MatmulKernel *k, float *out, const float *inp, const float *W,
                         int N, int C, int OC);
void matmul_backward_with(const MatmulKernel *k, float *dinp, float *dW, const float *dout,
                          const float *inp, const float *W, int N, int C, int OC);
