// test_ops_grad: central-difference gradient checks, in double, of every
// naive reference op in model/ops (the references are the oracle for the fast
// float ops, so their backward must be the exact derivative of their
// forward). Loss = sum(out * R) for a fixed random R, whose gradient with
// respect to out is R. Pass: worst relative error below 1e-6 (FD_EPS 1e-6,
// relative to max(|num|, |ana|, 1e-3); see test_ops_util.h).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "test_ops_util.h"

#define FD_TOL 1e-6

static void report(const char *what, double err) {
    printf("  %-56s max rel err %.2e\n", what, err);
    assert_true(err < FD_TOL);
}

// ---- embedding
typedef struct { const int *tokens; double *E; int N, C; } EmbCtx;
static void emb_fwd(void *p, double *out) {
    EmbCtx *c = p;
    embedding_forward_ref(out, c->tokens, c->E, c->N, c->C);
}

static void test_embedding_grad(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 11);
    enum { V = 9, C = 5, N = 12 };
    int tokens[N] = {3, 1, 3, 8, 0, 3, 4, 1, 8, 2, 4, 3};   // repeats; rows 5..7 never used
    double *E = rand_d(&r, V * C, 1.0), *R = rand_d(&r, N * C, 1.0);
    EmbCtx c = {tokens, E, N, C};
    double *dE = zeros_d(V * C);
    embedding_backward_ref(dE, R, tokens, N, C, -1);
    report("embedding dE (repeated tokens)", fd_check(emb_fwd, &c, N * C, R, E, dE, V * C));
    // skip_id (HF padding_idx): that row gets nothing, the others are unchanged.
    double *dE_skip = zeros_d(V * C);
    embedding_backward_ref(dE_skip, R, tokens, N, C, 3);
    for (int i = 0; i < V * C; i++) assert_true(dE_skip[i] == (i / C == 3 ? 0.0 : dE[i]));
    free(E); free(R); free(dE); free(dE_skip);
}

// ---- rmsnorm
typedef struct { double *x, *w; int N, C; double eps; } NormCtx;
static void norm_fwd(void *p, double *out) {
    NormCtx *c = p;
    double *rstd = zeros_d(c->N);
    rmsnorm_forward_ref(out, rstd, c->x, c->w, c->N, c->C, c->eps);
    free(rstd);
}

static void test_rmsnorm_grad(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 12);
    int shapes[][2] = {{5, 7}, {3, 16}, {4, 1}};
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)N * C;
        double *x = rand_d(&r, n, 1.3), *w = rand_d(&r, C, 1.0), *R = rand_d(&r, n, 1.0);
        NormCtx c = {x, w, N, C, 1e-6};
        double *out = zeros_d(n), *rstd = zeros_d(N), *dx = zeros_d(n), *dw = zeros_d(C);
        rmsnorm_forward_ref(out, rstd, x, w, N, C, c.eps);
        rmsnorm_backward_ref(dx, dw, R, x, w, rstd, N, C);
        char what[64];
        snprintf(what, sizeof what, "rmsnorm dx N=%d C=%d", N, C);
        report(what, fd_check(norm_fwd, &c, n, R, x, dx, n));
        snprintf(what, sizeof what, "rmsnorm dw N=%d C=%d", N, C);
        report(what, fd_check(norm_fwd, &c, n, R, w, dw, C));
        free(x); free(w); free(R); free(out); free(rstd); free(dx); free(dw);
    }
}

// ---- rope
typedef struct { double *x; const int *pos; int N, nh, hd; double theta; } RopeCtx;
static void rope_fwd(void *p, double *out) {
    RopeCtx *c = p;
    memcpy(out, c->x, (size_t)c->N * c->nh * c->hd * sizeof(double));
    rope_forward_ref(out, c->pos, c->N, c->nh, c->hd, c->theta);
}

static void test_rope_grad(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 13);
    int hds[] = {6, 12, 16};
    for (int s = 0; s < 3; s++) {
        int N = 5, nh = 3, hd = hds[s];
        int pos[5] = {0, 1, 7, 300, 4095};
        size_t n = (size_t)N * nh * hd;
        double *x = rand_d(&r, n, 1.0), *R = rand_d(&r, n, 1.0);
        RopeCtx c = {x, pos, N, nh, hd, s == 0 ? 1e6 : 1e4};
        double *dx = copy_d(R, n);
        rope_backward_ref(dx, pos, N, nh, hd, c.theta);
        char what[64];
        snprintf(what, sizeof what, "rope dx hd=%d", hd);
        report(what, fd_check(rope_fwd, &c, n, R, x, dx, n));
        free(x); free(R); free(dx);
    }
}

// ---- attention
typedef struct { double *q, *k, *v; const int *seg; int B, T, nq, nkv, hd; } AttnCtx;
static void attn_fwd(void *p, double *out) {
    AttnCtx *c = p;
    attention_forward_ref(out, c->q, c->k, c->v, c->seg, c->B, c->T, c->nq, c->nkv, c->hd);
}

static void attn_case(Rng *r, int B, int T, int nq, int nkv, int hd, const int *seg) {
    size_t nqe = (size_t)B * T * nq * hd, nke = (size_t)B * T * nkv * hd;
    double *q = rand_d(r, nqe, 1.0), *k = rand_d(r, nke, 1.0), *v = rand_d(r, nke, 1.0);
    double *R = rand_d(r, nqe, 1.0);
    AttnCtx c = {q, k, v, seg, B, T, nq, nkv, hd};
    double *dq = zeros_d(nqe), *dk = zeros_d(nke), *dv = zeros_d(nke);
    attention_backward_ref(dq, dk, dv, R, q, k, v, seg, B, T, nq, nkv, hd);
    double e = fd_check(attn_fwd, &c, nqe, R, q, dq, nqe);
    e = fmax(e, fd_check(attn_fwd, &c, nqe, R, k, dk, nke));
    e = fmax(e, fd_check(attn_fwd, &c, nqe, R, v, dv, nke));
    char what[96];
    snprintf(what, sizeof what, "attention B=%d T=%d nq=%d nkv=%d hd=%d%s dq,dk,dv", B, T, nq, nkv, hd,
             seg ? " seg" : "");
    report(what, e);
    free(q); free(k); free(v); free(R); free(dq); free(dk); free(dv);
}

static void test_attention_grad(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 14);
    // Packed rows: three segments in row 0; in row 1 id 3 comes back after 4,
    // which the contract counts as the same segment.
    const int seg[2 * 7] = {0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 3};
    attn_case(&r, 2, 7, 2, 2, 6, NULL);    // nq/nkv = 1
    attn_case(&r, 2, 7, 4, 2, 12, NULL);   // 2
    attn_case(&r, 2, 6, 3, 1, 16, NULL);   // 3
    attn_case(&r, 1, 5, 7, 1, 6, NULL);    // 7
    attn_case(&r, 2, 7, 2, 2, 6, seg);
    attn_case(&r, 2, 7, 4, 2, 12, seg);
    attn_case(&r, 2, 7, 3, 1, 16, seg);
    attn_case(&r, 2, 7, 7, 1, 6, seg);
}

// ---- swiglu and residual
typedef struct { double *a, *b; size_t n; int op; } EwCtx;   // op 0 swiglu, 1 residual
static void ew_fwd(void *p, double *out) {
    EwCtx *c = p;
    if (c->op == 0) swiglu_forward_ref(out, c->a, c->b, c->n);
    else residual_forward_ref(out, c->a, c->b, c->n);
}

static void test_elementwise_grad(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 15);
    size_t n = 37;
    for (int op = 0; op < 2; op++) {
        double *a = rand_d(&r, n, 3.0), *b = rand_d(&r, n, 1.0), *R = rand_d(&r, n, 1.0);
        EwCtx c = {a, b, n, op};
        double *da = zeros_d(n), *db = zeros_d(n);
        if (op == 0) swiglu_backward_ref(da, db, R, a, b, n);
        else   // the residual's backward passes the gradient to both branches (no op of its own)
            for (size_t i = 0; i < n; i++) da[i] = db[i] = R[i];
        report(op == 0 ? "swiglu dgate" : "residual da", fd_check(ew_fwd, &c, n, R, a, da, n));
        report(op == 0 ? "swiglu dup" : "residual db", fd_check(ew_fwd, &c, n, R, b, db, n));
        free(a); free(b); free(R); free(da); free(db);
    }
}

// ---- classifier: out[n] = -log p(target) of row n (0 if not counted), and
// R = scale everywhere, so sum(out * R) = scale * sum loss.
typedef struct { double *h, *W; const int *targets; const uint8_t *mask; int N, C, V; } ClsCtx;
static void cls_fwd(void *p, double *out) {
    ClsCtx *c = p;
    for (int n = 0; n < c->N; n++)
        out[n] = classifier_ref(NULL, NULL, c->h + (size_t)n * c->C, c->W, c->targets + n, c->mask + n, 1, c->C,
                                c->V, 1.0);
}

static void test_classifier_grad(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 16);
    enum { N = 7, C = 6, V = 11 };
    const int targets[N] = {3, -1, 0, 10, 5, 5, -1};
    const uint8_t mask[N] = {1, 1, 1, 0, 1, 1, 1};
    const double scale = 0.37;
    double *h = rand_d(&r, N * C, 1.0), *W = rand_d(&r, V * C, 0.7), R[N];
    for (int n = 0; n < N; n++) R[n] = scale;
    ClsCtx c = {h, W, targets, mask, N, C, V};
    double *dh = zeros_d(N * C), *dW = zeros_d(V * C);
    classifier_ref(dh, dW, h, W, targets, mask, N, C, V, scale);
    report("classifier dh (mask, ignored targets, scale)", fd_check(cls_fwd, &c, N, R, h, dh, N * C));
    report("classifier dW (mask, ignored targets, scale)", fd_check(cls_fwd, &c, N, R, W, dW, V * C));
    // Uncounted rows (target -1 or mask 0) get exactly no gradient.
    for (int n = 0; n < N; n++)
        if (targets[n] < 0 || !mask[n])
            for (int i = 0; i < C; i++) assert_true(dh[n * C + i] == 0.0);
    free(h); free(W); free(dh); free(dW);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_grad),   cmocka_unit_test(test_rmsnorm_grad),
        cmocka_unit_test(test_rope_grad),        cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_elementwise_grad), cmocka_unit_test(test_classifier_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
