// bench_header.h: the line every C benchmark starts with (the CPU, the
// instruction sets found, the kernels its device runs: POCKET_KERNELS may
// force a set), and the fp32 FMA peak of the vectors those kernels use, so a
// forced AVX2 set on an AVX-512 machine is measured against the AVX2 peak.
#pragma once
#include <stdio.h>
#include "../model/ops/ops.h"
#include "../util/cpu.h"

static inline void bench_header(const char *bench, const Device *d) {
    char model[64], isa[256], kernels[256];
    cpu_model_name(model, sizeof model);
    cpu_isa_list(isa, sizeof isa);
    cpu_kernels_describe(cpu_kernels(d), kernels, sizeof kernels);
    printf("== %s: cpu %s; instruction sets: %s; kernels: %s\n", bench, model, isa, kernels);
}

static inline double bench_peak(const Device *d, int threads) {
    return cpu_peak_fp32_gflops_lanes(threads, cpu_kernels_lanes(cpu_kernels(d)));
}
