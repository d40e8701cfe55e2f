// test_matmul: the matmul of every device (test_backends.h: the CPU once per
// kernel set this CPU runs; 1 to 3 threads) against the double-precision
// reference, on shapes that are not multiples of any tile or block size; the
// reference itself against hand arithmetic and central differences. The
// MATMUL_BF16 products against the same reference run on the bf16-rounded
// operands: a product of two bf16 values is exact in fp32, so only the fp32
// accumulation differs and the fp32 tolerance applies. The CPU's bf16
// kernels: their rounding against hand-worked cases and util's converter;
// both kernels' packs give the same bits.
//
// Tolerance: the fast ops sum K fp32 products, so their rounding error grows
// like sqrt(K) * u for random-sign data (u = 2^-24). We compare the normwise
// relative error max|got - want| / max|want| with TOL_PER_SQRT_K * sqrt(K),
// about 16 u per sqrt(K) (measured errors sit more than 10x below it); a
// wrong index or a lost edge tile gives errors of order 1.
//
// A GPU device (cuBLASLt) is held to max(that, 1e-5) in fp32. In bf16 its
// products are exact as on the CPU (bf16 x bf16 fits in fp32), but the tensor
// cores add them into the fp32 accumulator with their own alignment and
// rounding (truncation, not round-to-nearest, at each block of additions), so
// each of the at most K additions may lose up to one fp32 ulp of the partial
// sum, 2^-23 relative, all in the same direction: a bound linear in K,
// K * 2^-23 normwise (partial sums of random-sign data stay below the largest
// output in magnitude, up to a small factor the 1e-5 floor covers). That is
// still far below a bf16 rounding of the operands (2^-9 relative per
// operand), which test_precision_selects_products tells apart.
//
// The BFDOT kernel (neonbf16: AArch64 with FEAT_BF16) does not add as fp32
// does. The Arm ARM (BFDOT; FEAT_EBF16 absent or FPCR.EBF = 0, Linux's
// default) has each instruction round the sum of one k pair's two products
// (exact for bf16 operands) and then that sum's addition to the accumulator,
// both to fp32 with round-to-odd (an inexact result's last bit set), with
// denormal inputs and results flushed to zero. test_bfdot_tile_bits holds
// the tile to exactly that, bit for bit. Normwise: round-to-odd errs by
// less than one ulp of its result, 2^-23 relative (not half), and a sum of K
// products takes K/2 instructions of two roundings each; with the GPU's
// argument (pair sums and partial sums stay below the largest output, up to
// a small factor) the error is below K * 2^-23 of the largest output, plus
// the driver's own fp32 additions (its k blocks' partial sums into C, the
// accumulate into dinp and dW), which the fp32 tolerance covers.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#include "../util/util.h"
#include "test_backends.h"


#define TOL_PER_SQRT_K 1e-6

static double tol_for(int K) { return TOL_PER_SQRT_K * sqrt(K > 1 ? (double)K : 1.0); }

// The bound of device td for a sum of K products in precision p (see the top).
static double tol_dev(const TestDevice *td, MatmulPrecision p, int K) {
    const MatmulBf16Kernel *bfdot = matmul_bf16_kernel_neon();
    if (!td->gpu && p == MATMUL_BF16 && bfdot && cpu_kernels(&td->dev)->bf16 == bfdot) return tol_for(K) + K * 0x1p-23;
    if (!td->gpu) return tol_for(K);
    const double gpu = p == MATMUL_BF16 ? fmax(1e-5, K * 0x1p-23) : 1e-5;
    return fmax(tol_for(K), gpu);
}

// Random N(0,1) values, exactly representable in float, as a double array and
// its float copy.
static void rand_pair(Rng *r, size_t n, double **d, float **f) {
    *d = xmalloc((n ? n : 1) * sizeof(double), "test double");
    *f = xmalloc((n ? n : 1) * sizeof(float), "test float");
    for (size_t i = 0; i < n; i++) {
        (*f)[i] = (float)rng_normal(r);
        (*d)[i] = (*f)[i];
    }
}

static double rel_err(const float *got, const double *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > mag) mag = fabs(want[i]);
    }
    return mag > 0.0 ? diff / mag : diff;
}

typedef struct { int N, C, OC; } Shape;

// Small and odd sizes, sizes just past the 8x32 / 6x16 / 4x16 tiles, columns
// past the 256-column B block, K past the 512 k block (forward K = C, dinp
// K = OC, dW K = N), rows past the 1024-row packed A block (dW M = OC), OC >=
// 4N (the transposed forward; with C = 700 in a single k block), 4 KiB row strides (C or OC = 1024) that push
// the driver from in-place reads to packing, a shared operand wider than the
// 1024-column shared chunk ({1030, 2, 4128} forward) and a packed shared
// operand over more k blocks than one 8-block span ({16, 40, 5120} dinp; for
// the bf16 driver's 1024-long k blocks {8, 24, 9000} dinp).
static const Shape SHAPES[] = {
    {1, 1, 1},      {1, 3, 17},     {3, 17, 1},    {17, 65, 130}, {65, 130, 257}, {130, 257, 65},
    {257, 33, 3},   {5, 600, 7},    {1030, 9, 5},  {7, 13, 1100}, {9, 1100, 40},  {33, 31, 300},
    {20, 1024, 40}, {16, 40, 1024}, {64, 96, 128}, {40, 64, 2048}, {6, 700, 30},  {1030, 2, 4128},
    {16, 40, 5120}, {8, 24, 9000},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

typedef struct {
    Shape s;
    double *inp_d, *W_d, *dout_d, *dinp0_d, *dW0_d;
    float *inp, *W, *dout, *dinp0, *dW0;
    double *out_ref, *dinp_ref, *dW_ref;   // dinp0 + dout W, dW0 + dout^T inp
} Case;

// The double operands of the reference become the bf16-rounded values (the
// float operands stay as they are: the kernel rounds them itself).
static void round_to_bf16(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = bf16_to_f32(f32_to_bf16(f[i]));
}

// bf16: the reference multiplies bf16-rounded operands (the accumulators
// dinp0 and dW0 stay fp32).
static void case_init_p(Case *c, Shape s, uint64_t seed, int bf16) {
    Rng r;
    rng_seed(&r, seed);
    c->s = s;
    size_t nx = (size_t)s.N * s.C, nw = (size_t)s.OC * s.C, ny = (size_t)s.N * s.OC;
    rand_pair(&r, nx, &c->inp_d, &c->inp);
    rand_pair(&r, nw, &c->W_d, &c->W);
    rand_pair(&r, ny, &c->dout_d, &c->dout);
    rand_pair(&r, nx, &c->dinp0_d, &c->dinp0);   // nonzero: backward must add to it
    rand_pair(&r, nw, &c->dW0_d, &c->dW0);
    if (bf16) {
        round_to_bf16(c->inp_d, c->inp, nx);
        round_to_bf16(c->W_d, c->W, nw);
        round_to_bf16(c->dout_d, c->dout, ny);
    }
    c->out_ref = xmalloc(ny * sizeof(double), "out ref");
    matmul_forward_ref(c->out_ref, c->inp_d, c->W_d, s.N, s.C, s.OC);
    c->dinp_ref = xmalloc(nx * sizeof(double), "dinp ref");
    c->dW_ref = xmalloc(nw * sizeof(double), "dW ref");
    memcpy(c->dinp_ref, c->dinp0_d, nx * sizeof(double));
    memcpy(c->dW_ref, c->dW0_d, nw * sizeof(double));
    matmul_backward_ref(c->dinp_ref, c->dW_ref, c->dout_d, c->inp_d, c->W_d, s.N, s.C, s.OC);
}

static void case_init(Case *c, Shape s, uint64_t seed) { case_init_p(c, s, seed, 0); }

static void case_free(Case *c) {
    free(c->inp_d), free(c->W_d), free(c->dout_d), free(c->dinp0_d), free(c->dW0_d);
    free(c->inp), free(c->W), free(c->dout), free(c->dinp0), free(c->dW0);
    free(c->out_ref), free(c->dinp_ref), free(c->dW_ref);
}

static float *copy_f(const float *x, size_t n) {
    float *y = xmalloc((n ? n : 1) * sizeof(float), "test copy");
    memcpy(y, x, n * sizeof(float));
    return y;
}

// Runs forward and the backward variants (both grads, dinp only, dW only) on
// device td in precision p and checks each against the reference.
static void check_case(TestDevice *td, MatmulPrecision p, const Case *c) {
    Device *d = &td->dev;
    const Shape s = c->s;
    size_t nx = (size_t)s.N * s.C, nw = (size_t)s.OC * s.C, ny = (size_t)s.N * s.OC;
    char where[160];
    snprintf(where, sizeof where, "%s %s threads=%d N=%d C=%d OC=%d", td->name, p == MATMUL_BF16 ? "bf16" : "fp32",
             d->threads, s.N, s.C, s.OC);

    const double tol_f = tol_dev(td, p, s.C), tol_dx = tol_dev(td, p, s.OC), tol_dw = tol_dev(td, p, s.N);
    const size_t xb = nx * sizeof(float), wb = nw * sizeof(float), yb = ny * sizeof(float);
    float *out = xmalloc(yb ? yb : 1, "out");
    for (size_t i = 0; i < ny; i++) out[i] = NAN;   // forward must overwrite every element
    float *dinp = copy_f(c->dinp0, nx), *dW = copy_f(c->dW0, nw);
    Mirrors mr = mirrors_on(d);
    const float *inp_d = mirror(&mr, c->inp, xb), *W_d = mirror(&mr, c->W, wb), *dout_d = mirror(&mr, c->dout, yb);
    float *out_d = mirror(&mr, out, yb), *dinp_d = mirror(&mr, dinp, xb), *dW_d = mirror(&mr, dW, wb);
    OP(d, matmul_forward, out_d, inp_d, W_d, s.N, s.C, s.OC, p);
    fetch(d, out, out_d, yb);
    double e = rel_err(out, c->out_ref, ny);
    if (!(e <= tol_f)) fail_msg("forward %s: rel err %.3g > %.3g", where, e, tol_f);

    OP(d, matmul_backward, dinp_d, dW_d, dout_d, inp_d, W_d, s.N, s.C, s.OC, p);
    fetch(d, dinp, dinp_d, xb);
    fetch(d, dW, dW_d, wb);
    e = rel_err(dinp, c->dinp_ref, nx);
    if (!(e <= tol_dx)) fail_msg("dinp %s: rel err %.3g > %.3g", where, e, tol_dx);
    e = rel_err(dW, c->dW_ref, nw);
    if (!(e <= tol_dw)) fail_msg("dW %s: rel err %.3g > %.3g", where, e, tol_dw);

    // NULL gradients: the other one is still right, nothing else is touched.
    OP(d, upload, dinp_d, c->dinp0, xb);
    OP(d, matmul_backward, dinp_d, NULL, dout_d, inp_d, W_d, s.N, s.C, s.OC, p);
    fetch(d, dinp, dinp_d, xb);
    e = rel_err(dinp, c->dinp_ref, nx);
    if (!(e <= tol_dx)) fail_msg("dinp (dW NULL) %s: rel err %.3g", where, e);
    OP(d, upload, dW_d, c->dW0, wb);
    OP(d, matmul_backward, NULL, dW_d, dout_d, inp_d, W_d, s.N, s.C, s.OC, p);
    fetch(d, dW, dW_d, wb);
    e = rel_err(dW, c->dW_ref, nw);
    if (!(e <= tol_dw)) fail_msg("dW (dinp NULL) %s: rel err %.3g", where, e);
    OP(d, matmul_backward, NULL, NULL, dout_d, inp_d, W_d, s.N, s.C, s.OC, p);
    mirrors_free(&mr);

    free(out);
    free(dinp);
    free(dW);
}

// Every shape on every device at 1, 2 and 3 threads (3: an odd team). The
// ops run the device's thread count; the test workspace fits 3 threads.
static void check_precision(MatmulPrecision p) {
    for (size_t i = 0; i < N_SHAPES; i++) {
        Case c;
        case_init_p(&c, SHAPES[i], 1000 + i, p == MATMUL_BF16);
        for (int d = 0; d < n_devs; d++) {
            const int saved = devs[d].dev.threads;
            for (int threads = 1; threads <= (devs[d].gpu ? 1 : 3); threads++) {   // a GPU has no thread count
                devs[d].dev.threads = threads;
                check_case(&devs[d], p, &c);
            }
            devs[d].dev.threads = saved;
        }
        case_free(&c);
    }
    for (int d = 0; d < n_devs; d++) printf("  %-26s %s: %zu shapes x 1..3 threads pass\n", devs[d].name,
                                            p == MATMUL_BF16 ? "bf16" : "fp32", N_SHAPES);
}

static void test_fp32(void **state) { (void)state; check_precision(MATMUL_FP32); }
static void test_bf16(void **state) { (void)state; check_precision(MATMUL_BF16); }

static uint16_t bits16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// Rounding to bf16 by hand: 8 significant bits, ties to even; subnormals to
// signed zero; infinities kept; NaN stays NaN. Normal values agree with
// util's converter (written separately, round to nearest even).
static void test_bf16_rounding(void **state) {
    (void)state;
    const float one = 1.0f, ulp = 1.0f / 128;   // bf16 spacing at 1
    assert_int_equal(matmul_bf16_round(one), bits16(one));
    assert_int_equal(matmul_bf16_round(one + ulp / 2), bits16(one));                        // tie, 1 is even
    assert_int_equal(matmul_bf16_round(one + 3 * ulp / 2), bits16(one + 2 * ulp));          // tie, up to even
    assert_int_equal(matmul_bf16_round(one + ulp / 2 + ulp / 64), bits16(one + ulp));       // above the tie
    assert_int_equal(matmul_bf16_round(-(one + ulp / 2 - ulp / 64)), bits16(-one));         // below the tie
    assert_int_equal(matmul_bf16_round(from_bits(0x7f7fffffu)), 0x7f80);                   // FLT_MAX: up to inf
    assert_int_equal(matmul_bf16_round(INFINITY), 0x7f80);
    assert_int_equal(matmul_bf16_round(-INFINITY), 0xff80);
    assert_int_equal(matmul_bf16_round(from_bits(0x00400000u)), 0x0000);                   // subnormal
    assert_int_equal(matmul_bf16_round(from_bits(0x80000001u)), 0x8000);
    assert_int_equal(matmul_bf16_round(0.0f), 0x0000);
    assert_int_equal(matmul_bf16_round(-0.0f), 0x8000);
    uint16_t nan = matmul_bf16_round(from_bits(0x7f800001u));   // signalling NaN: low bits lost, made quiet
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x007f) != 0);
    Rng r;
    rng_seed(&r, 17);
    for (int i = 0; i < 100000; i++) {
        float x = (float)(rng_normal(&r) * pow(2.0, (double)(int)(rng_next(&r) % 200) - 100));
        assert_int_equal(matmul_bf16_round(x), f32_to_bf16(x));
    }
}

// n normal values with the cases bf16 rounding must get right mixed in:
// exact ties, subnormals, NaNs, values that round to infinity.
static float *special_values(Rng *r, int n) {
    float *src = xmalloc((size_t)n * sizeof(float), "pack src");
    for (int i = 0; i < n; i++) {
        float x = (float)rng_normal(r);
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        switch (rng_next(r) % 16) {
            case 0: u = (u & 0xffff0000u) | 0x8000u; break;        // exact tie
            case 1: u &= 0x807fffffu; break;                       // subnormal
            case 2: u = 0x7fc00000u | (u & 0x3fffffu); break;      // NaN
            case 3: u = (u & 0x80000000u) | 0x7f7fffffu; break;    // rounds to inf
            default: break;
        }
        memcpy(&src[i], &u, sizeof u);
    }
    return src;
}

// The fp32 kernels' vectorised transposing packs: a plain transposed copy,
// and with bf16 each value rounded as matmul_bf16_round does (what the
// "+round" bf16 kernels multiply), on ragged rows and kc and special values.
static void test_fp32_packs_round_exactly(void **state) {
    (void)state;
    const MatmulKernel *kernels[3] = {matmul_kernel_avx512(), matmul_kernel_avx2(), matmul_kernel_neon()};
    Rng r;
    rng_seed(&r, 29);
    const int rows_max = 40, kc_max = 45;
    float *src = special_values(&r, rows_max * kc_max);
    float *dst = xmalloc((size_t)32 * kc_max * sizeof(float), "pack dst");
    int checked = 0;
    for (int ki = 0; ki < 3; ki++) {
        const MatmulKernel *kern = kernels[ki];
        if (!kern || !kern->pack_t) continue;
        const int widths[2] = {kern->mr, kern->nr};
        for (int wi = 0; wi < 2; wi++)
            for (int rows = 1; rows <= widths[wi]; rows++)
                for (int kc = 1; kc <= kc_max; kc += 4)
                    for (int bf16 = 0; bf16 <= 1; bf16++) {
                        kern->pack_t(dst, widths[wi], src, kc_max, rows, kc, bf16);
                        for (int k = 0; k < kc; k++)
                            for (int j = 0; j < widths[wi]; j++) {
                                uint32_t got, want = 0;
                                memcpy(&got, &dst[k * widths[wi] + j], sizeof got);
                                if (j < rows) {
                                    memcpy(&want, &src[j * kc_max + k], sizeof want);
                                    if (bf16) want = (uint32_t)matmul_bf16_round(src[j * kc_max + k]) << 16;
                                }
                                if (got != want)
                                    fail_msg("%s pack_t width %d rows %d kc %d bf16 %d: (%d, %d) is %08x, not %08x",
                                             kern->name, widths[wi], rows, kc, bf16, k, j, got, want);
                            }
                        checked++;
                    }
    }
    if (!checked) skip();
    free(src), free(dst);
}

// The AVX512_BF16 and BFDOT kernels' packs give the portable pack's bits,
// on both vectorised source layouts (k contiguous, index contiguous) and a
// strided one, with ragged widths, odd kc and special values.
static void test_bf16_packs_agree(void **state) {
    (void)state;
    const MatmulBf16Kernel *fast = matmul_bf16_kernel_avx512(), *port = matmul_bf16_kernel_portable();
    if (!fast) fast = matmul_bf16_kernel_neon();
    if (!fast) {
        skip();
        return;
    }
    Rng r;
    rng_seed(&r, 23);
    const int rows_max = 70, kc_max = 77;
    float *src = special_values(&r, rows_max * kc_max * 3);
    // Panels are `stride` apart (more than one panel's kc, as in the driver's
    // last k block); the gap between them must stay untouched.
    const ptrdiff_t stride_max = (ptrdiff_t)rows_max * (kc_max + 3);
    uint16_t *a = xmalloc((size_t)stride_max * rows_max * sizeof(uint16_t), "pack a");
    uint16_t *b = xmalloc((size_t)stride_max * rows_max * sizeof(uint16_t), "pack b");
    const int widths[] = {8, 32, 4, 16, 12};
    for (int wi = 0; wi < 5; wi++)
        for (int rows = 1; rows <= rows_max; rows += 3)
            for (int kc = 1; kc <= kc_max; kc += 7) {
                const ptrdiff_t strides[3][2] = {{kc_max, 1}, {1, rows_max}, {2 * kc_max, 3}};   // (s_idx, s_k)
                const ptrdiff_t panel_stride = (ptrdiff_t)widths[wi] * (kc + (kc & 1) + 2);
                const size_t n = (size_t)panel_stride * ((rows + widths[wi] - 1) / widths[wi]);
                for (int st = 0; st < 3; st++) {
                    memset(a, 0xAB, n * sizeof(uint16_t));
                    memset(b, 0xAB, n * sizeof(uint16_t));
                    fast->pack(a, widths[wi], panel_stride, src, strides[st][0], strides[st][1], rows, kc);
                    port->pack(b, widths[wi], panel_stride, src, strides[st][0], strides[st][1], rows, kc);
                    if (memcmp(a, b, n * sizeof(uint16_t)))
                        fail_msg("%s packs differ: width %d rows %d kc %d strides %td,%td", fast->name, widths[wi],
                                 rows, kc, strides[st][0], strides[st][1]);
                    for (size_t i = 0; i < n; i++)   // the gap after each panel's pairs is not written
                        if ((ptrdiff_t)(i % panel_stride) >= (ptrdiff_t)widths[wi] * (kc + (kc & 1)) && a[i] != 0xABAB)
                            fail_msg("pack wrote past a panel: width %d rows %d kc %d", widths[wi], rows, kc);
                }
            }
    free(src), free(a), free(b);
}

// x + y rounded to fp32 as BFDOT rounds (Arm ARM): round-to-odd, denormal
// results to signed zero. The exact sum is s + e (TwoSum in double: exact
// for any two floats); its truncation toward zero with the last bit set when
// inexact is round-to-odd.
static float add_round_odd(float x, float y) {
    const double s = (double)x + (double)y, bv = s - x, e = ((double)x - (s - bv)) + ((double)y - bv);
    float t = (float)s;
    if (fabs((double)t) > fabs(s)) t = nextafterf(t, 0.0f);   // s truncated toward zero
    int inexact = (double)t != s;
    if (!inexact && e != 0.0) {
        inexact = 1;
        if ((e < 0) != (s < 0)) t = nextafterf(t, 0.0f);   // s + e lies just inside t
    }
    uint32_t u;
    memcpy(&u, &t, sizeof u);
    if (inexact) u |= 1;
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&t, &u, sizeof u);
    return t;
}

// The BFDOT tile, bit for bit, against BFDOT's arithmetic done by hand
// (add_round_odd; the top of this file): per k pair, acc = acc + (a0 b0 +
// a1 b1), both additions rounded to odd, then C = acc or C + acc (fp32).
// Operands of mixed magnitudes, so the roundings are inexact often; ragged
// tiles (only the mr x nr corner of C written), odd kc (the zero pad).
// Plain fp32 sums differ from these bits in many places, so a tile that
// added otherwise would fail.
static void test_bfdot_tile_bits(void **state) {
    (void)state;
    const MatmulBf16Kernel *k = matmul_bf16_kernel_neon();
    if (!k) {
        skip();
        return;
    }
    enum { KC_MAX = 64, LDC = 17 };
    const int MR = k->mr, NR = k->nr;
    Rng r;
    rng_seed(&r, 31);
    float *a = xmalloc((size_t)MR * KC_MAX * sizeof(float), "a");
    float *b = xmalloc((size_t)NR * KC_MAX * sizeof(float), "b");
    for (int i = 0; i < MR * KC_MAX; i++) a[i] = (float)ldexp(rng_normal(&r), (int)(rng_next(&r) % 9) - 4);
    for (int i = 0; i < NR * KC_MAX; i++) b[i] = (float)ldexp(rng_normal(&r), (int)(rng_next(&r) % 9) - 4);
    uint16_t *pa = xmalloc((size_t)MR * KC_MAX * sizeof(uint16_t), "pa");
    uint16_t *pb = xmalloc((size_t)NR * KC_MAX * sizeof(uint16_t), "pb");
    float c[8 * LDC], c0[8 * LDC];
    assert_true(MR <= 8 && NR <= LDC);
    for (int i = 0; i < 8 * LDC; i++) c0[i] = (float)rng_normal(&r);
    const int kcs[] = {1, 2, 3, 8, 17, 64};
    int differs_from_fp32 = 0;
    for (int ki = 0; ki < 6; ki++) {
        const int kc = kcs[ki];
        // A(i, k) = a[i*KC_MAX + k], B(k, j) = b[j*KC_MAX + k]: k contiguous.
        k->pack(pa, MR, (ptrdiff_t)MR * KC_MAX, a, KC_MAX, 1, MR, kc);
        k->pack(pb, NR, (ptrdiff_t)NR * KC_MAX, b, KC_MAX, 1, NR, kc);
        for (int shape = 0; shape < 2; shape++)
            for (int accumulate = 0; accumulate <= 1; accumulate++) {
                const int mr = shape ? 3 : MR, nr = shape ? 5 : NR;
                memcpy(c, c0, sizeof c);
                const MatmulBf16Tile t = {kc + (kc & 1), pa, pb, c, LDC, mr, nr, accumulate};
                k->tile(&t);
                for (int i = 0; i < 8; i++)
                    for (int j = 0; j < LDC; j++) {
                        float want = c0[i * LDC + j], acc = 0.0f, acc_fp32 = 0.0f;
                        if (i < mr && j < nr) {
                            for (int q = 0; q < (kc + 1) / 2; q++) {
                                float p[2] = {0.0f, 0.0f};
                                for (int h = 0; h < 2 && 2 * q + h < kc; h++)
                                    p[h] = bf16_to_f32(f32_to_bf16(a[i * KC_MAX + 2 * q + h])) *
                                           bf16_to_f32(f32_to_bf16(b[j * KC_MAX + 2 * q + h]));
                                acc = add_round_odd(acc, add_round_odd(p[0], p[1]));
                                acc_fp32 = acc_fp32 + (p[0] + p[1]);
                            }
                            differs_from_fp32 += acc != acc_fp32;
                            want = accumulate ? want + acc : acc;
                        }
                        uint32_t got_bits, want_bits;
                        memcpy(&got_bits, &c[i * LDC + j], sizeof got_bits);
                        memcpy(&want_bits, &want, sizeof want_bits);
                        if (got_bits != want_bits)
                            fail_msg("%s tile kc %d mr %d nr %d accumulate %d: C(%d, %d) is %08x (%.9g), BFDOT gives "
                                     "%08x (%.9g)", k->name, kc, mr, nr, accumulate, i, j, got_bits, c[i * LDC + j],
                                     want_bits, want);
                    }
            }
    }
    printf("  %s tile: every element BFDOT's bits; %d of them differ from plain fp32 sums\n", k->name,
           differs_from_fp32);
    assert_true(differs_from_fp32 > 0);
    free(a), free(b), free(pa), free(pb);
}

// POCKET_KERNELS names the BFDOT kernel "neonbf16": where the CPU has
// FEAT_BF16 it is the default and the neon set's own, "neon/neonbf16" forces
// it and "neon/neon" takes the fp32 tiles over rounded operands instead; where
// it has none, the name is refused as one this CPU cannot run.
static void test_bfdot_by_name(void **state) {
    (void)state;
    const MatmulBf16Kernel *bfdot = matmul_bf16_kernel_neon();
    CpuKernels k;
    PtError e;
    if (bfdot) {
        assert_ptr_equal(matmul_bf16_kernel_best(), bfdot);
        assert_int_equal(cpu_kernels_named(&k, "neon", &e), 0);
        assert_ptr_equal(k.bf16, bfdot);
        assert_int_equal(cpu_kernels_named(&k, "portable/neonbf16", &e), 0);
        assert_ptr_equal(k.bf16, bfdot);
        char line[256];
        cpu_kernels_describe(&k, line, sizeof line);
        assert_non_null(strstr(line, "bf16 neonbf16 (bfdot)"));
        assert_null(cpu_kernels_bf16_notice(&k));
        assert_int_equal(cpu_kernels_named(&k, "neon/neon", &e), 0);
        assert_string_equal(k.bf16->name, "neon+round");
    } else {
        assert_int_not_equal(cpu_kernels_named(&k, "portable/neonbf16", &e), 0);
        assert_non_null(strstr(e.msg, "this CPU cannot run the bf16 kernel 'neonbf16'"));
    }
    assert_int_not_equal(cpu_kernels_named(&k, "portable/neonbf15", &e), 0);
    assert_non_null(strstr(e.msg, "unknown bf16 kernel 'neonbf15'"));
}

// MATMUL_BF16 is the bf16 path (not fp32): against the reference on
// unrounded operands its error is of bf16 size, far above the fp32
// tolerance, while against the rounded-operand reference it is within it;
// MATMUL_FP32 meets the fp32 tolerance on the unrounded operands.
static void test_precision_selects_products(void **state) {
    (void)state;
    Case c, exact;
    const Shape s = {70, 300, 90};
    case_init_p(&c, s, 7, 1);
    case_init_p(&exact, s, 7, 0);
    size_t nx = (size_t)s.N * s.C, ny = (size_t)s.N * s.OC;
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        const TestDevice *td = &devs[d];
        float *o = xmalloc(ny * sizeof(float), "o"), *o2 = xmalloc(ny * sizeof(float), "o2");
        float *dx = copy_f(c.dinp0, nx);
        Mirrors mr = mirrors_on(dev);
        const float *inp_d = mirror(&mr, c.inp, nx * sizeof(float));
        const float *W_d = mirror(&mr, c.W, (size_t)s.OC * s.C * sizeof(float));
        const float *dout_d = mirror(&mr, c.dout, ny * sizeof(float));
        float *o_d = mirror(&mr, o, ny * sizeof(float)), *o2_d = mirror(&mr, o2, ny * sizeof(float));
        float *dx_d = mirror(&mr, dx, nx * sizeof(float));
        OP(dev, matmul_forward, o_d, inp_d, W_d, s.N, s.C, s.OC, MATMUL_BF16);
        OP(dev, matmul_forward, o2_d, inp_d, W_d, s.N, s.C, s.OC, MATMUL_FP32);
        OP(dev, matmul_backward, dx_d, NULL, dout_d, inp_d, W_d, s.N, s.C, s.OC, MATMUL_BF16);
        fetch(dev, o, o_d, ny * sizeof(float));
        fetch(dev, o2, o2_d, ny * sizeof(float));
        fetch(dev, dx, dx_d, nx * sizeof(float));
        mirrors_free(&mr);
        double e_rounded = rel_err(o, c.out_ref, ny), e_exact = rel_err(o, exact.out_ref, ny);
        if (!(e_rounded <= tol_dev(td, MATMUL_BF16, s.C) && e_exact > 20 * tol_for(s.C)))
            fail_msg("%s: bf16 forward is not the bf16 product: rel err %.3g (rounded operands), %.3g (exact)",
                     devs[d].name, e_rounded, e_exact);
        if (!(rel_err(o2, exact.out_ref, ny) <= tol_dev(td, MATMUL_FP32, s.C))) fail_msg("%s: fp32 forward", devs[d].name);
        if (!(rel_err(dx, c.dinp_ref, nx) <= tol_dev(td, MATMUL_BF16, s.OC))) fail_msg("%s: bf16 dinp", devs[d].name);
        printf("  %-26s bf16 forward: rel err %.1e on bf16 operands, %.1e against fp32 (bf16 size)\n",
               devs[d].name, e_rounded, e_exact);
        free(o), free(o2), free(dx);
    }
    case_free(&c);
    case_free(&exact);
}

// A second call gives the same bits again (no run-to-run drift, e.g. from
// scratch left in the workspace by the first).
static void test_same_bits_twice(void **state) {
    (void)state;
    Case c;
    case_init(&c, (Shape){70, 300, 90}, 7);
    const Shape s = c.s;
    size_t nx = (size_t)s.N * s.C, nw = (size_t)s.OC * s.C, ny = (size_t)s.N * s.OC;
    for (int d = 0; d < n_devs; d++)
        for (int p = MATMUL_FP32; p <= MATMUL_BF16; p++) {
            Device *dev = &devs[d].dev;
            float *o1 = xmalloc(ny * sizeof(float), "o1"), *o2 = xmalloc(ny * sizeof(float), "o2");
            float *dx1 = copy_f(c.dinp0, nx), *dx2 = copy_f(c.dinp0, nx);
            float *dw1 = copy_f(c.dW0, nw), *dw2 = copy_f(c.dW0, nw);
            const size_t xb = nx * sizeof(float), wb = nw * sizeof(float), yb = ny * sizeof(float);
            Mirrors mr = mirrors_on(dev);
            const float *inp_d = mirror(&mr, c.inp, xb), *W_d = mirror(&mr, c.W, wb);
            const float *dout_d = mirror(&mr, c.dout, yb);
            float *o1_d = mirror(&mr, o1, yb), *o2_d = mirror(&mr, o2, yb), *dx1_d = mirror(&mr, dx1, xb);
            float *dx2_d = mirror(&mr, dx2, xb), *dw1_d = mirror(&mr, dw1, wb), *dw2_d = mirror(&mr, dw2, wb);
            OP(dev, matmul_forward, o1_d, inp_d, W_d, s.N, s.C, s.OC, p);
            OP(dev, matmul_forward, o2_d, inp_d, W_d, s.N, s.C, s.OC, p);
            OP(dev, matmul_backward, dx1_d, dw1_d, dout_d, inp_d, W_d, s.N, s.C, s.OC, p);
            OP(dev, matmul_backward, dx2_d, dw2_d, dout_d, inp_d, W_d, s.N, s.C, s.OC, p);
            fetch(dev, o1, o1_d, yb);
            fetch(dev, o2, o2_d, yb);
            fetch(dev, dx1, dx1_d, xb);
            fetch(dev, dx2, dx2_d, xb);
            fetch(dev, dw1, dw1_d, wb);
            fetch(dev, dw2, dw2_d, wb);
            mirrors_free(&mr);
            if (memcmp(o1, o2, ny * sizeof(float)) || memcmp(dx1, dx2, nx * sizeof(float)) ||
                memcmp(dw1, dw2, nw * sizeof(float)))
                fail_msg("%s %s: a second call gave other bits", devs[d].name, p == MATMUL_BF16 ? "bf16" : "fp32");
            free(o1), free(o2), free(dx1), free(dx2), free(dw1), free(dw2);
        }
    case_free(&c);
}

// The reference against hand arithmetic: inp = [[1,2],[3,4]],
// W = [[5,6],[7,8],[9,10]] (OC=3, C=2); dout = ones; grads start at 0.5.
static void test_reference_by_hand(void **state) {
    (void)state;
    const double inp[] = {1, 2, 3, 4}, W[] = {5, 6, 7, 8, 9, 10}, dout[] = {1, 1, 1, 1, 1, 1};
    const double out_want[] = {17, 23, 29, 39, 53, 67};
    // dinp row = sum_o W[o,:] = [21, 24]; dW row = sum_n inp[n,:] = [4, 6].
    const double dinp_want[] = {21.5, 24.5, 21.5, 24.5}, dW_want[] = {4.5, 6.5, 4.5, 6.5, 4.5, 6.5};
    double out[6], dinp[4], dW[6];
    matmul_forward_ref(out, inp, W, 2, 2, 3);
    for (int i = 0; i < 6; i++) assert_true(out[i] == out_want[i]);
    for (int i = 0; i < 4; i++) dinp[i] = 0.5;
    for (int i = 0; i < 6; i++) dW[i] = 0.5;
    matmul_backward_ref(dinp, dW, dout, inp, W, 2, 2, 3);
    for (int i = 0; i < 4; i++) assert_true(dinp[i] == dinp_want[i]);
    for (int i = 0; i < 6; i++) assert_true(dW[i] == dW_want[i]);
}

// The reference backward is the gradient of L = sum(out * G): central
// differences of L with respect to every input and weight.
static double loss_with(const double *inp, const double *W, const double *G, int N, int C, int OC) {
    double *out = xmalloc((size_t)N * OC * sizeof(double), "fd out"), L = 0.0;
    matmul_forward_ref(out, inp, W, N, C, OC);
    for (int i = 0; i < N * OC; i++) L += out[i] * G[i];
    free(out);
    return L;
}

static void test_reference_finite_differences(void **state) {
    (void)state;
    const int N = 3, C = 5, OC = 4;
    Rng r;
    rng_seed(&r, 99);
    double inp[15], W[20], G[12], dinp[15] = {0}, dW[20] = {0};
    for (int i = 0; i < 15; i++) inp[i] = rng_normal(&r);
    for (int i = 0; i < 20; i++) W[i] = rng_normal(&r);
    for (int i = 0; i < 12; i++) G[i] = rng_normal(&r);
    matmul_backward_ref(dinp, dW, G, inp, W, N, C, OC);
    const double h = 1e-4;
    for (int i = 0; i < 15; i++) {
        double saved = inp[i];
        inp[i] = saved + h;
        double lp = loss_with(inp, W, G, N, C, OC);
        inp[i] = saved - h;
        double lm = loss_with(inp, W, G, N, C, OC);
        inp[i] = saved;
        assert_true(fabs((lp - lm) / (2 * h) - dinp[i]) < 1e-8);
    }
    for (int i = 0; i < 20; i++) {
        double saved = W[i];
        W[i] = saved + h;
        double lp = loss_with(inp, W, G, N, C, OC);
        W[i] = saved - h;
        double lm = loss_with(inp, W, G, N, C, OC);
        W[i] = saved;
        assert_true(fabs((lp - lm) / (2 * h) - dW[i]) < 1e-8);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_reference_by_hand),
        cmocka_unit_test(test_reference_finite_differences),
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_same_bits_twice),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_fp32_packs_round_exactly),
        cmocka_unit_test(test_bf16_packs_agree),
        cmocka_unit_test(test_bfdot_tile_bits),
        cmocka_unit_test(test_bfdot_by_name),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_precision_selects_products),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}
