// dropout_mask.h: the mask is model/dropout_mask.h (the decoder's definition,
// which the CPU and CUDA kernels implement); this forward serves the files that
// still include it from here (train/trainer.c, train/draft_train.c).
#pragma once
#include "../dropout_mask.h"
