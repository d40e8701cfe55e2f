// optim.h: AdamW over the flat parameter buffer, gradient norm / clipping /
// finiteness, and learning-rate schedules.
//
// Every function works on the flat buffers laid out by the tensor table
// (model/tensors.h): params, grads and the Adam moments m and v share the
// offsets. The padding floats between tensors are zero by contract; the
// gradient helpers walk the whole flat buffer (padding included), the update
// touches only the tensors' own floats.
//
// Typical step (grad_accum micro-batches already summed/averaged into grads):
//     double norm = grad_norm(grads, tt);
//     if (!isfinite(norm)) { skip the step; count a bad step; }
//     grad_scale(grads, tt, grad_clip_factor(norm, cfg.grad_clip));
//     float lr = schedule_lr(&sched, cfg.lr, updates_done);
//     adamw_step(params, grads, m, v, tt, &cfg, lr, updates_done + 1);
#pragma once
#include "../model/tensors.h"

typedef struct {
    float lr;             // base (peak) learning rate; the schedule scales it
    float beta1, beta2;   // moment decay rates, in [0, 1)
    float eps;            // added to sqrt(v_hat)
    float weight_decay;   // decoupled, only on TF_DECAY tensors
    float grad_clip;      // max global L2 norm; <= 0 disables clipping
} AdamWConfig;

// One AdamW update with PyTorch's torch.optim.AdamW semantics (fp32):
//     p -= lr * weight_decay * p          (TF_DECAY tensors only)
//     m  = beta1 * m + (1 - beta1) * g
//     v  = beta2 * v + (1 - beta2) * g * g
//     p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// `lr` is the scheduled rate for this update (c->lr is not read); `step` is
// 1-based: the first update is step 1. The four buffers must not overlap.
// OpenMP over the tensors' elements.
void adamw_step(float *params, const float *grads, float *m, float *v, const TensorTable *tt,
                const AdamWConfig *c, float lr, long step);

// Global L2 norm of all gradients, accumulated in double in fixed-size chunks
// and summed in a fixed order, so the result does not depend on the thread
// count. NaN or Inf when any gradient is non-finite.
double grad_norm(const float *grads, const TensorTable *tt);
// 1 when every gradient is finite, 0 otherwise.
int all_finite(const float *grads, const TensorTable *tt);
// grads *= s, every element.
void grad_scale(float *grads, const TensorTable *tt, float s);
// The factor torch.nn.utils.clip_grad_norm_ multiplies the gradients by:
// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
float grad_clip_factor(double norm, float max_norm);

// Learning-rate schedules. The values equal transformers' schedulers:
//     constant: get_constant_schedule_with_warmup
//     cosine:   get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate=min_lr_ratio)
//               (get_cosine_schedule_with_warmup when min_lr_ratio = 0)
//     linear:   get_linear_schedule_with_warmup, ending at min_lr_ratio * base
//               instead of 0 (identical when min_lr_ratio = 0)
//     wsd:      get_wsd_schedule(decay_type="linear", num_decay_steps =
//               round(decay_fraction * total)), except that the warmup starts
//               from 0 like the others (transformers starts it at min_lr_ratio).
// Step convention (as the HF Trainer uses them): `step` is the number of
// optimizer updates already done, so the update with 1-based AdamW step k uses
// schedule_lr(s, base, k - 1). Warmup is linear: lr = base * step / warmup for
// step < warmup, so the first update has lr 0 and the update at step = warmup
// has the full base lr. After warmup the decay runs over steps
// [warmup, total]; at step >= total every decaying schedule holds
// min_lr_ratio * base (constant holds base).
enum { SCHED_CONSTANT, SCHED_COSINE, SCHED_LINEAR, SCHED_WSD, SCHED_KIND_COUNT };

typedef struct {
    int kind;               // SCHED_*
    long warmup;            // warmup updates
    long total;             // total updates of the run
    float min_lr_ratio;     // final lr / base lr (cosine, linear, wsd)
    float decay_fraction;   // wsd: the last fraction of `total` that decays
} Schedule;

float schedule_lr(const Schedule *s, float base_lr, long step);
// Updates in the wsd decay phase: round(decay_fraction * total), at most total - warmup.
long schedule_wsd_decay_steps(const Schedule *s);
// "constant", "cosine", "linear", "wsd" (index = SCHED_*), for messages and recipes.
const char *schedule_kind_name(int kind);
