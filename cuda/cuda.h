// cuda.h: the CUDA backend (cuda/*.cu) as C sees it: a Device whose ops run
// on one NVIDIA GPU, behind the same Backend table as the CPU (model/backend.h).
// Only built with `make CUDA=1` (which defines POCKET_CUDA for the C files).
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "../model/backend.h"

// GPUs the CUDA runtime sees (0 when there is none, or no driver).
int cuda_device_count(void);
// A device on GPU `ordinal`: its stream, its cuBLASLt handle; the workspace
// starts empty (dev_reserve). Fails with one line when no GPU is present or
// the ordinal is out of range. dev_free releases everything.
int cuda_device_init(Device *d, int ordinal, PtError *e);
// The backend's table (the device's be).
const Backend *backend_cuda(void);
// Waits until every op queued on the device's stream has finished (timing).
void cuda_synchronize(Device *d);
// The GPU's free and total memory in bytes (cudaMemGetInfo).
void cuda_memory(Device *d, size_t *free_bytes, size_t *total_bytes);
// One line naming the GPU (name, compute capability, memory, SMs) into buf.
void cuda_describe(Device *d, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
