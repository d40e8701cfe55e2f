// grpo.h: GRPO's clipped policy-ratio loss over sampled completions, as a
// loss head (model.h), defined as TRL 1.16's GRPOTrainer defines it (token-
// level importance sampling). Each completion is a segment of the batch's
// rows; its tokens are the rows the batch's mask counts, the row predicting
// the token. For a token with log-probability logp under the model trained,
// old under the model that sampled it, ref under the reference, and its
// completion's advantage A:
//
//     r = exp(logp - old)
//     L = -min(r A, clamp(r, 1 - epsilon_low, 1 + epsilon_high) A)
//         + beta r (exp(ref - logp) - (ref - logp) - 1)
//
// (the KL estimate weighted by the ratio: TRL's use_bias_correction_kl, its
// default, which makes its gradient the reverse KL's without bias)
// normalised per completion (GRPO_NORM_SEQUENCE, TRL's loss_type "grpo":
// each completion's mean over its tokens, then the mean over completions) or
// over all tokens (GRPO_NORM_TOKEN, TRL's "bnpo": the sum over every token
// divided by their number). The advantages (rewards normalised within a
// prompt's group) come from the caller.
#pragma once
#include "model.h"

typedef enum { GRPO_NORM_SEQUENCE, GRPO_NORM_TOKEN, GRPO_NORM_COUNT } GrpoNorm;

typedef struct {
    double epsilon_low, epsilon_high;   // the ratio's clip range [1 - low, 1 + high]
    double beta;                        // the KL penalty's weight; 0: no reference
    int norm;                           // GrpoNorm
} GrpoLoss;

const char *grpo_norm_name(int norm);   // "grpo", "bnpo" (TRL's loss_type)

// Advantages of n rewards in groups of `group` >= 2 (n a multiple of it; the
// completions of one prompt side by side), as TRL's GRPOTrainer makes them:
// each reward less its group's mean, divided by (std + 1e-4) where std is
// the group's (GRPO_SCALE_GROUP) or the whole batch's (GRPO_SCALE_BATCH)
// sample standard deviation (n - 1 below), or not divided (GRPO_SCALE_NONE,
// Dr. GRPO). Returns how many groups have all-equal rewards (no signal).
typedef enum { GRPO_SCALE_GROUP, GRPO_SCALE_BATCH, GRPO_SCALE_NONE, GRPO_SCALE_COUNT } GrpoScale;
int grpo_advantages(const double *rewards, int n, int group, int scale, double *advantages);

// The metrics of a pass, summed over its tokens (means: divide by tokens).
enum { GRPO_KL, GRPO_CLIP_LOW, GRPO_CLIP_HIGH, GRPO_TOKENS, GRPO_METRICS };

// One token: its loss (unnormalised) and *d = dL/dlogp; its KL and whether
// the clip held it (the ratio below 1 - low with A < 0, above 1 + high with
// A > 0) added to metrics (may be NULL).
double grpo_token_loss(const GrpoLoss *l, double logp, double old, double ref, double adv, double *d,
                       double metrics[GRPO_METRICS]);

// A batch's completions for the head: completion k is the flat rows
// [row0[k], last[k]] (a packed segment), its tokens the rows the mask
// counts. old_logp and ref_logp are per flat row (host, [B*T]); old_logp
// NULL: the model's own (strictly on-policy, r = 1); ref_logp may be NULL
// when beta is 0.
typedef struct {
    GrpoLoss loss;
    int n;
    const int *row0, *last;       // [n], host
    const double *advantage;      // [n], host
    const float *old_logp, *ref_logp;
    // Outputs of the last pass, host: every counted row's log-probability
    // ([B*T] of the caller's, the other rows untouched), the metrics added up.
    float *logp;
    double metrics[GRPO_METRICS];
} GrpoHead;

// The head over h (the caller's; it outlives the passes). Its loss sum and
// count: over completions (sequence norm) or over tokens (token norm).
LossHead grpo_loss_head(GrpoHead *h);
