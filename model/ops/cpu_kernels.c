// cpu_kernels.c: which kernels a CPU device runs. By default the fastest this
// CPU has; POCKET_KERNELS (or a caller's spec) forces a set, so the AVX2 or
// portable path can be measured and used on a machine that has more, and
// start-up lines say what was chosen. The ops read a device's choice here
// (cpu_kernels), not from the table file cpu.c, which references every op.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "matmul_kernels.h"
#include "ops.h"

// The fp32 kernel of a name; *known says whether the name exists at all
// (NULL with *known: this CPU cannot run it).
static const MatmulKernel *f32_named(const char *name, size_t len, int *known) {
    static const char *const names[] = {"avx512", "avx2", "neon", "portable"};
    const MatmulKernel *(*const get[])(void) = {matmul_kernel_avx512, matmul_kernel_avx2, matmul_kernel_neon,
                                                matmul_kernel_portable};
    for (int i = 0; i < 4; i++)
        if (strlen(names[i]) == len && !strncmp(name, names[i], len)) {
            *known = 1;
            return get[i]();
        }
    *known = 0;
    return NULL;
}

// The bf16 kernel of a name: avx512bf16, neonbf16, portable, or an fp32 kernel's name
// for the bf16 products on that fp32 kernel (its "+round" kernel).
static const MatmulBf16Kernel *bf16_named(const char *name, size_t len, int *known) {
    *known = 1;
    if (len == 10 && !strncmp(name, "avx512bf16", len)) return matmul_bf16_kernel_avx512();
    if (len == 8 && !strncmp(name, "neonbf16", len)) return matmul_bf16_kernel_neon();
    if (len == 8 && !strncmp(name, "portable", len)) return matmul_bf16_kernel_portable();
    const MatmulKernel *f = f32_named(name, len, known);
    return f ? matmul_bf16_kernel_on(f) : NULL;
}

// The bf16 kernel that goes with a forced fp32 set: the set's instructions
// only (AVX512_BF16 counts as AVX-512, FEAT_BF16 as NEON).
static const MatmulBf16Kernel *bf16_for(const MatmulKernel *f) {
    if (f == matmul_kernel_avx512() && matmul_bf16_kernel_avx512()) return matmul_bf16_kernel_avx512();
    if (f == matmul_kernel_neon() && matmul_bf16_kernel_neon()) return matmul_bf16_kernel_neon();
    const MatmulBf16Kernel *b = matmul_bf16_kernel_on(f);
    return b ? b : matmul_bf16_kernel_portable();
}

int cpu_kernels_named(CpuKernels *k, const char *spec, PtError *e) {
    *k = (CpuKernels){matmul_kernel_best(), matmul_bf16_kernel_best(), 256};
    if (!spec || !spec[0] || !strcmp(spec, "auto")) return 0;
    const char *slash = strchr(spec, '/');
    const size_t len = slash ? (size_t)(slash - spec) : strlen(spec);
    int known;
    k->f32 = f32_named(spec, len, &known);
    if (!k->f32)
        return pt_fail(e, "%s=%s: %s '%.*s' (avx512, avx2, neon, portable; optionally /avx512bf16, /neonbf16, "
                       "/avx512, /avx2, /neon or /portable for the bf16 products)", CPU_KERNELS_ENV, spec,
                       known ? "this CPU cannot run the kernels" : "unknown kernel set", (int)len, spec);
    k->bf16 = bf16_for(k->f32);
    if (!slash) return 0;
    k->bf16 = bf16_named(slash + 1, strlen(slash + 1), &known);
    if (!k->bf16)
        return pt_fail(e, "%s=%s: %s '%s' (avx512bf16, neonbf16, avx512, avx2, neon, portable)", CPU_KERNELS_ENV, spec,
                       known ? "this CPU cannot run the bf16 kernel" : "unknown bf16 kernel", slash + 1);
    return 0;
}

void cpu_kernels_describe(const CpuKernels *k, char *buf, size_t n) {
    const MatmulBf16Kernel *b = k->bf16;
    snprintf(buf, n, "fp32 %s (%dx%d tiles), bf16 %s (%s)", k->f32->name, k->f32->mr, k->f32->nr, b->name,
             b->on_fp32                             ? "bf16-rounded operands on the fp32 FMA tiles"
             : b == matmul_bf16_kernel_avx512()     ? "vdpbf16ps"
             : b == matmul_bf16_kernel_neon()       ? "bfdot"
                                                    : "plain C");
}

const char *cpu_kernels_bf16_notice(const CpuKernels *k) {
    if (k->bf16 == matmul_bf16_kernel_avx512() || k->bf16 == matmul_bf16_kernel_neon()) return NULL;
    if (k->bf16->on_fp32)
        return "bf16 matmuls: this CPU (or the kernel set chosen) has no AVX512_BF16 or BFDOT: a bf16 product costs "
               "an fp32 FMA and its operands are rounded on top, so bf16 runs at most at the fp32 speed (0.91-1.00x "
               "measured with AVX2), not faster";
    return "bf16 matmuls: portable kernel (no AVX2 or AVX-512 kernels on this CPU or in the set chosen): bf16 runs "
           "at about half the fp32 speed";
}

int cpu_kernels_lanes(const CpuKernels *k) { return k->f32->lanes; }

CpuKernels *cpu_kernels_choose(const CpuKernels *given) {
    CpuKernels *k = xmalloc(sizeof *k, "cpu kernels");
    PtError e;
    if (given) *k = *given;
    else if (cpu_kernels_named(k, getenv(CPU_KERNELS_ENV), &e)) die("%s", e.msg);
    if (!k->f32) k->f32 = matmul_kernel_best();
    if (!k->bf16) k->bf16 = matmul_bf16_kernel_best();
    if (k->classifier_rows < 1) k->classifier_rows = 256;
    return k;
}

const CpuKernels *cpu_kernels(const Device *d) { return d->impl; }
