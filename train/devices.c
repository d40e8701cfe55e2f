// devices.c: device names to backends (devices.h).
#include "devices.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "../model/ops/ops.h"
#ifdef POCKET_CUDA
#include "../cuda/cuda.h"
#endif

int device_open(Device *d, const char *name, int threads, PtError *e) {
    if (!strcmp(name, "cpu")) {
        cpu_device_init(d, threads, NULL);
        return 0;
    }
    if (strncmp(name, "cuda", 4) || (name[4] && (name[4] != ':' || !name[5])))
        return pt_fail(e, "unknown device '%s' (cpu, cuda, cuda:N)", name);
#ifdef POCKET_CUDA
    char *end;
    long ordinal = name[4] ? strtol(name + 5, &end, 10) : 0;
    if (name[4] && (*end || ordinal < 0)) return pt_fail(e, "device '%s': N of cuda:N is not a GPU number", name);
    // The CPU's threads still matter: the host prepares batches and runs QAT's host steps.
    if (threads > 0) omp_set_num_threads(threads);
    return cuda_device_init(d, (int)ordinal, e);
#else
    (void)threads;
    return pt_fail(e, "device '%s': this pocket was built without CUDA (make CUDA=1)", name);
#endif
}
