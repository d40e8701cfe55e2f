// matmul_kernels.h: private to model/ops/ and its tests. The register-tile
// kernels (one per instruction set) a CPU device picks from (CpuKernels,
// ops.h), so tests can run every path the CPU supports.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "ops.h"

// Element (i, j) of a matrix view is p[i*rs + j*cs] (the drivers' operands).
typedef struct {
    const float *p;
    ptrdiff_t rs, cs;
} MatrixView;

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

// Writes (or adds) the mr x nr corner of a tile held in memory, tmp[r*ld + j],
// to C through its strides: the kernels' path for a C they cannot store with
// whole vectors.
static inline void matmul_tile_store(const MatmulTile *t, const float *tmp, int ld) {
    for (int r = 0; r < t->mr; r++)
        for (int j = 0; j < t->nr; j++) {
            float *c = t->c + r * t->c_rs + j * t->c_cs;
            *c = t->accumulate ? *c + tmp[r * ld + j] : tmp[r * ld + j];
        }
}

// Transposing pack: dst[k*width + j] = src[j*src_rs + k] for j < rows,
// 0 for rows <= j < width, k < kc. width is the kernel's MR or NR. With bf16,
// each value is rounded to bf16 on the way (matmul_bf16_round's bits).
typedef void (*MatmulPackFn)(float *dst, int width, const float *src, ptrdiff_t src_rs, int rows, int kc, int bf16);

// ---------------------------------------------------------------- int4
// W[rows, cols] on the int4 grid (int4_grid.h) packed for products with a
// few rows (matmul_int4.c): strips of INT4_STRIP_ROWS rows, each 4 panels of
// 16, read as one stream. Strip s holds its groups in order, group g in a
// block of block_bytes at int4_block(w, s, g):
//     64 fp16 scales, row 16q + j at [16q + j]; then 64 fp16 zero points (0 when symmetric)
//     then the group's G/2 pairs (2i, 2i+1) of k, 64 bytes each: byte 16q + j
//     holds the code of row 16q + j at 2i in its low nibble, at 2i + 1 in its high one
// (the grid's values are fp16-exact, so fp16 keeps them whole). Rows past
// `rows` hold code 8, scale 0, zero 0.
#define INT4_STRIP_ROWS 64
#define INT4_PARAM_BYTES 256
#define INT4_KERNEL_ROWS 8    // rows of x a strip kernel takes at once
#define INT4_MAX_K 1024       // k a strip kernel takes at once (the driver's k blocks are at most this long)
struct PackedWeight {
    int rows, cols, group;
    int strips;               // ceil(rows / INT4_STRIP_ROWS)
    size_t block_bytes;       // INT4_PARAM_BYTES + group * 32
    uint8_t *data;
};
static inline const uint8_t *int4_block(const PackedWeight *w, int s, int g) {
    return w->data + ((size_t)s * (w->cols / w->group) + g) * w->block_bytes;
}

// One strip's products with n <= INT4_KERNEL_ROWS rows of x over k in [k0, k1), inside one
// k block of the fp32 driver: acc[n*INT4_STRIP_ROWS + r] =
// sum_k w(64s + r, k) * x[n*ldx + k], from 0 and k in order, each weight
// w = (code - 8) * scale + zero (exact product, so one rounding either way)
// and each product added as the fp32 tile it stands for adds it (fma).
typedef void (*MatmulInt4Fn)(const PackedWeight *w, int s, int k0, int k1, const float *x, ptrdiff_t ldx, int n,
                             float *acc);

struct MatmulKernel {
    const char *name;   // "avx512", "avx2+fma", "neon", "portable"
    int lanes;          // floats per vector it uses (16, 8, 4, 1; portable: the build's widest): its FMA peak
    int mr, nr;         // register tile shape
    MatmulTileFn tile;
    MatmulPackFn pack_t;   // vectorised transposing pack, or NULL for plain loops
    int pack_shared_b;     // the driver packs a B that every task shares rather than read it in place
    const MatmulBf16Kernel *bf16_round;   // the bf16 products on these tiles (see on_fp32), or NULL
    int fma;               // the tile adds a product with one rounding (FMA); 0: rounds the product, then the sum
    MatmulInt4Fn int4;     // the int4 strip with these tiles' sums, or NULL (matmul_int4.c's plain C)
};

// NULL when this CPU (or this build's architecture) cannot run that kernel.
const MatmulKernel *matmul_kernel_avx512(void);   // matmul_kernels_x86.c
const MatmulKernel *matmul_kernel_avx2(void);
const MatmulKernel *matmul_kernel_neon(void);     // matmul_kernels_neon.c
const MatmulKernel *matmul_kernel_portable(void);
const MatmulKernel *matmul_kernel_best(void);

// Workspace of any fp32 product on this kernel (matmul.c).
size_t matmul_fp32_workspace_bytes(const MatmulKernel *kern, int threads);
// How the fp32 driver cuts K: returns the number of k blocks and their length
// in *kc (the last may be shorter). Each block's products are summed from 0
// in the tile's registers, then added to C (C column-major: the transposed
// forward, out^T = W inp^T, taken when OC >= 4N).
int matmul_k_blocks(int K, int c_col_major, int *kc);
// The x86 int4 strips (matmul_kernels_x86.c); not defined off x86.
void matmul_int4_strip_avx512(const PackedWeight *w, int s, int k0, int k1, const float *x, ptrdiff_t ldx, int n,
                              float *acc);
void matmul_int4_strip_avx2(const PackedWeight *w, int s, int k0, int k1, const float *x, ptrdiff_t ldx, int n,
                            float *acc);
// The plain C strip (matmul_int4.c), adding products as a kernel with `fma` does.
void matmul_int4_strip_c(const PackedWeight *w, int s, int k0, int k1, const float *x, ptrdiff_t ldx, int n,
                         float *acc, int fma);

// The three products of matmul.c on fp32 kernel k, with both operands
// rounded to bf16 in the packs when bf16_operands (a MatmulBf16Kernel's
// on_fp32 path).
void matmul_forward_fp32(Device *d, const MatmulKernel *k, float *out, const float *inp, const float *W, int N, int C,
                         int OC, int bf16_operands);
void matmul_backward_fp32(Device *d, const MatmulKernel *k, float *dinp, float *dW, const float *dout,
                          const float *inp, const float *W, int N, int C, int OC, int bf16_operands);

// ---------------------------------------------------------------- bf16
// The MATMUL_BF16 products (matmul_bf16.c) pack both operands as bf16 panels
// with k in pairs: element (i, k) of a panel `width` indices wide sits at
// p[(k/2)*2*width + 2*i + k%2], so one 32-bit word holds the pair (k, k+1) of
// index i, the operand layout of vdpbf16ps and of BFDOT. A panel's kc is even (an odd last
// k is padded with zero).

// One register tile: C[mr x nr] (+)= A[mr x kc] B[kc x nr] from packed panels
// (MR rows of A, NR columns of B, zero-padded); C row-major, c[r*c_rs + j].
typedef struct {
    int kc;                 // even
    const uint16_t *a, *b;
    float *c;
    ptrdiff_t c_rs;
    int mr, nr, accumulate;
} MatmulBf16Tile;

typedef void (*MatmulBf16TileFn)(const MatmulBf16Tile *t);

// Packs element (i, k) = src[i*s_idx + k*s_k], i < rows, k < kc, rounded to
// bf16, into ceil(rows / width) panels `width` wide, panel p (indices
// p*width ...) at dst + p*panel_stride (zeros for indices past rows in the
// last panel and for the pad k). One call packs many panels so the source is
// read in long runs. Every kernel's pack gives the same bits as
// matmul_bf16_round.
typedef void (*MatmulBf16PackFn)(uint16_t *dst, int width, ptrdiff_t panel_stride, const float *src,
                                 ptrdiff_t s_idx, ptrdiff_t s_k, int rows, int kc);

struct MatmulBf16Kernel {
    const char *name;   // "avx512bf16", "neonbf16", "avx512+round", "avx2+round", "neon+round", "portable"
    int mr, nr;
    MatmulBf16TileFn tile;
    MatmulBf16PackFn pack;
    // Set on CPUs without AVX512_BF16 or FEAT_BF16 (tile and pack NULL): the products run
    // on this fp32 kernel's driver (matmul.c), whose packs round both
    // operands to bf16 (matmul_bf16_round) and keep them as fp32 values.
    // A product of two bf16 values is exact in fp32, so the sums are those
    // of the portable bf16 kernel, at the fp32 kernel's speed.
    const MatmulKernel *on_fp32;
};

// fp32 -> bf16 as vcvtneps2bf16 does it: round to nearest even, subnormals
// to signed zero, NaN kept (quiet).
uint16_t matmul_bf16_round(float x);

const MatmulBf16Kernel *matmul_bf16_kernel_avx512(void);   // NULL without AVX512_BF16
const MatmulBf16Kernel *matmul_bf16_kernel_neon(void);     // BFDOT; NULL without FEAT_BF16 (or off AArch64)
const MatmulBf16Kernel *matmul_bf16_kernel_portable(void);
// The bf16 products on fp32 kernel f (f->bf16_round); NULL for NULL or the
// portable kernel.
const MatmulBf16Kernel *matmul_bf16_kernel_on(const MatmulKernel *f);
// AVX512_BF16 or BFDOT where the CPU has it, else on the best fp32 kernel,
// else portable.
const MatmulBf16Kernel *matmul_bf16_kernel_best(void);

// The MATMUL_BF16 forward / backward on kernel k (matmul_bf16.c), and the
// workspace any of its products takes.
void matmul_forward_bf16(Device *d, const MatmulBf16Kernel *k, float *out, const float *inp, const float *W, int N,
                         int C, int OC);
void matmul_backward_bf16(Device *d, const MatmulBf16Kernel *k, float *dinp, float *dW, const float *dout,
                          const float *inp, const float *W, int N, int C, int OC);
size_t matmul_bf16_workspace_bytes(const MatmulBf16Kernel *kern, int threads);
