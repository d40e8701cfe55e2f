// test_qat_util.h: the small tensor table the QAT tests share (tests only):
// one quantized tensor [GR, GC] in groups of GG, and a norm of NORM that must
// pass through every QAT step unchanged.
#pragma once
#include <stdio.h>
#include <string.h>
#include "../model/tensors.h"
#include "../util/util.h"

#define GR 4
#define GC 64
#define GG 32
#define NORM 16

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
