// eval_compare.h: how far one model's next-token distributions are from a
// reference model's on a token dataset -- the quantization quality report of
// `pocket eval --ref` (the figures llama.cpp's `llama-perplexity
// --kl-divergence` prints for a quantized model against its base).
//
// Over every counted position of one pass (the loader of eval_loss, so the
// same positions as the loss), with p = softmax(reference logits) and
// q = softmax(model logits):
//     KL      = sum_v p(v) (log p(v) - log q(v))      (nats; mean and its standard error)
//     top-1   = argmax q == argmax p                   (share of positions)
//     loss    = -log q(target), -log p(target)          (means; perplexity = exp)
// all in double from the fp32 logits. Both models must share the vocabulary
// and be planned with the same B x T.
#pragma once
#include "../data/dataset.h"
#include "../model/model.h"

typedef struct {
    long positions;
    double kl_mean, kl_stderr, kl_max;
    double top1;                 // share in [0, 1]
    double loss, ref_loss;       // mean cross-entropy of the model and of the reference
} CompareStats;

int eval_compare(Model *m, Model *ref, const Dataset *d, int doc_mask, long max_batches, CompareStats *out,
                 PtError *e);

// One position: KL(p || q) from the two logit rows, whether their argmax
// agree, and -log q(target), -log p(target) (target < 0: not asked).
void compare_row(const float *ref_logits, const float *logits, int V, int target, double *kl, int *same_top1,
                 double *loss, double *ref_loss);
