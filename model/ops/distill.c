// distill.c: the lm head with a distillation loss (classifier_distill in
// ops.h): cross-entropy against the data's targets mixed with the KL
// divergence from a teacher's next-token distribution, chunked over token
// rows as classifier.c is, so that no N x V array ever exists.
//
// Per counted position, with student logits z, teacher logits zt (or the
// teacher's top-k logits over ids k_i), temperature T, weights a = ce_weight
// and b = kd_weight:
//     ps   = softmax(z),  psT = softmax(z / T),  pt = softmax(zt / T)
//     loss = a * (-log ps[target]) + b * T^2 * sum_v pt(v) (log pt(v) - log psT(v))
//     dloss/dz = a * (ps - onehot(target)) + b * T * (psT - pt)
// (Hinton's T^2 keeps the soft term's gradient on the scale of the hard
// one's.) With top-k the teacher is known on its k ids, pt_i = exp(l_i / T -
// lse), and as the mass pt_rest of the other tokens together: the KL is over
// those k + 1 outcomes (psT_rest = 1 - psT over the ids), zero when the
// student is the teacher; its gradient is psT - pt on the ids and
// psT (1 - pt_rest / psT_rest) elsewhere (the teacher's rest spread over the
// student's own rest in proportion).
// Reversed (dense teacher), the KL is the student's: sum_v psT (log psT -
// log pt), and its part of the gradient b * T * psT (log psT - log pt - KL);
// the KL is summed over the row before the gradient can be written.
#include <math.h>
#include "../../util/util.h"
#include "fast_exp.h"
#include "ops.h"

static inline int is_counted(const int *targets, const uint8_t *mask, int n) {
    return targets && targets[n] >= 0 && (!mask || mask[n] != 0);
}

static float max_of(const float *z, int n) {
    float lane[16];
    for (int l = 0; l < 16; l++) lane[l] = -INFINITY;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) lane[l] = z[i + l] > lane[l] ? z[i + l] : lane[l];
    for (; i < n; i++) lane[0] = z[i] > lane[0] ? z[i] : lane[0];
    float m = lane[0];
    for (int l = 1; l < 16; l++) m = lane[l] > m ? lane[l] : m;
    return m;
}

// log sum_i exp(z[i] * inv_t) for a row whose largest value is z_max; blocks
// summed in float, the blocks in double (as classifier.c's row_loss).
static double lse_scaled(const float *z, int n, float z_max, float inv_t) {
    double sum = 0.0;
    for (int i0 = 0; i0 < n; i0 += EXP_CHUNK) {
        const int m = n - i0 < EXP_CHUNK ? n - i0 : EXP_CHUNK;
        float e[EXP_CHUNK];
        #pragma omp simd
        for (int i = 0; i < m; i++) e[i] = (z[i0 + i] - z_max) * inv_t;
        exp_block(e, e, m);
        float block = 0.0f;
        #pragma omp simd reduction(+:block)
        for (int i = 0; i < m; i++) block += e[i];
        sum += block;
    }
    return (double)z_max * inv_t + log(sum);
}

// A chunk of m logits of a row: the student's log psT (z, its log-sum-exp
// at T ls) and the dense teacher's log pt (zt, lt).
static inline void chunk_log_probs(const float *z, const float *zt, int m, float inv_t, float ls, float lt,
                                   float *log_ps, float *log_pt) {
    #pragma omp simd
    for (int i = 0; i < m; i++) {
        log_pt[i] = zt[i] * inv_t - lt;
        log_ps[i] = z[i] * inv_t - ls;
    }
}

// The student's probabilities at temperature 1 of a chunk (the
// cross-entropy's part of the gradient): psT itself when T is 1.
static inline void chunk_probs_at_one(float *p1, const float *z, const float *ps, int m, float T, float l1) {
    #pragma omp simd
    for (int i = 0; i < m; i++) p1[i] = T == 1.0f ? ps[i] : z[i] - l1;
    if (T != 1.0f) exp_block(p1, p1, m);
}

// One row. z[V] (overwritten by the gradient when make_grad), the teacher's
// zt[V] (dense) or its top-k (ids, logits, k, log-sum-exp lt); writes the
// row's two parts and returns its mixed loss.
static double row_distill(float *z, const float *zt, const int *ids, const float *tl, float lt_k, int k, int target,
                          int V, const DistillTarget *t, float scale, int make_grad, double *ce_out, double *kl_out) {
    const float T = t->temperature, inv_t = 1.0f / T, a = t->ce_weight, b = t->kd_weight;
    const float z_max = max_of(z, V), z_target = z[target];
    const double lse1 = lse_scaled(z, V, z_max, 1.0f);
    const double lse_s = T == 1.0f ? lse1 : lse_scaled(z, V, z_max, inv_t);
    const float ls = (float)lse_s, l1 = (float)lse1;
    double kl = 0.0;
    if (k == 0 && t->reverse) {
        const float lt = (float)lse_scaled(zt, V, max_of(zt, V), inv_t);
        for (int i0 = 0; i0 < V; i0 += EXP_CHUNK) {   // the KL first: the gradient needs it
            const int m = V - i0 < EXP_CHUNK ? V - i0 : EXP_CHUNK;
            float log_ps[EXP_CHUNK], log_pt[EXP_CHUNK], ps[EXP_CHUNK];
            chunk_log_probs(z + i0, zt + i0, m, inv_t, ls, lt, log_ps, log_pt);
            exp_block(ps, log_ps, m);
            float block = 0.0f;
            #pragma omp simd reduction(+:block)
            for (int i = 0; i < m; i++) block += ps[i] * (log_ps[i] - log_pt[i]);
            kl += block;
        }
        const float klf = (float)kl;
        for (int i0 = 0; make_grad && i0 < V; i0 += EXP_CHUNK) {
            const int m = V - i0 < EXP_CHUNK ? V - i0 : EXP_CHUNK;
            float log_ps[EXP_CHUNK], log_pt[EXP_CHUNK], ps[EXP_CHUNK], p1[EXP_CHUNK];
            chunk_log_probs(z + i0, zt + i0, m, inv_t, ls, lt, log_ps, log_pt);
            exp_block(ps, log_ps, m);
            chunk_probs_at_one(p1, z + i0, ps, m, T, l1);
            #pragma omp simd
            for (int i = 0; i < m; i++)
                z[i0 + i] = scale * (a * p1[i] + b * T * ps[i] * (log_ps[i] - log_pt[i] - klf));
        }
    } else if (k == 0) {
        const float lt = (float)lse_scaled(zt, V, max_of(zt, V), inv_t);
        for (int i0 = 0; i0 < V; i0 += EXP_CHUNK) {
            const int m = V - i0 < EXP_CHUNK ? V - i0 : EXP_CHUNK;
            float log_pt[EXP_CHUNK], pt[EXP_CHUNK], log_ps[EXP_CHUNK];
            chunk_log_probs(z + i0, zt + i0, m, inv_t, ls, lt, log_ps, log_pt);
            exp_block(pt, log_pt, m);
            float block = 0.0f;
            #pragma omp simd reduction(+:block)
            for (int i = 0; i < m; i++) block += pt[i] * (log_pt[i] - log_ps[i]);
            kl += block;
            if (!make_grad) continue;
            float ps[EXP_CHUNK], p1[EXP_CHUNK];
            exp_block(ps, log_ps, m);
            chunk_probs_at_one(p1, z + i0, ps, m, T, l1);
            #pragma omp simd
            for (int i = 0; i < m; i++) z[i0 + i] = scale * (a * p1[i] + b * T * (ps[i] - pt[i]));
        }
    } else {
        // The teacher's k ids and the rest as one outcome.
        float pt[DISTILL_MAX_TOPK], pk[DISTILL_MAX_TOPK];
        double q_sum = 0.0, p_sum = 0.0;
        for (int j = 0; j < k; j++) {
            const double log_q = (double)tl[j] * inv_t - lt_k, log_p = (double)z[ids[j]] * inv_t - lse_s;
            pt[j] = (float)exp(log_q);
            pk[j] = (float)exp(log_p);
            kl += exp(log_q) * (log_q - log_p);
            q_sum += exp(log_q);
            p_sum += exp(log_p);
        }
        const double q_rest = q_sum < 1.0 ? 1.0 - q_sum : 0.0, p_rest = p_sum < 1.0 - 1e-30 ? 1.0 - p_sum : 1e-30;
        if (q_rest > 0) kl += q_rest * (log(q_rest) - log(p_rest));
        if (make_grad) {
            const float spread = 1.0f - (float)(q_rest / p_rest);   // psT's factor off the ids
            for (int i0 = 0; i0 < V; i0 += EXP_CHUNK) {
                const int m = V - i0 < EXP_CHUNK ? V - i0 : EXP_CHUNK;
                float ps[EXP_CHUNK], p1[EXP_CHUNK];
                #pragma omp simd
                for (int i = 0; i < m; i++) {
                    ps[i] = z[i0 + i] * inv_t - ls;
                    p1[i] = z[i0 + i] - l1;
                }
                exp_block(ps, ps, m);
                exp_block(p1, p1, m);
                #pragma omp simd
                for (int i = 0; i < m; i++) z[i0 + i] = scale * (a * p1[i] + b * T * ps[i] * spread);
            }
            // on the ids psT - pt, not psT * spread
            for (int j = 0; j < k; j++) z[ids[j]] += scale * b * T * (pk[j] * (1.0f - spread) - pt[j]);
        }
    }
    if (make_grad) z[target] -= scale * a;
    *ce_out = lse1 - (double)z_target;
    *kl_out = kl > 0 ? kl : 0.0;   // float rounding can leave -1e-9 for equal rows
    return (double)a * *ce_out + (double)b * T * T * *kl_out;
}

double classifier_distill(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                          const uint8_t *mask, int N, int C, int V, float scale, const DistillTarget *t,
                          DistillSums *sums, int *count, MatmulPrecision p) {
    for (int n = 0; targets && n < N; n++)
        if (targets[n] >= V) die("classifier_distill: target %d at row %d is outside the vocabulary of %d", targets[n], n, V);
    if (t->k < 0 || t->k > DISTILL_MAX_TOPK) die("classifier_distill: top-k %d outside [0, %d]", t->k, DISTILL_MAX_TOPK);
    // The student's and the teacher's logits share the classifier's workspace:
    // half of its rows each (classifier_workspace_bytes).
    const int rows_ws = N < cpu_kernels(d)->classifier_rows ? N : cpu_kernels(d)->classifier_rows;
    const int chunk = rows_ws / 2 < 1 ? 1 : rows_ws / 2;
    const size_t mark = dev_scratch_mark(d);
    float *zs = dev_scratch(d, (size_t)chunk * V * sizeof(float), "distillation logits");
    float *zt = t->k ? NULL : dev_scratch(d, (size_t)chunk * V * sizeof(float), "teacher logits");
    double *row = dev_scratch(d, (size_t)chunk * 3 * sizeof(double), "distillation row losses");
    const int make_grad = dh != NULL || dW != NULL;
    double loss = 0.0, ce = 0.0, kl = 0.0;
    int counted = 0;
    int n0 = 0;
    while (n0 < N) {
        while (n0 < N && !is_counted(targets, mask, n0)) n0++;
        if (n0 == N) break;
        int n1 = n0 + chunk < N ? n0 + chunk : N;
        while (n1 - 1 > n0 && !is_counted(targets, mask, n1 - 1)) n1--;
        const int rows = n1 - n0;
        matmul_forward(d, zs, h + (size_t)n0 * C, W, rows, C, V, p);
        if (!t->k) matmul_forward(d, zt, t->h + (size_t)n0 * C, t->W, rows, C, V, p);
        #pragma omp parallel for schedule(static) num_threads(d->threads)
        for (int r = 0; r < rows; r++) {
            const int n = n0 + r;
            double *out = row + 3 * (size_t)r;
            out[0] = out[1] = out[2] = 0.0;
            float *z = zs + (size_t)r * V;
            if (!is_counted(targets, mask, n)) {
                if (make_grad) memset(z, 0, (size_t)V * sizeof(float));
                continue;
            }
            const size_t kk = (size_t)n * (size_t)t->k;
            out[0] = row_distill(z, t->k ? NULL : zt + (size_t)r * V, t->k ? t->topk_ids + kk : NULL,
                                 t->k ? t->topk_logits + kk : NULL, t->k ? t->topk_lse[n] : 0.0f, t->k, targets[n], V,
                                 t, scale, make_grad, &out[1], &out[2]);
        }
        for (int r = 0; r < rows; r++)   // in row order: independent of the thread count
            if (is_counted(targets, mask, n0 + r)) {
                loss += row[3 * r];
                ce += row[3 * r + 1];
                kl += row[3 * r + 2];
                counted++;
            }
        if (make_grad) matmul_backward(d, dh ? dh + (size_t)n0 * C : NULL, dW, zs, h + (size_t)n0 * C, W, rows, C, V, p);
        n0 = n1;
    }
    dev_scratch_release(d, mark);
    if (sums) {
        sums->ce = ce;
        sums->kl = kl;
    }
    if (count) *count = counted;
    return loss;
}

double classifier_distill_ref(double *dh, double *dW, const double *h, const double *W, const int *targets,
                              const uint8_t *mask, int N, int C, int V, double scale, const double *teacher_logits,
                              const int *topk_ids, const double *topk_logits, const double *topk_lse, int k,
                              double ce_weight, double kd_weight, double T, int reverse, double *ce_sum,
                              double *kl_sum) {
    double *z = xmalloc((size_t)V * sizeof(double), "distill_ref logits");
    double *pt = xmalloc((size_t)V * sizeof(double), "distill_ref teacher");
    int *in_k = xmalloc((size_t)V * sizeof(int), "distill_ref ids");
    double loss = 0.0, ce_total = 0.0, kl_total = 0.0;
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0 || (mask && !mask[n])) continue;
        const double *hn = h + (size_t)n * C;
        for (int i = 0; i < V; i++) {
            double acc = 0.0;
            for (int c = 0; c < C; c++) acc += hn[c] * W[(size_t)i * C + c];
            z[i] = acc;
        }
        double zmax = -INFINITY, s1 = 0.0, sT = 0.0;
        for (int i = 0; i < V; i++) zmax = z[i] > zmax ? z[i] : zmax;
        for (int i = 0; i < V; i++) {
            s1 += exp(z[i] - zmax);
            sT += exp((z[i] - zmax) / T);
        }
        const double lse1 = zmax + log(s1), lseT = zmax / T + log(sT);
        // The target of every token: the teacher's distribution at T (dense);
        // with top-k its exact probability on the ids and, elsewhere, its
        // rest spread over the student's own rest in proportion.
        double kl = 0.0;
        if (k == 0) {
            const double *zt = teacher_logits + (size_t)n * V;
            double tmax = -INFINITY, tsum = 0.0;
            for (int i = 0; i < V; i++) tmax = zt[i] > tmax ? zt[i] : tmax;
            for (int i = 0; i < V; i++) tsum += exp((zt[i] - tmax) / T);
            for (int i = 0; i < V; i++) {
                pt[i] = exp((zt[i] - tmax) / T) / tsum;
                if (reverse) kl += exp(z[i] / T - lseT) * ((z[i] / T - lseT) - log(pt[i]));
                else if (pt[i] > 0) kl += pt[i] * (log(pt[i]) - (z[i] / T - lseT));
            }
            // Reversed, the same gradient formula below holds with the target
            // psT - psT (log psT - log pt - KL) in place of pt.
            for (int i = 0; reverse && i < V; i++) {
                const double log_ps = z[i] / T - lseT;
                pt[i] = exp(log_ps) * (1.0 - (log_ps - log(pt[i]) - kl));
            }
        } else {
            double q_sum = 0.0, p_sum = 0.0;
            for (int i = 0; i < V; i++) in_k[i] = 0;
            for (int j = 0; j < k; j++) {
                const int id = topk_ids[(size_t)n * k + j];
                const double q = exp(topk_logits[(size_t)n * k + j] / T - topk_lse[n]), p = exp(z[id] / T - lseT);
                kl += q * (log(q) - log(p));
                q_sum += q;
                p_sum += p;
                pt[id] = q;
                in_k[id] = 1;
            }
            const double q_rest = 1.0 - q_sum, p_rest = 1.0 - p_sum;
            if (q_rest > 0) kl += q_rest * (log(q_rest) - log(p_rest));
            for (int i = 0; i < V; i++)
                if (!in_k[i]) pt[i] = q_rest * exp(z[i] / T - lseT) / p_rest;
        }
        const double ce = lse1 - z[targets[n]];
        ce_total += ce;
        kl_total += kl;
        loss += ce_weight * ce + kd_weight * T * T * kl;
        for (int i = 0; i < V; i++) {
            double g = ce_weight * (exp(z[i] - lse1) - (i == targets[n])) + kd_weight * T * (exp(z[i] / T - lseT) - pt[i]);
            g *= scale;
            for (int c = 0; c < C; c++) {
                if (dh) dh[(size_t)n * C + c] += g * W[(size_t)i * C + c];
                if (dW) dW[(size_t)i * C + c] += g * hn[c];
            }
        }
    }
    free(z);
    free(pt);
    free(in_k);
    if (ce_sum) *ce_sum = ce_total;
    if (kl_sum) *kl_sum = kl_total;
    return loss;
}
