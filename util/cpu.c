// cpu.c: the fp32 FMA peak measurement (the bursts it times are the
// architecture's: cpu_x86.c, cpu_arm.c), and the portable fallbacks of
// cpu.h for any other architecture.
#include "cpu.h"
#include <omp.h>
#include <stdio.h>
#include "util.h"

// Portable fallback: scalar fmaf chains (the compiler may vectorise them).
__attribute__((noinline)) float cpu_fma_burst_scalar(long iters, float seed) {
    float x[CPU_FMA_ACCS];
    for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = seed + (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = __builtin_fmaf(x[i], 0.999999f, 1e-6f);
    float t = 0.0f;
    for (int i = 0; i < CPU_FMA_ACCS; i++) t += x[i];
    return t;
}

#if !defined(__x86_64__) && !defined(__i386__) && !defined(__aarch64__)
int cpu_has_avx512(void) { return 0; }
int cpu_has_avx2_fma(void) { return 0; }
int cpu_has_avx512_bf16(void) { return 0; }
int cpu_has_neon(void) { return 0; }
int cpu_has_arm_bf16(void) { return 0; }
void cpu_model_name(char *buf, size_t n) { snprintf(buf, n, "unknown CPU"); }
void cpu_isa_list(char *buf, size_t n) { snprintf(buf, n, "none the kernels use"); }
float cpu_fma_burst(int width, long iters, float seed) {
    (void)width;
    return cpu_fma_burst_scalar(iters, seed);
}
int cpu_fma_width(int lanes) {
    (void)lanes;
    return 1;
}
#endif

// The machine may be shared (a VM whose cores also run other work), so the
// 0.3 s are cut into slices timed between barriers and the fastest slice
// counts: the peak is what the cores deliver when they are really ours.
double cpu_peak_fp32_gflops_lanes(int threads, int lanes) {
    if (threads < 1) threads = 1;
    const int width = cpu_fma_width(lanes);
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
        s = cpu_fma_burst(width, burst, s);
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
            s = cpu_fma_burst(width, burst, s * 1e-3f);
            #pragma omp barrier
            double t = now_seconds() - t0;
            #pragma omp master
            {
                double rate = 2.0 * (double)burst * CPU_FMA_ACCS * width * threads / t * 1e-9;
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
