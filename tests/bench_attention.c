// bench_attention: causal GQA attention forward and backward on the shapes of
// one pocket-0.3b layer (14 query heads over 2 KV heads of 64, B=1) at T=512
// and T=1024, on a CPU device with the best tile kernel for this CPU and its
// workspace reserved once, as in a training step. GFLOP/s count the useful
// work of the causal triangle: forward QK^T and PV, 2*T*(T+1)*hd per head;
// backward dP, dQ, dK and dV, twice that (the recomputed scores are not
// counted). The model step's FLOP count (model/config.c) uses PaLM's
// full-square 12*L*nq*hd*T per token instead, so its attention term is about
// twice this one.
// usage: bench_attention [reps]   (default 5; the best counts)
#include <stdio.h>
#include <stdlib.h>
#include "../model/ops/matmul_kernels.h"
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "bench_header.h"
#include "../util/util.h"

enum { NQ = 14, NKV = 2, HD = 64 };

static float *random_floats(Rng *r, size_t n) {
    float *x = xmalloc(n * sizeof(float), "bench_attention input");
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
    return x;
}

static void run(Device *d, int T, int reps, double peak) {
    Rng r;
    rng_seed(&r, 5);
    const size_t nq = (size_t)T * NQ * HD, nkv = (size_t)T * NKV * HD;
    float *q = random_floats(&r, nq), *k = random_floats(&r, nkv), *v = random_floats(&r, nkv);
    float *dout = random_floats(&r, nq), *out = xmalloc(nq * sizeof(float), "out");
    float *lse = xmalloc((size_t)T * NQ * sizeof(float), "lse");
    float *dq = xcalloc(nq, sizeof(float), "dq"), *dk = xcalloc(nkv, sizeof(float), "dk");
    float *dv = xcalloc(nkv, sizeof(float), "dv");
    dev_reserve(d, attention_workspace_bytes(d, 1, T, NQ, NKV, HD));
    double best_f = 1e30, best_b = 1e30;
    for (int i = 0; i <= reps; i++) {   // the first run warms caches and pages
        double t0 = now_seconds();
        OP(d, attention_forward, out, lse, q, k, v, NULL, 1, T, NQ, NKV, HD);
        double t1 = now_seconds();
        OP(d, attention_backward, dq, dk, dv, dout, out, lse, q, k, v, NULL, 1, T, NQ, NKV, HD);
        double t2 = now_seconds();
        if (i > 0 && t1 - t0 < best_f) best_f = t1 - t0;
        if (i > 0 && t2 - t1 < best_b) best_b = t2 - t1;
    }
    const double fwd = 2.0 * T * (T + 1.0) * HD * NQ, gf = fwd / best_f / 1e9, gb = 2 * fwd / best_b / 1e9;
    printf("attention %s T=%d (14/2 heads of 64): forward %.2f ms %.1f GFLOP/s = %.1f%% of peak, "
           "backward %.2f ms %.1f GFLOP/s = %.1f%% of peak (best of %d)\n",
           cpu_kernels(d)->f32->name, T, best_f * 1e3, gf, 100 * gf / peak, best_b * 1e3, gb, 100 * gb / peak,
           reps);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) die("bench_attention: reps must be at least 1, got %s", argv[1]);
    Device dev;
    cpu_device_init(&dev, 0, NULL);   // the best kernels (or POCKET_KERNELS'), OpenMP's thread count
    bench_header("bench_attention", &dev);
    double peak = bench_peak(&dev, 2);
    printf("== bench_attention: fp32 FMA peak %.1f GFLOP/s; causal FLOPs (see the top of tests/bench_attention.c)\n",
           peak);
    const int Ts[2] = {512, 1024};
    for (int i = 0; i < 2; i++) run(&dev, Ts[i], reps, peak);
    dev_free(&dev);
    return 0;
}
