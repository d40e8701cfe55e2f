// cpu_x86.c: feature detection, the model name and the FMA bursts of the
// peak measurement on x86 (cpu.h); nothing elsewhere.
#include "cpu.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdio.h>
#include <string.h>

// __builtin_cpu_supports also checks that the OS saves the wide registers
// (libgcc tests XCR0), so a "yes" means the instructions really run.
int cpu_has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
int cpu_has_avx2_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

int cpu_has_avx512_bf16(void) { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }

// F16C from CPUID (clang 14's __builtin_cpu_supports does not know "f16c"); it
// uses the AVX registers, so only with AVX.
static int cpu_has_f16c(void) {
    unsigned int a, b, c, d;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

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
                       cpu_has_f16c(),                     __builtin_cpu_supports("avx512f"),
                       __builtin_cpu_supports("avx512bw"), __builtin_cpu_supports("avx512vl"),
                       cpu_has_avx512_bf16()};
    size_t used = 0;
    if (n == 0) return;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (has[i] && used < n) used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? " " : "", names[i]);
    if (!buf[0]) snprintf(buf, n, "none of sse4.2 avx avx2 fma avx512f");
}

int cpu_has_neon(void) { return 0; }
int cpu_has_arm_bf16(void) { return 0; }

// Each burst runs `iters` rounds of CPU_FMA_ACCS independent FMA chains. 12
// covers latency x throughput on every current core (4 cycles x 2 pipes on
// Intel, 4 x 1 zmm or 4 x 2 ymm on Zen 4). x = x*m + a with m just below 1
// converges instead of overflowing, so no denormals or infinities appear.
// The result (a sum of the lanes) seeds the next burst, so the compiler can
// neither drop a burst nor hoist it out of the timing loop.

__attribute__((target("avx512f"), noinline)) static float fma_burst_avx512(long iters, float seed) {
    __m512 x[CPU_FMA_ACCS];
    const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = _mm512_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
        #pragma GCC unroll 12
        for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = _mm512_fmadd_ps(x[i], m, a);
    }
    __m512 s = x[0];
    for (int i = 1; i < CPU_FMA_ACCS; i++) s = _mm512_add_ps(s, x[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"), noinline)) static float fma_burst_avx2(long iters, float seed) {
    __m256 x[CPU_FMA_ACCS];
    const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = _mm256_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
        #pragma GCC unroll 12
        for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = _mm256_fmadd_ps(x[i], m, a);
    }
    __m256 s = x[0];
    for (int i = 1; i < CPU_FMA_ACCS; i++) s = _mm256_add_ps(s, x[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    float t = 0.0f;
    for (int i = 0; i < 8; i++) t += lanes[i];
    return t;
}

float cpu_fma_burst(int width, long iters, float seed) {
    return width == 16 ? fma_burst_avx512(iters, seed)
         : width == 8  ? fma_burst_avx2(iters, seed)
                       : cpu_fma_burst_scalar(iters, seed);
}

int cpu_fma_width(int lanes) {
    return lanes >= 16 && cpu_has_avx512() ? 16 : lanes >= 8 && cpu_has_avx2_fma() ? 8 : 1;
}
#endif
