// cpu_arm.c: feature detection, the model name and the FMA burst of the peak
// measurement on AArch64 (cpu.h): Linux reads the hardware capabilities the
// kernel reports (getauxval) and /proc/cpuinfo, macOS asks sysctl. Nothing
// elsewhere.
#include "cpu.h"
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdio.h>
#include <string.h>
#ifdef __APPLE__
#include <sys/sysctl.h>
#else
#include <sys/auxv.h>
#endif

int cpu_has_avx512(void) { return 0; }
int cpu_has_avx2_fma(void) { return 0; }
int cpu_has_avx512_bf16(void) { return 0; }
int cpu_has_neon(void) { return 1; }   // Advanced SIMD is part of AArch64

int cpu_has_arm_bf16(void) {
#ifdef __APPLE__
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_BF16", &v, &len, NULL, 0) == 0 && v;
#else
    return (getauxval(AT_HWCAP2) & (1UL << 14)) != 0;   // HWCAP2_BF16
#endif
}

void cpu_model_name(char *buf, size_t n) {
    if (n == 0) return;
    snprintf(buf, n, "unknown AArch64 CPU");
#ifdef __APPLE__
    size_t len = n;
    if (sysctlbyname("machdep.cpu.brand_string", buf, &len, NULL, 0) != 0) snprintf(buf, n, "unknown AArch64 CPU");
#else
    // Linux names no model on ARM: the implementer and part numbers say which core it is.
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256], impl[32] = "?", part[32] = "?";
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!v) continue;
        v += strspn(v + 1, " \t") + 1;
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "CPU implementer", 15)) snprintf(impl, sizeof impl, "%s", v);
        if (!strncmp(line, "CPU part", 8)) snprintf(part, sizeof part, "%s", v);
    }
    if (f) fclose(f);
    snprintf(buf, n, "AArch64 (implementer %s, part %s)", impl, part);
#endif
}

void cpu_isa_list(char *buf, size_t n) { snprintf(buf, n, "neon%s", cpu_has_arm_bf16() ? " bf16" : ""); }

// 12 independent vfmaq chains (see cpu_x86.c for why x = x*m + a).
__attribute__((noinline)) static float fma_burst_neon(long iters, float seed) {
    float32x4_t x[CPU_FMA_ACCS];
    const float32x4_t m = vdupq_n_f32(0.999999f), a = vdupq_n_f32(1e-6f);
    for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = vdupq_n_f32(seed + (float)i);
    for (long it = 0; it < iters; it++) {
        #pragma GCC unroll 12
        for (int i = 0; i < CPU_FMA_ACCS; i++) x[i] = vfmaq_f32(a, x[i], m);
    }
    float32x4_t s = x[0];
    for (int i = 1; i < CPU_FMA_ACCS; i++) s = vaddq_f32(s, x[i]);
    return vaddvq_f32(s);
}

float cpu_fma_burst(int width, long iters, float seed) {
    return width == 4 ? fma_burst_neon(iters, seed) : cpu_fma_burst_scalar(iters, seed);
}

int cpu_fma_width(int lanes) { return lanes == 1 ? 1 : 4; }
#endif
