// cpu.h: CPU feature detection (which matmul kernel this machine can run) and
// a measured fp32 FMA peak that every benchmark reports its fraction of.
#pragma once

#include <stddef.h>

int cpu_has_avx512(void);        // AVX-512F usable (CPU and OS)
int cpu_has_avx2_fma(void);      // AVX2 + FMA usable
int cpu_has_avx512_bf16(void);   // AVX-512F and AVX512_BF16 usable
int cpu_has_neon(void);          // AArch64 Advanced SIMD (always there on AArch64)
int cpu_has_arm_bf16(void);      // AArch64 BF16 (BFDOT, BFMMLA)

// The CPU's model name (the CPUID brand string, else /proc/cpuinfo's, else
// "unknown CPU") into buf.
void cpu_model_name(char *buf, size_t n);
// The vector instruction sets found that the kernels care about, separated
// by spaces ("sse4.2 avx avx2 fma avx512f avx512bw avx512_bf16"), into buf.
void cpu_isa_list(char *buf, size_t n);

// Measured fp32 FMA peak in GFLOP/s (2 flops per FMA lane) on `threads` OpenMP
// threads: an in-register FMA loop with enough independent accumulators to
// hide the FMA latency, run for about 0.3 s, with vectors of `lanes` floats:
// 16 (AVX-512), 8 (AVX2 + FMA), 4 (NEON) or 1 (scalar), so a kernel set
// restricted to AVX2 is measured against the peak of the instructions it may
// use. A width this CPU lacks falls back to the widest narrower one it has.
double cpu_peak_fp32_gflops_lanes(int threads, int lanes);

// The measurement's pieces, per architecture (cpu_x86.c, cpu_arm.c): the
// vector width it times for a kernel of `lanes` floats (what the CPU has, at
// most that), and one burst of `iters` rounds of independent FMA chains at
// that width, whose result seeds the next (so none can be dropped).
#define CPU_FMA_ACCS 12
int cpu_fma_width(int lanes);
float cpu_fma_burst(int width, long iters, float seed);
float cpu_fma_burst_scalar(long iters, float seed);
