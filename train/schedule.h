// schedule.h: learning-rate schedules, as functions of the number of
// optimizer updates done. (AdamW itself is a backend op, model/ops/ops.h.)
#pragma once

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
