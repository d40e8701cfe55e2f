// matmul_kernels_x86.c: the x86 register-tile kernels of the matmul driver
// (matmul.c) and the attention tiles: AVX-512 (8 x 32), AVX2 + FMA (6 x 16),
// their vectorised transposing packs, the AVX512_BF16 tile and pack, and the
// int4 strips of matmul_int4.c. Each tile computes an MR x NR block of C as a
// sum of kc outer products: NR/width vectors of one B row times a broadcast A
// value per tile row, all accumulators held in registers. They are compiled with target attributes,
// so this file builds without -march=native; the CPU check at run time
// decides which may run. Elsewhere than on x86 it defines no kernel.
#include "matmul_kernels.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>
#include "../../util/cpu.h"
#include "../../util/util.h"

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

// Writes (or adds) an 8-row x 32-column register tile to row-major C; masked
// loads/stores cover a short last column block. Shared by the fp32 and bf16
// AVX-512 tiles.
__attribute__((always_inline, target("avx512f"))) static inline void
avx512_store_rows(float *c_base, ptrdiff_t c_rs, int mr, int nr, int accumulate, const __m512 *acc0,
                  const __m512 *acc1) {
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    #pragma GCC unroll 8
    for (int r = 0; r < AVX512_MR; r++) {
        if (r >= mr) break;
        float *c = c_base + r * c_rs;
        __m512 v0 = acc0[r], v1 = acc1[r];
        if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
        }
        _mm512_mask_storeu_ps(c, m0, v0);
        _mm512_mask_storeu_ps(c + 16, m1, v1);
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
        avx512_store_rows(t->c, t->c_rs, t->mr, t->nr, t->accumulate, acc0, acc1);
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
        matmul_tile_store(t, tmp, AVX512_NR);
    }
}

__attribute__((target("avx512f"))) static void avx512_tile(const MatmulTile *t) {
    if (t->a_ks == 1) avx512_tile_body(t, 1);
    else avx512_tile_body(t, 0);
}

// Each float rounded to bf16 and widened back, with matmul_bf16_round's
// bits: to nearest even, zero and subnormals to signed zero, NaN made quiet.
__attribute__((always_inline, target("avx512f"))) static inline __m512 round_bf16_512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x), high = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), high);
    const __mmask16 tiny = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7f800000)),
                                                   _mm512_setzero_si512());
    r = _mm512_mask_mov_epi32(r, tiny, _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), high));
    return _mm512_castsi512_ps(r);
}

// Transposing pack, 16 k at a time: 16 source rows (zeros past `rows`) are
// loaded, transposed in registers and stored as 16 destination rows of up to
// 16 floats. The source rows are prefetched a few chunks ahead.
__attribute__((target("avx512f"))) static void avx512_pack_t(float *dst, int width, const float *src,
                                                          ptrdiff_t src_rs, int rows, int kc, int bf16) {
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
            if (bf16)
                for (int k = 0; k < kn; k++) r[k] = round_bf16_512(r[k]);
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
        matmul_tile_store(t, tmp, AVX2_NR);
    }
}

__attribute__((target("avx2,fma"))) static void avx2_tile(const MatmulTile *t) {
    if (t->a_ks == 1) avx2_tile_body(t, 1);
    else avx2_tile_body(t, 0);
}

// In-register transpose of an 8 x 8 block: r[i] holds row i on entry and
// column i on exit (interleave pairs, then 2-float pieces, then 128-bit halves).
__attribute__((always_inline, target("avx2"))) static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            u[i + 2 * h] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], 0x44);
            u[i + 2 * h + 1] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], 0xEE);
        }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

// The first n of 8 lanes (n <= 8), as a maskload/maskstore mask.
__attribute__((always_inline, target("avx2"))) static inline __m256i first_lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// round_bf16_512 on 8 floats.
__attribute__((always_inline, target("avx2"))) static inline __m256 round_bf16_256(__m256 x) {
    const __m256i u = _mm256_castps_si256(x), high = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), high);
    const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    r = _mm256_blendv_epi8(r, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)), tiny);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), high), nan);
    return _mm256_castsi256_ps(r);
}

// Transposing pack, 8 k at a time: 8 source rows (zeros past `rows`) are
// loaded, transposed in registers and stored as 8 destination rows of up to
// 8 floats (a panel 6 wide takes a 4-float and a 2-float store per row).
__attribute__((target("avx2,fma"))) static void avx2_pack_t(float *dst, int width, const float *src,
                                                         ptrdiff_t src_rs, int rows, int kc, int bf16) {
    for (int j0 = 0; j0 < width; j0 += 8) {
        const int w = width - j0 < 8 ? width - j0 : 8;
        const __m256i wmask = first_lanes(w);
        for (int k0 = 0; k0 < kc; k0 += 8) {
            const int kn = kc - k0 < 8 ? kc - k0 : 8;
            const __m256i kmask = first_lanes(kn);
            __m256 r[8];
            for (int j = 0; j < 8; j++) {
                if (j0 + j < rows && j < w) {
                    const float *row = src + (j0 + j) * src_rs + k0;
                    _mm_prefetch((const char *)(row + 64), _MM_HINT_T0);
                    r[j] = kn == 8 ? _mm256_loadu_ps(row) : _mm256_maskload_ps(row, kmask);
                } else {
                    r[j] = _mm256_setzero_ps();
                }
            }
            transpose8(r);
            if (bf16)
                for (int k = 0; k < kn; k++) r[k] = round_bf16_256(r[k]);
            float *d = dst + (ptrdiff_t)k0 * width + j0;
            if (w == 8)
                for (int k = 0; k < kn; k++) _mm256_storeu_ps(d + (ptrdiff_t)k * width, r[k]);
            else if (w == 6)
                for (int k = 0; k < kn; k++) {
                    _mm_storeu_ps(d + (ptrdiff_t)k * width, _mm256_castps256_ps128(r[k]));
                    _mm_storel_pi((__m64 *)(void *)(d + (ptrdiff_t)k * width + 4), _mm256_extractf128_ps(r[k], 1));
                }
            else
                for (int k = 0; k < kn; k++) _mm256_maskstore_ps(d + (ptrdiff_t)k * width, wmask, r[k]);
        }
    }
}


// ---------------------------------------------------------------- AVX512_BF16
// 8 x 32 tile as the fp32 one: 16 zmm accumulators; each vdpbf16ps adds two
// products per fp32 lane (k and k+1), twice the FMA work per instruction, and
// the A pair is broadcast straight from memory.
#define BF16_MR 8
#define BF16_NR 32
_Static_assert(BF16_MR == AVX512_MR, "the bf16 and fp32 AVX-512 tiles share their store");

__attribute__((target("avx512f,avx512bf16"))) static void avx512bf16_tile(const MatmulBf16Tile *t) {
    __m512 acc0[BF16_MR], acc1[BF16_MR];
    #pragma GCC unroll 8
    for (int r = 0; r < BF16_MR; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    // One 32-bit word holds a k pair; may_alias: the panel was written as uint16_t.
    typedef uint32_t __attribute__((may_alias)) pair_word;
    const pair_word *a = (const pair_word *)(const void *)t->a;
    const uint16_t *b = t->b;
    for (int r = 0; r < t->mr; r++) _mm_prefetch((const char *)(t->c + r * t->c_rs), _MM_HINT_T0);
    for (int p = 0; p < t->kc / 2; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 32);
        #pragma GCC unroll 8
        for (int r = 0; r < BF16_MR; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r]);
            acc0[r] = _mm512_dpbf16_ps(acc0[r], av, b0);
            acc1[r] = _mm512_dpbf16_ps(acc1[r], av, b1);
        }
        a += BF16_MR;
        b += 2 * BF16_NR;
    }
    avx512_store_rows(t->c, t->c_rs, t->mr, t->nr, t->accumulate, acc0, acc1);
}

// Writes the pair words of 16 consecutive indices j0..j0+15 (those below
// `valid`; the caller zeroes the rest) for pair q, across panel boundaries.
__attribute__((always_inline, target("avx512f"))) static inline void
store_pairs16(uint16_t *dst, int width, ptrdiff_t panel_stride, int q, int j0, __m512i words) {
    if (width >= 16) {   // 16 | width: one panel
        uint16_t *d = dst + (j0 / width) * panel_stride + ((ptrdiff_t)q * width + j0 % width) * 2;
        _mm512_storeu_si512(d, words);
        return;
    }
    if (width == 8) {   // two panels, half each
        uint16_t *d = dst + (j0 / 8) * panel_stride + (ptrdiff_t)q * 16;
        _mm256_storeu_si256((__m256i *)(void *)d, _mm512_castsi512_si256(words));
        _mm256_storeu_si256((__m256i *)(void *)(d + panel_stride), _mm512_extracti64x4_epi64(words, 1));
        return;
    }
    uint32_t w[16];
    _mm512_storeu_si512(w, words);
    for (int j = 0; j < 16; j++) {
        uint16_t *d = dst + ((j0 + j) / width) * panel_stride + ((ptrdiff_t)q * width + (j0 + j) % width) * 2;
        memcpy(d, &w[j], sizeof w[j]);
    }
}

// Packs with vcvtne2ps2bf16 (the same rounding as matmul_bf16_round). Two
// source layouts are vectorised, 16 indices at a time, and read the source in
// long contiguous runs; any other layout (or a width 16 does not divide and
// that does not divide 16) falls back to the scalar pack.
__attribute__((target("avx512f,avx512bf16"))) static void avx512bf16_pack(uint16_t *dst, int width,
                                                                          ptrdiff_t panel_stride, const float *src,
                                                                          ptrdiff_t s_idx, ptrdiff_t s_k, int rows,
                                                                          int kc) {
    const int pairs = (kc + 1) / 2, panels = (rows + width - 1) / width, span = panels * width;
    if ((width % 16 != 0 && 16 % width != 0) || (s_k != 1 && s_idx != 1)) {
        matmul_bf16_kernel_portable()->pack(dst, width, panel_stride, src, s_idx, s_k, rows, kc);
        return;
    }
    if (s_k == 1) {
        // Each index's k run is contiguous, so its pairs already sit side by
        // side: convert 32 k of 16 indices, then transpose 16 x 16 words.
        for (int j0 = 0; j0 < span; j0 += 16) {
            for (int k0 = 0; k0 < kc; k0 += 32) {
                const int kn = kc - k0 < 32 ? kc - k0 : 32;
                const __mmask16 lo = kn >= 16 ? 0xFFFF : (__mmask16)((1u << kn) - 1);
                const __mmask16 hi = kn >= 32 ? 0xFFFF : kn <= 16 ? 0 : (__mmask16)((1u << (kn - 16)) - 1);
                __m512 r[16];
                for (int j = 0; j < 16; j++) {
                    if (j0 + j < rows) {
                        const float *row = src + (j0 + j) * s_idx + k0;
                        _mm_prefetch((const char *)(row + 128), _MM_HINT_T0);
                        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + 16),
                                                         _mm512_maskz_loadu_ps(lo, row));
                        r[j] = _mm512_castsi512_ps((__m512i)h);
                    } else {
                        r[j] = _mm512_setzero_ps();
                    }
                }
                transpose16(r);
                const int np = (kn + 1) / 2;
                if (j0 + 16 <= span)
                    for (int q = 0; q < np; q++)
                        store_pairs16(dst, width, panel_stride, k0 / 2 + q, j0, _mm512_castps_si512(r[q]));
                else   // the last 16 reach past the panels (width < 16): only `span - j0` exist
                    for (int q = 0; q < np; q++) {
                        uint32_t w[16];
                        _mm512_storeu_si512(w, _mm512_castps_si512(r[q]));
                        for (int j = 0; j < span - j0; j++)
                            memcpy(dst + ((j0 + j) / width) * panel_stride +
                                       ((ptrdiff_t)(k0 / 2 + q) * width + (j0 + j) % width) * 2,
                                   &w[j], sizeof w[j]);
                    }
            }
        }
        return;
    }
    // s_idx == 1: indices are contiguous for each k: interleave rows k and
    // k+1, whole rows at a time.
    for (int q = 0; q < pairs; q++) {
        const float *r0 = src + (ptrdiff_t)(2 * q) * s_k, *r1 = r0 + s_k;
        const int has1 = 2 * q + 1 < kc;
        if (2 * q + 4 < kc) {
            _mm_prefetch((const char *)(r0 + 4 * s_k), _MM_HINT_T0);
            _mm_prefetch((const char *)(r1 + 4 * s_k), _MM_HINT_T0);
        }
        for (int j0 = 0; j0 < span; j0 += 16) {
            const int valid = rows - j0 >= 16 ? 16 : rows - j0 > 0 ? rows - j0 : 0;
            const __mmask16 vmask = (__mmask16)((1u << valid) - 1);
            __m256i e = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(vmask, r0 + j0));
            __m256i o = has1 ? (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(vmask, r1 + j0))
                             : _mm256_setzero_si256();
            __m512i words = _mm512_or_si512(_mm512_cvtepu16_epi32(e), _mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
            if (j0 + 16 <= span) {
                store_pairs16(dst, width, panel_stride, q, j0, words);
            } else {
                uint32_t w[16];
                _mm512_storeu_si512(w, words);
                for (int j = 0; j < span - j0; j++)
                    memcpy(dst + ((j0 + j) / width) * panel_stride + ((ptrdiff_t)q * width + (j0 + j) % width) * 2,
                           &w[j], sizeof w[j]);
            }
        }
    }
}


// ---------------------------------------------------------------- int4 strips
// The strips of matmul_int4.c (matmul_kernels.h). A vector holds one k of 16
// (8) rows, so every row's sum runs in its own lane in k order, as the fp32
// tiles run it; the weights are dequantized in registers: one load expands
// 16 codes of two k, their value (code - 8) comes from a table (AVX-512) or
// an integer subtract, then one FMA with the group's scale and zero point
// gives the weight (the product is exact), one more adds its product to the
// sum. One or two rows of x run the strip's 4 panels together (4 independent
// sums a row, enough to hide the FMA latency behind the dequantization); 3 to
// 8 rows take a panel at a time, each weight vector serving every row.
// How far ahead of the pair being read the strips fetch their codes: about a
// memory latency's worth of pairs.
#ifndef INT4_PREFETCH_BYTES
#define INT4_PREFETCH_BYTES 1536
#endif

// ---------------------------------------------------------------- AVX-512
// One k of the 4 panels from its nibble (hi: the high one) with rows of x
// broadcast in xk (and xk1 when two).
#define INT4_ONE_K(codes, hi)                                                                                     \
    for (int q = 0; q < 4; q++) {                                                                              \
        __m512i c = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)((codes) + q * 16)));                \
        if (hi) c = _mm512_srli_epi32(c, 4);                                                                   \
        const __m512 v = _mm512_fmadd_ps(_mm512_permutexvar_ps(c, values), sc[q], ze[q]);                     \
        a0[q] = _mm512_fmadd_ps(v, xk, a0[q]);                                                                 \
        if (two) a1[q] = _mm512_fmadd_ps(v, xk1, a1[q]);                                                       \
    }

// Rows of x (two at most): the sums of the 4 panels, group by group, code pair by code pair.
__attribute__((always_inline, target("avx512f"))) static inline void
avx512_strip_body(const PackedWeight *w, int s, int k0, int k1, const float *x, ptrdiff_t ldx, const int two,
                  float *acc) {
    const __m512 values = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const int G = w->group;
    const float *x1 = x + ldx;
    __m512 a0[4], a1[4];
    for (int q = 0; q < 4; q++) a0[q] = a1[q] = _mm512_setzero_ps();
    int k = k0;
    while (k < k1) {
        const int g = k / G, end = (g + 1) * G < k1 ? (g + 1) * G : k1;
        const uint8_t *blk = int4_block(w, s, g), *pairs = blk + INT4_PARAM_BYTES;
        const int kg = g * G;   // the group's first k: its pair i is (kg + 2i, kg + 2i + 1)
        __m512 sc[4], ze[4];
        for (int q = 0; q < 4; q++) {
            sc[q] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + q * 32)));
            ze[q] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + 128 + q * 32)));
        }
        // A k that does not start a pair (an odd block boundary) alone, from its high nibble.
        if (k & 1) {
            const __m512 xk = _mm512_set1_ps(x[k]), xk1 = two ? _mm512_set1_ps(x1[k]) : xk;
            INT4_ONE_K(pairs + (size_t)((k - kg) / 2) * 64, 1)
            k++;
        }
        for (; k + 1 < end; k += 2) {
            const __m512 x0 = _mm512_set1_ps(x[k]), x0n = _mm512_set1_ps(x[k + 1]);
            const __m512 y0 = two ? _mm512_set1_ps(x1[k]) : x0, y0n = two ? _mm512_set1_ps(x1[k + 1]) : x0n;
            const uint8_t *pair = pairs + (size_t)((k - kg) / 2) * 64;
            // The strip is one stream; the hardware prefetcher alone leaves
            // each load waiting on memory.
            _mm_prefetch((const char *)(pair + INT4_PREFETCH_BYTES), _MM_HINT_T0);
            #pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                // permutexvar reads the low 4 bits of each lane: the low nibble as it is.
                const __m512i c = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pair + q * 16)));
                const __m512 v0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(c, values), sc[q], ze[q]);
                const __m512 v1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), values), sc[q], ze[q]);
                a0[q] = _mm512_fmadd_ps(v0, x0, a0[q]);
                a0[q] = _mm512_fmadd_ps(v1, x0n, a0[q]);
                if (two) {
                    a1[q] = _mm512_fmadd_ps(v0, y0, a1[q]);
                    a1[q] = _mm512_fmadd_ps(v1, y0n, a1[q]);
                }
            }
        }
        if (k < end) {   // the first of a pair, where the block ends
            const __m512 xk = _mm512_set1_ps(x[k]), xk1 = two ? _mm512_set1_ps(x1[k]) : xk;
            INT4_ONE_K(pairs + (size_t)((k - kg) / 2) * 64, 0)
            k++;
        }
    }
    for (int q = 0; q < 4; q++) {
        _mm512_storeu_ps(acc + q * 16, a0[q]);
        if (two) _mm512_storeu_ps(acc + INT4_STRIP_ROWS + q * 16, a1[q]);
    }
}
#undef INT4_ONE_K

// R rows of x (3 to 8) against panel q of the strip: each dequantized vector
// serves R sums, so one panel at a time has enough of them in flight. xt is
// x transposed, xt[(k - k0) * 8 + r]: every broadcast one pointer away.
__attribute__((always_inline, target("avx512f"))) static inline void
avx512_panel_rows(const PackedWeight *w, int s, int q, int k0, int k1, const float *xt, const int R, float *acc) {
    const __m512 values = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const int G = w->group;
    __m512 a[8];
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    int k = k0;
    while (k < k1) {
        const int g = k / G, end = (g + 1) * G < k1 ? (g + 1) * G : k1, kg = g * G;
        const uint8_t *blk = int4_block(w, s, g), *pairs = blk + INT4_PARAM_BYTES + q * 16;
        const __m512 sc = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + q * 32)));
        const __m512 ze = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + 128 + q * 32)));
        for (; k < end; k++) {
            if (!(k & 1) && k + 1 < end) {   // a whole pair
                const uint8_t *pair = pairs + (size_t)((k - kg) / 2) * 64;
                _mm_prefetch((const char *)(pair + INT4_PREFETCH_BYTES), _MM_HINT_T0);
                const __m512i c = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)pair));
                const __m512 v0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(c, values), sc, ze);
                const __m512 v1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), values), sc, ze);
                const float *xk = xt + (size_t)(k - k0) * 8;
                #pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    a[r] = _mm512_fmadd_ps(v0, _mm512_set1_ps(xk[r]), a[r]);
                    a[r] = _mm512_fmadd_ps(v1, _mm512_set1_ps(xk[8 + r]), a[r]);
                }
                k++;
                continue;
            }
            __m512i c = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pairs + (size_t)((k - kg) / 2) * 64)));
            if (k & 1) c = _mm512_srli_epi32(c, 4);
            const __m512 v = _mm512_fmadd_ps(_mm512_permutexvar_ps(c, values), sc, ze);
            for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(v, _mm512_set1_ps(xt[(size_t)(k - k0) * 8 + r]), a[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(acc + r * INT4_STRIP_ROWS + q * 16, a[r]);
}

#define INT4_PANEL_ROWS(R)                                                                                        \
    case R:                                                                                                    \
        for (int q = 0; q < 4; q++) avx512_panel_rows(w, s, q, k0, k1, xt, R, acc);                           \
        break;

__attribute__((target("avx512f"))) void matmul_int4_strip_avx512(const PackedWeight *w, int s, int k0, int k1,
                                                                 const float *x, ptrdiff_t ldx, int n, float *acc) {
    float xt[INT4_MAX_K * 8] __attribute__((aligned(64)));
    if (n > 2) {
        if (k1 - k0 > INT4_MAX_K) die("matmul_int4_strip_avx512: %d k in one call (at most %d)", k1 - k0, INT4_MAX_K);
        for (int k = k0; k < k1; k++)
            for (int r = 0; r < n; r++) xt[(size_t)(k - k0) * 8 + r] = x[r * ldx + k];
    }
    switch (n) {
    case 1: avx512_strip_body(w, s, k0, k1, x, ldx, 0, acc); break;
    case 2: avx512_strip_body(w, s, k0, k1, x, ldx, 1, acc); break;
    INT4_PANEL_ROWS(3) INT4_PANEL_ROWS(4) INT4_PANEL_ROWS(5) INT4_PANEL_ROWS(6) INT4_PANEL_ROWS(7) INT4_PANEL_ROWS(8)
    default: die("matmul_int4_strip_avx512: %d rows (1 to %d)", n, INT4_KERNEL_ROWS);
    }
}
#undef INT4_PANEL_ROWS

// ---------------------------------------------------------------- AVX2
// Half a panel (8 rows) a vector; the value of a code by integer subtract and
// conversion (an 8-float table holds half the codes); the group's fp16
// parameters converted on the way in (F16C is not part of the AVX2 check).
__attribute__((always_inline, target("avx2,fma"))) static inline __m256 avx2_value(__m256i c, __m256 sc, __m256 ze) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(c, _mm256_set1_epi32(15)),
                                                         _mm256_set1_epi32(8)));
    return _mm256_fmadd_ps(v, sc, ze);
}

__attribute__((target("avx2,fma"))) void matmul_int4_strip_avx2(const PackedWeight *w, int s, int k0, int k1,
                                                               const float *x, ptrdiff_t ldx, int n, float *acc) {
    const int G = w->group;
    // Two passes of 4 panel halves each keep the sums of one row of x in 4 registers.
    for (int half = 0; half < 2; half++)
        for (int i = 0; i < n; i++) {
            const float *xi = x + i * ldx;
            __m256 a[4];
            for (int q = 0; q < 4; q++) a[q] = _mm256_setzero_ps();
            for (int k = k0; k < k1;) {
                const int g = k / G, end = (g + 1) * G < k1 ? (g + 1) * G : k1;
                const uint8_t *blk = int4_block(w, s, g), *pairs = blk + INT4_PARAM_BYTES;
                const int kg = g * G;   // the group's first k: its pair i is (kg + 2i, kg + 2i + 1)
                const uint16_t *h = (const uint16_t *)blk;
                float p[2][4][8];
                for (int q = 0; q < 4; q++)
                    for (int j = 0; j < 8; j++) {
                        p[0][q][j] = f16_to_f32(h[q * 16 + half * 8 + j]);
                        p[1][q][j] = f16_to_f32(h[INT4_STRIP_ROWS + q * 16 + half * 8 + j]);
                    }
                __m256 sc[4], ze[4];
                for (int q = 0; q < 4; q++) {
                    sc[q] = _mm256_loadu_ps(p[0][q]);
                    ze[q] = _mm256_loadu_ps(p[1][q]);
                }
                for (; k < end; k++) {
                    const __m256 xk = _mm256_set1_ps(xi[k]);
                    const uint8_t *pair = pairs + (size_t)((k - kg) / 2) * 64 + half * 8;
                    #pragma GCC unroll 4
                    for (int q = 0; q < 4; q++) {
                        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(pair + q * 16)));
                        if (k & 1) c = _mm256_srli_epi32(c, 4);
                        a[q] = _mm256_fmadd_ps(avx2_value(c, sc[q], ze[q]), xk, a[q]);
                    }
                }
            }
            for (int q = 0; q < 4; q++) _mm256_storeu_ps(acc + i * INT4_STRIP_ROWS + q * 16 + half * 8, a[q]);
        }
}

// ---------------------------------------------------------------- the kernels
// Without vdpbf16ps, a bf16 product is worth as much as an fp32 FMA: the fp32
// tiles over bf16-rounded operands ("+round") run at the fp32 speed, where
// the portable bf16 kernel (widening in its inner loop) runs at half of it.
static const MatmulBf16Kernel kernel_avx512_round, kernel_avx2_round;
static const MatmulKernel kernel_avx512 = {"avx512", 16, AVX512_MR, AVX512_NR, avx512_tile, avx512_pack_t, 0,
                                           &kernel_avx512_round, 1, matmul_int4_strip_avx512};
static const MatmulKernel kernel_avx2 = {"avx2+fma", 8, AVX2_MR, AVX2_NR, avx2_tile, avx2_pack_t, 1,
                                         &kernel_avx2_round, 1, matmul_int4_strip_avx2};
static const MatmulBf16Kernel kernel_avx512_round = {"avx512+round", AVX512_MR, AVX512_NR, NULL, NULL, &kernel_avx512};
static const MatmulBf16Kernel kernel_avx2_round = {"avx2+round", AVX2_MR, AVX2_NR, NULL, NULL, &kernel_avx2};
static const MatmulBf16Kernel kernel_avx512bf16 = {"avx512bf16", BF16_MR, BF16_NR, avx512bf16_tile, avx512bf16_pack,
                                                   NULL};

const MatmulKernel *matmul_kernel_avx512(void) { return cpu_has_avx512() ? &kernel_avx512 : NULL; }
const MatmulKernel *matmul_kernel_avx2(void) { return cpu_has_avx2_fma() ? &kernel_avx2 : NULL; }
const MatmulBf16Kernel *matmul_bf16_kernel_avx512(void) { return cpu_has_avx512_bf16() ? &kernel_avx512bf16 : NULL; }
#else
const MatmulKernel *matmul_kernel_avx512(void) { return NULL; }
const MatmulKernel *matmul_kernel_avx2(void) { return NULL; }
const MatmulBf16Kernel *matmul_bf16_kernel_avx512(void) { return NULL; }
#endif
