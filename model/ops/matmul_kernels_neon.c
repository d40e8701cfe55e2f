// matmul_kernels_neon.c: the AArch64 register-tile kernel of the matmul
// driver (matmul.c) and the attention tiles: 8 x 12 with NEON fp32 FMAs, 24
// of the 32 vector registers accumulating, 3 for the B row, 2 for 8 A values
// (each FMA takes its A value from a lane: vfmaq_laneq_f32). bf16 products
// run on it over bf16-rounded operands ("neon+round"), like the x86 "+round"
// kernels. Elsewhere than on AArch64 it defines no kernel.
#include "matmul_kernels.h"
#if defined(__aarch64__)
#include <arm_neon.h>
#include "../../util/cpu.h"

#define NEON_MR 8
#define NEON_NR 12

// acc[r][0..2] += A(r) * B row, A(r) being lane `lane` of vector `av`
// (a lane index must be a constant, hence the macro).
#define NEON_ROW(r, av, lane)                                               \
    do {                                                                    \
        acc[r][0] = vfmaq_laneq_f32(acc[r][0], b0, av, lane);               \
        acc[r][1] = vfmaq_laneq_f32(acc[r][1], b1, av, lane);               \
        acc[r][2] = vfmaq_laneq_f32(acc[r][2], b2, av, lane);               \
    } while (0)

static void neon_tile(const MatmulTile *t) {
    float32x4_t acc[NEON_MR][3];
    for (int r = 0; r < NEON_MR; r++) acc[r][0] = acc[r][1] = acc[r][2] = vdupq_n_f32(0.0f);
    const float *b = t->b;
    const ptrdiff_t b_ks = t->b_ks;
    if (t->a_ks == 1) {
        // A rows read in place: gather the 8 values of one k into 2 vectors.
        const float *row[NEON_MR];
        for (int r = 0; r < NEON_MR; r++) row[r] = t->a + r * t->a_rs;
        for (int k = 0; k < t->kc; k++) {
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
            float col[NEON_MR];
            for (int r = 0; r < NEON_MR; r++) col[r] = row[r][k];
            const float32x4_t a0 = vld1q_f32(col), a1 = vld1q_f32(col + 4);
            NEON_ROW(0, a0, 0); NEON_ROW(1, a0, 1); NEON_ROW(2, a0, 2); NEON_ROW(3, a0, 3);
            NEON_ROW(4, a1, 0); NEON_ROW(5, a1, 1); NEON_ROW(6, a1, 2); NEON_ROW(7, a1, 3);
            b += b_ks;
        }
    } else {
        // A(r, k) = a[r + k*a_ks]: the 8 values of one k side by side.
        const float *a = t->a;
        const ptrdiff_t a_ks = t->a_ks;
        for (int k = 0; k < t->kc; k++) {
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
            const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
            NEON_ROW(0, a0, 0); NEON_ROW(1, a0, 1); NEON_ROW(2, a0, 2); NEON_ROW(3, a0, 3);
            NEON_ROW(4, a1, 0); NEON_ROW(5, a1, 1); NEON_ROW(6, a1, 2); NEON_ROW(7, a1, 3);
            a += a_ks;
            b += b_ks;
        }
    }
    if (t->c_cs == 1 && t->nr == NEON_NR) {
        for (int r = 0; r < t->mr; r++) {
            float *c = t->c + r * t->c_rs;
            for (int q = 0; q < 3; q++) {
                float32x4_t v = acc[r][q];
                if (t->accumulate) v = vaddq_f32(v, vld1q_f32(c + 4 * q));
                vst1q_f32(c + 4 * q, v);
            }
        }
        return;
    }
    float tmp[NEON_MR * NEON_NR];
    for (int r = 0; r < NEON_MR; r++)
        for (int q = 0; q < 3; q++) vst1q_f32(tmp + r * NEON_NR + 4 * q, acc[r][q]);
    matmul_tile_store(t, tmp, NEON_NR);
}

static const MatmulBf16Kernel kernel_neon_round;
static const MatmulKernel kernel_neon = {"neon", 4, NEON_MR, NEON_NR, neon_tile, NULL, 1, &kernel_neon_round};
static const MatmulBf16Kernel kernel_neon_round = {"neon+round", NEON_MR, NEON_NR, NULL, NULL, &kernel_neon};

const MatmulKernel *matmul_kernel_neon(void) { return cpu_has_neon() ? &kernel_neon : NULL; }
#else
const MatmulKernel *matmul_kernel_neon(void) { return NULL; }
#endif
