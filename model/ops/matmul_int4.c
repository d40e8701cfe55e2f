// matmul_int4.c: products of a few rows (decoding) with int4 weights packed
// once (backend.h's pack_int4; the layout: matmul_kernels.h). The weights are
// dequantized in registers, half a byte read per weight where the float
// weights take four, and each output is summed exactly as the fp32 driver
// (matmul.c) sums it for out^T = W inp^T: k cut into the same blocks, each
// block's products added from 0 in k order as the device's fp32 tile adds
// them (FMA or not), the blocks then added in order. A weight's value
// (code - 8) * scale + zero has an exact product (a 4-bit integer times an
// fp16 value), so it rounds once whether fused or not: the products give the
// bits of matmul_forward on the dequantized weights, and `pocket generate
// --int4` decodes the same tokens with or without packing.
#include <math.h>
#include <omp.h>
#include <string.h>
#include "ops.h"
#include "matmul_kernels.h"
#include "../../util/util.h"

PackedWeight *matmul_int4_pack(Device *d, const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols,
                               const float *scale, const float *zero) {
    (void)d;
    PtError e;
    if (quant_check(q, rows, cols, "matmul_int4_pack", &e)) die("%s", e.msg);
    if (rows > (1 << 30) || cols > (1 << 30))
        die("matmul_int4_pack: a [%lld, %lld] weight is too large", (long long)rows, (long long)cols);
    PackedWeight *w = xcalloc(1, sizeof *w, "packed int4 weight");
    const int S = INT4_STRIP_ROWS, G = q->group, groups = (int)(cols / G);
    w->rows = (int)rows;
    w->cols = (int)cols;
    w->group = G;
    w->strips = (int)((rows + S - 1) / S);
    w->block_bytes = INT4_PARAM_BYTES + (size_t)G * 32;
    w->data = xaligned((size_t)w->strips * groups * w->block_bytes, "packed int4 weight");
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int s = 0; s < w->strips; s++)
        for (int g = 0; g < groups; g++) {
            uint8_t *blk = (uint8_t *)int4_block(w, s, g);
            uint16_t *sc = (uint16_t *)blk, *ze = sc + S;
            for (int j = 0; j < S; j++) {
                const int64_t r = (int64_t)s * S + j;
                const int real = r < rows;
                const float sv = real ? scale[r * groups + g] : 0.0f;
                const float zv = real && !q->symmetric ? zero[r * groups + g] : 0.0f;
                sc[j] = f32_to_f16(sv);
                ze[j] = f32_to_f16(zv);
                if (f16_to_f32(sc[j]) != sv || f16_to_f32(ze[j]) != zv)   // the grid keeps them fp16-exact
                    die("matmul_int4_pack: row %lld, group %d: scale %g or zero point %g is not an fp16 value",
                        (long long)r, g, sv, zv);
                const uint8_t *c = codes + r * cols + (int64_t)g * G;
                for (int i = 0; i < G / 2; i++)
                    blk[INT4_PARAM_BYTES + (size_t)i * 64 + j] =
                        real ? (uint8_t)(c[2 * i] | c[2 * i + 1] << 4) : QUANT_CODE_MID | QUANT_CODE_MID << 4;
            }
        }
    return w;
}

void matmul_int4_release(Device *d, PackedWeight *w) {
    (void)d;
    if (!w) return;
    free(w->data);
    free(w);
}

// One weight's value, as quant_dequant computes it.
static inline float int4_value(const PackedWeight *w, int s, int r, int k) {
    const int g = k / w->group, i = (k - g * w->group) / 2;
    const uint8_t *blk = int4_block(w, s, g);
    const uint8_t byte = blk[INT4_PARAM_BYTES + (size_t)i * 64 + r];
    const int code = k % 2 ? byte >> 4 : byte & 15;
    const uint16_t *sc = (const uint16_t *)blk, *ze = sc + INT4_STRIP_ROWS;
    return ((float)code - (float)QUANT_CODE_MID) * f16_to_f32(sc[r]) + f16_to_f32(ze[r]);
}

void matmul_int4_strip_c(const PackedWeight *w, int s, int k0, int k1, const float *x, ptrdiff_t ldx, int n,
                         float *acc, int fma) {
    for (int i = 0; i < n; i++)
        for (int r = 0; r < INT4_STRIP_ROWS; r++) {
            float a = 0.0f;
            for (int k = k0; k < k1; k++) {
                const float v = int4_value(w, s, r, k), xk = x[i * ldx + k];
                a = fma ? fmaf(v, xk, a) : a + v * xk;
            }
            acc[i * INT4_STRIP_ROWS + r] = a;
        }
}

// INT4_KERNEL_ROWS rows of x at a time through the strip kernel; each k
// block's sums are added to out as the fp32 tile stores them.
static void strip_forward(const MatmulKernel *kern, float *out, const float *inp, const PackedWeight *w, int N, int s,
                          int kblocks, int kc) {
    const int S = INT4_STRIP_ROWS, r0 = s * S, nr = w->rows - r0 < S ? w->rows - r0 : S;
    float acc[INT4_KERNEL_ROWS * INT4_STRIP_ROWS] __attribute__((aligned(64)));
    for (int b = 0; b < kblocks; b++) {
        const int k0 = b * kc, k1 = w->cols - k0 < kc ? w->cols : k0 + kc;
        for (int n0 = 0; n0 < N; n0 += INT4_KERNEL_ROWS) {
            const int n = N - n0 < INT4_KERNEL_ROWS ? N - n0 : INT4_KERNEL_ROWS;
            const float *x = inp + (size_t)n0 * w->cols;
            if (kern->int4) kern->int4(w, s, k0, k1, x, w->cols, n, acc);
            else matmul_int4_strip_c(w, s, k0, k1, x, w->cols, n, acc, kern->fma);
            for (int i = 0; i < n; i++) {
                float *o = out + (size_t)(n0 + i) * w->rows + r0;
                const float *a = acc + i * S;
                if (b == 0) memcpy(o, a, (size_t)nr * sizeof(float));
                else
                    for (int r = 0; r < nr; r++) o[r] = o[r] + a[r];
            }
        }
    }
}

void matmul_int4_forward(Device *d, float *out, const float *inp, const PackedWeight *w, int N) {
    if (N < 1 || N > PACKED_MAX_ROWS || 4 * N > w->rows)
        die("matmul_int4_forward: %d rows against a weight of %d outputs (at most %d rows, and 4 rows per output)", N,
            w->rows, PACKED_MAX_ROWS);
    const MatmulKernel *kern = cpu_kernels(d)->f32;
    int kc;
    const int kblocks = matmul_k_blocks(w->cols, 1, &kc);
    if (kc > INT4_MAX_K) die("matmul_int4_forward: k blocks of %d exceed the strips' %d", kc, INT4_MAX_K);
    int threads = omp_in_parallel() ? 1 : d->threads;
    if (threads > w->strips) threads = w->strips;
    if (2.0 * w->rows * N * w->cols < 1e5) threads = 1;   // a fork costs more than it saves
    // Strips in turn to whichever thread is free: each is an independent
    // stream of codes, so the split does not change a bit.
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int s = 0; s < w->strips; s++) strip_forward(kern, out, inp, w, N, s, kblocks, kc);
}
