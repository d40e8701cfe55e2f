// adamw.c: AdamW over the flat parameter buffer, the global gradient norm
// and clipping (ops.h).
#include <math.h>
#include <string.h>
#include "ops.h"

// The elementwise math follows torch.optim.AdamW (single-tensor path) op by
// op: the scalars are formed in double, rounded to float where PyTorch hands
// them to an fp32 kernel, and the fp32 expressions keep PyTorch's order and
// its fused multiply-adds (lerp, addcmul), so the results agree to the last
// bit or two.
typedef struct {
    float decay_mul;       // 1 - lr * wd (1 on tensors without TF_DECAY)
    float m_weight;        // lerp(m, g, 1 - beta1)
    float m_keep_weight;   // 1 - m_weight, for lerp's other form
    int lerp_small;        // PyTorch's lerp switches form at weight 0.5 to stay exact near both ends
    float v_keep, v_weight;
    float neg_step_size;   // -lr / (1 - beta1^step)
    float bias2_sqrt;      // sqrt(1 - beta2^step)
    float eps;
} AdamWScalars;

// GCC vectorizes this loop only under -fno-math-errno (sqrtf may set errno).
static void adamw_range(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, long n,
                        const AdamWScalars *s) {
    const AdamWScalars k = *s;
    for (long i = 0; i < n; i++) {
        float pi = p[i] * k.decay_mul, gi = g[i], mi = m[i], vi = v[i];
        mi = k.lerp_small ? fmaf(k.m_weight, gi - mi, mi) : fmaf(-(gi - mi), k.m_keep_weight, gi);
        vi = fmaf(k.v_weight * gi, gi, vi * k.v_keep);
        float denom = sqrtf(vi) / k.bias2_sqrt + k.eps;
        p[i] = pi + k.neg_step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

#define ADAMW_BLOCK 4096L   // floats per OpenMP work item

void adamw_step(Device *d, float *params, const float *grads, float *m, float *v, const TensorTable *tt,
                const AdamWConfig *c, float lr, long step) {
    const double beta1 = c->beta1, beta2 = c->beta2;
    AdamWScalars decayed = {
        .decay_mul = (float)(1.0 - (double)lr * c->weight_decay),
        .m_weight = (float)(1.0 - beta1),
        .v_keep = c->beta2,
        .v_weight = (float)(1.0 - beta2),
        .neg_step_size = (float)(-(double)lr / (1.0 - pow(beta1, (double)step))),
        .bias2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step)),
        .eps = c->eps,
    };
    decayed.m_keep_weight = 1.0f - decayed.m_weight;
    decayed.lerp_small = fabsf(decayed.m_weight) < 0.5f;
    AdamWScalars plain = decayed;
    plain.decay_mul = 1.0f;   // p * 1.0f == p exactly

#pragma omp parallel num_threads(d->threads)
    for (int k = 0; k < tt->n; k++) {
        const TensorInfo *t = &tt->t[k];
        const AdamWScalars *s = (t->flags & TF_DECAY) ? &decayed : &plain;
        const long n = (long)t->numel, n_blocks = (n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
        const size_t o = t->offset;
#pragma omp for schedule(static) nowait
        for (long b = 0; b < n_blocks; b++) {
            long lo = b * ADAMW_BLOCK, len = n - lo < ADAMW_BLOCK ? n - lo : ADAMW_BLOCK;
            adamw_range(params + o + lo, grads + o + lo, m + o + lo, v + o + lo, len, s);
        }
    }
}

size_t grad_norm_workspace_bytes(size_t n_params) { return (n_params / GRAD_NORM_CHUNK + 1) * sizeof(double) + 64; }

void grad_sumsq(Device *d, const float *grads, size_t n, double *partial) {
    const size_t n_chunks = (n + GRAD_NORM_CHUNK - 1) / GRAD_NORM_CHUNK;
#pragma omp parallel for schedule(static) num_threads(d->threads)
    for (size_t ch = 0; ch < n_chunks; ch++) {
        size_t lo = ch * GRAD_NORM_CHUNK, hi = lo + GRAD_NORM_CHUNK < n ? lo + GRAD_NORM_CHUNK : n;
        // Eight independent sums give the CPU parallel adds; the order is fixed.
        double acc[8] = {0};
        size_t i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int j = 0; j < 8; j++) {
                double x = grads[i + j];
                acc[j] += x * x;
            }
        for (; i < hi; i++) {
            double x = grads[i];
            acc[0] += x * x;
        }
        partial[ch] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
}

void grad_scale(Device *d, float *grads, size_t n, float s) {
    long total = (long)n;
#pragma omp parallel for schedule(static) num_threads(d->threads)
    for (long i = 0; i < total; i++) grads[i] *= s;
}

float grad_clip_factor(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), at most 1.
    float coef = (float)((double)max_norm / (norm + 1e-6));
    return coef < 1.0f ? coef : 1.0f;
}

