// bench_matmul: GFLOP/s of the three matmul products of training (forward
// y = x W^T, dX = dY W, dW = dY^T X) on the shapes of the pocket-0.3b model
// at T = 1024 (and the classifier in row chunks), as a fraction of this
// machine's measured fp32 FMA peak. Each figure is the best of several runs:
// the machine may be shared, and the best run is what the code can do.
// The table is printed at the end, once the peak has been measured twice.
// usage: bench_matmul [threads]   (default 2)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "../util/util.h"

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

static void fill(float *x, size_t n, Rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_uniform(r) - 0.5);
}

enum { FWD, DINP, DW };

static void run_product(int which, float *out, float *dinp, float *dW, const float *dout,
                        const float *inp, const float *W, const Shape *s) {
    if (which == FWD) matmul_forward(out, inp, W, s->N, s->C, s->OC);
    else if (which == DINP) matmul_backward(dinp, NULL, dout, inp, W, s->N, s->C, s->OC);
    else matmul_backward(NULL, dW, dout, inp, W, s->N, s->C, s->OC);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    const int n_shapes = (int)(sizeof SHAPES / sizeof SHAPES[0]);
    double gflops[sizeof SHAPES / sizeof SHAPES[0]][3];
    double t_start = now_seconds();
    // The peak is measured before and after the products and the larger
    // figure is used: a burst of other work on a shared machine can only
    // lower a measurement.
    double peak_before = cpu_peak_fp32_gflops(threads);
    Rng rng;
    rng_seed(&rng, 1);
    const double budget_per_product = 1.0;   // seconds; keeps the whole run near 30 s
    for (int i = 0; i < n_shapes; i++) {
        const Shape *s = &SHAPES[i];
        size_t nx = (size_t)s->N * s->C, nw = (size_t)s->OC * s->C, ny = (size_t)s->N * s->OC;
        float *inp = xaligned(nx * sizeof(float), "inp"), *dinp = xaligned(nx * sizeof(float), "dinp");
        float *W = xaligned(nw * sizeof(float), "W"), *dW = xaligned(nw * sizeof(float), "dW");
        float *out = xaligned(ny * sizeof(float), "out"), *dout = xaligned(ny * sizeof(float), "dout");
        fill(inp, nx, &rng);
        fill(W, nw, &rng);
        fill(dout, ny, &rng);
        const double flops = 2.0 * s->N * s->C * (double)s->OC;
        for (int which = FWD; which <= DW; which++) {
            run_product(which, out, dinp, dW, dout, inp, W, s);   // warm: pages, caches
            double best = 1e30, spent = 0.0;
            for (int rep = 0; rep < 20 && (rep < 3 || spent < budget_per_product); rep++) {
                double t0 = now_seconds();
                run_product(which, out, dinp, dW, dout, inp, W, s);
                double t = now_seconds() - t0;
                spent += t;
                if (t < best) best = t;
            }
            gflops[i][which] = flops / best * 1e-9;
        }
        free(inp), free(dinp), free(W), free(dW), free(out), free(dout);
    }
    double peak_after = cpu_peak_fp32_gflops(threads);
    double peak = peak_after > peak_before ? peak_after : peak_before;
    printf("== bench_matmul: kernel %s, %d threads, fp32 FMA peak %.1f GFLOP/s (measured %.1f before, %.1f after)\n",
           matmul_kernel_best()->name, threads, peak, peak_before, peak_after);
    printf("%-10s %5s %5s %6s | %-22s | %-22s | %-22s\n", "shape", "N", "C", "OC",
           "forward y = x W^T", "dX = dY W", "dW = dY^T X");
    for (int i = 0; i < n_shapes; i++) {
        const Shape *s = &SHAPES[i];
        printf("%-10s %5d %5d %6d", s->what, s->N, s->C, s->OC);
        for (int which = FWD; which <= DW; which++)
            printf(" | %6.1f GF/s %5.1f%% pk", gflops[i][which], 100.0 * gflops[i][which] / peak);
        printf("\n");
    }
    printf("== bench_matmul: %.1f s\n", now_seconds() - t_start);
    return 0;
}
