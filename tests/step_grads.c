// step_grads: issue #20's check that a full training step gives the same
// gradients on every CPU the kernels run on (make test-arm64 builds it for
// x86 and for AArch64 from this one source and runs both).
//
//   step_grads run DIR            one step of each case (step_grads.h) on every kernel set
//                                 this CPU runs: DIR/ARCH.bin with the set the CPU picks
//                                 (POCKET_KERNELS is not read), DIR/ARCH-SET.bin with each
//                                 other set
//   step_grads compare REF FILE...  every FILE against REF: per case the loss and each
//                                 gradient tensor within the case's normwise bound
//                                 (max|b - a| / max|a|, per tensor); exit 1 if any is not
#include <errno.h>
#include <sys/stat.h>
#include "step_grads.h"

#if defined(__x86_64__)
#define STEP_ARCH "x86_64"
#elif defined(__aarch64__)
#define STEP_ARCH "aarch64"
#else
#define STEP_ARCH "other"
#endif

static void run_and_write(const char *dir, const CpuKernels *k, const char *suffix) {
    StepFile f;
    const double t0 = now_seconds();
    step_run_all(k, STEP_ARCH, &f);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s%s.bin", dir, STEP_ARCH, suffix);
    PtError e;
    if (step_file_write(path, &f, &e)) die("%s", e.msg);
    printf("%s: %s (%.1f s)\n", path, f.what, now_seconds() - t0);
    step_file_free(&f);
}

static int run(const char *dir) {
    if (mkdir(dir, 0777) && errno != EEXIST) die("%s: cannot create the directory: %s", dir, strerror(errno));
    PtError e;
    CpuKernels pick;
    if (cpu_kernels_named(&pick, NULL, &e)) die("%s", e.msg);
    run_and_write(dir, &pick, "");
    static const char *const sets[] = {"avx512", "avx2", "neon", "portable"};
    for (int i = 0; i < 4; i++) {
        CpuKernels k;
        if (cpu_kernels_named(&k, sets[i], &e)) continue;   // a set this CPU cannot run
        if (k.f32 == pick.f32 && k.bf16 == pick.bf16) continue;
        char suffix[32];
        snprintf(suffix, sizeof suffix, "-%s", sets[i]);
        run_and_write(dir, &k, suffix);
    }
    return 0;
}

static int compare(int n, char **paths) {
    PtError e;
    StepFile ref;
    if (step_file_read(paths[0], &ref, &e)) die("%s", e.msg);
    int failed = 0;
    for (int i = 1; i < n; i++) {
        StepFile f;
        if (step_file_read(paths[i], &f, &e)) die("%s", e.msg);
        printf("%s (%s)\n  against %s (%s):\n", paths[i], f.what, paths[0], ref.what);
        const int over = step_compare(paths[0], &ref, paths[i], &f, stdout, &e);
        if (over < 0) die("%s", e.msg);
        failed += over;
        step_file_free(&f);
    }
    step_file_free(&ref);
    if (failed) fprintf(stderr, "step_grads: %d case(s) over their bound\n", failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "run")) return run(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "compare")) return compare(argc - 2, argv + 2);
    fprintf(stderr, "usage: %s run DIR | %s compare REF FILE...\n", argv[0], argv[0]);
    return 2;
}
