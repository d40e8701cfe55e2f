// quant.h: the CPU backend's kernels of the int4 grid (model/int4_grid.h
// defines the grid, its codes and its host functions): the QAT backward and
// the scales' Adam, and the A16 rounding of activations. Each takes the
// Device first and runs on its threads, as every op of ops.h; cpu.c gives the
// grid's quant_fake and quant_dequant the device's threads too.
#pragma once
#include "../backend.h"

// ---- QAT kernels: the backward of fake-quant and the Adam of the scales
// (qat/qat.h says how a training step uses them).
//
// Gradient w.r.t. the weights w from g, the gradient w.r.t. the fake-quantized
// weights, in place on g. Straight-through estimator: it passes unchanged
// where w's rounded code lies inside the code range and is 0 where the clamp
// changed it (quant_inside false: more than half a step beyond the outermost
// grid point). Half a step, not the LSQ boundary itself, so the min and max of
// every group right after RTN init (codes exactly 0 and 15) keep their
// gradient. With grad_scale / grad_zero non-NULL it also writes, per (row,
// group), the sums over the group of g * dw/dscale and g * dw/dzero
// (straight-through on the rounding):
//     inside:  dw/dscale = (u - 8) - (w - zero) / scale,   dw/dzero = 0
//     clipped: dw/dscale = u_clip - 8,                     dw/dzero = 1
// (symmetric: no zero gradient). A group with scale 0 uses the limit
// scale -> 0+: w above zero counts as clipped at 15, below at the lowest code,
// w == zero as inside. No LSQ gradient scaling: Adam is invariant to it.
void quant_backward(Device *d, const QuantSpec *q, const float *w, float *g, int64_t rows, int64_t cols, const float *scale,
                    const float *zero, float *grad_scale, float *grad_zero);
// With frozen codes w = (u - 8) * scale + zero is smooth in (scale, zero):
// grad_scale = sum over the group of g * (u - 8), grad_zero = sum of g (0
// when symmetric), exactly; g is zeroed (the weights get no gradient).
void quant_backward_frozen(Device *d, const QuantSpec *q, const uint8_t *codes, float *g, int64_t rows, int64_t cols,
                           float *grad_scale, float *grad_zero);
// Adam (torch.optim.Adam semantics, no weight decay; betas and eps of c,
// `step` 1-based) on n fp16 values, each rounded to fp16 again after the
// update and clamped to [lo, hi]. An update smaller than half an fp16 ulp of
// the value is lost to that rounding.
void quant_adam(Device *d, float *p, const float *g, float *m, float *v, size_t n, const AdamWConfig *c, float lr,
                long step, float lo, float hi);

// A16 (int4_grid.h names the modes): x rounded in place to bf16 or fp16;
// A16_OFF leaves it.
void a16_round(Device *d, float *x, size_t n, int mode);
