// matmul_kernels_neon.c: the AArch64 register-tile kernels of the matmul
// drivers (matmul.c, matmul_bf16.c) and the attention tiles. fp32 ("neon"):
// 8 x 12 with NEON fp32 FMAs, 24 of the 32 vector registers accumulating, 3
// for the B row, 2 for 8 A values (each FMA takes its A value from a lane:
// vfmaq_laneq_f32), and its transposing pack (4 x 4 in-register transposes).
// bf16: on CPUs with FEAT_BF16, "neonbf16", the same 8 x 12 shape with BFDOT
// (two products per fp32 lane per instruction) over the k-pair panels of
// matmul_kernels.h; elsewhere the fp32 tiles over bf16-rounded operands
// ("neon+round"), like the x86 "+round" kernels.
// The BFDOT tile alone is compiled for armv8.2-a+bf16 (a target attribute),
// so the build runs on every AArch64 and the CPU check at run time decides.
// Elsewhere than on AArch64 it defines no kernel.
#include "matmul_kernels.h"
#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>
#include "../../util/cpu.h"

#define NEON_MR 8
#define NEON_NR 12

// acc[r][0..2] = op(acc[r][0..2], B row, lane `lane` of `av`): one tile row
// (a lane index must be a constant, hence the macro).
#define NEON_ROW(op, r, av, lane)                                           \
    do {                                                                    \
        acc[r][0] = op(acc[r][0], b0, av, lane);                            \
        acc[r][1] = op(acc[r][1], b1, av, lane);                            \
        acc[r][2] = op(acc[r][2], b2, av, lane);                            \
    } while (0)
// All 8 rows: A rows 0-3 in the lanes of a0, 4-7 in those of a1.
#define NEON_ROWS(op, a0, a1)                                                                               \
    do {                                                                                                    \
        NEON_ROW(op, 0, a0, 0); NEON_ROW(op, 1, a0, 1); NEON_ROW(op, 2, a0, 2); NEON_ROW(op, 3, a0, 3);     \
        NEON_ROW(op, 4, a1, 0); NEON_ROW(op, 5, a1, 1); NEON_ROW(op, 6, a1, 2); NEON_ROW(op, 7, a1, 3);     \
    } while (0)

// Writes (or adds) the mr x nr corner of an 8 x 12 register tile to C,
// C(r, j) = c[r*c_rs + j*c_cs]: whole vectors when rows are full and
// contiguous, else through memory. Shared by the fp32 and bf16 tiles.
__attribute__((always_inline)) static inline void neon_store(float32x4_t acc[NEON_MR][3], const MatmulTile *t) {
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

// matmul_bf16_round on 4 floats, in integer lanes (so the bits do not
// depend on FPCR as a BFCVT's handling of denormals would, and the pack
// needs no FEAT_BF16): each result's bf16 in the high 16 bits of its lane.
static inline uint32x4_t round_bf16_x4(float32x4_t x) {
    const uint32x4_t u = vreinterpretq_u32_f32(x);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb);
    const uint32x4_t tiny = vceqq_u32(vandq_u32(u, vdupq_n_u32(0x7f800000u)), vdupq_n_u32(0));
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    const uint32x4_t signed_zero = vandq_u32(u, vdupq_n_u32(0x80000000u));
    const uint32x4_t quiet = vorrq_u32(u, vdupq_n_u32(0x00400000u));
    return vbslq_u32(nan, quiet, vbslq_u32(tiny, signed_zero, r));
}

// In-register transpose of a 4 x 4 block of 32-bit lanes: r[i] holds row i
// on entry and column i on exit (interleave lanes, then 64-bit halves).
static inline void transpose4(uint32x4_t r[4]) {
    const uint64x2_t t0 = vreinterpretq_u64_u32(vtrn1q_u32(r[0], r[1]));
    const uint64x2_t t1 = vreinterpretq_u64_u32(vtrn2q_u32(r[0], r[1]));
    const uint64x2_t t2 = vreinterpretq_u64_u32(vtrn1q_u32(r[2], r[3]));
    const uint64x2_t t3 = vreinterpretq_u64_u32(vtrn2q_u32(r[2], r[3]));
    r[0] = vreinterpretq_u32_u64(vtrn1q_u64(t0, t2));
    r[1] = vreinterpretq_u32_u64(vtrn1q_u64(t1, t3));
    r[2] = vreinterpretq_u32_u64(vtrn2q_u64(t0, t2));
    r[3] = vreinterpretq_u32_u64(vtrn2q_u64(t1, t3));
}

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
            NEON_ROWS(vfmaq_laneq_f32, a0, a1);
            b += b_ks;
        }
    } else {
        // A(r, k) = a[r + k*a_ks]: the 8 values of one k side by side.
        const float *a = t->a;
        const ptrdiff_t a_ks = t->a_ks;
        for (int k = 0; k < t->kc; k++) {
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
            const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
            NEON_ROWS(vfmaq_laneq_f32, a0, a1);
            a += a_ks;
            b += b_ks;
        }
    }
    neon_store(acc, t);
}

// Transposing pack (MatmulPackFn), 4 x 4 blocks: 4 source rows of 4 k
// (zeros past `rows`, a short last k run through a zeroed copy) are loaded,
// transposed in registers and stored as 4 destination rows of 4 floats,
// rounded to bf16 on the way when asked. width is MR or NR, both multiples
// of 4.
_Static_assert(NEON_MR % 4 == 0 && NEON_NR % 4 == 0, "the transposing pack works in 4 x 4 blocks");
static void neon_pack_t(float *dst, int width, const float *src, ptrdiff_t src_rs, int rows, int kc, int bf16) {
    for (int j0 = 0; j0 < width; j0 += 4)
        for (int k0 = 0; k0 < kc; k0 += 4) {
            const int kn = kc - k0 < 4 ? kc - k0 : 4;
            uint32x4_t r[4];
            for (int j = 0; j < 4; j++) {
                if (j0 + j >= rows) {
                    r[j] = vdupq_n_u32(0);
                    continue;
                }
                const float *row = src + (j0 + j) * src_rs + k0;
                float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                if (kn < 4) {
                    memcpy(part, row, (size_t)kn * sizeof(float));
                    row = part;
                }
                r[j] = vreinterpretq_u32_f32(vld1q_f32(row));
            }
            transpose4(r);
            for (int k = 0; k < kn; k++) {
                uint32x4_t v = r[k];
                if (bf16) v = vandq_u32(round_bf16_x4(vreinterpretq_f32_u32(v)), vdupq_n_u32(0xffff0000u));
                vst1q_f32(dst + (ptrdiff_t)(k0 + k) * width + j0, vreinterpretq_f32_u32(v));
            }
        }
}

// ---------------------------------------------------------------- BFDOT
// vbfdotq_laneq_f32(acc, b, a, lane) adds, to each of 4 fp32 lanes (4 B
// columns), that column's k pair dotted with the k pair of A row `lane`:
// the k-pair panel layout as it is, 8 A rows in 2 vectors, 12 B columns in 3.
// Its arithmetic (Arm ARM, BFDOT; FEAT_EBF16 absent or FPCR.EBF = 0, as
// Linux starts a process): the two products (exact for bf16 operands), their
// sum and the sum's addition to the accumulator each rounded to fp32 by
// round-to-odd, denormal inputs and results flushed to zero, default NaN.
// tests/test_matmul.c holds it to that, bit for bit, and derives the
// normwise bound of the products from it.
__attribute__((target("arch=armv8.2-a+bf16"))) static void neonbf16_tile(const MatmulBf16Tile *t) {
    float32x4_t acc[NEON_MR][3];
    for (int r = 0; r < NEON_MR; r++) acc[r][0] = acc[r][1] = acc[r][2] = vdupq_n_f32(0.0f);
    const uint16_t *a = t->a, *b = t->b;
    for (int p = 0; p < t->kc / 2; p++) {
        const bfloat16x8_t b0 = vreinterpretq_bf16_u16(vld1q_u16(b)), b1 = vreinterpretq_bf16_u16(vld1q_u16(b + 8)),
                           b2 = vreinterpretq_bf16_u16(vld1q_u16(b + 16));
        const bfloat16x8_t a0 = vreinterpretq_bf16_u16(vld1q_u16(a)), a1 = vreinterpretq_bf16_u16(vld1q_u16(a + 8));
        NEON_ROWS(vbfdotq_laneq_f32, a0, a1);
        a += 2 * NEON_MR;
        b += 2 * NEON_NR;
    }
    const MatmulTile c = {.c = t->c, .c_rs = t->c_rs, .c_cs = 1, .mr = t->mr, .nr = t->nr, .accumulate = t->accumulate};
    neon_store(acc, &c);
}

// The pair word of index j, pair q (zero past rows and kc), written one at
// a time: the pack's ragged edges.
static inline void pack_pair_scalar(uint16_t *dst, int width, ptrdiff_t panel_stride, const float *src,
                                    ptrdiff_t s_idx, ptrdiff_t s_k, int rows, int kc, int j, int q) {
    uint16_t *d = dst + (j / width) * panel_stride + ((ptrdiff_t)q * width + j % width) * 2;
    for (int h = 0; h < 2; h++) {
        const int k = 2 * q + h;
        d[h] = j < rows && k < kc ? matmul_bf16_round(src[j * s_idx + k * s_k]) : 0;
    }
}

// Packs 4 indices at a time (4 | width, so they share a panel and their
// pair words of one q are one 16-byte store, of uint16_t lanes as the panel
// is typed). Two source layouts are vectorised: k contiguous (8 k of 4
// indices rounded, then a 4 x 4 transpose of pair words) and indices
// contiguous (rows k and k+1 rounded and interleaved by one shift-insert);
// any other layout, or a width 4 does not divide, is the portable pack.
static void neonbf16_pack(uint16_t *dst, int width, ptrdiff_t panel_stride, const float *src, ptrdiff_t s_idx,
                          ptrdiff_t s_k, int rows, int kc) {
    if (width % 4 != 0 || (s_k != 1 && s_idx != 1)) {
        matmul_bf16_kernel_portable()->pack(dst, width, panel_stride, src, s_idx, s_k, rows, kc);
        return;
    }
    const int pairs = (kc + 1) / 2, span = (rows + width - 1) / width * width;
    for (int j0 = 0; j0 < span; j0 += 4) {
        uint16_t *d = dst + (j0 / width) * panel_stride + (ptrdiff_t)(j0 % width) * 2;   // pair q at + q*2*width
        const int full = j0 + 4 <= rows;
        int q = 0;
        if (full && s_k == 1)
            for (; 2 * q + 8 <= kc; q += 4) {
                uint32x4_t w[4];
                for (int i = 0; i < 4; i++) {
                    const float *x = src + (j0 + i) * s_idx + 2 * q;
                    const uint32x4_t lo = round_bf16_x4(vld1q_f32(x)), hi = round_bf16_x4(vld1q_f32(x + 4));
                    // The high halves of k .. k+7 in order: 4 pair words.
                    w[i] = vreinterpretq_u32_u16(vuzp2q_u16(vreinterpretq_u16_u32(lo), vreinterpretq_u16_u32(hi)));
                }
                transpose4(w);   // w[p]: pair q + p of the 4 indices
                for (int p = 0; p < 4; p++) vst1q_u16(d + (ptrdiff_t)(q + p) * 2 * width, vreinterpretq_u16_u32(w[p]));
            }
        if (full && s_idx == 1)
            for (; 2 * q + 2 <= kc; q++) {
                const float *x = src + j0 + (ptrdiff_t)(2 * q) * s_k;
                const uint32x4_t even = round_bf16_x4(vld1q_f32(x)), odd = round_bf16_x4(vld1q_f32(x + s_k));
                vst1q_u16(d + (ptrdiff_t)q * 2 * width, vreinterpretq_u16_u32(vsriq_n_u32(odd, even, 16)));
            }
        for (; q < pairs; q++)
            for (int i = 0; i < 4; i++)
                pack_pair_scalar(dst, width, panel_stride, src, s_idx, s_k, rows, kc, j0 + i, q);
    }
}

static const MatmulBf16Kernel kernel_neon_round;
static const MatmulKernel kernel_neon = {"neon", 4, NEON_MR, NEON_NR, neon_tile, neon_pack_t, 1, &kernel_neon_round,
                                         1, NULL};
static const MatmulBf16Kernel kernel_neon_round = {"neon+round", NEON_MR, NEON_NR, NULL, NULL, &kernel_neon};
static const MatmulBf16Kernel kernel_neonbf16 = {"neonbf16", NEON_MR, NEON_NR, neonbf16_tile, neonbf16_pack, NULL};

const MatmulKernel *matmul_kernel_neon(void) { return cpu_has_neon() ? &kernel_neon : NULL; }
const MatmulBf16Kernel *matmul_bf16_kernel_neon(void) { return cpu_has_arm_bf16() ? &kernel_neonbf16 : NULL; }
#else
const MatmulKernel *matmul_kernel_neon(void) { return NULL; }
const MatmulBf16Kernel *matmul_bf16_kernel_neon(void) { return NULL; }
#endif
