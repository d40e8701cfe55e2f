// bench_bf16_peak.h: this machine's bf16 multiply-add peak on the vectors
// the bf16 matmul kernel uses (AVX512_BF16's vdpbf16ps), measured: the
// denominator of every bf16 matmul figure (bench_matmul, bench_sampler);
// 0 on other machines.
#pragma once
#include <omp.h>
#include "../model/ops/matmul_kernels.h"
#include "../util/util.h"
#include "bench_header.h"

#if defined(__x86_64__)
#include <immintrin.h>

// vdpbf16ps peak: 12 independent accumulators (latency x throughput) in
// registers, 64 flops per instruction (16 lanes x 2 products x 2).
#define BF16_ACCS 12
__attribute__((target("avx512f,avx512bf16"), noinline)) static float dpbf16_burst(long iters, float seed) {
    __m512 acc[BF16_ACCS];
    for (int i = 0; i < BF16_ACCS; i++) acc[i] = _mm512_set1_ps(seed + (float)i);
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x38003800);
    for (long it = 0; it < iters; it++) {
        #pragma GCC unroll 12
        for (int i = 0; i < BF16_ACCS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));
    }
    __m512 s = acc[0];
    for (int i = 1; i < BF16_ACCS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

// Best rate over ~0.3 s of ~20 ms slices on `threads` threads (a warm-up
// slice sizes them); 0 when the device's bf16 kernel is not AVX512_BF16's.
static double bf16_peak_gflops(const Device *d, int threads) {
    if (!matmul_bf16_kernel_avx512() || cpu_kernels(d)->bf16 != matmul_bf16_kernel_avx512()) return 0.0;
    long burst = 100000;
    double best = 0.0, start = now_seconds();
    float sink = 0.0f;
    for (int slice = 0; slice < 200 && (slice < 3 || now_seconds() - start < 0.3); slice++) {
        double t0 = now_seconds();
        #pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += dpbf16_burst(burst, (float)omp_get_thread_num());
        double t = now_seconds() - t0, rate = 64.0 * BF16_ACCS * burst * threads / t * 1e-9;
        if (slice == 0) {
            if (t > 0.0 && t < 0.02) burst = (long)(burst * (0.02 / t));
            continue;
        }
        if (rate > best) best = rate;
    }
    volatile float keep = sink;
    (void)keep;
    return best;
}
#else
static double bf16_peak_gflops(const Device *d, int threads) {   // no vdpbf16ps: no bf16 peak to measure
    (void)d, (void)threads;
    return 0.0;
}
#endif
