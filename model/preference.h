// preference.h: preference losses over pairs of responses to one prompt,
// a chosen one and a rejected one, as a loss head (model.h): DPO's sigmoid
// loss (with label smoothing: conservative DPO), its robust form, IPO and
// SimPO, as TRL 1.16 defines them (DPOTrainer; SimPO: CPOTrainer with
// cpo_alpha 0). A response's log-probability is the sum over its response
// tokens (those the batch's mask counts) of log p(token | what precedes it),
// each pair's two sequences packed as segments of the batch's rows.
//
// With z the policy's log-ratio margin over the frozen reference,
//     z = (logp_c - ref_c) - (logp_r - ref_r),
//     sigmoid  L = -(1 - e) log sigmoid(beta z) - e log sigmoid(-beta z)
//     robust   L = (-(1 - e) log sigmoid(beta z) + e log sigmoid(-beta z)) / (1 - 2e)
//     ipo      L = (d - 1/(2 beta))^2, d = (logp_c - ref_c)/n_c - (logp_r - ref_r)/n_r
//     simpo    L = -(1 - e) log sigmoid(beta a) - e log sigmoid(-beta a), a = logp_c/n_c - logp_r/n_r - gamma/beta
// (n: the response's token count, at least 1; SimPO uses no reference).
// With sft_weight w > 0 a pass adds w times the chosen responses' mean
// next-token loss over all their tokens in the pass (TRL's "sft" loss type
// beside the preference one, RPO; CPOTrainer's cpo_alpha): it keeps the
// chosen answers likely, where the preference loss alone may lower both.
// The metrics are TRL's: rewards beta (logp - ref) (SimPO: beta logp/n),
// their margin and how often the chosen one's is larger, and the policy's
// log-probabilities (SimPO: per token).
#pragma once
#include "model.h"

typedef enum { PREF_SIGMOID, PREF_ROBUST, PREF_IPO, PREF_SIMPO, PREF_LOSS_COUNT } PrefLossKind;

typedef struct {
    int kind;                // PrefLossKind
    double beta;             // > 0
    double label_smoothing;  // e in [0, 0.5)
    double simpo_gamma;      // SimPO's target margin
    double sft_weight;       // w >= 0: the chosen responses' next-token loss beside the preference loss
} PrefLoss;

const char *pref_loss_name(int kind);   // "sigmoid", "robust", "ipo", "simpo"
int pref_loss_uses_reference(int kind);

// The metrics of a pass, summed over its pairs (means: divide by the pairs).
enum { PREF_REWARD_CHOSEN, PREF_REWARD_REJECTED, PREF_ACCURACY, PREF_MARGIN, PREF_LOGP_CHOSEN, PREF_LOGP_REJECTED,
       PREF_METRICS };
extern const char *const pref_metric_names[PREF_METRICS];   // "rewards/chosen", ... as TRL logs them

// One pair: its loss, the loss's derivatives w.r.t. the two summed
// log-probabilities, and its metrics added to metrics (may be NULL).
double pref_pair_loss(const PrefLoss *l, double logp_c, double logp_r, double ref_c, double ref_r, int n_c, int n_r,
                      double *d_c, double *d_r, double metrics[PREF_METRICS]);

// The sft term of a batch of n_pairs pairs (logps, n_tokens: [2 n_pairs],
// chosen 2g, rejected 2g+1): w (-sum logp_c) / (sum n_c), and *d_c its
// derivative w.r.t. every chosen response's summed log-probability; 0 when
// w is 0 or the chosen responses have no tokens.
double pref_sft_loss(double w, const double *logps, const int *n_tokens, int n_pairs, double *d_c);

// A batch's pairs for the head: candidate 2g is pair g's chosen response,
// 2g+1 its rejected one; candidate k's sequence is the flat rows
// [row0[k], last[k]] of the batch (a packed segment), its response the rows
// the batch's targets and mask count. ref[k]: the reference's summed
// log-probability (NULL when the loss uses none, or when only measuring).
typedef struct {
    PrefLoss loss;
    int measure_only;             // only the log-probabilities: no loss, no gradient
    int n_pairs;
    const int *row0, *last;       // [2 n_pairs], host
    const double *ref;            // [2 n_pairs], host, or NULL
    // Outputs of the last pass, host: each candidate's summed
    // log-probability and response token count ([2 n_pairs] of the
    // caller's), and the metrics added up over passes.
    double *logps;
    int *n_tokens;
    double metrics[PREF_METRICS];
} PrefHead;

// The head over ph (the caller's; it outlives the passes). Its loss sum is
// over the pairs (the sft term enters as n_pairs times its value), its count
// the pairs. The input must have targets and mask.
LossHead pref_loss_head(PrefHead *ph);
