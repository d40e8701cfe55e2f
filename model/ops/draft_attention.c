// draft_attention.c: the DFlash draft's attention (ops.h). Each block's rows
// see their sequence's context rows before the block's anchor and every row
// of their own block, without a causal mask. Work is split by (sequence, KV
// head): one task writes only its own sequence's context gradients and its
// own blocks' rows, so there are no races and the sums do not depend on the
// thread count.
#include <math.h>
#include <string.h>
#include "ops.h"

// The context rows block s sees: [*lo, end) of its sequence (then its blk block rows).
static int visible_context(const int *anchor, const int *ctx_lo, int s, int T, int *lo) {
    int p = anchor[s], l = ctx_lo ? ctx_lo[s] : 0;
    p = p < 0 ? 0 : p > T ? T : p;
    *lo = l < 0 ? 0 : l > p ? p : l;
    return p;
}

void draft_attention_forward(Device *d, float *out, float *lse, const float *q, const float *kc, const float *vc,
                             const float *kb, const float *vb, const int *anchor, const int *ctx_lo, int B, int T,
                             int A, int blk, int nq, int nkv, int hd) {
    const int S = B * A, group = nq / nkv, Q = nq * hd, KV = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic) collapse(2) num_threads(d->threads)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < nkv; g++) {
            float sc[T + DRAFT_ATTN_MAX_BLOCK];
            for (int j = 0; j < A; j++) {
                int lo;
                const int s = b * A + j, end = visible_context(anchor, ctx_lo, s, T, &lo), n_ctx = end - lo;
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int i = 0; i < blk; i++) {
                        const size_t row = (size_t)i * S + s;
                        const float *qr = q + row * Q + (size_t)h * hd;
                        float mx = -INFINITY;
                        for (int u = 0; u < n_ctx + blk; u++) {
                            const float *kr = u < n_ctx ? kc + ((size_t)b * T + lo + u) * KV + (size_t)g * hd
                                                        : kb + ((size_t)(u - n_ctx) * S + s) * KV + (size_t)g * hd;
                            float dot = 0;
                            for (int e = 0; e < hd; e++) dot = fmaf(qr[e], kr[e], dot);
                            sc[u] = dot * scale;
                            if (sc[u] > mx) mx = sc[u];
                        }
                        float sum = 0;
                        for (int u = 0; u < n_ctx + blk; u++) {
                            sc[u] = expf(sc[u] - mx);
                            sum += sc[u];
                        }
                        float *o = out + row * Q + (size_t)h * hd;
                        memset(o, 0, (size_t)hd * sizeof(float));
                        for (int u = 0; u < n_ctx + blk; u++) {
                            const float *vr = u < n_ctx ? vc + ((size_t)b * T + lo + u) * KV + (size_t)g * hd
                                                        : vb + ((size_t)(u - n_ctx) * S + s) * KV + (size_t)g * hd;
                            const float p = sc[u] / sum;
                            for (int e = 0; e < hd; e++) o[e] = fmaf(p, vr[e], o[e]);
                        }
                        lse[(size_t)h * blk * S + row] = mx + logf(sum);
                    }
            }
        }
}

void draft_attention_backward(Device *d, float *dq, float *dkc, float *dvc, float *dkb, float *dvb, const float *dout,
                              const float *out, const float *lse, const float *q, const float *kc, const float *vc,
                              const float *kb, const float *vb, const int *anchor, const int *ctx_lo, int B, int T,
                              int A, int blk, int nq, int nkv, int hd) {
    const int S = B * A, group = nq / nkv, Q = nq * hd, KV = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic) collapse(2) num_threads(d->threads)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < nkv; g++)
            for (int j = 0; j < A; j++) {
                int lo;
                const int s = b * A + j, end = visible_context(anchor, ctx_lo, s, T, &lo), n_ctx = end - lo;
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int i = 0; i < blk; i++) {
                        const size_t row = (size_t)i * S + s;
                        const float *qr = q + row * Q + (size_t)h * hd, *dor = dout + row * Q + (size_t)h * hd;
                        const float *orow = out + row * Q + (size_t)h * hd;
                        float *dqr = dq + row * Q + (size_t)h * hd;
                        const float l = lse[(size_t)h * blk * S + row];
                        float D = 0;   // sum_e dout * out = sum_u p_u (dout . v_u)
                        for (int e = 0; e < hd; e++) D = fmaf(dor[e], orow[e], D);
                        for (int u = 0; u < n_ctx + blk; u++) {
                            const size_t ko = u < n_ctx ? ((size_t)b * T + lo + u) * KV + (size_t)g * hd
                                                        : ((size_t)(u - n_ctx) * S + s) * KV + (size_t)g * hd;
                            const float *kr = (u < n_ctx ? kc : kb) + ko, *vr = (u < n_ctx ? vc : vb) + ko;
                            float *dkr = (u < n_ctx ? dkc : dkb) + ko, *dvr = (u < n_ctx ? dvc : dvb) + ko;
                            float dot = 0, dp = 0;
                            for (int e = 0; e < hd; e++) {
                                dot = fmaf(qr[e], kr[e], dot);
                                dp = fmaf(dor[e], vr[e], dp);
                            }
                            const float p = expf(dot * scale - l), ds = p * (dp - D) * scale;
                            for (int e = 0; e < hd; e++) {
                                dvr[e] = fmaf(p, dor[e], dvr[e]);
                                dqr[e] = fmaf(ds, kr[e], dqr[e]);
                                dkr[e] = fmaf(ds, qr[e], dkr[e]);
                            }
                        }
                    }
            }
}

void draft_attention_forward_ref(double *out, const double *q, const double *kc, const double *vc, const double *kb,
                                 const double *vb, const int *anchor, const int *ctx_lo, int B, int T, int A, int blk,
                                 int nq, int nkv, int hd) {
    const int S = B * A, Q = nq * hd, KV = nkv * hd;
    double *sc = xmalloc((size_t)(T + blk) * sizeof(double), "draft attention scores");
    for (int s = 0; s < S; s++) {
        int lo;
        const int b = s / A, end = visible_context(anchor, ctx_lo, s, T, &lo), n_ctx = end - lo;
        for (int h = 0; h < nq; h++) {
            const int g = h / (nq / nkv);
            for (int i = 0; i < blk; i++) {
                const double *qr = q + ((size_t)i * S + s) * Q + (size_t)h * hd;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u < n_ctx + blk; u++) {
                    const double *kr = u < n_ctx ? kc + ((size_t)b * T + lo + u) * KV + (size_t)g * hd
                                                 : kb + ((size_t)(u - n_ctx) * S + s) * KV + (size_t)g * hd;
                    double dot = 0;
                    for (int e = 0; e < hd; e++) dot += qr[e] * kr[e];
                    sc[u] = dot / sqrt((double)hd);
                    mx = fmax(mx, sc[u]);
                }
                for (int u = 0; u < n_ctx + blk; u++) sum += (sc[u] = exp(sc[u] - mx));
                double *o = out + ((size_t)i * S + s) * Q + (size_t)h * hd;
                for (int e = 0; e < hd; e++) o[e] = 0;
                for (int u = 0; u < n_ctx + blk; u++) {
                    const double *vr = u < n_ctx ? vc + ((size_t)b * T + lo + u) * KV + (size_t)g * hd
                                                 : vb + ((size_t)(u - n_ctx) * S + s) * KV + (size_t)g * hd;
                    for (int e = 0; e < hd; e++) o[e] += sc[u] / sum * vr[e];
                }
            }
        }
    }
    free(sc);
}
