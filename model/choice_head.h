// choice_head.h: the decision head (`[train] mode = choice`, `pocket choose`).
//
// A candidate answer is scored by one row of the output projection: with h the
// final-normed hidden state at the last token of (prompt + candidate),
//     score = h . lm_head[choice_id]
// which is exactly that token's logit at that position. The row is reserved:
// its token is never an input (a row past the tokenizer's tokens, or one the
// trainer appends), so with a tied embedding the row is free to be the head.
// Any runtime that computes logits computes the score (the MNN package on the
// phone, transformers on the HF export), and the int4 export quantizes the row
// with the rest of lm_head (each row has its own groups, so the head's scale
// and zero points are its own). The loss of a group of K candidates is the
// cross-entropy over their K scores.
//
// In training every (prompt + candidate) is a packed segment of its own (the
// prompt repeated), so no attention mask beyond the packed segments is needed;
// at inference the prompt is fed once into a KV cache and each candidate from
// the prompt's cache position (choice_score_shared).
#pragma once
#include "model.h"

// The groups of a batch: group g's candidates end at the flat rows
// last[first[g] .. first[g+1]) (row b*T+t), and label[g] in [0, K) is the
// right one. Host memory.
typedef struct ChoiceGroups {
    int n_groups;
    const int *first;   // [n_groups + 1]
    const int *last;    // [first[n_groups]]
    const int *label;   // [n_groups]
} ChoiceGroups;

// After the final norm of a forward over the batch (m->a.lnf): the scores of
// every candidate into scores_out (host, [first[n_groups]], may be NULL), and
// the SUM over groups of the cross-entropy over each group's scores. With dh
// (device, [N,H], accumulated) the backward: grad_scale * dL/dh into dh and
// dL/d(head row) into the model's lm_head gradient (none when the model has
// no lm_head gradient: a frozen base). *count = n_groups.
double choice_head_loss(Model *m, const ChoiceGroups *g, float *dh, float grad_scale, float *scores_out, int *count);
// The same as a loss head (model.h) over g (the caller's, it outlives the pass).
LossHead choice_loss_head(const ChoiceGroups *g);

// Scores of n candidates behind one prompt on a cache plan
// (model_plan_cache with room for the prompt and the longest candidate): the
// prompt is fed once; each candidate continues from the prompt's cache
// position. prompt_len >= 1; each candidate has at least one token.
void choice_score_shared(Model *m, const int *prompt, int prompt_len, const int *const *cand, const int *cand_len,
                         int n, float *scores);
// The same scores with each (prompt + candidate) fed alone from position 0.
void choice_score_alone(Model *m, const int *prompt, int prompt_len, const int *const *cand, const int *cand_len,
                        int n, float *scores);

// Softmax of n scores into p (in double, as the loss).
void choice_softmax(const float *scores, int n, double *p);
