// attention.c: causal grouped-query attention, flash style. The forward keeps
// only the log-sum-exp of each query's scaled scores; the backward recomputes
// the probabilities from it, so nothing of size T x T is ever stored.
//
// Layout: row n = b*T + t; q rows hold nq heads of hd, k/v rows nkv heads.
// Query head h reads KV head h / (nq/nkv) directly (no repeated copies).
//
// Work is cut into blocks of KEY_BLOCK keys. A block of K (and V) is copied
// transposed, [hd][KEY_BLOCK], so the scores of one query against the whole
// block are a loop over d of vector FMAs across keys (no horizontal sums),
// and the exponentials of a block are one vectorised loop (exp_block).
// Note: the build is ISO C, where gcc does not contract a*b+c into an FMA on
// its own, so the hot loops call fmaf.
#include <math.h>
#include <string.h>
#include <omp.h>
#include "../../util/util.h"
#include "ops.h"

enum { KEY_BLOCK = 64, QUERY_TILE = 16 };

typedef struct {
    int B, T, nq, nkv, hd, rep;
    size_t q_stride, kv_stride;
    float scale;
} Shape;

static Shape make_shape(int B, int T, int nq, int nkv, int hd, const char *who) {
    if (B <= 0 || T <= 0 || hd <= 0 || nq <= 0 || nkv <= 0 || nq % nkv != 0)
        die("%s: bad shape B=%d T=%d hd=%d, or %d query heads not a multiple of %d KV heads", who, B, T, hd, nq, nkv);
    Shape s = {B, T, nq, nkv, hd, nq / nkv, (size_t)nq * hd, (size_t)nkv * hd, 1.0f / sqrtf((float)hd)};
    return s;
}

// exp(x) for a whole block, vectorisable (a call to expf per key would cost
// more than the key's FMAs): x = k ln2 + r with |r| <= ln2/2, e^r from its
// Taylor series to r^7 (truncation < 1e-8 relative), 2^k put into the exponent
// bits. Measured within 0.94 ulp of exp on [-87, 0]; x < -87 (and -inf) gives 0.
static void exp_block(float *y, const float *x, int n) {
    #pragma omp simd
    for (int i = 0; i < n; i++) {
        float xi = x[i] < -87.0f ? -87.0f : (x[i] > 88.0f ? 88.0f : x[i]);
        float k = (xi * 1.44269504f + 12582912.0f) - 12582912.0f;   // round to nearest integer
        float r = (xi - k * 0.693359375f) - k * -2.12194440e-4f;     // ln2 split in two parts
        float p = 1.0f / 5040.0f;
        p = fmaf(p, r, 1.0f / 720.0f);
        p = fmaf(p, r, 1.0f / 120.0f);
        p = fmaf(p, r, 1.0f / 24.0f);
        p = fmaf(p, r, 1.0f / 6.0f);
        p = fmaf(p, r, 0.5f);
        p = fmaf(p, r, 1.0f);
        p = fmaf(p, r, 1.0f);
        union { int32_t i; float f; } two_k = {.i = ((int32_t)k + 127) << 23};
        y[i] = x[i] < -87.0f ? 0.0f : p * two_k.f;
    }
}

// Keys [u0, u0+nk) of one KV head, transposed into dst[hd][KEY_BLOCK]; the
// columns past nk are zero.
static void load_transposed(float *dst, const float *head, size_t stride, int u0, int nk, int hd) {
    for (int d = 0; d < hd; d++) {
        float *row = dst + (size_t)d * KEY_BLOCK;
        for (int j = 0; j < nk; j++) row[j] = head[(size_t)(u0 + j) * stride + d];
        for (int j = nk; j < KEY_BLOCK; j++) row[j] = 0.0f;
    }
}

// out[j] = x . block[:, j] for all KEY_BLOCK columns of a transposed block.
static inline void block_dots(float *out, const float *x, const float *block_t, int hd) {
    for (int j = 0; j < KEY_BLOCK; j++) out[j] = 0.0f;
    for (int d = 0; d < hd; d++) {
        const float xd = x[d], *row = block_t + (size_t)d * KEY_BLOCK;
        #pragma omp simd
        for (int j = 0; j < KEY_BLOCK; j++) out[j] = fmaf(xd, row[j], out[j]);
    }
}

// Scales the raw dots of one query into scores and sets keys it may not see
// (j >= lim, i.e. later positions or past the block, or another segment) to
// -inf. Returns the block maximum, -inf when nothing is visible.
static inline float mask_scores(float *s, int lim, const int *seg_block, int seg_t, float scale) {
    float block_max = -INFINITY;
    #pragma omp simd reduction(max:block_max)
    for (int j = 0; j < KEY_BLOCK; j++) {
        s[j] = (j < lim && seg_block[j] == seg_t) ? s[j] * scale : -INFINITY;
        block_max = s[j] > block_max ? s[j] : block_max;
    }
    return block_max;
}

// Whether any of the first lim keys of the block shares the query's segment.
// Checked before the dot products: with packed short documents most blocks
// belong to other documents, and 64 integer compares cost far less than
// 64 * hd FMAs.
static inline int segment_visible(const int *seg_block, int lim, int seg_t) {
    int any = 0;
    #pragma omp simd reduction(|:any)
    for (int j = 0; j < KEY_BLOCK; j++) any |= (j < lim) & (seg_block[j] == seg_t);
    return any;
}

// Segment ids of keys [u0, u0+nk); all 0 when there is no packing.
static void load_segments(int *seg_block, const int *seg_b, int u0, int nk) {
    for (int j = 0; j < KEY_BLOCK; j++) seg_block[j] = seg_b && j < nk ? seg_b[u0 + j] : 0;
}

// acc[0, hd) += sum over j < n of w[j] * rows[j * stride + (0, hd)]. The
// accumulator is held in a fixed-size local chunk across the whole j loop so
// it stays in registers (updating acc in memory once per j would chain every
// FMA through a store and a reload).
#define ROW_SUM_CHUNK(W)                                                         \
    for (; d0 + (W) <= hd; d0 += (W)) {                                          \
        float a[W];                                                              \
        for (int i = 0; i < (W); i++) a[i] = acc[d0 + i];                        \
        for (int j = 0; j < n; j++) {                                            \
            const float wj = w[j], *r = rows + (size_t)j * stride + d0;          \
            _Pragma("omp simd")                                                  \
            for (int i = 0; i < (W); i++) a[i] = fmaf(wj, r[i], a[i]);           \
        }                                                                        \
        for (int i = 0; i < (W); i++) acc[d0 + i] = a[i];                        \
    }
static void weighted_row_sum(float *restrict acc, const float *restrict w, const float *restrict rows, size_t stride,
                             int n, int hd) {
    int d0 = 0;
    ROW_SUM_CHUNK(64)
    ROW_SUM_CHUNK(16)
    ROW_SUM_CHUNK(1)
}
#undef ROW_SUM_CHUNK

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int *seg, int B, int T, int nq, int nkv, int hd) {
    const Shape sh = make_shape(B, T, nq, nkv, hd, "attention_forward");
    const int n_tiles = (T + QUERY_TILE - 1) / QUERY_TILE;
    const size_t per_thread = (size_t)KEY_BLOCK * hd + (size_t)QUERY_TILE * hd;
    float *scratch = xmalloc((size_t)omp_get_max_threads() * per_thread * sizeof(float), "attention scratch");
    #pragma omp parallel
    {
        float *k_t = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *acc = k_t + (size_t)KEY_BLOCK * hd;   // [QUERY_TILE][hd]
        float s[KEY_BLOCK], p[KEY_BLOCK], run_max[QUERY_TILE];
        double run_sum[QUERY_TILE];   // sum of exp(score - run_max), in double
        int seg_block[KEY_BLOCK];
        #pragma omp for collapse(3) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < nq; h++)
                for (int tile = 0; tile < n_tiles; tile++) {
                    const int t0 = tile * QUERY_TILE, t1 = t0 + QUERY_TILE < T ? t0 + QUERY_TILE : T;
                    const int g = h / sh.rep;
                    const float *k_head = k + (size_t)b * T * sh.kv_stride + (size_t)g * hd;
                    const float *v_head = v + (size_t)b * T * sh.kv_stride + (size_t)g * hd;
                    const int *seg_b = seg ? seg + (size_t)b * T : NULL;
                    memset(acc, 0, (size_t)QUERY_TILE * hd * sizeof(float));
                    for (int i = 0; i < QUERY_TILE; i++) run_max[i] = -INFINITY, run_sum[i] = 0.0;
                    // Keys past t1 - 1 are invisible to the whole tile.
                    for (int u0 = 0; u0 < t1; u0 += KEY_BLOCK) {
                        const int nk = u0 + KEY_BLOCK < t1 ? KEY_BLOCK : t1 - u0;
                        load_transposed(k_t, k_head, sh.kv_stride, u0, nk, hd);
                        load_segments(seg_block, seg_b, u0, nk);
                        for (int t = t0 > u0 ? t0 : u0; t < t1; t++) {
                            const int i = t - t0, lim = t - u0 + 1 < nk ? t - u0 + 1 : nk;
                            const int seg_t = seg_b ? seg_b[t] : 0;
                            if (!segment_visible(seg_block, lim, seg_t)) continue;   // all in other documents
                            const float *qt = q + ((size_t)b * T + t) * sh.q_stride + (size_t)h * hd;
                            block_dots(s, qt, k_t, hd);
                            const float block_max = mask_scores(s, lim, seg_block, seg_t, sh.scale);
                            float *acc_t = acc + (size_t)i * hd;
                            if (block_max > run_max[i]) {
                                float correction = expf(run_max[i] - block_max);   // 0 on the first visible block
                                run_sum[i] *= correction;
                                for (int d = 0; d < hd; d++) acc_t[d] *= correction;
                                run_max[i] = block_max;
                            }
                            for (int j = 0; j < KEY_BLOCK; j++) s[j] -= run_max[i];
                            exp_block(p, s, KEY_BLOCK);
                            float block_sum = 0.0f;
                            #pragma omp simd reduction(+:block_sum)
                            for (int j = 0; j < KEY_BLOCK; j++) block_sum += p[j];
                            run_sum[i] += block_sum;
                            weighted_row_sum(acc_t, p, v_head + (size_t)u0 * sh.kv_stride, sh.kv_stride, lim, hd);
                        }
                    }
                    // Key t itself is always visible, so run_sum >= 1.
                    for (int t = t0; t < t1; t++) {
                        const int i = t - t0;
                        const float inv_sum = (float)(1.0 / run_sum[i]);
                        float *ot = out + ((size_t)b * T + t) * sh.q_stride + (size_t)h * hd;
                        for (int d = 0; d < hd; d++) ot[d] = acc[(size_t)i * hd + d] * inv_sum;
                        lse[((size_t)b * nq + h) * T + t] = run_max[i] + (float)log(run_sum[i]);
                    }
                }
    }
    free(scratch);
}

// With P = exp(S - lse), dP = dout V^T and D = rowsum(dout * out):
//   dS = P * (dP - D),  dq = scale dS K,  dk = scale dS^T Q,  dv = P^T dout.
// Pass 1 gives every query tile its dq (parallel over (b, h, query tile));
// pass 2 gives every key block its dk, dv (parallel over (b, KV head, key
// block), looping over the query heads of the group). Each task owns the rows
// it writes, so there are no races and the result does not depend on the
// thread count; the price is computing P twice.
//
// Recomputes, for query t against one key block, the probabilities p and
// ds = p * (dp - D). Returns 0 when the block holds no visible key.
static inline int block_grads(float *p, float *ds, const float *qt, const float *gt, const float *k_t,
                              const float *v_t, const int *seg_block, int seg_t, int lim, float lse_t, float D_t,
                              const Shape *sh) {
    if (!segment_visible(seg_block, lim, seg_t)) return 0;
    float s[KEY_BLOCK];
    block_dots(s, qt, k_t, sh->hd);
    mask_scores(s, lim, seg_block, seg_t, sh->scale);
    for (int j = 0; j < KEY_BLOCK; j++) s[j] -= lse_t;
    exp_block(p, s, KEY_BLOCK);
    block_dots(ds, gt, v_t, sh->hd);   // dp
    #pragma omp simd
    for (int j = 0; j < KEY_BLOCK; j++) ds[j] = p[j] * (ds[j] - D_t);
    return 1;
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v,
                        const int *seg, int B, int T, int nq, int nkv, int hd) {
    const Shape sh = make_shape(B, T, nq, nkv, hd, "attention_backward");
    float *D = xmalloc((size_t)B * nq * T * sizeof(float), "attention D");
    #pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < B * T; n++)
        for (int h = 0; h < nq; h++) {
            const float *a = dout + (size_t)n * sh.q_stride + (size_t)h * hd;
            const float *o = out + (size_t)n * sh.q_stride + (size_t)h * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot = fmaf(a[d], o[d], dot);
            D[((size_t)(n / T) * nq + h) * T + n % T] = dot;
        }

    const size_t block_floats = (size_t)KEY_BLOCK * hd;
    const size_t per_thread = 4 * block_floats + (size_t)QUERY_TILE * hd;
    float *scratch = xmalloc((size_t)omp_get_max_threads() * per_thread * sizeof(float), "attention scratch");
    const int n_tiles = (T + QUERY_TILE - 1) / QUERY_TILE, n_blocks = (T + KEY_BLOCK - 1) / KEY_BLOCK;
    #pragma omp parallel
    {
        float *k_t = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *v_t = k_t + block_floats, *dk_acc = v_t + block_floats, *dv_acc = dk_acc + block_floats;
        float *dq_acc = dv_acc + block_floats;   // [QUERY_TILE][hd]
        float p[KEY_BLOCK], ds[KEY_BLOCK], p_tile[KEY_BLOCK * QUERY_TILE], ds_tile[KEY_BLOCK * QUERY_TILE];
        int seg_block[KEY_BLOCK];

        if (dq) {
            #pragma omp for collapse(3) schedule(dynamic, 1)
            for (int b = 0; b < B; b++)
                for (int h = 0; h < nq; h++)
                    for (int tile = 0; tile < n_tiles; tile++) {
                        const int t0 = tile * QUERY_TILE, t1 = t0 + QUERY_TILE < T ? t0 + QUERY_TILE : T;
                        const int g = h / sh.rep;
                        const float *k_head = k + (size_t)b * T * sh.kv_stride + (size_t)g * hd;
                        const float *v_head = v + (size_t)b * T * sh.kv_stride + (size_t)g * hd;
                        const int *seg_b = seg ? seg + (size_t)b * T : NULL;
                        memset(dq_acc, 0, (size_t)QUERY_TILE * hd * sizeof(float));
                        for (int u0 = 0; u0 < t1; u0 += KEY_BLOCK) {
                            const int nk = u0 + KEY_BLOCK < t1 ? KEY_BLOCK : t1 - u0;
                            load_transposed(k_t, k_head, sh.kv_stride, u0, nk, hd);
                            load_transposed(v_t, v_head, sh.kv_stride, u0, nk, hd);
                            load_segments(seg_block, seg_b, u0, nk);
                            for (int t = t0 > u0 ? t0 : u0; t < t1; t++) {
                                const size_t row = ((size_t)b * T + t) * sh.q_stride + (size_t)h * hd;
                                const size_t stat = ((size_t)b * nq + h) * T + t;
                                const int lim = t - u0 + 1 < nk ? t - u0 + 1 : nk;
                                if (!block_grads(p, ds, q + row, dout + row, k_t, v_t, seg_block, seg_b ? seg_b[t] : 0,
                                                 lim, lse[stat], D[stat], &sh))
                                    continue;
                                weighted_row_sum(dq_acc + (size_t)(t - t0) * hd, ds,
                                                 k_head + (size_t)u0 * sh.kv_stride, sh.kv_stride, lim, hd);
                            }
                        }
                        for (int t = t0; t < t1; t++) {
                            float *dqt = dq + ((size_t)b * T + t) * sh.q_stride + (size_t)h * hd;
                            const float *acc_t = dq_acc + (size_t)(t - t0) * hd;
                            for (int d = 0; d < hd; d++) dqt[d] = fmaf(sh.scale, acc_t[d], dqt[d]);
                        }
                    }
        }

        if (dk || dv) {
            #pragma omp for collapse(3) schedule(dynamic, 1)
            for (int b = 0; b < B; b++)
                for (int g = 0; g < nkv; g++)
                    for (int kb = 0; kb < n_blocks; kb++) {
                        const int u0 = kb * KEY_BLOCK, nk = u0 + KEY_BLOCK < T ? KEY_BLOCK : T - u0;
                        const float *k_head = k + (size_t)b * T * sh.kv_stride + (size_t)g * hd;
                        const float *v_head = v + (size_t)b * T * sh.kv_stride + (size_t)g * hd;
                        const int *seg_b = seg ? seg + (size_t)b * T : NULL;
                        load_transposed(k_t, k_head, sh.kv_stride, u0, nk, hd);
                        load_transposed(v_t, v_head, sh.kv_stride, u0, nk, hd);
                        load_segments(seg_block, seg_b, u0, nk);
                        memset(dk_acc, 0, 2 * block_floats * sizeof(float));   // dk_acc and dv_acc
                        // Queries before u0 see none of these keys. They come
                        // in tiles whose p and ds are kept transposed,
                        // [key][query], so each key's dk and dv row is one
                        // weighted sum over the tile's q and dout rows.
                        for (int h = g * sh.rep; h < (g + 1) * sh.rep; h++)
                            for (int t0 = u0; t0 < T; t0 += QUERY_TILE) {
                                const int nt = t0 + QUERY_TILE < T ? QUERY_TILE : T - t0;
                                int any = 0;
                                for (int i = 0; i < nt; i++) {
                                    const int t = t0 + i;
                                    const size_t row = ((size_t)b * T + t) * sh.q_stride + (size_t)h * hd;
                                    const size_t stat = ((size_t)b * nq + h) * T + t;
                                    const int lim = t - u0 + 1 < nk ? t - u0 + 1 : nk;
                                    if (block_grads(p, ds, q + row, dout + row, k_t, v_t, seg_block,
                                                    seg_b ? seg_b[t] : 0, lim, lse[stat], D[stat], &sh)) {
                                        any = 1;
                                    } else {
                                        memset(p, 0, sizeof p);
                                        memset(ds, 0, sizeof ds);
                                    }
                                    for (int j = 0; j < nk; j++) {
                                        p_tile[j * QUERY_TILE + i] = p[j];
                                        ds_tile[j * QUERY_TILE + i] = ds[j];
                                    }
                                }
                                if (!any) continue;
                                const size_t row0 = ((size_t)b * T + t0) * sh.q_stride + (size_t)h * hd;
                                for (int j = 0; j < nk; j++) {
                                    weighted_row_sum(dk_acc + (size_t)j * hd, ds_tile + j * QUERY_TILE, q + row0,
                                                     sh.q_stride, nt, hd);
                                    weighted_row_sum(dv_acc + (size_t)j * hd, p_tile + j * QUERY_TILE, dout + row0,
                                                     sh.q_stride, nt, hd);
                                }
                            }
                        for (int j = 0; j < nk; j++) {
                            const size_t row = ((size_t)b * T + u0 + j) * sh.kv_stride + (size_t)g * hd;
                            if (dk)
                                for (int d = 0; d < hd; d++)
                                    dk[row + d] = fmaf(sh.scale, dk_acc[(size_t)j * hd + d], dk[row + d]);
                            if (dv)
                                for (int d = 0; d < hd; d++) dv[row + d] += dv_acc[(size_t)j * hd + d];
                        }
                    }
        }
    }
    free(scratch);
    free(D);
}

// ---- naive double reference: the full score matrix of one (b, h) at a time.

static double *ref_probs(const double *q, const double *k, const int *seg, int b, int h, int T, int nq,
                         int nkv, int hd) {
    const int g = h / (nq / nkv);
    const double scale = 1.0 / sqrt((double)hd);
    double *P = xcalloc((size_t)T * T, sizeof(double), "attention_ref probs");
    for (int t = 0; t < T; t++) {
        double mx = -INFINITY;
        for (int u = 0; u <= t; u++) {
            if (seg && seg[b * T + u] != seg[b * T + t]) continue;
            double sc = 0.0;
            for (int d = 0; d < hd; d++)
                sc += q[((size_t)b * T + t) * nq * hd + (size_t)h * hd + d] *
                      k[((size_t)b * T + u) * nkv * hd + (size_t)g * hd + d];
            P[(size_t)t * T + u] = sc * scale;
            if (sc * scale > mx) mx = sc * scale;
        }
        double sum = 0.0;
        for (int u = 0; u <= t; u++) {
            if (seg && seg[b * T + u] != seg[b * T + t]) continue;
            P[(size_t)t * T + u] = exp(P[(size_t)t * T + u] - mx);
            sum += P[(size_t)t * T + u];
        }
        for (int u = 0; u <= t; u++) P[(size_t)t * T + u] /= sum;   // invisible entries stay 0
    }
    return P;
}

void attention_forward_ref(double *out, const double *q, const double *k, const double *v,
                           const int *seg, int B, int T, int nq, int nkv, int hd) {
    make_shape(B, T, nq, nkv, hd, "attention_forward_ref");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nq; h++) {
            const int g = h / (nq / nkv);
            double *P = ref_probs(q, k, seg, b, h, T, nq, nkv, hd);
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int u = 0; u < T; u++)
                        acc += P[(size_t)t * T + u] * v[((size_t)b * T + u) * nkv * hd + (size_t)g * hd + d];
                    out[((size_t)b * T + t) * nq * hd + (size_t)h * hd + d] = acc;
                }
            free(P);
        }
}

void attention_backward_ref(double *dq, double *dk, double *dv, const double *dout, const double *q,
                            const double *k, const double *v, const int *seg, int B, int T, int nq,
                            int nkv, int hd) {
    make_shape(B, T, nq, nkv, hd, "attention_backward_ref");
    const double scale = 1.0 / sqrt((double)hd);
    double *dS = xmalloc((size_t)T * T * sizeof(double), "attention_ref dS");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nq; h++) {
            const int g = h / (nq / nkv);
            double *P = ref_probs(q, k, seg, b, h, T, nq, nkv, hd);
#define QI(t, d) (((size_t)b * T + (t)) * nq * hd + (size_t)h * hd + (d))
#define KI(u, d) (((size_t)b * T + (u)) * nkv * hd + (size_t)g * hd + (d))
            // dP = dout V^T, then the softmax Jacobian row by row.
            for (int t = 0; t < T; t++) {
                double row_dot = 0.0;
                for (int u = 0; u < T; u++) {
                    double dp = 0.0;
                    for (int d = 0; d < hd; d++) dp += dout[QI(t, d)] * v[KI(u, d)];
                    dS[(size_t)t * T + u] = dp;
                    row_dot += P[(size_t)t * T + u] * dp;
                }
                for (int u = 0; u < T; u++)
                    dS[(size_t)t * T + u] = P[(size_t)t * T + u] * (dS[(size_t)t * T + u] - row_dot);
            }
            for (int t = 0; t < T; t++)
                for (int u = 0; u < T; u++) {
                    double ds = dS[(size_t)t * T + u], p = P[(size_t)t * T + u];
                    for (int d = 0; d < hd; d++) {
                        if (dq) dq[QI(t, d)] += scale * ds * k[KI(u, d)];
                        if (dk) dk[KI(u, d)] += scale * ds * q[QI(t, d)];
                        if (dv) dv[KI(u, d)] += p * dout[QI(t, d)];
                    }
                }
#undef QI
#undef KI
            free(P);
        }
    free(dS);
}
