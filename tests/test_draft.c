// test_draft: the DFlash draft (model/draft.h). Its attention op against the
// double reference (forward) and central differences of it (backward); the
// whole pass (logits, the weighted loss, every draft weight's gradient)
// against PyTorch in float64 (tests/ref/make_draft_fixtures.py, whose autograd
// is itself checked against finite differences there); a generation-style
// pass that fills the context a few rows at a time against one pass over all
// of it; a vocabulary of its own (logits, loss from torch's logits, gradients
// against central differences); the KL term to the target's distribution
// (kl_weight 0 bit-identical; with it, the loss from the logits in double and
// its gradients against central differences); the acceptance counts of
// greedy columns against a recount; and the config checks.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "../model/draft.h"
#include "test_fixture_util.h"
#include "test_model_util.h"
#include "test_ops_util.h"

#define FIXTURE "tests/fixtures/draft/expected.safetensors"

// ---- the attention op
typedef struct { double *q, *kc, *vc, *kb, *vb; const int *anchor, *lo; int B, T, A, blk, nq, nkv, hd; } AttnCtx;
static void attn_fwd(void *p, double *out) {
    AttnCtx *c = p;
    draft_attention_forward_ref(out, c->q, c->kc, c->vc, c->kb, c->vb, c->anchor, c->lo, c->B, c->T, c->A, c->blk,
                                c->nq, c->nkv, c->hd);
}

static float *to_f(const double *x, size_t n) {
    float *f = xmalloc(n * sizeof(float), "test floats");
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}
static double *to_d(const float *x, size_t n) {
    double *d = xmalloc(n * sizeof(double), "test doubles");
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static void test_attention_op(void **state) {
    (void)state;
    enum { B = 2, T = 5, A = 3, blk = 3, nq = 4, nkv = 2, hd = 4 };
    const int S = B * A, R = blk * S, Q = nq * hd, KV = nkv * hd;
    const int anchor[B * A] = {0, 2, 5, 1, 4, 9};   // no context, some, all of it, and past the end
    const int lo[B * A] = {0, 0, 3, 1, 2, 0};       // packed examples: context from its example's first row
    Rng r;
    rng_seed(&r, 3);
    double *q = rand_d(&r, (size_t)R * Q, 1.0), *kc = rand_d(&r, (size_t)B * T * KV, 1.0);
    double *vc = rand_d(&r, (size_t)B * T * KV, 1.0), *kb = rand_d(&r, (size_t)R * KV, 1.0);
    double *vb = rand_d(&r, (size_t)R * KV, 1.0), *Rw = rand_d(&r, (size_t)R * Q, 1.0);
    double *want = zeros_d((size_t)R * Q);
    AttnCtx c = {q, kc, vc, kb, vb, anchor, lo, B, T, A, blk, nq, nkv, hd};
    attn_fwd(&c, want);

    Device dev;
    cpu_device_init(&dev, 0, NULL);
    float *fq = to_f(q, (size_t)R * Q), *fkc = to_f(kc, (size_t)B * T * KV), *fvc = to_f(vc, (size_t)B * T * KV);
    float *fkb = to_f(kb, (size_t)R * KV), *fvb = to_f(vb, (size_t)R * KV), *fR = to_f(Rw, (size_t)R * Q);
    float *out = xcalloc((size_t)R * Q, sizeof(float), "out"), *lse = xcalloc((size_t)R * nq, sizeof(float), "lse");
    draft_attention_forward(&dev, out, lse, fq, fkc, fvc, fkb, fvb, anchor, lo, B, T, A, blk, nq, nkv, hd);
    double worst = 0;
    for (int i = 0; i < R * Q; i++) worst = fmax(worst, fabs(out[i] - want[i]));
    printf("  draft attention forward: max |float - double| %.2e\n", worst);
    assert_true(worst < 1e-5);

    // backward: accumulates onto what is there; checked against central differences of the reference
    float *dq = xcalloc((size_t)R * Q, sizeof(float), "dq"), *dkc = xcalloc((size_t)B * T * KV, sizeof(float), "dkc");
    float *dvc = xcalloc((size_t)B * T * KV, sizeof(float), "dvc");
    float *dkb = xcalloc((size_t)R * KV, sizeof(float), "dkb"), *dvb = xcalloc((size_t)R * KV, sizeof(float), "dvb");
    draft_attention_backward(&dev, dq, dkc, dvc, dkb, dvb, fR, out, lse, fq, fkc, fvc, fkb, fvb, anchor, lo, B, T, A,
                             blk, nq, nkv, hd);
    struct { double *x; float *g; size_t n; const char *name; } parts[] = {
        {q, dq, (size_t)R * Q, "dq"}, {kc, dkc, (size_t)B * T * KV, "dk (context)"},
        {vc, dvc, (size_t)B * T * KV, "dv (context)"}, {kb, dkb, (size_t)R * KV, "dk (block)"},
        {vb, dvb, (size_t)R * KV, "dv (block)"}};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        double *g = to_d(parts[k].g, parts[k].n);
        double e = fd_check(attn_fwd, &c, (size_t)R * Q, Rw, parts[k].x, g, parts[k].n);
        printf("  draft attention backward %-14s max rel err %.2e\n", parts[k].name, e);
        assert_true(e < 1e-4);
        free(g);
    }
    free(q), free(kc), free(vc), free(kb), free(vb), free(Rw), free(want);
    free(fq), free(fkc), free(fvc), free(fkb), free(fvb), free(fR), free(out), free(lse);
    free(dq), free(dkc), free(dvc), free(dkb), free(dvb);
    dev_free(&dev);
}

// ---- the whole pass against PyTorch
typedef struct {
    StFile f;
    ModelConfig tc;
    DraftConfig dc;
    Draft d;
    int B, T, A;
    float *captures, *embed, *lm_head, *pos_weight;
    int *tokens, *anchors, *targets;
} Fixture;

static int *ints(const StFile *f, const char *name, size_t n) {
    float *x = expected(f, name, n);
    int *v = xmalloc(n * sizeof(int), "fixture ints");
    for (size_t i = 0; i < n; i++) v[i] = (int)x[i];
    free(x);
    return v;
}

static void fixture_load(Fixture *fx) {
    memset(fx, 0, sizeof *fx);
    PtError e;
    assert_int_equal(st_open(&fx->f, FIXTURE, &e), 0);
    float *c = expected(&fx->f, "config", 14);
    ModelConfig *tc = &fx->tc;
    PtError pe;
    assert_int_equal(config_preset(tc, "tiny", &pe), 0);
    tc->d_model = (int)c[0], tc->n_head = (int)c[1], tc->n_kv_head = (int)c[2], tc->head_dim = (int)c[3];
    tc->vocab_size = (int)c[4], tc->rope_theta = c[5], tc->norm_eps = c[6];
    tc->n_layer = 4, tc->max_seq = 64;
    DraftConfig *dc = &fx->dc;
    dc->n_layer = (int)c[7], dc->block = (int)c[8], dc->n_target = (int)c[9], dc->d_ff = (int)c[10];
    for (int k = 0; k < dc->n_target; k++) dc->target_layers[k] = k + 1;
    dc->mask_token = tc->vocab_size - 1;
    fx->B = (int)c[11], fx->T = (int)c[12], fx->A = (int)c[13];
    free(c);
    assert_int_equal(draft_config_check(dc, tc, "fixture", &pe), 0);
    draft_alloc(&fx->d, tc, dc);
    for (int i = 0; i < fx->d.tt.n; i++) {
        const TensorInfo *t = &fx->d.tt.t[i];
        char name[128];
        snprintf(name, sizeof name, "w.%s", t->name);
        float *w = expected(&fx->f, name, t->numel);
        memcpy(fx->d.params + t->offset, w, t->numel * sizeof(float));
        free(w);
    }
    const int H = tc->d_model, V = tc->vocab_size, S = fx->B * fx->A, R = dc->block * S;
    fx->captures = expected(&fx->f, "captures", (size_t)fx->B * fx->T * dc->n_target * H);
    fx->embed = expected(&fx->f, "embed", (size_t)V * H);
    fx->lm_head = expected(&fx->f, "lm_head", (size_t)V * H);
    fx->pos_weight = expected(&fx->f, "pos_weight", (size_t)dc->block);
    fx->tokens = ints(&fx->f, "block_tokens", (size_t)R);
    fx->anchors = ints(&fx->f, "anchors", (size_t)S);
    fx->targets = ints(&fx->f, "targets", (size_t)R);
}

static void fixture_free(Fixture *fx) {
    st_close(&fx->f);
    draft_free(&fx->d);
    free(fx->captures), free(fx->embed), free(fx->lm_head), free(fx->pos_weight);
    free(fx->tokens), free(fx->anchors), free(fx->targets);
}

static void test_pass_matches_torch(void **state) {
    (void)state;
    Fixture fx;
    fixture_load(&fx);
    Device dev;
    cpu_device_init(&dev, 0, NULL);
    DraftModel dm;
    draft_model_init(&dm, &dev, &fx.tc, &fx.dc, &fx.d.tt, fx.d.params, fx.embed, fx.lm_head, MATMUL_FP32);
    PtError e;
    assert_int_equal(draft_model_plan(&dm, fx.B, fx.T, fx.A, 1, &e), 0);
    DraftInput in = {.block_tokens = fx.tokens, .anchors = fx.anchors, .targets = fx.targets, .pos_weight = fx.pos_weight};
    const int V = fx.tc.vocab_size, R = fx.dc.block * fx.B * fx.A;
    float *logits = xmalloc((size_t)R * V * sizeof(float), "logits");
    double weight;
    double loss = draft_forward(&dm, fx.captures, &in, logits, &weight);
    float *want_logits = expected(&fx.f, "logits", (size_t)R * V), *want_loss = expected(&fx.f, "loss", 1);
    float *want_weight = expected(&fx.f, "weight", 1);
    const double lerr = normwise_error(logits, want_logits, (size_t)R * V);
    printf("  logits normwise error %.2e; loss %.6f (torch %.6f); weight %.4f (torch %.4f)\n", lerr, loss,
           want_loss[0], weight, want_weight[0]);
    assert_true(lerr < 1e-5);
    assert_true(fabs(loss - want_loss[0]) < 1e-5 * fabs(want_loss[0]));
    assert_true(fabs(weight - want_weight[0]) < 1e-5);

    // the gradients, scaled: grad_scale multiplies them
    draft_zero_grads(&dm);
    double loss2 = draft_forward_backward(&dm, fx.captures, &in, 0.5f, NULL);
    assert_true(loss2 == loss);
    for (int i = 0; i < fx.d.tt.n; i++) {
        const TensorInfo *t = &fx.d.tt.t[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *want = expected(&fx.f, name, t->numel);
        for (size_t j = 0; j < t->numel; j++) want[j] *= 0.5f;
        const double err = normwise_error(dm.grads + t->offset, want, t->numel);
        if (!(err < 1e-4)) fail_msg("%s: gradient off torch's by %.2e normwise", t->name, err);
        double norm = 0;
        for (size_t j = 0; j < t->numel; j++) norm += fabs(want[j]);
        if (!(norm > 1e-6)) fail_msg("%s: torch's gradient is zero, so this checks nothing", t->name);
        free(want);
    }
    printf("  every draft gradient within 1e-4 (normwise) of torch's float64 autograd\n");
    free(logits), free(want_logits), free(want_loss), free(want_weight);
    draft_model_free(&dm);
    dev_free(&dev);
    fixture_free(&fx);
}

// Generation fills the context a few rows at a time (ctx_from / ctx_rows);
// the logits of a block must be those of one pass over the same context.
static void test_partial_context(void **state) {
    (void)state;
    Fixture fx;
    fixture_load(&fx);
    Device dev;
    cpu_device_init(&dev, 0, NULL);
    const int V = fx.tc.vocab_size, blk = fx.dc.block, T = fx.T;
    DraftModel whole, part;
    PtError e;
    draft_model_init(&whole, &dev, &fx.tc, &fx.dc, &fx.d.tt, fx.d.params, fx.embed, fx.lm_head, MATMUL_FP32);
    draft_model_init(&part, &dev, &fx.tc, &fx.dc, &fx.d.tt, fx.d.params, fx.embed, fx.lm_head, MATMUL_FP32);
    assert_int_equal(draft_model_plan(&whole, 1, T, 1, 0, &e), 0);
    assert_int_equal(draft_model_plan(&part, 1, T, 1, 0, &e), 0);
    float *a = xmalloc((size_t)blk * V * sizeof(float), "a"), *b = xmalloc((size_t)blk * V * sizeof(float), "b");
    int tokens[DRAFT_MAX_BLOCK];
    for (int i = 0; i < blk; i++) tokens[i] = i ? fx.dc.mask_token : 5;
    int from = 0;
    for (int n = 2; n <= T; n += 3) {   // 2, 5, 8 context rows, then the block at n
        int anchor = n;
        DraftInput iw = {.block_tokens = tokens, .anchors = &anchor, .ctx_rows = n},
                   ip = {.block_tokens = tokens, .anchors = &anchor, .ctx_from = from, .ctx_rows = n};
        draft_forward(&whole, fx.captures, &iw, a, NULL);
        draft_forward(&part, fx.captures, &ip, b, NULL);
        assert_true(max_diff(a, b, (size_t)blk * V) == 0);
        from = n;
    }
    free(a), free(b);
    draft_model_free(&whole);
    draft_model_free(&part);
    dev_free(&dev);
    fixture_free(&fx);
}

// A vocabulary of its own (every third token): the logits are torch's at
// those columns; the loss is the position-weighted cross-entropy over those
// columns only (computed here from torch's logits), targets outside the
// vocabulary not counted; and its gradient matches central differences.
static void test_vocab_head(void **state) {
    (void)state;
    Fixture fx;
    fixture_load(&fx);
    Device dev;
    cpu_device_init(&dev, 0, NULL);
    const int V = fx.tc.vocab_size, blk = fx.dc.block, S = fx.B * fx.A, R = blk * S;
    int K = 0, *ids = xmalloc((size_t)V * sizeof(int), "ids"), *column = xmalloc((size_t)V * sizeof(int), "columns");
    for (int i = 0; i < V; i++) column[i] = i % 3 ? -1 : K, ids[K] = i, K += !(i % 3);
    int *targets = xmalloc((size_t)R * sizeof(int), "targets"), outside = 0, inside = 0;
    for (int r = 0; r < R; r++) {
        targets[r] = fx.targets[r] < 0 ? -1 : column[fx.targets[r]];
        outside += fx.targets[r] >= 0 && targets[r] < 0;
        inside += targets[r] >= 0;
    }
    assert_true(outside > 0 && inside > 0);
    DraftModel dm;
    draft_model_init(&dm, &dev, &fx.tc, &fx.dc, &fx.d.tt, fx.d.params, fx.embed, fx.lm_head, MATMUL_FP32);
    draft_model_use_vocab(&dm, ids, K);
    PtError e;
    assert_int_equal(draft_model_plan(&dm, fx.B, fx.T, fx.A, 1, &e), 0);
    DraftInput in = {.block_tokens = fx.tokens, .anchors = fx.anchors, .targets = targets, .pos_weight = fx.pos_weight};
    float *logits = xmalloc((size_t)R * K * sizeof(float), "logits"), *want = expected(&fx.f, "logits", (size_t)R * V);
    double weight;
    const double loss = draft_forward(&dm, fx.captures, &in, logits, &weight);
    double ref = 0, ref_weight = 0, diff = 0;
    for (int r = 0; r < R; r++) {
        const float *w = want + (size_t)r * V;
        for (int k = 0; k < K; k++) diff = fmax(diff, fabs(logits[(size_t)r * K + k] - w[ids[k]]));
        const int i = r / S;   // block position: rows are position-major
        if (targets[r] < 0 || i == 0) continue;
        double mx = -1e300, sum = 0;
        for (int k = 0; k < K; k++) mx = fmax(mx, w[ids[k]]);
        for (int k = 0; k < K; k++) sum += exp(w[ids[k]] - mx);
        ref += fx.pos_weight[i] * (mx + log(sum) - w[ids[targets[r]]]);
        ref_weight += fx.pos_weight[i];
    }
    printf("  vocabulary of %d of %d: logits off torch's by %.2e at most; loss %.6f (from torch's logits %.6f), "
           "%d targets outside\n", K, V, diff, loss, ref, outside);
    assert_true(diff < 1e-4);
    assert_true(fabs(loss - ref) < 1e-5 * fabs(ref));
    assert_true(fabs(weight - ref_weight) < 1e-6);
    // d(loss)/d(w) against central differences on a few weights of fc and the last layer's down_proj
    draft_zero_grads(&dm);
    draft_forward_backward(&dm, fx.captures, &in, 1.0f, NULL);
    const char *names[2] = {"fc.weight", "layers.0.mlp.down_proj.weight"};
    for (int n = 0; n < 2; n++) {
        const TensorInfo *t = tensor_table_find(&fx.d.tt, names[n]);
        assert_non_null(t);
        for (size_t j = 0; j < t->numel; j += t->numel / 5) {
            float *p = fx.d.params + t->offset + j, keep = *p;
            const float h = 1e-2f;
            *p = keep + h;
            const double up = draft_forward(&dm, fx.captures, &in, NULL, NULL);
            *p = keep - h;
            const double down = draft_forward(&dm, fx.captures, &in, NULL, NULL);
            *p = keep;
            const double fd = (up - down) / (2.0 * h), g = dm.grads[t->offset + j];
            if (!(fabs(fd - g) <= 2e-2 * fabs(fd) + 1e-4))
                fail_msg("%s[%zu]: gradient %.6f, central difference %.6f", names[n], j, g, fd);
        }
    }
    free(logits), free(want), free(ids), free(column), free(targets);
    draft_model_free(&dm);
    dev_free(&dev);
    fixture_free(&fx);
}

// ---- the KL term to the target's distribution (DraftLossMix)

// The fixture's pass with a teacher: random rows standing for the target's
// final-normed hidden states (RMS 1, as its final norm leaves them).
static float *teacher_rows(const Fixture *fx, int R) {
    const int H = fx->tc.d_model;
    Rng r;
    rng_seed(&r, 11);
    double *x = rand_d(&r, (size_t)R * H, 1.0);
    float *h = xmalloc((size_t)R * H * sizeof(float), "teacher rows");
    for (int n = 0; n < R; n++) {
        double ss = 0;
        for (int c = 0; c < H; c++) ss += x[(size_t)n * H + c] * x[(size_t)n * H + c];
        for (int c = 0; c < H; c++) h[(size_t)n * H + c] = (float)(x[(size_t)n * H + c] / sqrt(ss / H));
    }
    free(x);
    return h;
}

// The loss with a mix, from the pass's own logits and the teacher's logits
// made here in double: sum over counted rows of pos_weight[i] (a CE + b KL(q || p)).
static double mix_loss_ref(const Fixture *fx, const float *logits, const float *th, double a, double b) {
    const int V = fx->tc.vocab_size, H = fx->tc.d_model, S = fx->B * fx->A, R = fx->dc.block * S;
    double total = 0;
    double *zt = xmalloc((size_t)V * sizeof(double), "teacher logits");
    for (int r = S; r < R; r++) {
        if (fx->targets[r] < 0) continue;
        const float *z = logits + (size_t)r * V;
        double zm = -INFINITY, tm = -INFINITY, ls = 0, lt = 0, kl = 0;
        for (int v = 0; v < V; v++) {
            double acc = 0;
            for (int c = 0; c < H; c++) acc += (double)th[(size_t)r * H + c] * fx->lm_head[(size_t)v * H + c];
            zt[v] = acc;
            zm = fmax(zm, z[v]), tm = fmax(tm, zt[v]);
        }
        for (int v = 0; v < V; v++) ls += exp(z[v] - zm), lt += exp(zt[v] - tm);
        ls = zm + log(ls), lt = tm + log(lt);
        for (int v = 0; v < V; v++) kl += exp(zt[v] - lt) * ((zt[v] - lt) - (z[v] - ls));
        total += fx->pos_weight[r / S] * (a * (ls - z[fx->targets[r]]) + b * kl);
    }
    free(zt);
    return total;
}

// d(loss)/d(*p) by a four-point central difference (Richardson's: error
// O(h^4)) of the pass's loss, summed in double, at steps as float holds them.
static double central_difference(DraftModel *dm, const Fixture *fx, const DraftInput *in, float *p, float h) {
    const float keep = *p, at[4] = {keep + 2 * h, keep + h, keep - h, keep - 2 * h};
    double f[4];
    for (int q = 0; q < 4; q++) {
        *p = at[q];
        f[q] = draft_forward(dm, fx->captures, in, NULL, NULL);
    }
    *p = keep;
    const double d1 = (f[1] - f[2]) / ((double)at[1] - at[2]), d2 = (f[0] - f[3]) / ((double)at[0] - at[3]);
    return (4 * d1 - d2) / 3;
}

// kl_weight 0 (ce_weight 1): the loss and every gradient are the bits of the
// pass without a mix. With a KL term: the loss is the position-weighted
// a CE + b KL(target || draft) (from the pass's logits and the teacher's,
// made here in double), and its gradient with respect to coordinates of
// several draft tensors matches central differences of the loss (a
// four-point stencil; the pass's loss is summed in double).
static void test_kl_term(void **state) {
    (void)state;
    Fixture fx;
    fixture_load(&fx);
    Device dev;
    cpu_device_init(&dev, 0, NULL);
    const int V = fx.tc.vocab_size, R = fx.dc.block * fx.B * fx.A;
    const size_t P = fx.d.tt.total;
    DraftModel dm;
    draft_model_init(&dm, &dev, &fx.tc, &fx.dc, &fx.d.tt, fx.d.params, fx.embed, fx.lm_head, MATMUL_FP32);
    PtError e;
    assert_int_equal(draft_model_plan(&dm, fx.B, fx.T, fx.A, 1, &e), 0);
    float *th = teacher_rows(&fx, R);
    DraftInput plain = {.block_tokens = fx.tokens, .anchors = fx.anchors, .targets = fx.targets,
                        .pos_weight = fx.pos_weight};

    // kl_weight = 0: bit-identical
    DraftLossMix off = {.ce_weight = 1.0f, .kl_weight = 0.0f, .target_h = th};
    DraftInput with_off = plain;
    with_off.mix = &off;
    double w0, w1;
    draft_zero_grads(&dm);
    const double l0 = draft_forward_backward(&dm, fx.captures, &plain, 0.25f, &w0);
    float *g0 = xmalloc(P * sizeof(float), "grads");
    memcpy(g0, dm.grads, P * sizeof(float));
    draft_zero_grads(&dm);
    const double l1 = draft_forward_backward(&dm, fx.captures, &with_off, 0.25f, &w1);
    assert_memory_equal(&l0, &l1, sizeof l0);
    assert_memory_equal(&w0, &w1, sizeof w0);
    assert_memory_equal(g0, dm.grads, P * sizeof(float));
    printf("  kl_weight 0: loss, weight and every gradient bit-identical to the pass without the term\n");

    const struct { float a, b; } mixes[] = {{0.0f, 1.0f}, {1.0f, 0.5f}};
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        DraftLossMix mix = {.ce_weight = mixes[m].a, .kl_weight = mixes[m].b, .target_h = th};
        DraftInput in = plain;
        in.mix = &mix;
        float *logits = xmalloc((size_t)R * V * sizeof(float), "logits");
        const double loss = draft_forward(&dm, fx.captures, &in, logits, NULL);
        const double ref = mix_loss_ref(&fx, logits, th, mixes[m].a, mixes[m].b);
        printf("  ce %.1f, kl %.1f: loss %.8f, from the logits in double %.8f; kl part %.6f\n", mixes[m].a, mixes[m].b,
               loss, ref, dm.kl_sum);
        assert_true(fabs(loss - ref) < 1e-5 * fabs(ref));
        assert_true(dm.kl_sum > 0);
        free(logits);
        draft_zero_grads(&dm);
        draft_forward_backward(&dm, fx.captures, &in, 1.0f, NULL);
        // the three largest gradients of each tensor (a check of near-zero ones would be all rounding)
        const char *names[] = {"fc.weight", "hidden_norm.weight", "layers.0.self_attn.q_proj.weight",
                               "layers.0.self_attn.v_proj.weight", "layers.0.mlp.down_proj.weight", "norm.weight"};
        double worst = 0;
        for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
            const TensorInfo *t = tensor_table_find(&fx.d.tt, names[n]);
            assert_non_null(t);
            size_t picked[3] = {0, 0, 0};
            for (int k = 0; k < 3; k++) {
                double best = -1;
                for (size_t j = 0; j < t->numel; j++) {
                    const double g = fabs(dm.grads[t->offset + j]);
                    if (g > best && (k < 1 || j != picked[0]) && (k < 2 || j != picked[1])) best = g, picked[k] = j;
                }
            }
            for (int k = 0; k < 3; k++) {
                float *p = fx.d.params + t->offset + picked[k];
                double fd[3];
                for (int q = 0; q < 3; q++) fd[q] = central_difference(&dm, &fx, &in, p, 2e-2f + 1e-2f * q);
                // the median of three step sizes: float rounding of the pass, not the step, limits each
                const double med = fmax(fmin(fd[0], fd[1]), fmin(fmax(fd[0], fd[1]), fd[2]));
                const double g = dm.grads[t->offset + picked[k]], rel = fabs(med - g) / fabs(med);
                worst = fmax(worst, rel);
                if (!(rel < 1e-4))
                    fail_msg("%s[%zu]: gradient %.8f, central difference %.8f (rel %.2e)", names[n], picked[k], g, med,
                             rel);
            }
        }
        printf("  ce %.1f, kl %.1f: gradients of 6 tensors within %.2e (relative) of central differences\n",
               mixes[m].a, mixes[m].b, worst);
    }
    free(g0), free(th);
    draft_model_free(&dm);
    dev_free(&dev);
    fixture_free(&fx);
}

// The greedy pass's columns are the argmax (lower on ties) of the logits of
// the plain pass, taken here. draft_acceptance on them: with targets made so
// that block s's greedy tokens agree with them on positions 1..L_s and no
// further (L_s cycling through 0..blk-1; one block without a target at
// position 1, one with a gap), its counts against a recount here and against
// the L_s they were made with; they do not increase with the position.
static void test_acceptance(void **state) {
    (void)state;
    Fixture fx;
    fixture_load(&fx);
    Device dev;
    cpu_device_init(&dev, 0, NULL);
    const int V = fx.tc.vocab_size, blk = fx.dc.block, S = fx.B * fx.A, R = blk * S;
    DraftModel dm;
    draft_model_init(&dm, &dev, &fx.tc, &fx.dc, &fx.d.tt, fx.d.params, fx.embed, fx.lm_head, MATMUL_FP32);
    PtError e;
    assert_int_equal(draft_model_plan(&dm, fx.B, fx.T, fx.A, 0, &e), 0);
    DraftInput in = {.block_tokens = fx.tokens, .anchors = fx.anchors};
    float *logits = xmalloc((size_t)R * V * sizeof(float), "logits");
    draft_forward(&dm, fx.captures, &in, logits, NULL);
    int *greedy = xmalloc((size_t)R * sizeof(int), "greedy"), *targets = xmalloc((size_t)R * sizeof(int), "targets");
    for (int r = 0; r < R; r++) {
        const float *z = logits + (size_t)r * V;
        greedy[r] = 0;
        for (int v = 1; v < V; v++)
            if (z[v] > z[greedy[r]]) greedy[r] = v;
    }
    int *picked = xmalloc((size_t)R * sizeof(int), "the pass's greedy columns");
    draft_forward_greedy(&dm, fx.captures, &in, picked, NULL);
    for (int r = 0; r < R; r++) assert_int_equal(picked[r], r < S ? -1 : greedy[r]);
    int made[64];
    assert_true(S <= 64 && S >= 4);
    for (int s = 0; s < S; s++) {
        made[s] = s % blk;   // the prefix block s is made to reach
        targets[s] = -1;
        for (int i = 1; i < blk; i++)
            targets[i * S + s] = i <= made[s] ? greedy[i * S + s] : (greedy[i * S + s] + i) % V;
    }
    targets[S + 0] = -1, made[0] = -1;   // not counted: no target at position 1
    if (blk > 2) {   // block 2 (made to reach 2): a gap at position 2 ends its prefix at 1
        targets[2 * S + 2] = -1;
        made[2] = 1;
    }
    double reached[DRAFT_MAX_BLOCK] = {0}, blocks = 0;
    draft_acceptance(picked, targets, blk, S, reached, &blocks);
    // the recount: each counted block's prefix from the argmax of its rows
    double want[DRAFT_MAX_BLOCK] = {0}, want_blocks = 0, from_made[DRAFT_MAX_BLOCK] = {0};
    for (int s = 0; s < S; s++) {
        if (targets[S + s] < 0) continue;
        want_blocks++;
        int n = 0;
        while (n + 1 < blk && targets[(n + 1) * S + s] >= 0 && targets[(n + 1) * S + s] == greedy[(n + 1) * S + s]) n++;
        for (int i = 1; i <= n; i++) want[i]++;
        for (int i = 1; i <= made[s]; i++) from_made[i]++;
    }
    assert_true(blocks == want_blocks && blocks == S - 1);
    double length = 1;
    for (int i = 1; i < blk; i++) {
        printf("  accepted prefix >= %d: %.0f of %.0f blocks (recounted %.0f, made %.0f)\n", i, reached[i], blocks,
               want[i], from_made[i]);
        assert_true(reached[i] == want[i] && reached[i] == from_made[i]);
        if (i > 1) assert_true(reached[i] <= reached[i - 1]);
        length += reached[i] / blocks;
    }
    assert_true(reached[1] > 0 && reached[blk - 1] > 0);   // every prefix length occurs
    printf("  expected tokens per target pass: %.4f\n", length);
    free(logits), free(greedy), free(picked), free(targets);
    draft_model_free(&dm);
    dev_free(&dev);
    fixture_free(&fx);
}

static void test_config_checks(void **state) {
    (void)state;
    ModelConfig tc;
    PtError e;
    assert_int_equal(config_preset(&tc, "tiny", &e), 0);
    DraftConfig dc = {.n_layer = 1, .block = 8, .mask_token = 0, .d_ff = 16};
    draft_layers_default(&dc, 3, tc.n_layer);
    assert_int_equal(draft_config_check(&dc, &tc, "t", &e), 0);
    DraftConfig bad = dc;
    bad.block = 1;
    assert_int_equal(draft_config_check(&bad, &tc, "t", &e), -1);
    assert_non_null(strstr(e.msg, "block must be 2..64"));
    bad = dc;
    bad.target_layers[bad.n_target - 1] = tc.n_layer;
    assert_int_equal(draft_config_check(&bad, &tc, "t", &e), -1);
    assert_non_null(strstr(e.msg, "outside the target's"));
    bad = dc;
    bad.mask_token = tc.vocab_size;
    assert_int_equal(draft_config_check(&bad, &tc, "t", &e), -1);
    assert_non_null(strstr(e.msg, "mask token"));
    assert_int_equal(draft_layers_parse("1, 0", &bad, "t", &e), 0);
    assert_int_equal(draft_config_check(&bad, &tc, "t", &e), -1);
    assert_non_null(strstr(e.msg, "must increase"));
    assert_int_equal(draft_layers_parse("1,x", &bad, "t", &e), -1);
    assert_non_null(strstr(e.msg, "at \"x\""));
    char s[64];
    assert_int_equal(draft_layers_parse("1,5,12", &bad, "t", &e), 0);
    draft_layers_format(&bad, s, sizeof s);
    assert_string_equal(s, "1,5,12");
    // DFlash's default spread over a 28-layer target: 1 .. 25
    draft_layers_default(&bad, 3, 28);
    draft_layers_format(&bad, s, sizeof s);
    assert_string_equal(s, "1,13,25");
    draft_layers_default(&bad, 3, 2);   // a 2-layer target gives both of its layers
    draft_layers_format(&bad, s, sizeof s);
    assert_string_equal(s, "0,1");
    draft_layers_default(&bad, 3, 4);
    draft_layers_format(&bad, s, sizeof s);
    assert_string_equal(s, "0,2,3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_op),
        cmocka_unit_test(test_pass_matches_torch),
        cmocka_unit_test(test_partial_context),
        cmocka_unit_test(test_vocab_head),
        cmocka_unit_test(test_kl_term),
        cmocka_unit_test(test_acceptance),
        cmocka_unit_test(test_config_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
