// attention.c: causal grouped-query attention, flash style. The forward keeps
// only the log-sum-exp of each query's scaled scores; the backward recomputes
// the probabilities from it, so nothing of size T x T is ever stored.
//
// Layout: row n = b*T + t; q rows hold nq heads of hd, k/v rows nkv heads.
// Query head h reads KV head h / (nq/nkv); K and V are packed once per KV
// head, never repeated per query head.
//
// Queries and keys are cut into tiles of TILE positions. Every product inside
// a tile pair (scores Q K^T, P V, dP = dO V^T, dQ += dS K, dK += dS^T Q,
// dV += P^T dO) is a small matrix product run on the matmul register-tile
// kernels (matmul_kernels.h), so attention runs near the FMA rate of the
// projections instead of one query at a time. The operands are packed once
// per call into buffers padded to the kernel's tile shape (see Packed).
// Note: the build is ISO C, where gcc does not contract a*b+c into an FMA on
// its own, so the scalar loops call fmaf.
#include <math.h>
#include <string.h>
#include <omp.h>
#include "../../util/util.h"
#include "fast_exp.h"
#include "matmul_kernels.h"
#include "ops.h"

enum { TILE = 64 };   // queries per query tile = keys per key block (a multiple of 16)

// Positions in the tile that starts at `start` (the last one may be short).
static inline int tile_len(int T, int start) { return T - start < TILE ? T - start : TILE; }

typedef struct {
    int B, T, nq, nkv, hd, rep, n_tiles;
    size_t q_stride, kv_stride;
    float scale;
    const MatmulKernel *kern;
    int hd_pad;     // hd rounded up to the kernel's NR: a B operand row is read NR floats at a time
    int rows_pad;   // rows of a tile buffer: TILE rounded up to the kernel's MR
    int lds;        // row stride of score tiles: >= TILE + MR, so a transposed read of MR keys stays inside
    size_t panel;   // floats per padded tile buffer, [rows_pad][hd_pad] or [hd][TILE], plus slack
    size_t score;   // floats per score tile buffer, [rows_pad][lds], plus slack
    int threads;    // the device's
} Shape;

static Shape make_shape(const MatmulKernel *kern, int threads, int B, int T, int nq, int nkv, int hd,
                        const char *who) {
    if (B <= 0 || T <= 0 || hd <= 0 || nq <= 0 || nkv <= 0 || nq % nkv != 0)
        die("%s: bad shape B=%d T=%d hd=%d, or %d query heads not a multiple of %d KV heads", who, B, T, hd, nq, nkv);
    Shape s = {B, T, nq, nkv, hd, nq / nkv, (T + TILE - 1) / TILE, (size_t)nq * hd, (size_t)nkv * hd,
               1.0f / sqrtf((float)hd), kern, 0, 0, 0, 0, 0, threads};
    s.hd_pad = (hd + kern->nr - 1) / kern->nr * kern->nr;
    s.rows_pad = (TILE + kern->mr - 1) / kern->mr * kern->mr;
    s.lds = TILE + kern->mr;
    // Each buffer a whole number of cache lines, with a line of slack for
    // the kernels' reads past its end.
    const size_t rows = (size_t)s.rows_pad * s.hd_pad, transposed = (size_t)hd * TILE;
    s.panel = ((rows > transposed ? rows : transposed) + 31) / 16 * 16;
    s.score = ((size_t)s.rows_pad * s.lds + 31) / 16 * 16;
    return s;
}

// C[M x N] (+)= A[M x K] B[K x N] on the tile kernel, for operands already in
// padded buffers: A(i, k) = a[i*a_rs + k*a_ks] with a_ks == 1 (rows) or
// a_rs == 1 (columns), every MR-row panel readable; B(k, j) = b[k*b_ks + j]
// with N rounded up to NR readable; C row-major with stride c_rs.
static void tile_product(const MatmulKernel *kern, float *c, ptrdiff_t c_rs, const float *a, ptrdiff_t a_rs,
                         ptrdiff_t a_ks, const float *b, ptrdiff_t b_ks, int M, int N, int K, int accumulate) {
    for (int i0 = 0; i0 < M; i0 += kern->mr)
        for (int j0 = 0; j0 < N; j0 += kern->nr) {
            MatmulTile t = {K, a + i0 * a_rs, a_rs, a_ks, b + j0, b_ks, c + i0 * c_rs + j0, c_rs, 1,
                            M - i0 < kern->mr ? M - i0 : kern->mr, N - j0 < kern->nr ? N - j0 : kern->nr,
                            accumulate};
            kern->tile(&t);
        }
}

// Copies n rows of hd floats (src rows `stride` apart), times mul, into
// dst[rows_pad][hd_pad]. The pad rows and columns are never written and may
// hold anything: the tile kernel reads them, but they only reach rows and
// columns of its result that are not stored (and scores past a block's keys
// are masked before use), so no buffer needs zeroing.
static void load_rows(float *dst, const float *src, size_t stride, int n, float mul, const Shape *sh) {
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)i * stride;
        float *d = dst + (size_t)i * sh->hd_pad;
        #pragma omp simd
        for (int c = 0; c < sh->hd; c++) d[c] = s[c] * mul;
    }
}

// n rows of hd floats transposed into dst[hd][TILE] (the columns past n are pad).
static void load_transposed(float *dst, const float *src, size_t stride, int n, int hd) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < hd; d++) dst[(size_t)d * TILE + j] = src[(size_t)j * stride + d];
}

// The operands every tile pair reads, packed once per call into padded
// buffers the tile kernel can read whole: per (b, KV head, key block) the keys
// and values as rows [rows_pad][hd_pad] and transposed [hd][TILE]; per (b,
// query head, query tile) the queries times scale and the output gradients as
// rows, and each head's share of dk and dv. Packing moves each float once;
// without it the transposes were redone for every tile pair and cost a third
// of the forward. All of it, and D, lives in the device workspace (fresh pages
// per call cost as much as the packing itself).
typedef struct {
    float *k, *v, *k_t, *v_t;               // n_kv panels each
    float *q, *dout, *dk_share, *dv_share;  // n_q panels each
    float *D;                               // [B][nq][T]: rowsum(dout * out)
    size_t n_kv, n_q;
} Packed;

// Panels per KV array (b, KV head, key block) and per query array (b, query head, query tile).
static size_t n_kv_panels(const Shape *sh) { return (size_t)sh->B * sh->nkv * sh->n_tiles; }
static size_t n_q_panels(const Shape *sh) { return (size_t)sh->B * sh->nq * sh->n_tiles; }

static size_t packed_floats(const Shape *sh) {
    return 4 * (n_kv_panels(sh) + n_q_panels(sh)) * sh->panel + (size_t)sh->B * sh->nq * sh->T;
}

static Packed packed_layout(float *base, const Shape *sh) {
    Packed pk;
    pk.n_kv = n_kv_panels(sh);
    pk.n_q = n_q_panels(sh);
    float **kv[4] = {&pk.k, &pk.v, &pk.k_t, &pk.v_t}, **qs[4] = {&pk.q, &pk.dout, &pk.dk_share, &pk.dv_share};
    float *p = base;
    for (int i = 0; i < 4; i++) *kv[i] = p, p += pk.n_kv * sh->panel;
    for (int i = 0; i < 4; i++) *qs[i] = p, p += pk.n_q * sh->panel;
    pk.D = p;
    return pk;
}

static const float *kv_tile(const float *base, int b, int g, int kb, const Shape *sh) {
    return base + (((size_t)b * sh->nkv + g) * sh->n_tiles + kb) * sh->panel;
}
static float *q_tile(float *base, int b, int h, int tile, const Shape *sh) {
    return base + (((size_t)b * sh->nq + h) * sh->n_tiles + tile) * sh->panel;
}

// Fills the packed buffers named in `which`: 'k' 'v' (rows), 'K' 'V'
// (transposed), 'q' 'o' (queries, dout).
static void pack(const Packed *pk, const char *which, const float *q, const float *k, const float *v,
                 const float *dout, const Shape *sh) {
    const int T = sh->T, hd = sh->hd;
    const int rows_k = !!strchr(which, 'k'), rows_v = !!strchr(which, 'v');
    const int tr_k = !!strchr(which, 'K'), tr_v = !!strchr(which, 'V');
    const int want_q = !!strchr(which, 'q'), want_o = !!strchr(which, 'o');
    #pragma omp parallel for schedule(static) num_threads(sh->threads)
    for (size_t i = 0; i < pk->n_kv; i++) {
        const int kb = (int)(i % sh->n_tiles), g = (int)(i / sh->n_tiles % sh->nkv), b = (int)(i / sh->n_tiles / sh->nkv);
        const int n = tile_len(T, kb * TILE);
        const size_t src = ((size_t)b * T + (size_t)kb * TILE) * sh->kv_stride + (size_t)g * hd, off = i * sh->panel;
        if (rows_k) load_rows(pk->k + off, k + src, sh->kv_stride, n, 1.0f, sh);
        if (rows_v) load_rows(pk->v + off, v + src, sh->kv_stride, n, 1.0f, sh);
        if (tr_k) load_transposed(pk->k_t + off, k + src, sh->kv_stride, n, hd);
        if (tr_v) load_transposed(pk->v_t + off, v + src, sh->kv_stride, n, hd);
    }
    if (!want_q && !want_o) return;
    #pragma omp parallel for schedule(static) num_threads(sh->threads)
    for (size_t i = 0; i < pk->n_q; i++) {
        const int tile = (int)(i % sh->n_tiles), h = (int)(i / sh->n_tiles % sh->nq), b = (int)(i / sh->n_tiles / sh->nq);
        const int n = tile_len(T, tile * TILE);
        const size_t src = ((size_t)b * T + (size_t)tile * TILE) * sh->q_stride + (size_t)h * hd, off = i * sh->panel;
        if (want_q) load_rows(pk->q + off, q + src, sh->q_stride, n, sh->scale, sh);
        if (want_o) load_rows(pk->dout + off, dout + src, sh->q_stride, n, 1.0f, sh);
    }
}

// Whether any key of block [u0, u0+nk) is visible to any query of tile
// [t0, t0+nt): key u to query t iff u <= t and, with packing, both lie in one
// segment. Checked before any product: with packed short documents most
// blocks belong to other documents.
static int block_visible(int nt, int nk, int t0, int u0, const int *seg_b) {
    if (u0 > t0 + nt - 1) return 0;
    if (!seg_b) return 1;
    for (int i = 0; i < nt; i++) {
        const int lim = t0 + i - u0 + 1 < nk ? t0 + i - u0 + 1 : nk;
        for (int j = 0; j < lim; j++)
            if (seg_b[u0 + j] == seg_b[t0 + i]) return 1;
    }
    return 0;
}

// Sets the scores of the keys each query may not see (later, past the block's
// nk keys, or in another segment) to -inf; blocks wholly in the tile's past
// need nothing without packing.
static void mask_scores(float *s, int lds, int nt, int nk, int t0, int u0, const int *seg_b) {
    if (!seg_b && u0 + TILE - 1 <= t0) return;
    for (int i = 0; i < nt; i++) {
        float *row = s + (size_t)i * lds;
        const int lim = t0 + i - u0 + 1 < nk ? t0 + i - u0 + 1 : nk, seg_t = seg_b ? seg_b[t0 + i] : 0;
        for (int j = 0; j < TILE; j++)
            if (j >= lim || (seg_b && seg_b[u0 + j] != seg_t)) row[j] = -INFINITY;
    }
}

static inline float row_max(const float *row) {
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (int j = 0; j < TILE; j++) m = row[j] > m ? row[j] : m;
    return m;
}

// Per-thread query tile, score tiles and accumulators.
typedef struct {
    float *q;            // [rows_pad][hd_pad]: the forward's query tile (times scale)
    float *s, *ds;       // [rows_pad][lds]: scores, then probabilities; dP, then dS
    float *acc, *acc2;   // [rows_pad][hd_pad]: out or dq or dk; dv
} Workspace;

static size_t workspace_floats(const Shape *sh) { return 3 * sh->panel + 2 * sh->score; }

static Workspace workspace_of(float *all, const Shape *sh) {
    float *p = all + (size_t)omp_get_thread_num() * workspace_floats(sh);
    Workspace w = {p, p + sh->panel, p + sh->panel + sh->score, p + sh->panel + 2 * sh->score,
                   p + 2 * sh->panel + 2 * sh->score};
    return w;
}

size_t attention_workspace_bytes(const Device *d, int B, int T, int nq, int nkv, int hd) {
    const Shape sh = make_shape(cpu_kernels(d)->f32, d->threads, B, T, nq, nkv, hd, "attention_workspace_bytes");
    return (packed_floats(&sh) + (size_t)d->threads * workspace_floats(&sh)) * sizeof(float) + 128;
}

// The packed operands and the per-thread workspaces of one call, from the device workspace.
static Packed take_scratch(Device *d, const Shape *sh, float **workspaces) {
    Packed pk = packed_layout(dev_scratch(d, packed_floats(sh) * sizeof(float), "attention packed operands"), sh);
    *workspaces = dev_scratch(d, (size_t)d->threads * workspace_floats(sh) * sizeof(float), "attention workspaces");
    return pk;
}

void attention_forward(Device *d, float *out, float *lse, const float *q, const float *k, const float *v,
                       const int *seg, int B, int T, int nq, int nkv, int hd) {
    const MatmulKernel *kern = cpu_kernels(d)->f32;
    const Shape sh = make_shape(kern, d->threads, B, T, nq, nkv, hd, "attention_forward");
    const size_t mark = dev_scratch_mark(d);
    float *scratch;
    Packed pk = take_scratch(d, &sh, &scratch);
    pack(&pk, "vK", q, k, v, NULL, &sh);
    #pragma omp parallel num_threads(d->threads)
    {
        Workspace w = workspace_of(scratch, &sh);
        float run_max[TILE];
        // Per row, the sum of exp(score - run_max) kept as 16 lane partials:
        // reducing a row's 64 probabilities to one float every block was a
        // serial chain of scalar adds; the lanes are added once per tile.
        float run_sum[TILE][16];
        // Later tiles see more keys: hand them out first so the threads finish together.
        #pragma omp for collapse(3) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < nq; h++)
                for (int rev = 0; rev < sh.n_tiles; rev++) {
                    const int tile = sh.n_tiles - 1 - rev, t0 = tile * TILE, nt = tile_len(T, t0);
                    const int g = h / sh.rep;
                    const int *seg_b = seg ? seg + (size_t)b * T : NULL;
                    load_rows(w.q, q + ((size_t)b * T + t0) * sh.q_stride + (size_t)h * hd, sh.q_stride, nt,
                              sh.scale, &sh);
                    memset(w.acc, 0, (size_t)nt * sh.hd_pad * sizeof(float));
                    for (int i = 0; i < nt; i++) {
                        run_max[i] = -INFINITY;
                        for (int l = 0; l < 16; l++) run_sum[i][l] = 0.0f;
                    }
                    for (int kb = 0; kb <= tile; kb++) {
                        const int u0 = kb * TILE, nk = tile_len(T, u0);
                        if (!block_visible(nt, nk, t0, u0, seg_b)) continue;
                        tile_product(kern, w.s, sh.lds, w.q, sh.hd_pad, 1, kv_tile(pk.k_t, b, g, kb, &sh), TILE, nt,
                                     nk, hd, 0);
                        mask_scores(w.s, sh.lds, nt, nk, t0, u0, seg_b);
                        for (int i = 0; i < nt; i++) {
                            float *row = w.s + (size_t)i * sh.lds;
                            const float block_max = row_max(row);
                            if (block_max == -INFINITY) {   // nothing visible in this row: weight 0
                                memset(row, 0, TILE * sizeof(float));
                                continue;
                            }
                            if (block_max > run_max[i]) {
                                float correction = expf(run_max[i] - block_max);   // 0 on the first visible block
                                for (int l = 0; l < 16; l++) run_sum[i][l] *= correction;
                                float *acc_i = w.acc + (size_t)i * sh.hd_pad;
                                for (int d = 0; d < hd; d++) acc_i[d] *= correction;
                                run_max[i] = block_max;
                            }
                            const float m = run_max[i];
                            #pragma omp simd
                            for (int j = 0; j < TILE; j++) row[j] -= m;
                            exp_block(row, row, TILE);
                            #pragma omp simd
                            for (int l = 0; l < 16; l++) run_sum[i][l] += (row[l] + row[16 + l]) + (row[32 + l] + row[48 + l]);
                        }
                        tile_product(kern, w.acc, sh.hd_pad, w.s, sh.lds, 1, kv_tile(pk.v, b, g, kb, &sh), sh.hd_pad,
                                     nt, hd, nk, 1);
                    }
                    // Key t itself is always visible, so the sum is >= 1.
                    for (int i = 0; i < nt; i++) {
                        double sum = 0.0;
                        for (int l = 0; l < 16; l++) sum += run_sum[i][l];
                        const float inv_sum = (float)(1.0 / sum);
                        float *ot = out + ((size_t)b * T + t0 + i) * sh.q_stride + (size_t)h * hd;
                        for (int d = 0; d < hd; d++) ot[d] = w.acc[(size_t)i * sh.hd_pad + d] * inv_sum;
                        lse[((size_t)b * nq + h) * T + t0 + i] = run_max[i] + (float)log(sum);
                    }
                }
    }
    dev_scratch_release(d, mark);
}

// With P = exp(S - lse), dP = dout V^T and D = rowsum(dout * out):
//   dS = P * (dP - D),  dq = scale dS K,  dk = scale dS^T Q,  dv = P^T dout.
// One task per (b, query head) walks all its tile pairs once, computing P
// and dS once each: it owns its dq rows, and writes its head's share of dk and
// dv into a buffer of its own; the shares of a KV group's heads are summed
// afterwards in a fixed order. No races, and the result does not depend on
// the thread count. (All tasks have the same amount of work.)
//
// One tile pair: w.s gets P and w.ds gets dS (zero past the block's nk keys).
static void tile_grads(Workspace *w, const Packed *pk, int b, int h, int tile, int kb, const int *seg_b,
                       const float *lse, const float *D, const Shape *sh) {
    const int t0 = tile * TILE, nt = tile_len(sh->T, t0);
    const int u0 = kb * TILE, nk = tile_len(sh->T, u0), g = h / sh->rep;
    const size_t stat0 = ((size_t)b * sh->nq + h) * sh->T + t0;
    tile_product(sh->kern, w->s, sh->lds, q_tile(pk->q, b, h, tile, sh), sh->hd_pad, 1,
                 kv_tile(pk->k_t, b, g, kb, sh), TILE, nt, nk, sh->hd, 0);
    mask_scores(w->s, sh->lds, nt, nk, t0, u0, seg_b);
    tile_product(sh->kern, w->ds, sh->lds, q_tile(pk->dout, b, h, tile, sh), sh->hd_pad, 1,
                 kv_tile(pk->v_t, b, g, kb, sh), TILE, nt, nk, sh->hd, 0);
    for (int i = 0; i < nt; i++) {
        float *p = w->s + (size_t)i * sh->lds, *ds = w->ds + (size_t)i * sh->lds;
        const float l = lse[stat0 + i], Di = D[stat0 + i];
        #pragma omp simd
        for (int j = 0; j < TILE; j++) p[j] -= l;
        exp_block(p, p, TILE);   // masked scores give 0
        // Two loops, not one with a select: gcc vectorises neither form of that.
        #pragma omp simd
        for (int j = 0; j < nk; j++) ds[j] = p[j] * (ds[j] - Di);
        for (int j = nk; j < TILE; j++) ds[j] = 0.0f;
    }
}

void attention_backward(Device *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, const int *seg, int B, int T,
                        int nq, int nkv, int hd) {
    const MatmulKernel *kern = cpu_kernels(d)->f32;
    const Shape sh = make_shape(kern, d->threads, B, T, nq, nkv, hd, "attention_backward");
    const size_t mark = dev_scratch_mark(d);
    float *scratch;
    Packed pk = take_scratch(d, &sh, &scratch);
    float *D = pk.D;
    #pragma omp parallel for collapse(2) schedule(static) num_threads(d->threads)
    for (int n = 0; n < B * T; n++)
        for (int h = 0; h < nq; h++) {
            const float *a = dout + (size_t)n * sh.q_stride + (size_t)h * hd;
            const float *o = out + (size_t)n * sh.q_stride + (size_t)h * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot = fmaf(a[d], o[d], dot);
            D[((size_t)(n / T) * nq + h) * T + n % T] = dot;
        }
    pack(&pk, "kKVqo", q, k, v, dout, &sh);
    const int n_tiles = sh.n_tiles;
    #pragma omp parallel num_threads(d->threads)
    {
        Workspace w = workspace_of(scratch, &sh);
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < nq; h++) {
                const int *seg_b = seg ? seg + (size_t)b * T : NULL;
                const int g = h / sh.rep;
                const size_t shares = (size_t)n_tiles * sh.panel * sizeof(float);
                memset(q_tile(pk.dk_share, b, h, 0, &sh), 0, shares);
                memset(q_tile(pk.dv_share, b, h, 0, &sh), 0, shares);
                for (int tile = 0; tile < n_tiles; tile++) {
                    const int t0 = tile * TILE, nt = tile_len(T, t0);
                    memset(w.acc, 0, (size_t)nt * sh.hd_pad * sizeof(float));   // dq of the tile
                    for (int kb = 0; kb <= tile; kb++) {
                        const int u0 = kb * TILE, nk = tile_len(T, u0);
                        if (!block_visible(nt, nk, t0, u0, seg_b)) continue;
                        tile_grads(&w, &pk, b, h, tile, kb, seg_b, lse, D, &sh);
                        tile_product(kern, w.acc, sh.hd_pad, w.ds, sh.lds, 1, kv_tile(pk.k, b, g, kb, &sh), sh.hd_pad,
                                     nt, hd, nk, 1);
                        // The packed queries carry the scale, so this is scale dS^T Q = dk;
                        // A is read down the columns of dS and of P.
                        float *dk_rows = q_tile(pk.dk_share, b, h, kb, &sh);
                        float *dv_rows = q_tile(pk.dv_share, b, h, kb, &sh);
                        tile_product(kern, dk_rows, sh.hd_pad, w.ds, 1, sh.lds, q_tile(pk.q, b, h, tile, &sh),
                                     sh.hd_pad, nk, hd, nt, 1);
                        tile_product(kern, dv_rows, sh.hd_pad, w.s, 1, sh.lds, q_tile(pk.dout, b, h, tile, &sh),
                                     sh.hd_pad, nk, hd, nt, 1);
                    }
                    if (!dq) continue;
                    float *dq0 = dq + ((size_t)b * T + t0) * sh.q_stride + (size_t)h * hd;
                    for (int i = 0; i < nt; i++)
                        for (int d = 0; d < hd; d++)
                            dq0[(size_t)i * sh.q_stride + d] =
                                fmaf(sh.scale, w.acc[(size_t)i * sh.hd_pad + d], dq0[(size_t)i * sh.q_stride + d]);
                }
            }
        // dk, dv: each KV row gets its group's shares, summed in head order.
        #pragma omp for collapse(2) schedule(static)
        for (int n = 0; n < B * T; n++)
            for (int g = 0; g < nkv; g++) {
                const int b = n / T, t = n % T;
                const size_t row = (size_t)n * sh.kv_stride + (size_t)g * hd;
                const size_t in_tile = (size_t)(t % TILE) * sh.hd_pad;
                for (int h = g * sh.rep; h < (g + 1) * sh.rep; h++) {
                    const float *ks = q_tile(pk.dk_share, b, h, t / TILE, &sh) + in_tile;
                    const float *vs = q_tile(pk.dv_share, b, h, t / TILE, &sh) + in_tile;
                    if (dk)
                        for (int d = 0; d < hd; d++) dk[row + d] += ks[d];
                    if (dv)
                        for (int d = 0; d < hd; d++) dv[row + d] += vs[d];
                }
            }
    }
    dev_scratch_release(d, mark);
}

// n query rows at positions p0 .. p0+n-1 against the cached keys 0 .. p0+i:
// out[i, h] = sum_u softmax_u(q.k_u / sqrt(hd)) v_u, with query head h reading
// KV head h / (nq/nkv). The softmax runs online (running max and sum,
// accumulating into out), so no score buffer is needed.
void attention_cached(Device *d, float *out, const float *q, const float *K, const float *V, int p0, int n, int nq,
                      int nkv, int hd, size_t kv_stride) {
    const int rep = nq / nkv;
    const size_t Q = (size_t)nq * hd, KVw = kv_stride;
    const float scale = 1.0f / sqrtf((float)hd);
    // Threads only pay off with enough work (a tiny model's single step has little).
    const long work = (long)n * nq * (p0 + n) * hd;
    #pragma omp parallel for collapse(2) schedule(static) num_threads(d->threads) if (work > 65536)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nq; h++) {
            const float *qh = q + i * Q + (size_t)h * hd;
            const float *Kh = K + (size_t)(h / rep) * hd, *Vh = V + (size_t)(h / rep) * hd;
            float *acc = out + i * Q + (size_t)h * hd;
            float max = -INFINITY, sum = 0.0f;
            for (int c = 0; c < hd; c++) acc[c] = 0.0f;
            for (int u = 0; u <= p0 + i; u++) {
                const float *ku = Kh + u * KVw, *vu = Vh + u * KVw;
                float s = 0.0f;
                #pragma omp simd reduction(+ : s)
                for (int c = 0; c < hd; c++) s += qh[c] * ku[c];
                s *= scale;
                if (s > max) {   // rescale what was summed under the old maximum
                    const float r = expf(max - s);
                    sum *= r;
                    #pragma omp simd
                    for (int c = 0; c < hd; c++) acc[c] *= r;
                    max = s;
                }
                const float p = expf(s - max);
                sum += p;
                #pragma omp simd
                for (int c = 0; c < hd; c++) acc[c] += p * vu[c];
            }
            const float inv = 1.0f / sum;
            for (int c = 0; c < hd; c++) acc[c] *= inv;
        }
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
    make_shape(matmul_kernel_portable(), 1, B, T, nq, nkv, hd, "attention_forward_ref");
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
    make_shape(matmul_kernel_portable(), 1, B, T, nq, nkv, hd, "attention_backward_ref");
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
