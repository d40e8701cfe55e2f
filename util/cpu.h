// cpu.h: CPU feature detection (which matmul kernel this machine can run) and
// a measured fp32 FMA peak that every benchmark reports its fraction of.
#pragma once

int cpu_has_avx512(void);      // AVX-512F usable (CPU and OS)
int cpu_has_avx2_fma(void);    // AVX2 + FMA usable
// Name of the fastest kernel family this CPU runs: "avx512", "avx2+fma" or "portable".
const char *cpu_kernel_name(void);

// Measured fp32 FMA peak in GFLOP/s (2 flops per FMA lane) on `threads` OpenMP
// threads: an in-register FMA loop with enough independent accumulators to
// hide the FMA latency, widest vectors available, run for about 0.3 s.
double cpu_peak_fp32_gflops(int threads);
