// test_ops_distill: the classifier with a distillation loss
// (classifier_distill, model/ops/distill.c) on every device
// (test_backends.h): its double reference against central finite differences,
// each device against that reference (a dense teacher from its hidden states
// and lm_head, also reversed as on-policy distillation takes it, and a top-k
// teacher; temperatures 1 and 2.5; a cross-entropy
// mix; masked and ignored rows; several chunks of rows), against torch's
// F.cross_entropy and F.kl_div with autograd (the arrays below, written by
// the script at the end of this file), the plain classifier when the KL
// weight is 0, and a CPU device's bits on 1, 2 and 3 threads.
// Bounds: the reference's gradients within 1e-5 of central differences
// (double); a device's loss 1e-6 relative, dh/dW 5e-6 normwise (fp32 logits,
// the vectorised exp within 1 ulp); torch's values 2e-6 (as test_ops_torch);
// a GPU device 1e-4 (dev_tol).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "test_backends.h"
#include "test_ops_util.h"

enum { N = 29, C = 23, V = 203, K = 9 };

typedef struct {
    double *h, *W, *ht, *Wt, *zt, *topk_logits_d, *topk_lse_d[2];   // lse at T = 1 and 2.5 (MIXES)
    float *hf, *Wf, *htf, *Wtf, *topk_logits, *topk_lse[2];
    int targets[N], topk_ids[N * K];
    uint8_t mask[N];
} Data;

// The teacher's top-k from its double logits (ids in decreasing order).
static void top_k(const double *z, int *ids, double *vals) {
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= ids[i] == v;
            if (!taken && (best < 0 || z[v] > z[best])) best = v;
        }
        ids[j] = best;
        vals[j] = z[best];
    }
}

static void data_init(Data *d, Rng *r) {
    d->h = rand_d(r, N * C, 1.0);
    d->W = rand_d(r, V * C, 0.3);
    d->ht = rand_d(r, N * C, 1.0);
    d->Wt = rand_d(r, V * C, 0.3);
    d->hf = to_float_exact(d->h, N * C);
    d->Wf = to_float_exact(d->W, V * C);
    d->htf = to_float_exact(d->ht, N * C);
    d->Wtf = to_float_exact(d->Wt, V * C);
    d->zt = zeros_d((size_t)N * V);
    matmul_forward_ref(d->zt, d->ht, d->Wt, N, C, V);
    d->topk_logits_d = zeros_d(N * K);
    for (int n = 0; n < N; n++) top_k(d->zt + (size_t)n * V, d->topk_ids + n * K, d->topk_logits_d + n * K);
    d->topk_logits = to_float_exact(d->topk_logits_d, N * K);
    const double Ts[2] = {1.0, 2.5};
    for (int i = 0; i < 2; i++) {
        d->topk_lse_d[i] = zeros_d(N);
        for (int n = 0; n < N; n++) {
            double mx = -INFINITY, s = 0.0;
            for (int v = 0; v < V; v++) mx = fmax(mx, d->zt[(size_t)n * V + v] / Ts[i]);
            for (int v = 0; v < V; v++) s += exp(d->zt[(size_t)n * V + v] / Ts[i] - mx);
            d->topk_lse_d[i][n] = mx + log(s);
        }
        d->topk_lse[i] = to_float_exact(d->topk_lse_d[i], N);
    }
    for (int n = 0; n < N; n++) {
        d->targets[n] = n % 9 == 4 ? -1 : (int)(rng_next(r) % V);
        d->mask[n] = n < 3 || n % 7 == 3 ? 0 : 1;
    }
}

static void data_free(Data *d) {
    free(d->h); free(d->W); free(d->ht); free(d->Wt); free(d->zt); free(d->topk_logits_d);
    free(d->hf); free(d->Wf); free(d->htf); free(d->Wtf); free(d->topk_logits);
    for (int i = 0; i < 2; i++) free(d->topk_lse_d[i]), free(d->topk_lse[i]);
}

typedef struct {
    double ce_w, kd_w, T;
    int k;         // 0: the dense teacher
    int reverse;   // KL(student || teacher), dense only
} Mix;

static const Mix MIXES[] = {{0.0, 1.0, 1.0, 0, 0}, {0.3, 0.7, 2.5, 0, 0}, {0.0, 1.0, 1.0, K, 0},
                            {0.5, 0.5, 2.5, K, 0}, {0.0, 1.0, 1.0, 0, 1}, {0.2, 0.8, 2.5, 0, 1}};
enum { N_MIXES = 6 };

static int lse_of(const Mix *m) { return m->T == 1.0 ? 0 : 1; }

static double ref_loss(const Data *d, const Mix *m, double *dh, double *dW, double scale, double *ce, double *kl) {
    return classifier_distill_ref(dh, dW, d->h, d->W, d->targets, d->mask, N, C, V, scale, m->k ? NULL : d->zt,
                                  m->k ? d->topk_ids : NULL, m->k ? d->topk_logits_d : NULL,
                                  m->k ? d->topk_lse_d[lse_of(m)] : NULL, m->k, m->ce_w, m->kd_w, m->T, m->reverse, ce, kl);
}

// ---- the reference against central differences

typedef struct { Data *d; const Mix *m; } FdCtx;
static void fd_forward(void *p, double *out) {
    FdCtx *c = p;
    out[0] = ref_loss(c->d, c->m, NULL, NULL, 1.0, NULL, NULL);
}

static void test_distill_ref_finite_differences(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 51);
    Data d;
    data_init(&d, &r);
    for (int i = 0; i < N_MIXES; i++) {
        double *dh = zeros_d(N * C), *dW = zeros_d(V * C), one = 1.0;
        ref_loss(&d, &MIXES[i], dh, dW, 1.0, NULL, NULL);
        FdCtx c = {&d, &MIXES[i]};
        double e_h = fd_check(fd_forward, &c, 1, &one, d.h, dh, N * C);
        double e_W = fd_check(fd_forward, &c, 1, &one, d.W, dW, 60);   // the first rows of W
        printf("  reference mix %d (ce %.1f, kd %.1f, T %.1f, k %d%s): dh %.1e, dW %.1e against differences\n", i,
               MIXES[i].ce_w, MIXES[i].kd_w, MIXES[i].T, MIXES[i].k, MIXES[i].reverse ? ", reverse" : "", e_h, e_W);
        assert_true(e_h < 1e-5 && e_W < 1e-5);
        free(dh); free(dW);
    }
    data_free(&d);
}

// ---- a device against the reference

typedef struct { double loss; DistillSums sums; int count; float *dh, *dW; } Run;

static Device *with_rows(Device *tmp, Device *d, int rows) {
    if (d->be != backend_cpu()) return d;
    const CpuKernels *k = cpu_kernels(d);
    const CpuKernels kr = {k->f32, k->bf16, rows};
    cpu_device_init(tmp, d->threads, &kr);
    dev_reserve(tmp, classifier_workspace_bytes(tmp, N, V));
    return tmp;
}

// classifier_distill on dev over host arrays of n rows (mirrored there and back).
static Run distill_on(Device *dev, const float *h, const float *W, const float *ht, const float *Wt, const int *targets,
                      const uint8_t *mask, const int *ids, const float *tl, const float *lse, int n, int c, int v,
                      const Mix *m, float scale, int k) {
    Run o = {0};
    o.dh = zeros_f((size_t)n * c);
    o.dW = zeros_f((size_t)v * c);
    Mirrors mr = mirrors_on(dev);
    const size_t hb = (size_t)n * c * sizeof(float), wb = (size_t)v * c * sizeof(float);
    float *dh_d = mirror(&mr, o.dh, hb), *dW_d = mirror(&mr, o.dW, wb);
    DistillTarget t = {(float)m->ce_w, (float)m->kd_w, (float)m->T, NULL, NULL, NULL, NULL, NULL, k, m->reverse};
    if (k) {
        t.topk_ids = mirror(&mr, ids, (size_t)n * k * sizeof(int));
        t.topk_logits = mirror(&mr, tl, (size_t)n * k * sizeof(float));
        t.topk_lse = mirror(&mr, lse, (size_t)n * sizeof(float));
    } else {
        t.h = mirror(&mr, ht, hb);
        t.W = mirror(&mr, Wt, wb);
    }
    o.loss = OP(dev, classifier_distill, dh_d, dW_d, mirror(&mr, h, hb), mirror(&mr, W, wb),
                mirror(&mr, targets, (size_t)n * sizeof(int)), mask ? mirror(&mr, mask, (size_t)n) : NULL, n, c, v,
                scale, &t, &o.sums, &o.count, MATMUL_FP32);
    fetch(dev, o.dh, dh_d, hb);
    fetch(dev, o.dW, dW_d, wb);
    mirrors_free(&mr);
    return o;
}

static Run run_data(Device *dev, const Data *d, const Mix *m, float scale) {
    return distill_on(dev, d->hf, d->Wf, d->htf, d->Wtf, d->targets, d->mask, d->topk_ids, d->topk_logits,
                      d->topk_lse[lse_of(m)], N, C, V, m, scale, m->k);
}

static void run_free(Run *o) { free(o->dh); free(o->dW); }

static void test_distill_vs_ref(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 52);
    Data d;
    data_init(&d, &r);
    const float scale = 1.0f / 19.0f;
    for (int i = 0; i < N_MIXES; i++) {
        const Mix *m = &MIXES[i];
        double *dh = zeros_d(N * C), *dW = zeros_d(V * C), ce, kl;
        const double loss = ref_loss(&d, m, dh, dW, scale, &ce, &kl);
        int count = 0;
        for (int n = 0; n < N; n++) count += d.targets[n] >= 0 && d.mask[n];
        for (int j = 0; j < n_devs; j++) {
            Device tmp, *dev = with_rows(&tmp, &devs[j].dev, 8);   // chunks of 4 rows
            Run o = run_data(dev, &d, m, scale);
            const double e_loss = fabs(o.loss - loss) / loss, e_ce = fabs(o.sums.ce - ce) / ce;
            const double e_kl = fabs(o.sums.kl - kl) / kl;
            const double e_dh = rel_err_f(o.dh, dh, N * C), e_dW = rel_err_f(o.dW, dW, V * C);
            printf("  %-26s mix %d: loss %.6f (ref %.6f) %.1e, ce %.1e, kl %.1e, dh %.1e, dW %.1e\n", devs[j].name, i,
                   o.loss, loss, e_loss, e_ce, e_kl, e_dh, e_dW);
            assert_int_equal(o.count, count);
            const TestDevice *td = &devs[j];
            if (!(e_loss < dev_tol(td, 1e-6, 1e-4) && e_ce < dev_tol(td, 1e-6, 1e-4) && e_kl < dev_tol(td, 1e-5, 1e-4) &&
                  e_dh < dev_tol(td, 5e-6, 1e-4) && e_dW < dev_tol(td, 5e-6, 1e-4)))
                fail_msg("%s: classifier_distill mix %d off the reference", td->name, i);
            run_free(&o);
            if (dev == &tmp) dev_free(&tmp);
        }
        free(dh); free(dW);
    }
    data_free(&d);
}

// With kd_weight 0 the op is the plain classifier; a teacher equal to the
// student, whole or as its top-k and the rest, gives KL 0 and, without
// cross-entropy, no gradient.
static void test_distill_limits(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 53);
    Data d;
    data_init(&d, &r);
    for (int j = 0; j < n_devs; j++) {
        Device *dev = &devs[j].dev;
        const Mix ce_only = {1.0, 0.0, 1.0, 0, 0}, self = {0.0, 1.0, 1.0, 0, 0};
        Run o = run_data(dev, &d, &ce_only, 0.5f);
        float *dh = zeros_f(N * C), *dW = zeros_f(V * C);
        int count;
        Mirrors mr = mirrors_on(dev);
        float *dh_d = mirror(&mr, dh, N * C * sizeof(float)), *dW_d = mirror(&mr, dW, V * C * sizeof(float));
        const double loss = OP(dev, classifier, dh_d, dW_d, NULL, mirror(&mr, d.hf, N * C * sizeof(float)),
                               mirror(&mr, d.Wf, V * C * sizeof(float)), mirror(&mr, d.targets, sizeof d.targets),
                               mirror(&mr, d.mask, sizeof d.mask), N, C, V, 0.5f, &count, MATMUL_FP32);
        fetch(dev, dh, dh_d, N * C * sizeof(float));
        fetch(dev, dW, dW_d, V * C * sizeof(float));
        mirrors_free(&mr);
        double e_h = 0, e_W = 0, m_h = 0, m_W = 0;
        for (int i = 0; i < N * C; i++) e_h = fmax(e_h, fabs(o.dh[i] - dh[i])), m_h = fmax(m_h, fabs(dh[i]));
        for (int i = 0; i < V * C; i++) e_W = fmax(e_W, fabs(o.dW[i] - dW[i])), m_W = fmax(m_W, fabs(dW[i]));
        printf("  %-26s kd weight 0 vs classifier: loss %.1e, dh %.1e, dW %.1e\n", devs[j].name,
               fabs(o.loss - loss) / loss, e_h / m_h, e_W / m_W);
        assert_int_equal(o.count, count);
        assert_true(fabs(o.loss - loss) <= 1e-6 * loss && e_h <= 1e-6 * m_h && e_W <= 1e-6 * m_W);
        run_free(&o);
        // the teacher is the student itself
        o = distill_on(dev, d.hf, d.Wf, d.hf, d.Wf, d.targets, d.mask, NULL, NULL, NULL, N, C, V, &self, 1.0f, 0);
        double g = 0;
        for (int i = 0; i < N * C; i++) g = fmax(g, fabs(o.dh[i]));
        printf("  %-26s teacher = student: KL %.2e, max |dh| %.2e\n", devs[j].name, o.sums.kl, g);
        assert_true(o.sums.kl < 1e-5 && g < 1e-5);
        run_free(&o);
        // ... the other way round
        const Mix self_reverse = {0.0, 1.0, 2.5, 0, 1};
        o = distill_on(dev, d.hf, d.Wf, d.hf, d.Wf, d.targets, d.mask, NULL, NULL, NULL, N, C, V, &self_reverse, 1.0f, 0);
        g = 0;
        for (int i = 0; i < N * C; i++) g = fmax(g, fabs(o.dh[i]));
        printf("  %-26s teacher = student, reversed: KL %.2e, max |dh| %.2e\n", devs[j].name, o.sums.kl, g);
        assert_true(o.sums.kl < 1e-5 && g < 1e-5);
        run_free(&o);
        // ... and as its own top-k with the rest as one outcome
        double *z = zeros_d((size_t)N * V), vals[K];
        int ids[N * K];
        float tl[N * K], lse[N];
        matmul_forward_ref(z, d.h, d.W, N, C, V);
        for (int n = 0; n < N; n++) {
            top_k(z + (size_t)n * V, ids + n * K, vals);
            double mx = -INFINITY, sum = 0.0;
            for (int v = 0; v < V; v++) mx = fmax(mx, z[(size_t)n * V + v]);
            for (int v = 0; v < V; v++) sum += exp(z[(size_t)n * V + v] - mx);
            lse[n] = (float)(mx + log(sum));
            for (int i = 0; i < K; i++) tl[n * K + i] = (float)vals[i];
        }
        const Mix self_k = {0.0, 1.0, 1.0, K, 0};
        o = distill_on(dev, d.hf, d.Wf, NULL, NULL, d.targets, d.mask, ids, tl, lse, N, C, V, &self_k, 1.0f, K);
        g = 0;
        for (int i = 0; i < N * C; i++) g = fmax(g, fabs(o.dh[i]));
        printf("  %-26s teacher = student, top-%d and the rest: KL %.2e, max |dh| %.2e\n", devs[j].name, K, o.sums.kl, g);
        assert_true(o.sums.kl < 1e-5 && g < 1e-5);
        run_free(&o);
        free(z);
        free(dh); free(dW);
    }
    data_free(&d);
}

// A CPU device's loss and gradients are the same bits on 1, 2 and 3 threads.
static void test_distill_thread_count(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 54);
    Data d;
    data_init(&d, &r);
    for (int i = 0; i < N_MIXES; i++) {
        Run first = {0};
        for (int threads = 1; threads <= 3; threads++) {
            Device dev;
            cpu_device_init(&dev, threads, NULL);
            dev_reserve(&dev, classifier_workspace_bytes(&dev, N, V));
            Run o = run_data(&dev, &d, &MIXES[i], 0.25f);
            dev_free(&dev);
            if (threads == 1) {
                first = o;
                continue;
            }
            assert_true(o.loss == first.loss && o.sums.kl == first.sums.kl);
            assert_memory_equal(o.dh, first.dh, N * C * sizeof(float));
            assert_memory_equal(o.dW, first.dW, V * C * sizeof(float));
            run_free(&o);
        }
        run_free(&first);
    }
    data_free(&d);
}

// ---- torch

static const double torch_t1_dense_loss = 7.2196846, torch_t1_dense_ce = 8.13083076, torch_t1_dense_kl = 7.2196846;
static const float torch_t1_dense_dh[30] = {
    -0x1.32fefcp-3f, 0x1.ca3ac8p-3f, -0x1.32fefap-3f, 0x1.ca3acap-3f, -0x1.3994f8p+0f, 0x1.973218p-3f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x1.1525c6p+0f, -0x1.c06222p-2f, 0x1.1525c4p+0f,
    -0x1.c06224p-2f, -0x1.c37b64p-3f, -0x1.c62afp-2f, 0x1.1b5f52p-2f, -0x1.067a5ap-2f, 0x1.1b5f5p-2f,
    -0x1.067a5ap-2f, 0x1.2ee8eep-2f, -0x1.ac3024p-3f, -0x1.3b639cp-3f, -0x1.75ccb4p-6f, -0x1.3b6394p-3f,
    -0x1.75cc98p-6f, -0x1.c3353ap-7f, 0x1.5a6e94p-1f,
};
static const float torch_t1_dense_dW[42] = {
    0x1.a9d1bep-8f, 0x1.1e786p-3f, 0x1.5c8634p-3f, 0x1.071e18p-1f, 0x1.55def4p-2f, 0x1.5aec02p-1f,
    0x1.1314f4p-3f, 0x1.6a9724p-1f, 0x1.88b3b8p-3f, -0x1.c321dap-2f, 0x1.fe527cp-3f, -0x1.885278p-2f,
    0x1.970f7cp-5f, -0x1.1a362p-1f, -0x1.9b643p-9f, 0x1.c7d1f2p-2f, -0x1.ca7c06p-5f, 0x1.91b938p-2f,
    -0x1.74fa72p-4f, -0x1.8cf3dcp-3f, -0x1.99a0cap-4f, 0x1.6782e6p-2f, -0x1.be4724p-4f, 0x1.5e595p-2f,
    -0x1.fc8942p-1f, 0x1.82b36cp-1f, -0x1.08a1c2p+0f, 0x1.2dce54p-3f, -0x1.12fee4p+0f, 0x1.b5ca9p-4f,
    0x1.8bc77cp-2f, -0x1.710bep-2f, 0x1.67010ap-2f, -0x1.0fe3c2p-2f, 0x1.423a96p-2f, -0x1.34aa34p-2f,
    0x1.03bafap-1f, -0x1.fddf3ap-2f, 0x1.b28808p-2f, -0x1.80b952p-1f, 0x1.5d9a1cp-2f, -0x1.ab304ap-1f,
};
static const int torch_topk_ids[15] = {0, 3, 5, 0, 5, 3, 0, 5, 3, 1, 4, 6, 1, 4, 6};
static const float torch_topk_logits[15] = {
    0x1.3216b4p+1f, 0x1.fc0766p-1f, 0x1.88f6f8p-1f, 0x1.3216b4p+1f, 0x1.a95394p-1f, 0x1.887376p-1f,
    0x1.3216b4p+1f, 0x1.c9b03p-1f, 0x1.14df88p-1f, 0x1.50e8dp+1f, 0x1.e2baecp+0f, 0x1.0ef744p+0f,
    0x1.0f07b2p+1f, 0x1.cded16p+0f, 0x1.36c6aap-1f,
};
static const float torch_topk_lse_t1[5] = {
    0x1.6ec358p+1f, 0x1.69b914p+1f, 0x1.670a1p+1f, 0x1.9d25e8p+1f, 0x1.73b3fp+1f,
};
static const double torch_t1_topk_loss = 6.72549915, torch_t1_topk_ce = 8.13083076, torch_t1_topk_kl = 6.72549915;
static const float torch_t1_topk_dh[30] = {
    -0x1.c8d688p-5f, 0x1.288ccp-3f, -0x1.c8d68cp-5f, 0x1.288ccp-3f, -0x1.217bccp+0f, 0x1.5aa542p-3f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x1.0dd9cap+0f, -0x1.c93b2p-2f, 0x1.0dd9ccp+0f,
    -0x1.c93b2p-2f, -0x1.fddb2cp-3f, -0x1.74bf74p-2f, 0x1.efab9cp-3f, -0x1.f82c26p-3f, 0x1.efab96p-3f,
    -0x1.f82c26p-3f, 0x1.0cd29p-2f, -0x1.5c56bcp-3f, -0x1.1ed49cp-3f, -0x1.d3ced8p-6f, -0x1.1ed498p-3f,
    -0x1.d3cecp-6f, -0x1.ed591cp-8f, 0x1.56a496p-1f,
};
static const float torch_t1_topk_dW[42] = {
    0x1.af292p-8f, 0x1.28c4cp-3f, 0x1.5da418p-3f, 0x1.04039p-1f, 0x1.56e778p-2f, 0x1.580e44p-1f,
    0x1.53a796p-4f, 0x1.77b6fp-1f, 0x1.25488p-3f, -0x1.a5f74cp-2f, 0x1.a0bd3p-3f, -0x1.683cf2p-2f,
    0x1.22096ap-4f, -0x1.2bd564p-1f, 0x1.7e199p-8f, 0x1.959466p-2f, -0x1.e48c7p-5f, 0x1.530a7p-2f,
    -0x1.48d9dp-4f, -0x1.a99542p-3f, -0x1.77017cp-4f, 0x1.446b4ap-2f, -0x1.a52924p-4f, 0x1.38e15ep-2f,
    -0x1.c47374p-1f, 0x1.739706p-1f, -0x1.d36438p-1f, 0x1.0882a8p-3f, -0x1.e255p-1f, 0x1.997f28p-4f,
    0x1.7919f4p-2f, -0x1.598b22p-2f, 0x1.5847dap-2f, -0x1.a74ae4p-3f, 0x1.3775bcp-2f, -0x1.e8ef2p-3f,
    0x1.bdda7ap-2f, -0x1.e4fdbap-2f, 0x1.64d242p-2f, -0x1.7655bap-1f, 0x1.0bca08p-2f, -0x1.a2d9d8p-1f,
};
static const double torch_t2_dense_loss = 9.08282661, torch_t2_dense_ce = 8.13083076, torch_t2_dense_kl = 2.35003972;
static const float torch_t2_dense_dh[30] = {
    -0x1.02a4p-1f, 0x1.938822p-3f, -0x1.02a402p-1f, 0x1.93881cp-3f, -0x1.1702e6p+0f, 0x1.5c8f26p-3f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x1.5e713p+0f, -0x1.4211c6p-1f, 0x1.5e713p+0f,
    -0x1.4211c6p-1f, -0x1.5453c4p-3f, -0x1.3d1b14p-1f, 0x1.a89094p-2f, -0x1.1846c8p-2f, 0x1.a89094p-2f,
    -0x1.1846c8p-2f, 0x1.f8271ep-2f, -0x1.4d9fbap-3f, -0x1.e737e4p-3f, 0x1.cb590ap-3f, -0x1.e737e8p-3f,
    0x1.cb590cp-3f, 0x1.8d009p-6f, 0x1.86041cp-2f,
};
static const float torch_t2_dense_dW[42] = {
    -0x1.794c1p-2f, 0x1.3d9a86p-3f, -0x1.e5ac5ep-3f, 0x1.5bf29p-1f, -0x1.b18138p-4f, 0x1.9f2d8p-1f,
    0x1.8a7bd2p-2f, 0x1.208d6ep-2f, 0x1.8ccebcp-2f, -0x1.446744p-1f, 0x1.8f21a4p-2f, -0x1.433dcep-1f,
    0x1.bed528p-5f, -0x1.76069p-3f, 0x1.279abcp-5f, 0x1.14c664p-5f, 0x1.20c0aep-6f, 0x1.f62fep-7f,
    -0x1.db56e4p-7f, -0x1.7a4a4cp-3f, 0x1.15b8f6p-6f, 0x1.0c1174p-1f, 0x1.8c8eb4p-5f, 0x1.1c2c98p-1f,
    -0x1.243b18p+0f, 0x1.83115ap-1f, -0x1.31285cp+0f, 0x1.50a69cp-2f, -0x1.3e15ap+0f, 0x1.1cf192p-2f,
    0x1.2766bep-1f, -0x1.1b644cp-1f, 0x1.0fe4b2p-1f, -0x1.829a98p-2f, 0x1.f0c54ep-2f, -0x1.b19eaap-2f,
    0x1.03f798p-1f, -0x1.168c68p-2f, 0x1.d4908ep-2f, -0x1.1bef2cp-1f, 0x1.a131e8p-2f, -0x1.359e7cp-1f,
};
static const float torch_topk_lse_t2[5] = {
    0x1.1909dep+1f, 0x1.140b18p+1f, 0x1.10682ap+1f, 0x1.2e2264p+1f, 0x1.1e9204p+1f,
};
static const double torch_t2_topk_loss = 7.75716734, torch_t2_topk_ce = 8.13083076, torch_t2_topk_kl = 1.9081533;
static const float torch_t2_topk_dh[30] = {
    -0x1.c57c46p-3f, -0x1.e8f23cp-6f, -0x1.c57c46p-3f, -0x1.e8f24cp-6f, -0x1.9cc0dap-1f, 0x1.48103p-4f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x1.4213ecp+0f, -0x1.3e9664p-1f, 0x1.4213ecp+0f,
    -0x1.3e9662p-1f, -0x1.1b9ee4p-2f, -0x1.a62e2p-2f, 0x1.41582cp-2f, -0x1.ad17fcp-3f, 0x1.41582cp-2f,
    -0x1.ad18p-3f, 0x1.88f3d2p-2f, -0x1.f7240cp-5f, -0x1.9250d8p-3f, 0x1.af635ap-3f, -0x1.9250d4p-3f,
    0x1.af6358p-3f, 0x1.310298p-5f, 0x1.72cc2p-2f,
};
static const float torch_t2_topk_dW[42] = {
    -0x1.7c6eap-2f, 0x1.71bf7cp-3f, -0x1.e67794p-3f, 0x1.547fd8p-1f, -0x1.a823bp-4f, 0x1.991946p-1f,
    0x1.a8e9dap-3f, 0x1.74e1ep-2f, 0x1.b8cfc4p-3f, -0x1.176d06p-1f, 0x1.c8b5acp-3f, -0x1.13738cp-1f,
    0x1.4ba9dp-4f, -0x1.eeba9cp-3f, 0x1.20f836p-5f, -0x1.ec0894p-5f, -0x1.558cdcp-7f, -0x1.b13202p-4f,
    0x1.dd2596p-6f, -0x1.063744p-2f, 0x1.97f598p-5f, 0x1.9b162cp-2f, 0x1.20ac36p-4f, 0x1.b04284p-2f,
    -0x1.94845ap-1f, 0x1.4d33f4p-1f, -0x1.9f86c2p-1f, 0x1.029c02p-2f, -0x1.aa892ap-1f, 0x1.d92e6cp-3f,
    0x1.0dcc1cp-1f, -0x1.f7860cp-2f, 0x1.f74f5cp-2f, -0x1.b83718p-3f, 0x1.d30684p-2f, -0x1.006464p-2f,
    0x1.44ad64p-2f, -0x1.a61dc4p-3f, 0x1.07745p-2f, -0x1.fe3b4p-2f, 0x1.94767ap-3f, -0x1.1dba2ap-1f,
};

static float *gen(int n, int a, int m, double scale) {
    float *x = xmalloc((size_t)n * sizeof(float), "gen");
    for (int i = 0; i < n; i++) x[i] = (float)((((i * a + 7) % m) / (0.5 * m) - 1.0) * scale);
    return x;
}

static double rel_vs(const float *got, const float *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)got[i] - want[i]));
        mag = fmax(mag, fabs((double)want[i]));
    }
    return diff / mag;
}

static void test_distill_torch(void **state) {
    (void)state;
    enum { TN = 5, TC = 6, TV = 7, TK = 3 };
    const int targets[TN] = {3, -1, 0, 6, 2};
    float *h = gen(TN * TC, 29, 61, 1.5), *W = gen(TV * TC, 31, 67, 1.0);
    float *ht = gen(TN * TC, 37, 71, 1.3), *Wt = gen(TV * TC, 41, 73, 1.0);
    const struct {
        const char *name;
        Mix m;
        double loss, ce, kl;
        const float *dh, *dW;
    } cases[] = {
        {"T 1, KL only, dense", {0.0, 1.0, 1.0, 0, 0}, torch_t1_dense_loss, torch_t1_dense_ce, torch_t1_dense_kl,
         torch_t1_dense_dh, torch_t1_dense_dW},
        {"T 1, KL only, top-3", {0.0, 1.0, 1.0, TK, 0}, torch_t1_topk_loss, torch_t1_topk_ce, torch_t1_topk_kl,
         torch_t1_topk_dh, torch_t1_topk_dW},
        {"T 2, 0.25 CE + 0.75 KL, dense", {0.25, 0.75, 2.0, 0, 0}, torch_t2_dense_loss, torch_t2_dense_ce,
         torch_t2_dense_kl, torch_t2_dense_dh, torch_t2_dense_dW},
        {"T 2, 0.25 CE + 0.75 KL, top-3", {0.25, 0.75, 2.0, TK, 0}, torch_t2_topk_loss, torch_t2_topk_ce,
         torch_t2_topk_kl, torch_t2_topk_dh, torch_t2_topk_dW},
    };
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < n_devs; j++) {
            Run o = distill_on(&devs[j].dev, h, W, ht, Wt, targets, NULL, torch_topk_ids, torch_topk_logits,
                               cases[c].m.T == 1.0 ? torch_topk_lse_t1 : torch_topk_lse_t2, TN, TC, TV, &cases[c].m,
                               1.0f, cases[c].m.k);
            const double e_l = fabs(o.loss - cases[c].loss) / cases[c].loss;
            const double e_kl = fabs(o.sums.kl - cases[c].kl) / cases[c].kl, e_ce = fabs(o.sums.ce - cases[c].ce) / cases[c].ce;
            const double e_h = rel_vs(o.dh, cases[c].dh, TN * TC), e_W = rel_vs(o.dW, cases[c].dW, TV * TC);
            printf("  %-26s %-30s loss %.1e ce %.1e kl %.1e dh %.1e dW %.1e (vs torch)\n", devs[j].name,
                   cases[c].name, e_l, e_ce, e_kl, e_h, e_W);
            assert_int_equal(o.count, 4);
            const double tol = dev_tol(&devs[j], 2e-6, 1e-4);
            if (!(e_l < tol && e_kl < 4 * tol && e_ce < tol && e_h < tol && e_W < tol))
                fail_msg("%s: %s off torch", devs[j].name, cases[c].name);
            run_free(&o);
        }
    free(h); free(W); free(ht); free(Wt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_distill_ref_finite_differences), cmocka_unit_test(test_distill_vs_ref),
        cmocka_unit_test(test_distill_limits), cmocka_unit_test(test_distill_thread_count),
        cmocka_unit_test(test_distill_torch),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}

/* The generator (run with the test venv's python, tests/.venv; prints the arrays above):

# Prints the C arrays of tests/test_ops_distill.c: torch's cross-entropy and
# KL divergence (F.cross_entropy, F.kl_div) and their autograd gradients on
# inputs both sides build from gen().
import re
import numpy as np, torch
import torch.nn.functional as F

def gen(n, a, m, scale=1.0):
    return np.array([np.float32((((i * a + 7) % m) / (0.5 * m) - 1.0) * scale) for i in range(n)], dtype=np.float32)

def carr(name, x):
    x = np.asarray(x, dtype=np.float32).ravel()
    vals = [re.sub(r"\.?0*p", "p", float(v).hex()) + "f" for v in x]
    lines, line = [], "   "
    for v in vals:
        if len(line) + len(v) + 2 > 110:
            lines.append(line)
            line = "   "
        line += " " + v + ","
    lines.append(line)
    return f"static const float {name}[{x.size}] = {{\n" + "\n".join(lines) + "\n};"

N, C, V, K = 5, 6, 7, 3
targets = torch.tensor([3, -100, 0, 6, 2])
ht = torch.from_numpy(gen(N * C, 37, 71, 1.3)).reshape(N, C)
Wt = torch.from_numpy(gen(V * C, 41, 73)).reshape(V, C)
zt = ht @ Wt.T
out = []
for name, T, a, b in (("t1", 1.0, 0.0, 1.0), ("t2", 2.0, 0.25, 0.75)):
    for mode in ("dense", "topk"):
        h = torch.from_numpy(gen(N * C, 29, 61, 1.5)).reshape(N, C).requires_grad_()
        W = torch.from_numpy(gen(V * C, 31, 67)).reshape(V, C).requires_grad_()
        z = h @ W.T
        keep = targets >= 0
        ce = F.cross_entropy(z, targets, ignore_index=-100, reduction="sum")
        log_ps = F.log_softmax(z[keep] / T, dim=-1)
        if mode == "dense":
            log_pt = F.log_softmax(zt[keep] / T, dim=-1)
            kl = F.kl_div(log_ps, log_pt, log_target=True, reduction="sum")
        else:
            # the teacher's k ids with their exact probabilities, and the rest as one outcome
            vals, ids = zt.topk(K, dim=-1)
            lse = torch.logsumexp(zt / T, dim=-1)
            log_q = vals[keep] / T - lse[keep, None]
            log_p = log_ps.gather(1, ids[keep])
            q_rest = 1 - log_q.exp().sum(-1)
            p_rest = 1 - log_p.exp().sum(-1)
            kl = (log_q.exp() * (log_q - log_p)).sum() + (q_rest * (q_rest.log() - p_rest.log())).sum()
            if name == "t1":
                out.append("static const int torch_topk_ids[%d] = {%s};" % (N * K, ", ".join(str(int(i)) for i in ids.flatten())))
                out.append(carr("torch_topk_logits", vals.detach().numpy()))
            out.append(carr(f"torch_topk_lse_{name}", lse.detach().numpy()))
        loss = a * ce + b * T * T * kl
        loss.backward()
        tag = f"{name}_{mode}"
        out += [f"static const double torch_{tag}_loss = {float(loss.detach()):.9g}, torch_{tag}_ce = {float(ce):.9g}, "
                f"torch_{tag}_kl = {float(kl):.9g};",
                carr(f"torch_{tag}_dh", h.grad.numpy()), carr(f"torch_{tag}_dW", W.grad.numpy())]
print("\n".join(out))
*/
