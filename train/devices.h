// devices.h: the devices a run can name: "cpu" (the CPU backend, model/ops/),
// and, in a pocket built with make CUDA=1, "cuda" or "cuda:N" (GPU N).
#pragma once
#include "../model/backend.h"

// Opens the named device; threads are the CPU's (0: all cores). Errors name
// the device: an unknown name, a GPU this build or machine does not have.
int device_open(Device *d, const char *name, int threads, PtError *e);
