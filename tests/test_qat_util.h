// test_qat_util.h: pieces the QAT tests share (tests only; include after
// cmocka.h): a small tensor table, one quantized tensor [GR, GC] in groups of
// GG and a norm of NORM that must pass through every QAT step unchanged; a
// preset's table with random parameters; and the check that frozen codes come
// back from the weights.
#pragma once
#include <stdio.h>
#include <string.h>
#include "../model/config.h"
#include "../model/tensors.h"
#include "../model/ops/ops.h"
#include "../qat/qat.h"
#include "../util/util.h"

#define GR 4
#define GC 64
#define GG 32
#define NORM 16

static inline int f16_exact(float x) { return f16_to_f32(f32_to_f16(x)) == x; }

// The tensor table of a config preset ("tiny", ...).
static inline void build_table(TensorTable *tt, const char *preset) {
    ModelConfig c;
    PtError e;
    if (config_preset(&c, preset, &e)) fail_msg("%s", e.msg);
    tensor_table_build(tt, &c);
}

// Random parameters for a table: norms near 1, the rest small.
static inline float *random_params(const TensorTable *tt, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    float *p = xcalloc(tt->total, sizeof(float), "params");
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        for (size_t j = 0; j < t->numel; j++)
            p[t->offset + j] = (t->flags & TF_NORM) ? 1.0f + 0.1f * (float)rng_normal(&r) : 0.05f * (float)rng_normal(&r);
    }
    return p;
}

static inline void small_table(TensorTable *tt) {
    memset(tt, 0, sizeof *tt);
    tt->t = xcalloc(2, sizeof(TensorInfo), "table");
    tt->n = 2;
    TensorInfo *w = &tt->t[0], *n = &tt->t[1];
    snprintf(w->name, sizeof w->name, "w");
    w->kind = T_WQ;
    w->ndim = 2;
    w->shape[0] = GR;
    w->shape[1] = GC;
    w->numel = GR * GC;
    w->flags = TF_QUANT | TF_DECAY;
    snprintf(n->name, sizeof n->name, "norm");
    n->kind = T_LN1;
    n->ndim = 1;
    n->shape[0] = NORM;
    n->numel = NORM;
    n->offset = GR * GC;
    n->flags = TF_NORM;
    tt->total = GR * GC + NORM;
}

// With frozen codes the master weights are the int4 model: quant_codes (the
// rule the exporters and --int4 runs apply) on them with the tuned scales
// gives the frozen codes back, and decoding those gives the masters exactly.
// A group whose scale reached 0 decodes to its zero whatever the codes (the
// rule then says 8), so its codes are not compared.
static inline void assert_frozen_codes_rederive(const QatState *q, const TensorTable *tt, const float *master) {
    for (int i = 0; i < q->n; i++) {
        const QatTensor *qt = &q->t[i];
        const size_t off = tt->t[qt->tensor].offset, n = (size_t)(qt->rows * qt->cols), G = (size_t)q->spec.group;
        uint8_t *codes = xmalloc(n, "re-derived codes");
        float *w = xmalloc(n * sizeof(float), "decoded weights");
        quant_codes(&q->spec, master + off, qt->rows, qt->cols, q->scale + qt->offset, q->zero + qt->offset, codes);
        const uint8_t *frozen = qat_codes_of(q, qt);
        for (size_t j = 0; j < n; j++)
            if (q->scale[qt->offset + j / G] != 0.0f && codes[j] != frozen[j])
                fail_msg("%s[%zu]: frozen code %d, re-derived %d", tt->t[qt->tensor].name, j, frozen[j], codes[j]);
        quant_dequant(&q->spec, codes, qt->rows, qt->cols, q->scale + qt->offset, q->zero + qt->offset, w, 0);
        assert_memory_equal(w, master + off, n * sizeof(float));
        free(codes);
        free(w);
    }
}

// The device the QAT tests run the per-step work on (made on first use).
static inline Device *qat_test_device(void) {
    static Device d;
    if (!d.be) cpu_device_init(&d, 0, NULL);
    return &d;
}
