// test_ops_attention: the attention of every device (test_backends.h; the CPU
// once per tile kernel) against the naive double reference (which
// materialises the full score matrix), generation over a KV cache against the
// same reference, packing isolation with segment ids, determinism across
// thread counts, and a workspace full of NaNs giving the same bits as a zeroed one.
// Bounds, normwise max|op - ref| / max|ref|: out, lse, dq, dk, dv <= 5e-6
// (fp32 dot products of length hd <= 64, softmax sums over <= 200 keys in
// double, dk/dv sums over <= 7 * 200 query rows in float; the cached
// attention's online softmax sums <= 70 keys in float). A GPU device is held
// to 1e-4 (dev_tol): its softmax sums run in float, in tiles of 64, and its
// expf is within 2 ulp. Shapes cover T and hd that are not multiples of the
// GPU's 64-row tiles or its padded head sizes (16, 32, 64, 128).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "test_backends.h"
#include "test_ops_util.h"

#define ATTN_TOL 5e-6


// lse[B, nq, T] of the scaled scores, in double, straight from the definition.
static void lse_ref(double *lse, const double *q, const double *k, const int *seg, int B, int T, int nq, int nkv,
                    int hd) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nq; h++)
            for (int t = 0; t < T; t++) {
                int g = h / (nq / nkv);
                double mx = -INFINITY, s[512];
                for (int u = 0; u <= t; u++) {
                    s[u] = -INFINITY;
                    if (seg && seg[b * T + u] != seg[b * T + t]) continue;
                    double d = 0.0;
                    for (int i = 0; i < hd; i++)
                        d += q[((size_t)(b * T + t) * nq + h) * hd + i] * k[((size_t)(b * T + u) * nkv + g) * hd + i];
                    s[u] = d / sqrt((double)hd);
                    mx = fmax(mx, s[u]);
                }
                double sum = 0.0;
                for (int u = 0; u <= t; u++) sum += exp(s[u] - mx);
                lse[((size_t)b * nq + h) * T + t] = mx + log(sum);
            }
}

typedef struct {
    int B, T, nq, nkv, hd;
    size_t nqe, nke, nl;
    double *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
    float *qf, *kf, *vf, *doutf, *outf, *lsef, *dqf, *dkf, *dvf;
    float *dq0, *dk0, *dv0;   // the non-zero starts of dqf, dkf, dvf
} AttnCase;

static void case_init(AttnCase *c, Rng *r, int B, int T, int nq, int nkv, int hd, double q_sd) {
    *c = (AttnCase){.B = B, .T = T, .nq = nq, .nkv = nkv, .hd = hd};
    c->nqe = (size_t)B * T * nq * hd;
    c->nke = (size_t)B * T * nkv * hd;
    c->nl = (size_t)B * nq * T;
    c->q = rand_d(r, c->nqe, q_sd);
    c->k = rand_d(r, c->nke, 1.0);
    c->v = rand_d(r, c->nke, 1.0);
    c->dout = rand_d(r, c->nqe, 1.0);
    c->dq = zeros_d(c->nqe);
    c->dk = zeros_d(c->nke);
    c->dv = zeros_d(c->nke);
    c->qf = to_float_exact(c->q, c->nqe);
    c->kf = to_float_exact(c->k, c->nke);
    c->vf = to_float_exact(c->v, c->nke);
    c->doutf = to_float_exact(c->dout, c->nqe);
    c->dqf = rand_f(r, c->nqe, 0.5);   // non-zero: backward must accumulate
    c->dkf = rand_f(r, c->nke, 0.5);
    c->dvf = rand_f(r, c->nke, 0.5);
    c->dq0 = copy_f(c->dqf, c->nqe);
    c->dk0 = copy_f(c->dkf, c->nke);
    c->dv0 = copy_f(c->dvf, c->nke);
    c->out = zeros_d(c->nqe);
    c->lse = zeros_d(c->nl);
    c->outf = zeros_f(c->nqe);
    c->lsef = zeros_f(c->nl);
}

static void case_free(AttnCase *c) {
    double *d[] = {c->q, c->k, c->v, c->dout, c->out, c->lse, c->dq, c->dk, c->dv};
    float *f[] = {c->qf, c->kf, c->vf, c->doutf, c->outf, c->lsef, c->dqf, c->dkf, c->dvf};
    for (int i = 0; i < 9; i++) {
        free(d[i]);
        free(f[i]);
    }
    free(c->dq0);
    free(c->dk0);
    free(c->dv0);
}

// The case on every device against the reference, computed once.
static void compare_case(Rng *r, int B, int T, int nq, int nkv, int hd, const int *seg, double q_sd) {
    AttnCase c;
    case_init(&c, r, B, T, nq, nkv, hd, q_sd);
    attention_forward_ref(c.out, c.q, c.k, c.v, seg, B, T, nq, nkv, hd);
    lse_ref(c.lse, c.q, c.k, seg, B, T, nq, nkv, hd);
    attention_backward_ref(c.dq, c.dk, c.dv, c.dout, c.q, c.k, c.v, seg, B, T, nq, nkv, hd);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        float *dq = copy_f(c.dq0, c.nqe), *dk = copy_f(c.dk0, c.nke), *dv = copy_f(c.dv0, c.nke);
        const size_t qb = c.nqe * sizeof(float), kb = c.nke * sizeof(float), lb = c.nl * sizeof(float);
        Mirrors mr = mirrors_on(dev);
        float *q_d = mirror(&mr, c.qf, qb), *k_d = mirror(&mr, c.kf, kb), *v_d = mirror(&mr, c.vf, kb);
        float *dout_d = mirror(&mr, c.doutf, qb), *out_d = mirror(&mr, c.outf, qb), *lse_d = mirror(&mr, c.lsef, lb);
        float *dq_d = mirror(&mr, dq, qb), *dk_d = mirror(&mr, dk, kb), *dv_d = mirror(&mr, dv, kb);
        int *seg_d = seg ? mirror(&mr, seg, (size_t)B * T * sizeof(int)) : NULL;
        OP(dev, attention_forward, out_d, lse_d, q_d, k_d, v_d, seg_d, B, T, nq, nkv, hd);
        OP(dev, attention_backward, dq_d, dk_d, dv_d, dout_d, out_d, lse_d, q_d, k_d, v_d, seg_d, B, T, nq, nkv, hd);
        fetch(dev, c.outf, out_d, qb);
        fetch(dev, c.lsef, lse_d, lb);
        fetch(dev, dq, dq_d, qb);
        fetch(dev, dk, dk_d, kb);
        fetch(dev, dv, dv_d, kb);
        mirrors_free(&mr);
        const double tol = dev_tol(&devs[d], ATTN_TOL, 1e-4);
        double e[5] = {rel_err_f(c.outf, c.out, c.nqe), rel_err_f(c.lsef, c.lse, c.nl),
                       rel_err_delta_f(dq, c.dq0, c.dq, c.nqe), rel_err_delta_f(dk, c.dk0, c.dk, c.nke),
                       rel_err_delta_f(dv, c.dv0, c.dv, c.nke)};
        printf("  %-26s B=%d T=%3d nq=%d nkv=%d hd=%2d%s q_sd=%.0f: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n",
               devs[d].name, B, T, nq, nkv, hd, seg ? " seg" : "    ", q_sd, e[0], e[1], e[2], e[3], e[4]);
        for (int i = 0; i < 5; i++)
            if (!(e[i] <= tol))
                fail_msg("%s: attention B=%d T=%d nq=%d nkv=%d hd=%d: %s rel err %.3g > %.3g", devs[d].name, B, T,
                         nq, nkv, hd, (const char *[]){"out", "lse", "dq", "dk", "dv"}[i], e[i], tol);
        free(dq); free(dk); free(dv);
    }
    case_free(&c);
}

// Random packing: segments of 1..25 tokens, ids counting up per row.
static int *random_segments(Rng *r, int B, int T) {
    int *seg = xmalloc((size_t)B * T * sizeof(int), "seg");
    for (int b = 0; b < B; b++) {
        int id = 100 * b, left = 0;
        for (int t = 0; t < T; t++) {
            if (left == 0) {
                id++;
                left = 1 + (int)(rng_next(r) % 25);
            }
            seg[b * T + t] = id;
            left--;
        }
    }
    return seg;
}

// Shapes: every nq/nkv ratio up to the Pocket model's 7, head sizes that are
// and are not multiples of the kernels' tile widths, T below, at and past the
// 64-position tiles with ragged ends, packed segments, peaked softmax.
static void test_attention_vs_ref(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 31);
    int *seg = random_segments(&r, 3, 70), *seg_long = random_segments(&r, 2, 200);
    compare_case(&r, 2, 70, 2, 2, 6, NULL, 1.0);    // nq/nkv 1
    compare_case(&r, 2, 70, 4, 2, 12, NULL, 1.0);   // 2
    compare_case(&r, 1, 67, 3, 1, 16, NULL, 1.0);   // 3
    compare_case(&r, 2, 70, 7, 1, 64, NULL, 1.0);   // 7, the Pocket head size
    compare_case(&r, 1, 200, 7, 1, 64, NULL, 1.0);  // four query tiles, the last ragged
    compare_case(&r, 1, 128, 2, 1, 40, NULL, 1.0);  // exactly two tiles
    compare_case(&r, 2, 70, 4, 2, 12, seg, 1.0);
    compare_case(&r, 3, 70, 7, 1, 16, seg, 1.0);
    compare_case(&r, 1, 200, 4, 2, 24, seg_long, 1.0);
    compare_case(&r, 2, 70, 6, 2, 6, NULL, 6.0);   // peaked softmax: the running max moves a lot
    compare_case(&r, 2, 70, 3, 3, 18, seg, 6.0);
    compare_case(&r, 3, 1, 2, 1, 6, NULL, 1.0);    // T = 1
    // The GPU's padded head sizes: hd 100 (128), 33 (64), 17 (32); its 64-row
    // tiles: T = 129 and 191 end one past / one short of a tile.
    compare_case(&r, 1, 129, 4, 2, 100, NULL, 1.0);
    compare_case(&r, 2, 191, 6, 3, 33, seg_long, 2.0);
    compare_case(&r, 1, 65, 2, 2, 17, NULL, 1.0);
    free(seg);
    free(seg_long);
}

// Generation: n query rows at positions p0 .. p0+n-1 against a cache of
// T = p0+n key/value rows give rows p0 .. p0+n-1 of the full causal attention.
// {T, nq, nkv, hd, p0}: single rows (n = 1) and chunks, chunks that cross the
// 64-row tile of the training attention (p0 < 64 < T) and one that starts on it.
static void test_attention_cached_vs_ref(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 36);
    const int cases[][5] = {
        {9, 4, 2, 8, 8},     {40, 4, 2, 16, 39},  {70, 4, 2, 8, 60},  {70, 6, 2, 16, 1},
        {70, 6, 2, 8, 64},   {66, 6, 2, 16, 50},  {70, 4, 2, 16, 63}, {33, 6, 2, 8, 20},
        {300, 4, 2, 40, 290},   // keys past the GPU kernel's 128-key chunks
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int T = cases[ci][0], nq = cases[ci][1], nkv = cases[ci][2], hd = cases[ci][3], p0 = cases[ci][4];
        const int n = T - p0;   // the cache holds exactly p0 + n rows
        AttnCase c;
        case_init(&c, &r, 1, T, nq, nkv, hd, 1.0);
        attention_forward_ref(c.out, c.q, c.k, c.v, NULL, 1, T, nq, nkv, hd);
        const size_t row = (size_t)nq * hd;
        for (int d = 0; d < n_devs; d++) {
            Device *dev = &devs[d].dev;
            float *out = zeros_f((size_t)n * row);
            Mirrors mr = mirrors_on(dev);
            float *out_d = mirror(&mr, out, (size_t)n * row * sizeof(float));
            float *q_d = mirror(&mr, c.qf + (size_t)p0 * row, (size_t)n * row * sizeof(float));
            float *k_d = mirror(&mr, c.kf, c.nke * sizeof(float)), *v_d = mirror(&mr, c.vf, c.nke * sizeof(float));
            OP(dev, attention_cached, out_d, q_d, k_d, v_d, p0, n, nq, nkv, hd, (size_t)nkv * hd);
            fetch(dev, out, out_d, (size_t)n * row * sizeof(float));
            mirrors_free(&mr);
            const double tol = dev_tol(&devs[d], ATTN_TOL, 1e-4);
            double e = rel_err_f(out, c.out + (size_t)p0 * row, (size_t)n * row);
            printf("  %-26s cached T=%3d nq=%d nkv=%d hd=%2d rows %3d..%3d: out %.1e\n", devs[d].name, T, nq, nkv,
                   hd, p0, T - 1, e);
            if (!(e <= tol))
                fail_msg("%s: attention_cached T=%d nq=%d nkv=%d hd=%d p0=%d n=%d: rel err %.3g > %.3g",
                         devs[d].name, T, nq, nkv, hd, p0, n, e, tol);
            free(out);
        }
        case_free(&c);
    }
}

// Several sequences' caches interleaved by position ([T][R][nkv*hd], the
// lockstep cache of model_plan_cache_rows): each sequence's one query row at
// the last position, read with the stride R*nkv*hd, equals its own attention.
static void test_attention_cached_interleaved(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 37);
    enum { R = 3, T = 70, NQ = 6, NKV = 2, HD = 16 };
    AttnCase c;
    case_init(&c, &r, R, T, NQ, NKV, HD, 1.0);
    attention_forward_ref(c.out, c.q, c.k, c.v, NULL, R, T, NQ, NKV, HD);
    const size_t row = (size_t)NQ * HD, kv = (size_t)NKV * HD;
    float *K = xmalloc((size_t)T * R * kv * sizeof(float), "interleaved K"), *V = xmalloc((size_t)T * R * kv * sizeof(float), "interleaved V");
    for (int u = 0; u < T; u++)
        for (int b = 0; b < R; b++) {
            memcpy(K + ((size_t)u * R + b) * kv, c.kf + ((size_t)b * T + u) * kv, kv * sizeof(float));
            memcpy(V + ((size_t)u * R + b) * kv, c.vf + ((size_t)b * T + u) * kv, kv * sizeof(float));
        }
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        for (int b = 0; b < R; b++) {
            float *out = zeros_f(row);
            Mirrors mr = mirrors_on(dev);
            float *out_d = mirror(&mr, out, row * sizeof(float));
            const float *q_d = mirror(&mr, c.qf + ((size_t)b * T + T - 1) * row, row * sizeof(float));
            const float *k_d = mirror(&mr, K, (size_t)T * R * kv * sizeof(float));
            const float *v_d = mirror(&mr, V, (size_t)T * R * kv * sizeof(float));
            OP(dev, attention_cached, out_d, q_d, k_d + b * kv, v_d + b * kv, T - 1, 1, NQ, NKV, HD, R * kv);
            fetch(dev, out, out_d, row * sizeof(float));
            mirrors_free(&mr);
            const double e = rel_err_f(out, c.out + ((size_t)b * T + T - 1) * row, row);
            printf("  %-26s interleaved cache of %d, sequence %d: out %.1e\n", devs[d].name, R, b, e);
            if (!(e <= dev_tol(&devs[d], ATTN_TOL, 1e-4)))
                fail_msg("%s: attention_cached over an interleaved cache, sequence %d: rel err %.3g", devs[d].name, b, e);
            free(out);
        }
    }
    free(K);
    free(V);
    case_free(&c);
}

// Keys and values outside a query's segment must not reach it: changing them
// leaves that segment's outputs and lse bit for bit the same, and a gradient
// that enters only through one segment leaves nothing outside it.
static void test_attention_packing_isolation(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 32);
    const int B = 2, T = 70, nq = 4, nkv = 2, hd = 12;
    int *seg = random_segments(&r, B, T);
    const int target = seg[30];   // the segment holding token 30 of row 0
    AttnCase c;
    case_init(&c, &r, B, T, nq, nkv, hd, 1.0);
    float *k2 = copy_f(c.kf, c.nke), *v2 = copy_f(c.vf, c.nke);
    int first = -1, last = -1;
    for (int n = 0; n < B * T; n++) {
        if (n < T && seg[n] == target) {
            if (first < 0) first = n;
            last = n;
            continue;
        }
        for (int i = 0; i < nkv * hd; i++) {
            k2[(size_t)n * nkv * hd + i] += 3.0f;
            v2[(size_t)n * nkv * hd + i] *= -2.0f;
        }
    }
    assert_true(first > 0 && last < T - 1);   // segments on both sides of it
    // Gradient entering only at the target segment's outputs.
    float *dout = zeros_f(c.nqe);
    for (int t = first; t <= last; t++)
        memcpy(dout + (size_t)t * nq * hd, c.doutf + (size_t)t * nq * hd, nq * hd * sizeof(float));
    const size_t qb = c.nqe * sizeof(float), kb = c.nke * sizeof(float), lb = c.nl * sizeof(float);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        float *out2 = zeros_f(c.nqe), *lse2 = zeros_f(c.nl);
        float *dq = zeros_f(c.nqe), *dk = zeros_f(c.nke), *dv = zeros_f(c.nke);
        Mirrors mr = mirrors_on(dev);
        float *q_d = mirror(&mr, c.qf, qb), *k_d = mirror(&mr, c.kf, kb), *v_d = mirror(&mr, c.vf, kb);
        float *k2_d = mirror(&mr, k2, kb), *v2_d = mirror(&mr, v2, kb), *dout_d = mirror(&mr, dout, qb);
        float *out_d = mirror(&mr, c.outf, qb), *lse_d = mirror(&mr, c.lsef, lb);
        float *out2_d = mirror(&mr, out2, qb), *lse2_d = mirror(&mr, lse2, lb);
        float *dq_d = mirror(&mr, dq, qb), *dk_d = mirror(&mr, dk, kb), *dv_d = mirror(&mr, dv, kb);
        int *seg_d = mirror(&mr, seg, (size_t)B * T * sizeof(int));
        OP(dev, attention_forward, out_d, lse_d, q_d, k_d, v_d, seg_d, B, T, nq, nkv, hd);
        OP(dev, attention_forward, out2_d, lse2_d, q_d, k2_d, v2_d, seg_d, B, T, nq, nkv, hd);
        OP(dev, attention_backward, dq_d, dk_d, dv_d, dout_d, out_d, lse_d, q_d, k_d, v_d, seg_d, B, T, nq, nkv, hd);
        fetch(dev, c.outf, out_d, qb);
        fetch(dev, c.lsef, lse_d, lb);
        fetch(dev, out2, out2_d, qb);
        fetch(dev, lse2, lse2_d, lb);
        fetch(dev, dq, dq_d, qb);
        fetch(dev, dk, dk_d, kb);
        fetch(dev, dv, dv_d, kb);
        mirrors_free(&mr);
        for (int t = first; t <= last; t++) {
            if (memcmp(out2 + (size_t)t * nq * hd, c.outf + (size_t)t * nq * hd, nq * hd * sizeof(float)))
                fail_msg("%s: row %d changed with keys outside its segment", devs[d].name, t);
            for (int h = 0; h < nq; h++) assert_true(lse2[(size_t)h * T + t] == c.lsef[(size_t)h * T + t]);
        }
        double inside = 0.0;
        for (int n = 0; n < B * T; n++) {
            int in = n >= first && n <= last;
            for (int i = 0; i < nq * hd; i++) {
                if (in) inside += fabs(dq[(size_t)n * nq * hd + i]);
                else if (dq[(size_t)n * nq * hd + i] != 0.0f) fail_msg("%s: dq outside the segment", devs[d].name);
            }
            for (int i = 0; i < nkv * hd; i++) {
                if (in) inside += fabs(dk[(size_t)n * nkv * hd + i]) + fabs(dv[(size_t)n * nkv * hd + i]);
                else if (dk[(size_t)n * nkv * hd + i] != 0.0f || dv[(size_t)n * nkv * hd + i] != 0.0f)
                    fail_msg("%s: dk or dv outside the segment", devs[d].name);
            }
        }
        assert_true(inside > 0.0);
        printf("  %-26s segment rows %d..%d isolated (forward bit-exact, no gradient outside)\n", devs[d].name, first,
               last);
        free(out2); free(lse2); free(dq); free(dk); free(dv);
    }
    case_free(&c);
    free(seg); free(k2); free(v2); free(dout);
}

// A packed segment gives the same result as that document run on its own
// (positions of the block boundaries differ, so only to float rounding).
static void test_attention_packed_equals_alone(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 33);
    const int T = 70, nq = 7, nkv = 1, hd = 16, C = nq * hd, KC = nkv * hd;
    int *seg = random_segments(&r, 1, T);
    AttnCase c;
    case_init(&c, &r, 1, T, nq, nkv, hd, 1.0);
    const size_t qb = c.nqe * sizeof(float), kb = c.nke * sizeof(float);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        memset(c.dqf, 0, c.nqe * sizeof(float));
        memset(c.dkf, 0, c.nke * sizeof(float));
        memset(c.dvf, 0, c.nke * sizeof(float));
        Mirrors mr = mirrors_on(dev);
        float *q_d = mirror(&mr, c.qf, qb), *k_d = mirror(&mr, c.kf, kb), *v_d = mirror(&mr, c.vf, kb);
        float *dout_d = mirror(&mr, c.doutf, qb), *out_d = mirror(&mr, c.outf, qb);
        float *lse_d = mirror(&mr, c.lsef, c.nl * sizeof(float));
        float *dq_d = mirror(&mr, c.dqf, qb), *dk_d = mirror(&mr, c.dkf, kb), *dv_d = mirror(&mr, c.dvf, kb);
        int *seg_d = mirror(&mr, seg, (size_t)T * sizeof(int));
        OP(dev, attention_forward, out_d, lse_d, q_d, k_d, v_d, seg_d, 1, T, nq, nkv, hd);
        OP(dev, attention_backward, dq_d, dk_d, dv_d, dout_d, out_d, lse_d, q_d, k_d, v_d, seg_d, 1, T, nq, nkv, hd);
        fetch(dev, c.outf, out_d, qb);
        fetch(dev, c.dqf, dq_d, qb);
        fetch(dev, c.dkf, dk_d, kb);
        fetch(dev, c.dvf, dv_d, kb);
        double worst = 0.0;
        for (int s0 = 0; s0 < T;) {
            int s1 = s0;
            while (s1 < T && seg[s1] == seg[s0]) s1++;
            int L = s1 - s0;
            float *o = zeros_f((size_t)L * C), *l = zeros_f((size_t)nq * L);
            float *dq = zeros_f((size_t)L * C), *dk = zeros_f((size_t)L * KC), *dv = zeros_f((size_t)L * KC);
            const size_t ob = (size_t)L * C * sizeof(float), kvb = (size_t)L * KC * sizeof(float);
            Mirrors ms = mirrors_on(dev);
            float *o_d = mirror(&ms, o, ob), *l_d = mirror(&ms, l, (size_t)nq * L * sizeof(float));
            float *q_s = mirror(&ms, c.qf + (size_t)s0 * C, ob), *k_s = mirror(&ms, c.kf + (size_t)s0 * KC, kvb);
            float *v_s = mirror(&ms, c.vf + (size_t)s0 * KC, kvb), *g_s = mirror(&ms, c.doutf + (size_t)s0 * C, ob);
            float *dq_s = mirror(&ms, dq, ob), *dk_s = mirror(&ms, dk, kvb), *dv_s = mirror(&ms, dv, kvb);
            OP(dev, attention_forward, o_d, l_d, q_s, k_s, v_s, NULL, 1, L, nq, nkv, hd);
            OP(dev, attention_backward, dq_s, dk_s, dv_s, g_s, o_d, l_d, q_s, k_s, v_s, NULL, 1, L, nq, nkv, hd);
            fetch(dev, o, o_d, ob);
            fetch(dev, dq, dq_s, ob);
            fetch(dev, dk, dk_s, kvb);
            fetch(dev, dv, dv_s, kvb);
            mirrors_free(&ms);
            for (size_t i = 0; i < (size_t)L * C; i++) {
                worst = fmax(worst, fabs(o[i] - c.outf[(size_t)s0 * C + i]));
                worst = fmax(worst, fabs(dq[i] - c.dqf[(size_t)s0 * C + i]));
            }
            for (size_t i = 0; i < (size_t)L * KC; i++) {
                worst = fmax(worst, fabs(dk[i] - c.dkf[(size_t)s0 * KC + i]));
                worst = fmax(worst, fabs(dv[i] - c.dvf[(size_t)s0 * KC + i]));
            }
            free(o); free(l); free(dq); free(dk); free(dv);
            s0 = s1;
        }
        mirrors_free(&mr);
        const double tol = dev_tol(&devs[d], 1e-5, 1e-4);
        printf("  %-26s packed vs each document alone: max abs diff %.1e\n", devs[d].name, worst);
        if (!(worst < tol)) fail_msg("%s: packed vs alone differ by %.3g", devs[d].name, worst);
    }
    case_free(&c);
    free(seg);
}

// Forward then backward of case c on dev (seg: host ids or NULL), results
// into the host arrays o, l, dq, dk, dv (dq, dk, dv accumulate onto them).
static void run_pair(Device *dev, const AttnCase *c, const int *seg, float *o, float *l, float *dq, float *dk,
                     float *dv) {
    const size_t qb = c->nqe * sizeof(float), kb = c->nke * sizeof(float), lb = c->nl * sizeof(float);
    Mirrors mr = mirrors_on(dev);
    float *q_d = mirror(&mr, c->qf, qb), *k_d = mirror(&mr, c->kf, kb), *v_d = mirror(&mr, c->vf, kb);
    float *g_d = mirror(&mr, c->doutf, qb), *o_d = mirror(&mr, o, qb), *l_d = mirror(&mr, l, lb);
    float *dq_d = mirror(&mr, dq, qb), *dk_d = mirror(&mr, dk, kb), *dv_d = mirror(&mr, dv, kb);
    int *seg_d = seg ? mirror(&mr, seg, (size_t)c->B * c->T * sizeof(int)) : NULL;
    OP(dev, attention_forward, o_d, l_d, q_d, k_d, v_d, seg_d, c->B, c->T, c->nq, c->nkv, c->hd);
    OP(dev, attention_backward, dq_d, dk_d, dv_d, g_d, o_d, l_d, q_d, k_d, v_d, seg_d, c->B, c->T, c->nq, c->nkv,
       c->hd);
    fetch(dev, o, o_d, qb);
    fetch(dev, l, l_d, lb);
    fetch(dev, dq, dq_d, qb);
    fetch(dev, dk, dk_d, kb);
    fetch(dev, dv, dv_d, kb);
    mirrors_free(&mr);
}

// Every output element is owned by one task, so the thread count must not
// change a single bit (the ops run the device's thread count; the test
// workspace is sized for far more than 3).
static void test_attention_thread_independent(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 34);
    const int B = 2, T = 70, nq = 4, nkv = 2, hd = 16;
    AttnCase c;
    case_init(&c, &r, B, T, nq, nkv, hd, 1.0);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        const int saved = dev->threads;
        float *res[2][5];
        for (int run = 0; run < 2; run++) {
            dev->threads = run == 0 ? 1 : 3;
            float *o = zeros_f(c.nqe), *l = zeros_f(c.nl), *dq = zeros_f(c.nqe), *dk = zeros_f(c.nke);
            float *dv = zeros_f(c.nke);
            run_pair(dev, &c, NULL, o, l, dq, dk, dv);
            res[run][0] = o; res[run][1] = l; res[run][2] = dq; res[run][3] = dk; res[run][4] = dv;
        }
        dev->threads = saved;
        size_t sizes[5] = {c.nqe, c.nl, c.nqe, c.nke, c.nke};
        for (int i = 0; i < 5; i++) {
            if (memcmp(res[0][i], res[1][i], sizes[i] * sizeof(float)))
                fail_msg("%s: 1 and 3 threads differ", devs[d].name);
            free(res[0][i]);
            free(res[1][i]);
        }
        printf("  %-26s 1 and 3 threads: the same bits\n", devs[d].name);
    }
    case_free(&c);
}

// The workspace the ops borrow scratch from is never zeroed: filled with NaNs
// it gives the same bits as a zeroed one (pad rows and columns never reach a
// result).
static void test_attention_dirty_workspace(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 35);
    const int B = 2, T = 150, nq = 6, nkv = 2, hd = 20;
    int *seg = random_segments(&r, B, T);
    AttnCase c;
    case_init(&c, &r, B, T, nq, nkv, hd, 1.0);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        const size_t n = dev->ws_bytes / sizeof(float);
        float *nans = xmalloc(n * sizeof(float), "NaN workspace");
        for (size_t i = 0; i < n; i++) nans[i] = NAN;
        for (int pass = 0; pass < 2; pass++) {
            const int *sg = pass ? seg : NULL;
            float *res[2][5];
            for (int run = 0; run < 2; run++) {
                if (run) OP(dev, upload, dev->ws, nans, n * sizeof(float));
                else OP(dev, zero, dev->ws, dev->ws_bytes);
                float *o = zeros_f(c.nqe), *l = zeros_f(c.nl), *dq = zeros_f(c.nqe), *dk = zeros_f(c.nke);
                float *dv = zeros_f(c.nke);
                run_pair(dev, &c, sg, o, l, dq, dk, dv);
                res[run][0] = o; res[run][1] = l; res[run][2] = dq; res[run][3] = dk; res[run][4] = dv;
            }
            size_t sizes[5] = {c.nqe, c.nl, c.nqe, c.nke, c.nke};
            for (int i = 0; i < 5; i++) {
                for (size_t j = 0; j < sizes[i]; j++)
                    if (!isfinite(res[1][i][j])) fail_msg("%s: a NaN of the workspace reached a result", devs[d].name);
                if (memcmp(res[0][i], res[1][i], sizes[i] * sizeof(float)))
                    fail_msg("%s: a dirty workspace changed a result", devs[d].name);
                free(res[0][i]);
                free(res[1][i]);
            }
        }
        printf("  %-26s NaN-filled workspace: the same bits as a zeroed one\n", devs[d].name);
        free(nans);
    }
    free(seg);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_attention_vs_ref),
        cmocka_unit_test(test_attention_cached_vs_ref),
        cmocka_unit_test(test_attention_cached_interleaved),
        cmocka_unit_test(test_attention_packing_isolation),
        cmocka_unit_test(test_attention_packed_equals_alone),
        cmocka_unit_test(test_attention_thread_independent),
        cmocka_unit_test(test_attention_dirty_workspace),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}
