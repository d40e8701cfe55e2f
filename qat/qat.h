// qat.h: W4A16 quantization-aware training state for a model: the fp16 scale
// and zero of every quantized tensor, fake-quant of the weights, the
// straight-through backward with LSQ-style learned scales, their Adam update,
// the frozen-code phase (codes fixed, only scales/zeros trained) and A16
// activation rounding. The grid itself is model/ops/quant.h.
//
// One training step with QAT (the model runs on `effective`, a second buffer
// laid out by the tensor table like the master params):
//     qat_forward_weights(&q, tt, params, effective);
//     ... forward/backward of the model on effective, grads summed over the
//         micro-batches into `grads` (gradients w.r.t. the effective weights) ...
//     qat_backward(&q, tt, params, grads, grads);   // in place: -> master grads
//     ... clip, adamw_step(params, grads, ...) ...
//     if (learn_scales) qat_step(&q, &qcfg, lr_scales, step);
// qat_backward is linear in the gradient and the master weights do not change
// inside a step, so calling it once on the summed gradient equals calling it
// per micro-batch.
#pragma once
#include "../model/tensors.h"
#include "../model/ops/quant.h"

typedef struct {
    int tensor;         // row of the TensorTable
    int64_t rows, cols; // the tensor's [out, in]
    size_t offset;      // its first (row, group) entry in the QatState arrays
    size_t n_groups;    // rows * cols / group
} QatTensor;

typedef struct {
    QuantSpec spec;
    int quant_embedding;   // the embedding is quantized too (tied: it is the lm_head)
    int n;                 // quantized tensors, in tensor-table order
    QatTensor *t;
    size_t total;          // (row, group) entries over all quantized tensors
    float *scale, *zero;   // [total], every value fp16-exact; zero is all 0 when symmetric
    // Learned scales: allocated (zeroed) only when qat_init got learn_scales.
    float *grad_scale, *grad_zero;               // [total], written by qat_backward
    float *m_scale, *v_scale, *m_zero, *v_zero;  // Adam moments
    // Frozen codes (qat_freeze): NULL before. One code per weight of every
    // quantized tensor, tensor i's at codes + t[i].offset * spec.group, laid
    // out like the weights. When set, the scale arrays above exist too.
    uint8_t *codes;
} QatState;

// Selects every tensor with TF_QUANT, plus the embedding (TF_EMBED) when
// quant_embedding is set, checks their shapes against the spec and allocates
// the arrays (scale 0, zero 0). Errors name `src` (recipe or checkpoint) and
// the tensor, e.g. a column count not divisible by the group.
int qat_init(QatState *q, const TensorTable *tt, const QuantSpec *spec, int quant_embedding, int learn_scales,
             const char *src, PtError *e);
void qat_free(QatState *q);

enum { QAT_INIT_RTN = 0, QAT_INIT_MSE = 1 };
// Scale/zero of every quantized tensor from the master weights (quant_init_rtn
// or quant_init_mse). For MSE, *sse_rtn and *sse_mse (may be NULL) receive the
// total squared weight error of RTN and of the chosen grid. Resets the Adam
// moments. Fails on a non-finite weight or an fp16 overflow.
int qat_init_from_weights(QatState *q, const TensorTable *tt, const float *master, int method, double *sse_rtn,
                          double *sse_mse, const char *src, PtError *e);

// The QatTensor of table row `tensor`, NULL when that tensor is not quantized.
// Its scale/zero are q->scale + t->offset and q->zero + t->offset.
const QatTensor *qat_find(const QatState *q, int tensor);

// effective = master (all tt->total floats), with each quantized tensor
// replaced by quant_fake of it. effective must not alias master.
void qat_forward_weights(const QatState *q, const TensorTable *tt, const float *master, float *effective);

// Gradient w.r.t. the master weights from the gradient w.r.t. the effective
// weights (grad_master may equal grad_eff: done in place). Straight-through
// estimator: for an element of a quantized tensor, the gradient passes
// unchanged when its rounded code lies inside the code range and is 0 when the
// clamp changed it (quant_inside false: more than half a step beyond
// the outermost grid point). Half a step, not the LSQ boundary itself, so the
// min and max of every group right after RTN init (codes exactly 0 and 15)
// keep their gradient. Other tensors pass unchanged.
//
// With learned scales it also writes, per (row, group), the sums over the
// group of g * dw/dscale and g * dw/dzero (straight-through on the rounding):
//     inside:  dw/dscale = (u - 8) - (x - zero) / scale,   dw/dzero = 0
//     clipped: dw/dscale = u_clip - 8,                     dw/dzero = 1
// (symmetric: no zero gradient). A group with scale 0 uses the limit
// scale -> 0+: x above zero counts as clipped at 15, below at the lowest code,
// x == zero as inside. No LSQ gradient scaling: Adam is invariant to it.
void qat_backward(QatState *q, const TensorTable *tt, const float *master, const float *grad_eff,
                  float *grad_master);

// ---- Frozen codes (recipe [qat] freeze_codes_step). With the codes fixed the
// int4 model w = (u - 8) * scale + zero is smooth in (scale, zero): they are
// trained with exact gradients (no straight-through estimate) while the
// quantized master weights stay fixed.
//
// Consistency with every consumer: after qat_freeze and after each
// qat_frozen_sync the quantized master weights ARE the int4 model,
// master = (u - 8) * scale + zero with the current scales. quant_codes on
// them with those scales gives u back (|(w - zero) / scale - (u - 8)| is a
// few float ulps, far below the 1/2 that would change the rounding), so
// exporters and `--int4` runs that re-derive codes from (master, scale, zero)
// get the frozen codes; a group whose scale reached 0 decodes to `zero`
// either way. The checkpoint stores the codes too (checkpoint_qat.h), so a resumed
// run continues with exactly them.
//
// qat_freeze: codes = quant_codes(master, scale, zero) (the one code rule),
// allocates the scale/zero gradient and moment arrays when absent, zeroes the
// moments (the scale Adam restarts: its step counts from the freeze) and
// writes master = dequant(codes). Once frozen:
//   qat_forward_weights  quantized tensors = dequant(codes, scale, zero);
//   qat_backward         grad_scale[k] = sum over the group of g * (u - 8),
//                        grad_zero[k] = sum of g (0 when symmetric), and the
//                        quantized tensors' master gradient is 0;
//   qat_step             as with learned scales;
//   qat_frozen_sync      master = dequant(codes, scale, zero) after the step.
void qat_freeze(QatState *q, const TensorTable *tt, float *master);
void qat_frozen_sync(const QatState *q, const TensorTable *tt, float *master);
// The frozen codes of a quantized tensor (NULL when not frozen).
static inline const uint8_t *qat_codes_of(const QatState *q, const QatTensor *t) {
    return q->codes ? q->codes + t->offset * (size_t)q->spec.group : NULL;
}
// Allocates the zeroed scale/zero gradient and moment arrays when absent.
void qat_alloc_scale_training(QatState *q);
// Those, and the codes array when absent (qat_freeze, loading a frozen checkpoint).
void qat_alloc_frozen(QatState *q);

// Sum of squares of the scale/zero gradients (NaN or Inf when one is not
// finite), for the caller's finiteness check or a global norm.
double qat_grad_sumsq(const QatState *q);

// Adam (torch.optim.Adam semantics, no weight decay) on scale and zero with
// their own learning rate; `step` is 1-based. After the update every value is
// rounded to fp16 again (scale clamped to >= 0, zero to +-65504). An update
// smaller than half an fp16 ulp of the value is lost to that rounding; Adam
// moves a value by about lr per step, so lr should be at least ~1e-3 of the
// typical scale (about 1e-5 for weights of std 0.02, group 64).
typedef struct {
    float beta1, beta2, eps;   // 0.9, 0.999, 1e-8 as torch
} QatAdam;
void qat_step(QatState *q, const QatAdam *c, float lr, long step);

// A16: rounds activations in place to bf16 or fp16 precision (round to
// nearest even, as torch's .to(bfloat16) / .to(float16); fp16 overflows to
// +-inf). The model calls it on matmul inputs and outputs when [qat] a16 is set.
enum { A16_OFF = 0, A16_BF16 = 1, A16_FP16 = 2 };
void a16_round(float *x, size_t n, int mode);
// "off", "bf16" or "fp16" -> A16_*; -1 for anything else.
int a16_mode_from_name(const char *name);
const char *a16_mode_name(int mode);
