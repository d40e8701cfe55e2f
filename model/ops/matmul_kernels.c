// matmul_kernels.c: register-tile kernels for the blocked matmul driver in
// matmul.c. Each computes an MR x NR block of C as a sum of kc outer products:
// NR/width vectors of one B row times a broadcast A value per tile row, all
// accumulators held in registers. The AVX-512 and AVX2 kernels are compiled
// with target attributes, so this file builds without -march=native; the CPU
// check at run time decides which one may run.
#include <immintrin.h>
#include <string.h>
#include "matmul_kernels.h"
#include "../../util/cpu.h"

// ---------------------------------------------------------------- AVX-512
// 8 x 32 tile: 16 zmm accumulators, 2 for the B row, 1 broadcast. Zen 4 runs
// one zmm FMA per cycle with latency 4, so 16 independent chains keep it busy,
// and 8 rows divide every token count and width of the model (no ragged tiles).
#define AVX512_MR 8
#define AVX512_NR 32

// In-register transpose of a 16 x 16 block: r[i] holds row i on entry and
// column i on exit. Three rounds of interleaves (1, 2 floats, then 128-bit
// lanes twice).
__attribute__((always_inline, target("avx512f"))) static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)
        for (int h = 0; h < 2; h++) {
            __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + 2 + h]);
            r[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            r[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    // r[4g + c] now holds, in 128-bit lane L, column 4L + c of rows 4g..4g+3;
    // two rounds of lane shuffles gather each column's four pieces.
    for (int i = 0; i < 16; i += 8)
        for (int c = 0; c < 4; c++) {
            t[i + c] = _mm512_shuffle_f32x4(r[i + c], r[i + 4 + c], 0x88);       // lanes 0,2 | 0,2
            t[i + 4 + c] = _mm512_shuffle_f32x4(r[i + c], r[i + 4 + c], 0xDD);   // lanes 1,3 | 1,3
        }
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++) {
            __m512 a = t[h * 4 + c], b = t[8 + h * 4 + c];
            r[h * 4 + c] = _mm512_shuffle_f32x4(a, b, 0x88);       // column 4h + c
            r[8 + h * 4 + c] = _mm512_shuffle_f32x4(a, b, 0xDD);   // column 8 + 4h + c
        }
}

__attribute__((always_inline, target("avx512f"))) static inline void
avx512_tile_body(const MatmulTile *t, const int rows_in_place) {
    __m512 acc0[AVX512_MR], acc1[AVX512_MR];
    #pragma GCC unroll 8
    for (int r = 0; r < AVX512_MR; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    const float *b = t->b;
    const ptrdiff_t b_ks = t->b_ks;
    // Start fetching the C tile now; it arrives while the k loop runs.
    if (t->c_cs == 1)
        for (int r = 0; r < t->mr; r++) {
            _mm_prefetch((const char *)(t->c + r * t->c_rs), _MM_HINT_T0);
            _mm_prefetch((const char *)(t->c + r * t->c_rs + 16), _MM_HINT_T0);
        }
    if (rows_in_place) {
        // A rows are contiguous in k: one pointer per row, each advancing by 1.
        const float *row[AVX512_MR];
        for (int r = 0; r < AVX512_MR; r++) row[r] = t->a + r * t->a_rs;
        for (int k = 0; k < t->kc; k++) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            #pragma GCC unroll 8
            for (int r = 0; r < AVX512_MR; r++) {
                __m512 av = _mm512_set1_ps(row[r][k]);
                acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
            }
            b += b_ks;
        }
    } else {
        // A(r, k) = a[r + k*a_ks]: the MR values of one k sit side by side.
        const float *a = t->a;
        const ptrdiff_t a_ks = t->a_ks;
        for (int k = 0; k < t->kc; k++) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            #pragma GCC unroll 8
            for (int r = 0; r < AVX512_MR; r++) {
                __m512 av = _mm512_set1_ps(a[r]);
                acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
            }
            a += a_ks;
            b += b_ks;
        }
    }
    if (t->c_cs == 1) {
        // Row-major C: masked loads/stores cover a short last column block.
        const int nr = t->nr;
        const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
        const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
        #pragma GCC unroll 8
        for (int r = 0; r < AVX512_MR; r++) {
            if (r >= t->mr) break;
            float *c = t->c + r * t->c_rs;
            __m512 v0 = acc0[r], v1 = acc1[r];
            if (t->accumulate) {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
            }
            _mm512_mask_storeu_ps(c, m0, v0);
            _mm512_mask_storeu_ps(c + 16, m1, v1);
        }
    } else if (t->c_rs == 1) {
        // Column-major C (the transposed forward): transpose the tile in
        // registers and write each of its nr columns as MR contiguous floats.
        const __mmask16 rows = (__mmask16)((1u << t->mr) - 1);
        __m512 r[16];
        for (int half = 0; half < 2; half++) {
            #pragma GCC unroll 8
            for (int i = 0; i < AVX512_MR; i++) r[i] = half ? acc1[i] : acc0[i];
            for (int i = AVX512_MR; i < 16; i++) r[i] = _mm512_setzero_ps();
            transpose16(r);
            for (int j = 0; j < 16 && half * 16 + j < t->nr; j++) {
                float *c = t->c + (half * 16 + j) * t->c_cs;
                __m512 v = r[j];
                if (t->accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, c));
                _mm512_mask_storeu_ps(c, rows, v);
            }
        }
    } else {
        // Any other strided C: via memory.
        float tmp[AVX512_MR * AVX512_NR] __attribute__((aligned(64)));
        #pragma GCC unroll 8
        for (int r = 0; r < AVX512_MR; r++) {
            _mm512_store_ps(tmp + r * AVX512_NR, acc0[r]);
            _mm512_store_ps(tmp + r * AVX512_NR + 16, acc1[r]);
        }
        for (int j = 0; j < t->nr; j++)
            for (int r = 0; r < t->mr; r++) {
                float *c = t->c + r * t->c_rs + j * t->c_cs;
                *c = t->accumulate ? *c + tmp[r * AVX512_NR + j] : tmp[r * AVX512_NR + j];
            }
    }
}

__attribute__((target("avx512f"))) static void avx512_tile(const MatmulTile *t) {
    if (t->a_ks == 1) avx512_tile_body(t, 1);
    else avx512_tile_body(t, 0);
}

// Transposing pack, 16 k at a time: 16 source rows (zeros past `rows`) are
// loaded, transposed in registers and stored as 16 destination rows of up to
// 16 floats. The source rows are prefetched a few chunks ahead.
__attribute__((target("avx512f"))) static void avx512_pack_t(float *dst, int width, const float *src,
                                                          ptrdiff_t src_rs, int rows, int kc) {
    for (int j0 = 0; j0 < width; j0 += 16) {
        const int w = width - j0 < 16 ? width - j0 : 16;
        const __mmask16 wmask = (__mmask16)((1u << w) - 1);
        for (int k0 = 0; k0 < kc; k0 += 16) {
            const int kn = kc - k0 < 16 ? kc - k0 : 16;
            const __mmask16 kmask = (__mmask16)((1u << kn) - 1);
            __m512 r[16];
            for (int j = 0; j < 16; j++) {
                if (j0 + j < rows && j < w) {
                    const float *row = src + (j0 + j) * src_rs + k0;
                    _mm_prefetch((const char *)(row + 64), _MM_HINT_T0);
                    r[j] = _mm512_maskz_loadu_ps(kmask, row);
                } else {
                    r[j] = _mm512_setzero_ps();
                }
            }
            transpose16(r);
            for (int k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + (k0 + k) * width + j0, wmask, r[k]);
        }
    }
}

// ---------------------------------------------------------------- AVX2 + FMA
// 6 x 16 tile: 12 ymm accumulators + 2 B + 1 broadcast = 15 of 16 registers;
// 12 chains cover FMA latency 4 x 2 pipes.
#define AVX2_MR 6
#define AVX2_NR 16

__attribute__((always_inline, target("avx2,fma"))) static inline void
avx2_tile_body(const MatmulTile *t, const int rows_in_place) {
    __m256 acc0[AVX2_MR], acc1[AVX2_MR];
    #pragma GCC unroll 6
    for (int r = 0; r < AVX2_MR; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    const float *b = t->b;
    const ptrdiff_t b_ks = t->b_ks;
    if (t->c_cs == 1)   // fetch the C tile while the k loop runs
        for (int r = 0; r < t->mr; r++) _mm_prefetch((const char *)(t->c + r * t->c_rs), _MM_HINT_T0);
    if (rows_in_place) {
        const float *row[AVX2_MR];
        for (int r = 0; r < AVX2_MR; r++) row[r] = t->a + r * t->a_rs;
        for (int k = 0; k < t->kc; k++) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            #pragma GCC unroll 6
            for (int r = 0; r < AVX2_MR; r++) {
                __m256 av = _mm256_broadcast_ss(row[r] + k);
                acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
                acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
            }
            b += b_ks;
        }
    } else {
        const float *a = t->a;
        const ptrdiff_t a_ks = t->a_ks;
        for (int k = 0; k < t->kc; k++) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            #pragma GCC unroll 6
            for (int r = 0; r < AVX2_MR; r++) {
                __m256 av = _mm256_broadcast_ss(a + r);
                acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
                acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
            }
            a += a_ks;
            b += b_ks;
        }
    }
    if (t->c_cs == 1 && t->nr == AVX2_NR) {
        #pragma GCC unroll 6
        for (int r = 0; r < AVX2_MR; r++) {
            if (r >= t->mr) break;
            float *c = t->c + r * t->c_rs;
            __m256 v0 = acc0[r], v1 = acc1[r];
            if (t->accumulate) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(c));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(c + 8));
            }
            _mm256_storeu_ps(c, v0);
            _mm256_storeu_ps(c + 8, v1);
        }
    } else {
        float tmp[AVX2_MR * AVX2_NR] __attribute__((aligned(32)));
        #pragma GCC unroll 6
        for (int r = 0; r < AVX2_MR; r++) {
            _mm256_store_ps(tmp + r * AVX2_NR, acc0[r]);
            _mm256_store_ps(tmp + r * AVX2_NR + 8, acc1[r]);
        }
        for (int r = 0; r < t->mr; r++)
            for (int j = 0; j < t->nr; j++) {
                float *c = t->c + r * t->c_rs + j * t->c_cs;
                *c = t->accumulate ? *c + tmp[r * AVX2_NR + j] : tmp[r * AVX2_NR + j];
            }
    }
}

__attribute__((target("avx2,fma"))) static void avx2_tile(const MatmulTile *t) {
    if (t->a_ks == 1) avx2_tile_body(t, 1);
    else avx2_tile_body(t, 0);
}

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
    for (int r = 0; r < t->mr; r++)
        for (int j = 0; j < t->nr; j++) {
            float *c = t->c + r * t->c_rs + j * t->c_cs;
            *c = t->accumulate ? *c + acc[r][j] : acc[r][j];
        }
}

// ---------------------------------------------------------------- selection

static const MatmulKernel kernel_avx512 = {"avx512", AVX512_MR, AVX512_NR, avx512_tile, avx512_pack_t};
static const MatmulKernel kernel_avx2 = {"avx2+fma", AVX2_MR, AVX2_NR, avx2_tile, NULL};
static const MatmulKernel kernel_portable = {"portable", PORT_MR, PORT_NR, portable_tile, NULL};

const MatmulKernel *matmul_kernel_avx512(void) { return cpu_has_avx512() ? &kernel_avx512 : NULL; }
const MatmulKernel *matmul_kernel_avx2(void) { return cpu_has_avx2_fma() ? &kernel_avx2 : NULL; }
const MatmulKernel *matmul_kernel_portable(void) { return &kernel_portable; }

const MatmulKernel *matmul_kernel_best(void) {
    if (cpu_has_avx512()) return &kernel_avx512;
    if (cpu_has_avx2_fma()) return &kernel_avx2;
    return &kernel_portable;
}
