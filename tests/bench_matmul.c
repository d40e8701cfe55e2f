// bench_matmul: GFLOP/s of the three matmul products of training (forward
// y = x W^T, dX = dY W, dW = dY^T X) on the shapes of the pocket-0.3b model
// at T = 1024 (and the classifier in row chunks), in fp32 and in bf16
// (MATMUL_BF16: bf16 operands, fp32 accumulation), each as a fraction of this
// machine's measured fp32 FMA peak. One vdpbf16ps does two multiply-adds per
// fp32 lane, so the bf16 peak is twice the fp32 one where the CPU has
// AVX512_BF16 (measured here too): a bf16 figure over 100% of the fp32 peak
// is possible. Each figure is the best of several runs: the machine may be
// shared, and the best run is what the code can do. The table is printed at
// the end, once the peaks have been measured twice. With --blas it measures
// OpenBLAS sgemm on the same products instead, in a process of its own (each
// library's idle threads spin for a while after a call and would slow the
// other's next measurement). OpenBLAS is loaded at run time from
// libopenblas.so.0, so building needs no BLAS; without it --blas says so.
// usage: bench_matmul [threads] [--blas]   (default 2 threads)
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "../util/util.h"
#include "bench_bf16_peak.h"
#include "bench_header.h"

typedef struct {
    const char *what;
    int N, C, OC;
} Shape;

static const Shape SHAPES[] = {
    {"q/o proj  ", 1024, 896, 896},
    {"k/v proj  ", 1024, 896, 128},
    {"gate/up   ", 1024, 896, 2560},
    {"down      ", 1024, 2560, 896},
    {"classifier", 128, 896, 65536},
    {"classifier", 256, 896, 65536},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

static void fill(float *x, size_t n, Rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_uniform(r) - 0.5);
}

enum { FWD, DINP, DW };

// The CBLAS entry points used here (cblas.h is not needed to build).
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*SgemmFn)(int order, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc);
typedef struct {
    SgemmFn sgemm;
    const char *config;   // openblas_get_config(): version, target, threading
} Openblas;

// NULL sgemm when the library is absent; its threads are set to ours.
static Openblas openblas_open(int threads) {
    Openblas ob = {NULL, NULL};
    void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return ob;
    ob.sgemm = (SgemmFn)dlsym(lib, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(lib, "openblas_set_num_threads");
    char *(*get_config)(void) = (char *(*)(void))dlsym(lib, "openblas_get_config");
    if (set_threads) set_threads(threads);
    ob.config = get_config ? get_config() : "OpenBLAS";
    return ob;
}

// The same three products as run_product, through sgemm (row-major):
// out = inp W^T, dinp += dout W, dW += dout^T inp.
static void run_sgemm(const Openblas *ob, int which, float *out, float *dinp, float *dW, const float *dout,
                      const float *inp, const float *W, const Shape *s) {
    if (which == FWD)
        ob->sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, s->N, s->OC, s->C, 1.0f, inp, s->C, W, s->C, 0.0f,
                  out, s->OC);
    else if (which == DINP)
        ob->sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, s->N, s->C, s->OC, 1.0f, dout, s->OC, W, s->C,
                  1.0f, dinp, s->C);
    else
        ob->sgemm(CBLAS_ROW_MAJOR, CBLAS_TRANS, CBLAS_NO_TRANS, s->OC, s->C, s->N, 1.0f, dout, s->OC, inp, s->C,
                  1.0f, dW, s->C);
}

// One product on one shape's buffers: ours (the CPU device's op) at precision
// p, or OpenBLAS's sgemm when blas is set.
typedef struct {
    Device *dev;
    const Openblas *blas;
    MatmulPrecision p;
    int which;
    float *out, *dinp, *dW;
    const float *dout, *inp, *W;
    const Shape *s;
} Product;

static void run_product(const Product *r) {
    const Shape *s = r->s;
    if (r->blas) run_sgemm(r->blas, r->which, r->out, r->dinp, r->dW, r->dout, r->inp, r->W, s);
    else if (r->which == FWD) OP(r->dev, matmul_forward, r->out, r->inp, r->W, s->N, s->C, s->OC, r->p);
    else if (r->which == DINP)
        OP(r->dev, matmul_backward, r->dinp, NULL, r->dout, r->inp, r->W, s->N, s->C, s->OC, r->p);
    else OP(r->dev, matmul_backward, NULL, r->dW, r->dout, r->inp, r->W, s->N, s->C, s->OC, r->p);
}

// GFLOP/s of a product: the best of 3 to 20 timed runs after a warm one
// (pages, caches), repeating while under `budget` seconds in all.
static double best_gflops(const Product *r, double budget) {
    run_product(r);
    double best = 1e30, spent = 0.0;
    for (int rep = 0; rep < 20 && (rep < 3 || spent < budget); rep++) {
        double t0 = now_seconds();
        run_product(r);
        double t = now_seconds() - t0;
        spent += t;
        if (t < best) best = t;
    }
    return 2.0 * r->s->N * r->s->C * (double)r->s->OC / best * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1) threads = 1;
    const int blas_only = argc > 2 && !strcmp(argv[2], "--blas");
    double gflops[N_SHAPES][2][3], gflops_blas[N_SHAPES][3];
    double t_start = now_seconds();
    // The peaks are measured before and after the products and the larger
    // figures are used: a burst of other work on a shared machine can only
    // lower a measurement.
    Device dev;
    cpu_device_init(&dev, threads, NULL);   // the best kernels for this CPU, or POCKET_KERNELS'
    bench_header("bench_matmul", &dev);
    double peak_before = bench_peak(&dev, threads), bf16_before = bf16_peak_gflops(&dev, threads);
    Rng rng;
    rng_seed(&rng, 1);
    const double budget_per_product = 0.7;   // seconds; keeps the whole run near 40 s
    Openblas blas = {NULL, NULL};
    if (blas_only && !(blas = openblas_open(threads)).sgemm) {
        printf("== bench_matmul: no reference: libopenblas.so.0 not found (apt-get install libopenblas0)\n");
        return 0;
    }
    dev_reserve(&dev, matmul_workspace_bytes(&dev));
    for (int i = 0; i < N_SHAPES; i++) {
        const Shape *s = &SHAPES[i];
        size_t nx = (size_t)s->N * s->C, nw = (size_t)s->OC * s->C, ny = (size_t)s->N * s->OC;
        float *inp = xaligned(nx * sizeof(float), "inp"), *dinp = xaligned(nx * sizeof(float), "dinp");
        float *W = xaligned(nw * sizeof(float), "W"), *dW = xaligned(nw * sizeof(float), "dW");
        float *out = xaligned(ny * sizeof(float), "out"), *dout = xaligned(ny * sizeof(float), "dout");
        fill(inp, nx, &rng);
        fill(W, nw, &rng);
        fill(dout, ny, &rng);
        Product r = {&dev, blas_only ? &blas : NULL, MATMUL_FP32, FWD, out, dinp, dW, dout, inp, W, s};
        for (int p = MATMUL_FP32; p <= MATMUL_BF16 && !blas_only; p++)
            for (int which = FWD; which <= DW; which++) {
                r.p = p;
                r.which = which;
                gflops[i][p][which] = best_gflops(&r, budget_per_product);
            }
        for (int which = FWD; which <= DW && blas_only; which++) {
            r.which = which;
            gflops_blas[i][which] = best_gflops(&r, budget_per_product);
        }
        free(inp), free(dinp), free(W), free(dW), free(out), free(dout);
    }
    double peak_after = bench_peak(&dev, threads), bf16_after = bf16_peak_gflops(&dev, threads);
    double peak = peak_after > peak_before ? peak_after : peak_before;
    double bf16_peak = bf16_after > bf16_before ? bf16_after : bf16_before;
    printf("== bench_matmul: kernel %s, %d threads, fp32 FMA peak %.1f GFLOP/s (measured %.1f before, %.1f after)\n",
           cpu_kernels(&dev)->f32->name, threads, peak, peak_before, peak_after);
    if (bf16_peak > 0)
        printf("== bench_matmul: bf16 kernel %s, vdpbf16ps peak %.1f GFLOP/s = %.2fx the fp32 FMA peak "
               "(measured %.1f before, %.1f after)\n",
               cpu_kernels(&dev)->bf16->name, bf16_peak, bf16_peak / peak, bf16_before, bf16_after);
    else
        printf("== bench_matmul: bf16 kernel %s (%s)\n", cpu_kernels(&dev)->bf16->name,
               cpu_kernels(&dev)->bf16 == matmul_bf16_kernel_neon()
                   ? "BFDOT: its peak is not measured here"
                   : "no AVX512_BF16 in use: bf16 runs at fp32 speed at best");
    if (blas_only)
        printf("== bench_matmul: reference OpenBLAS sgemm (%s), %d threads, OPENBLAS_CORETYPE=%s\n", blas.config,
               threads, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
    printf("%% pk: of the fp32 FMA peak (the bf16 peak is %s the fp32 one)\n",
           bf16_peak > 0                                     ? "2x"
           : cpu_kernels(&dev)->bf16 == matmul_bf16_kernel_neon() ? "not measured against"
                                                                 : "no more than");
    printf("%-10s %5s %5s %6s %4s | %-22s | %-22s | %-22s\n", "shape", "N", "C", "OC", "prec",
           "forward y = x W^T", "dX = dY W", "dW = dY^T X");
    for (int i = 0; i < N_SHAPES; i++) {
        const Shape *s = &SHAPES[i];
        for (int p = MATMUL_FP32; p <= MATMUL_BF16 && !blas_only; p++) {
            printf("%-10s %5d %5d %6d %4s", s->what, s->N, s->C, s->OC, p == MATMUL_BF16 ? "bf16" : "fp32");
            for (int which = FWD; which <= DW; which++)
                printf(" | %6.1f GF/s %5.1f%% pk", gflops[i][p][which], 100.0 * gflops[i][p][which] / peak);
            printf("\n");
        }
        if (!blas_only) continue;
        printf("%-10s %5d %5d %6d %4s", s->what, s->N, s->C, s->OC, "blas");
        for (int which = FWD; which <= DW; which++)
            printf(" | %6.1f GF/s %5.1f%% pk", gflops_blas[i][which], 100.0 * gflops_blas[i][which] / peak);
        printf("\n");
    }
    printf("== bench_matmul: %.1f s\n", now_seconds() - t_start);
    dev_free(&dev);
    return 0;
}
