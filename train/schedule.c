// schedule.c: learning-rate schedules (schedule.h).
#include "schedule.h"
#include <math.h>

static const char *SCHED_NAMES[SCHED_KIND_COUNT] = {"constant", "cosine", "linear", "wsd"};

const char *schedule_kind_name(int kind) {
    return kind >= 0 && kind < SCHED_KIND_COUNT ? SCHED_NAMES[kind] : "?";
}

long schedule_wsd_decay_steps(const Schedule *s) {
    long decay = (long)floor((double)s->decay_fraction * (double)s->total + 0.5);
    long room = s->total - s->warmup;
    if (decay > room) decay = room;
    return decay > 0 ? decay : 0;
}

// Fraction of the way from `begin` to `begin + span`, clamped to [0, 1].
static double progress(long step, long begin, long span) {
    double p = (double)(step - begin) / (double)(span > 1 ? span : 1);
    return p < 0.0 ? 0.0 : p > 1.0 ? 1.0 : p;
}

float schedule_lr(const Schedule *s, float base_lr, long step) {
    if (step < 0) step = 0;
    double floor_ratio = s->min_lr_ratio, f;
    if (step < s->warmup) {
        f = (double)step / (double)s->warmup;
    } else {
        switch (s->kind) {
        case SCHED_COSINE: {
            double cosine = 0.5 * (1.0 + cos(M_PI * progress(step, s->warmup, s->total - s->warmup)));
            f = cosine * (1.0 - floor_ratio) + floor_ratio;
            break;
        }
        case SCHED_LINEAR:
            f = (1.0 - progress(step, s->warmup, s->total - s->warmup)) * (1.0 - floor_ratio) + floor_ratio;
            break;
        case SCHED_WSD: {
            long decay = schedule_wsd_decay_steps(s), decay_begin = s->total - decay;
            if (step < decay_begin) f = 1.0;
            else if (step >= s->total) f = floor_ratio;   // also when there is no decay phase
            else f = (1.0 - progress(step, decay_begin, decay)) * (1.0 - floor_ratio) + floor_ratio;
            break;
        }
        default: f = 1.0; break;   // SCHED_CONSTANT
        }
    }
    return (float)((double)base_lr * (f > 0.0 ? f : 0.0));
}
