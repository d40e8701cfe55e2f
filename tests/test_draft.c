// test_draft: the DFlash draft (model/draft.h). Its attention op against the
// double reference (forward) and central differences of it (backward); the
// whole pass (logits, the weighted loss, every draft weight's gradient)
// against PyTorch in float64 (tests/ref/make_draft_fixtures.py, whose autograd
// is itself checked against finite differences there); a generation-style
// pass that fills the context a few rows at a time against one pass over all
// of it; a vocabulary of its own (logits, loss from torch's logits, gradients
// against central differences); and the config checks.
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
    DraftInput in = {fx.tokens, fx.anchors, NULL, fx.targets, fx.pos_weight, 0, 0};
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
        DraftInput iw = {tokens, &anchor, NULL, NULL, NULL, 0, n}, ip = {tokens, &anchor, NULL, NULL, NULL, from, n};
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
    DraftInput in = {fx.tokens, fx.anchors, NULL, targets, fx.pos_weight, 0, 0};
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
        cmocka_unit_test(test_config_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
