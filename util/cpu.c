// cpu.c: feature detection and the fp32 FMA peak measurement.
#include "cpu.h"
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include "util.h"

// __builtin_cpu_supports also checks that the OS saves the wide registers
// (libgcc tests XCR0), so a "yes" means the instructions really run.
int cpu_has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
int cpu_has_avx2_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

int cpu_has_avx512_bf16(void) { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }

void cpu_model_name(char *buf, size_t n) {
    unsigned int r[12], top = __get_cpuid_max(0x80000000u, NULL);
    if (n == 0) return;
    buf[0] = 0;
    if (top >= 0x80000004u) {
        for (unsigned int leaf = 0; leaf < 3; leaf++)
            __get_cpuid(0x80000002u + leaf, &r[4 * leaf], &r[4 * leaf + 1], &r[4 * leaf + 2], &r[4 * leaf + 3]);
        char brand[49];
        memcpy(brand, r, 48);
        brand[48] = 0;
        const char *s = brand;
        while (*s == ' ') s++;   // some vendors right-align the string
        snprintf(buf, n, "%s", s);
    }
    if (!buf[0]) snprintf(buf, n, "unknown CPU");
    size_t len = strlen(buf);
    while (len > 0 && buf[len - 1] == ' ') buf[--len] = 0;
}

void cpu_isa_list(char *buf, size_t n) {
    static const char *const names[] = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                        "avx512vl", "avx512bf16"};
    // __builtin_cpu_supports takes a string literal only, hence the table of tests.
    const int has[] = {__builtin_cpu_supports("sse4.2"),   __builtin_cpu_supports("avx"),
                       __builtin_cpu_supports("avx2"),     __builtin_cpu_supports("fma"),
                       __builtin_cpu_supports("f16c"),     __builtin_cpu_supports("avx512f"),
                       __builtin_cpu_supports("avx512bw"), __builtin_cpu_supports("avx512vl"),
                       cpu_has_avx512_bf16()};
    size_t used = 0;
    if (n == 0) return;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (has[i] && used < n) used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? " " : "", names[i]);
    if (!buf[0]) snprintf(buf, n, "none of sse4.2 avx avx2 fma avx512f");
}

// Each burst runs `iters` rounds of ACCS independent FMA chains. ACCS = 12
// covers latency x throughput on every current core (4 cycles x 2 pipes on
// Intel, 4 x 1 zmm or 4 x 2 ymm on Zen 4). x = x*m + a with m just below 1
// converges instead of overflowing, so no denormals or infinities appear.
// The result (a sum of the lanes) seeds the next burst, so the compiler can
// neither drop a burst nor hoist it out of the timing loop.
#define ACCS 12

__attribute__((target("avx512f"), noinline)) static float fma_burst_avx512(long iters, float seed) {
    __m512 x[ACCS];
    const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < ACCS; i++) x[i] = _mm512_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
        #pragma GCC unroll 12
        for (int i = 0; i < ACCS; i++) x[i] = _mm512_fmadd_ps(x[i], m, a);
    }
    __m512 s = x[0];
    for (int i = 1; i < ACCS; i++) s = _mm512_add_ps(s, x[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"), noinline)) static float fma_burst_avx2(long iters, float seed) {
    __m256 x[ACCS];
    const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < ACCS; i++) x[i] = _mm256_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
        #pragma GCC unroll 12
        for (int i = 0; i < ACCS; i++) x[i] = _mm256_fmadd_ps(x[i], m, a);
    }
    __m256 s = x[0];
    for (int i = 1; i < ACCS; i++) s = _mm256_add_ps(s, x[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    float t = 0.0f;
    for (int i = 0; i < 8; i++) t += lanes[i];
    return t;
}

// Portable fallback: scalar fmaf chains (the compiler may vectorise them).
__attribute__((noinline)) static float fma_burst_scalar(long iters, float seed) {
    float x[ACCS];
    for (int i = 0; i < ACCS; i++) x[i] = seed + (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < ACCS; i++) x[i] = __builtin_fmaf(x[i], 0.999999f, 1e-6f);
    float t = 0.0f;
    for (int i = 0; i < ACCS; i++) t += x[i];
    return t;
}

static float burst_for(int width, long iters, float seed) {
    return width == 16 ? fma_burst_avx512(iters, seed)
         : width == 8  ? fma_burst_avx2(iters, seed)
                       : fma_burst_scalar(iters, seed);
}

// The machine may be shared (a VM whose cores also run other work), so the
// 0.3 s are cut into slices timed between barriers and the fastest slice
// counts: the peak is what the cores deliver when they are really ours.
double cpu_peak_fp32_gflops(int threads) { return cpu_peak_fp32_gflops_lanes(threads, 16); }

double cpu_peak_fp32_gflops_lanes(int threads, int lanes) {
    if (threads < 1) threads = 1;
    const int width = lanes >= 16 && cpu_has_avx512() ? 16 : lanes >= 8 && cpu_has_avx2_fma() ? 8 : 1;
    const double duration = 0.3;
    long burst = 20000;                 // rounds per slice, sized in the warm-up
    double best = 0.0, start = 0.0;    // shared: written by the master only
    int done = 0;
    float sink = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        float s = (float)omp_get_thread_num();
        // Warm-up (clock ramp, wide-vector frequency licence); the master
        // sizes a slice to about 20 ms from it.
        double w0 = now_seconds();
        s = burst_for(width, burst, s);
        #pragma omp barrier
        #pragma omp master
        {
            double w = now_seconds() - w0;
            if (w > 0.0 && w < 0.02) burst = (long)(burst * (0.02 / w));
        }
        #pragma omp master
        start = now_seconds();
        #pragma omp barrier
        while (!done) {
            #pragma omp barrier
            double t0 = now_seconds();
            s = burst_for(width, burst, s * 1e-3f);
            #pragma omp barrier
            double t = now_seconds() - t0;
            #pragma omp master
            {
                double rate = 2.0 * (double)burst * ACCS * width * threads / t * 1e-9;
                if (rate > best) best = rate;
                done = now_seconds() - start >= duration;
            }
            // Every thread must see the master's decision before testing it.
            #pragma omp barrier
        }
        sink += s;
    }
    // sink depends on every FMA; returning through a volatile keeps it alive.
    volatile float keep = sink;
    (void)keep;
    return best;
}
