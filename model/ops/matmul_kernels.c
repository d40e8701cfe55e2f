// matmul_kernels.c: the portable register-tile kernels (plain C the compiler
// vectorises for whatever the build targets; every CPU runs them), the bf16
// rounding, and the choice of the fastest kernels this CPU runs among these,
// the x86 ones (matmul_kernels_x86.c) and the ARM ones (matmul_kernels_neon.c).
#include <string.h>
#include "matmul_kernels.h"
#include "../../util/cpu.h"

// ---------------------------------------------------------------- portable C
// Plain loops over a 4 x 16 tile; the compiler vectorises the j loop for
// whatever the build targets.
#define PORT_MR 4
#define PORT_NR 16

static void portable_tile(const MatmulTile *t) {
    float acc[PORT_MR][PORT_NR];
    for (int r = 0; r < PORT_MR; r++)
        for (int j = 0; j < PORT_NR; j++) acc[r][j] = 0.0f;
    const float *restrict a = t->a, *restrict b = t->b;
    const ptrdiff_t a_rs = t->a_rs, a_ks = t->a_ks, b_ks = t->b_ks;
    for (int k = 0; k < t->kc; k++) {
        const float *restrict bk = b + k * b_ks;
        for (int r = 0; r < PORT_MR; r++) {
            const float av = a[r * a_rs + k * a_ks];
            #pragma omp simd
            for (int j = 0; j < PORT_NR; j++) acc[r][j] += av * bk[j];
        }
    }
    matmul_tile_store(t, &acc[0][0], PORT_NR);
}

// The widest FMA vectors the build lets the compiler use for these loops:
// the portable kernel's peak (an upper bound where it picks narrower ones).
#if defined(__AVX512F__)
#define PORT_LANES 16
#elif defined(__AVX2__) && defined(__FMA__)
#define PORT_LANES 8
#elif defined(__aarch64__)
#define PORT_LANES 4
#else
#define PORT_LANES 1
#endif

static const MatmulKernel kernel_portable = {"portable", PORT_LANES, PORT_MR, PORT_NR, portable_tile, NULL, 0, NULL, 0, NULL};

const MatmulKernel *matmul_kernel_portable(void) { return &kernel_portable; }

const MatmulKernel *matmul_kernel_best(void) {
    const MatmulKernel *k = matmul_kernel_avx512();
    if (!k) k = matmul_kernel_avx2();
    if (!k) k = matmul_kernel_neon();
    return k ? k : &kernel_portable;
}

// ================================================================ bf16
// Packs and tiles for the MATMUL_BF16 products (layout in matmul_kernels.h).

uint16_t matmul_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);            // zero, subnormal
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);    // NaN, made quiet
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void portable_bf16_pack(uint16_t *dst, int width, ptrdiff_t panel_stride, const float *src,
                               ptrdiff_t s_idx, ptrdiff_t s_k, int rows, int kc) {
    const int panels = (rows + width - 1) / width;
    for (int p = 0; p < panels; p++)
        for (int k = 0; k < kc + (kc & 1); k++) {
            uint16_t *d = dst + p * panel_stride + (ptrdiff_t)(k >> 1) * 2 * width + (k & 1);
            for (int r = 0; r < width; r++) {
                const int i = p * width + r;
                d[2 * r] = i < rows && k < kc ? matmul_bf16_round(src[i * s_idx + k * s_k]) : 0;
            }
        }
}

// ---------------------------------------------------------------- portable bf16
// Exact products of the bf16 values, summed in fp32 (a product of two bf16
// values is exact in fp32, so fused or not gives the same sums). Plain loops
// the compiler vectorises; an 8 x 32 tile spreads the conversion of each B
// pair row over 8 rows of A. Correct everywhere but about half the speed of
// the fp32 kernels: x86 CPUs without AVX512_BF16 run the "+round" kernels.
#define PORT_BF16_MR 8
#define PORT_BF16_NR 32

static void portable_bf16_tile(const MatmulBf16Tile *t) {
    float acc[PORT_BF16_MR][PORT_BF16_NR];
    for (int r = 0; r < PORT_BF16_MR; r++)
        for (int j = 0; j < PORT_BF16_NR; j++) acc[r][j] = 0.0f;
    for (int p = 0; p < t->kc / 2; p++) {
        const uint16_t *a = t->a + (ptrdiff_t)p * 2 * PORT_BF16_MR, *b = t->b + (ptrdiff_t)p * 2 * PORT_BF16_NR;
        float b0[PORT_BF16_NR], b1[PORT_BF16_NR];
        for (int j = 0; j < PORT_BF16_NR; j++) {
            b0[j] = bf16_value(b[2 * j]);
            b1[j] = bf16_value(b[2 * j + 1]);
        }
        for (int r = 0; r < PORT_BF16_MR; r++) {
            const float a0 = bf16_value(a[2 * r]), a1 = bf16_value(a[2 * r + 1]);
            #pragma omp simd
            for (int j = 0; j < PORT_BF16_NR; j++) acc[r][j] = (acc[r][j] + a0 * b0[j]) + a1 * b1[j];
        }
    }
    for (int r = 0; r < t->mr; r++)
        for (int j = 0; j < t->nr; j++) {
            float *c = t->c + r * t->c_rs + j;
            *c = t->accumulate ? *c + acc[r][j] : acc[r][j];
        }
}

static const MatmulBf16Kernel kernel_portable_bf16 = {"portable", PORT_BF16_MR, PORT_BF16_NR, portable_bf16_tile,
                                                      portable_bf16_pack, NULL};

const MatmulBf16Kernel *matmul_bf16_kernel_portable(void) { return &kernel_portable_bf16; }
const MatmulBf16Kernel *matmul_bf16_kernel_on(const MatmulKernel *f) { return f ? f->bf16_round : NULL; }
const MatmulBf16Kernel *matmul_bf16_kernel_best(void) {
    const MatmulBf16Kernel *k = matmul_bf16_kernel_avx512();
    if (!k) k = matmul_bf16_kernel_neon();
    if (!k) k = matmul_bf16_kernel_on(matmul_kernel_best());
    return k ? k : &kernel_portable_bf16;
}
