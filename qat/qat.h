// qat.h: W4A16 quantization-aware training. QatState holds the fp16 scale
// and zero of every quantized tensor (and, once frozen, the int4 codes); it
// is also the int4 state inference and the exporters use. QatRun is the
// training run: the trainer calls it at three points of every step. The grid
// is model/int4_grid.h (its host functions serve the scales' initialisation
// and the frozen codes); the per-step ops run through the device's backend.
//
// One training step with QAT (the model runs on `effective`, a second buffer
// laid out by the tensor table like the master params):
//     qat_forward_weights(d, &q, tt, params, effective);
//     ... forward/backward of the model on effective, grads summed over the
//         micro-batches into `grads` (gradients w.r.t. the effective weights) ...
//     qat_backward(d, &q, tt, params, grads, grads);   // in place: -> master grads
//     ... clip, adamw_step(params, grads, ...) ...
//     if (learn_scales) qat_step(d, &q, 0, q.total, &adam, lr_scales, step);
// qat_backward is linear in the gradient and the master weights do not change
// inside a step, so calling it once on the summed gradient equals calling it
// per micro-batch.
#pragma once
#include "../model/model.h"

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

// out: in for the table out_tt, whose vocabulary rows (the embedding, an
// untied lm_head) bundle_take_vocab_rows took from in_tt's as rows[0 ..
// out's vocab_size) says. Every (row, group) entry of such a row follows it
// (scale, zero, the scale Adam moments; the frozen codes of the row); a row
// with no source (rows[r] < 0, zero weights) gets scale 0, zero 0 and code
// QUANT_CODE_MID, which decode to 0. Other tensors' entries are copied.
int qat_take_vocab_rows(const QatState *in, const TensorTable *in_tt, const TensorTable *out_tt, const int *rows,
                        QatState *out, PtError *e);

// The QatTensor of table row `tensor`, NULL when that tensor is not quantized.
// Its scale/zero are q->scale + t->offset and q->zero + t->offset.
const QatTensor *qat_find(const QatState *q, int tensor);

// effective = master (all tt->total floats), with each quantized tensor
// replaced by quant_fake of it (quant_dequant of its codes once frozen).
// effective must not alias master.
void qat_forward_weights(Device *d, const QatState *q, const TensorTable *tt, const float *master, float *effective);
// The same on the host, without a device: host buffers, the grid's functions
// (int4_grid.h) on `threads` OpenMP threads (0: OpenMP's count). The same bits.
void qat_host_weights(const QatState *q, const TensorTable *tt, const float *master, float *out, int threads);

// The int4 model's projections and lm_head packed by d's backend (pack_int4)
// into pv, for model_use_packed: each tensor's codes (the frozen ones, else
// quant_codes of the host master), so the packed weights are exactly what
// qat_host_weights gives. Where the backend packs nothing, pv stays all NULL.
void qat_pack(Device *d, const QatState *q, const TensorTable *tt, const float *master, PackedViews *pv);
void qat_pack_free(Device *d, PackedViews *pv);

// Gradient w.r.t. the master weights from the gradient w.r.t. the effective
// weights (grad_master may equal grad_eff: done in place): quant_backward on
// every quantized tensor (the straight-through estimator, and with learned
// scales the scale/zero gradients into grad_scale / grad_zero); other tensors
// pass unchanged.
void qat_backward(Device *d, QatState *q, const TensorTable *tt, const float *master, const float *grad_eff,
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
//   qat_backward         quant_backward_frozen: exact scale/zero gradients,
//                        none for the quantized tensors' masters;
//   qat_step             as with learned scales;
//   qat_frozen_sync      master = dequant(codes, scale, zero) after the step.
void qat_freeze(Device *d, QatState *q, const TensorTable *tt, float *master);
void qat_frozen_sync(Device *d, const QatState *q, const TensorTable *tt, float *master);
// The frozen codes of a quantized tensor (NULL when not frozen).
static inline const uint8_t *qat_codes_of(const QatState *q, const QatTensor *t) {
    return q->codes ? q->codes + t->offset * (size_t)q->spec.group : NULL;
}
// Allocates the zeroed scale/zero gradient and moment arrays when absent.
void qat_alloc_scale_training(QatState *q);
// Those, and the codes array when absent (qat_freeze, loading a frozen checkpoint).
void qat_alloc_frozen(QatState *q);

// Adam (quant_adam) on the (row, group) entries [lo, hi) of scale and zero
// with their own learning rate, betas and eps from c; `step` is 1-based. Scales are clamped to [0, 65504], zeros
// to +-65504. Adam moves a value by about lr per step, so lr should be at
// least ~1e-3 of the typical scale (about 1e-5 for weights of std 0.02, group 64).
void qat_step(Device *d, QatState *q, size_t lo, size_t hi, const AdamWConfig *c, float lr, long step);

// ---- The QAT run of a training (recipe [qat]), called at three points.
typedef struct {
    QuantSpec spec;
    int quant_embedding;
    long start_step;          // QAT starts at this update (float training before)
    int init;                 // QAT_INIT_*: the scales when it starts
    int learn_scales;         // scales/zeros trained by their own Adam
    float scale_lr;
    long freeze_codes_step;   // -1 = never; else the codes are frozen from this update on
} QatRunConfig;

typedef struct {
    QatRunConfig cfg;
    AdamWConfig adam;         // betas and eps of the scale Adam
    QatState q;               // host memory: what checkpoints read and write, and the host steps (RTN, freezing)
    QatState dq;              // the same state with its arrays on the device, which the step's ops use (the
                              // very arrays of q on a device that works in host memory)
    int ready;                // q holds scales (QAT started, or loaded from a checkpoint)
    float *effective;         // the fake-quantized weights the model runs on (device memory)
    Device *dev;
    const TensorTable *tt;
    FILE *log;                // where it says that QAT starts or the codes freeze (NULL: quiet)
    size_t lo, hi;            // the (row, group) entries whose scales this process updates (all, unless the
                              // optimizer state is sharded over ranks)
} QatRun;

// Selects the tensors (qat_init) and allocates the effective weights. A
// checkpoint's state is then loaded into run->q by the caller (ready = 1).
int qat_run_init(QatRun *run, Device *d, const TensorTable *tt, const QatRunConfig *c, const AdamWConfig *adam,
                 FILE *log, const char *src, PtError *e);
void qat_run_free(QatRun *run);
// q to the device after the host changed it (a checkpoint read into it), and
// back before the host reads it (a checkpoint written from it).
void qat_run_upload(QatRun *run);
void qat_run_download(QatRun *run);
// 1. Before the step (or an evaluation) after `step` updates: the weights the
//    model runs on. The masters before start_step; then, after starting QAT
//    or freezing the codes when their update has come, the fake-quantized ones.
float *qat_run_weights(QatRun *run, long step, float *master, PtError *e);
// Whether the model runs on fake-quantized weights at this step.
int qat_run_active(const QatRun *run, long step);
// 2. After the backward: grads becomes the gradient w.r.t. the masters.
void qat_run_backward(QatRun *run, long step, const float *master, float *grads);
// 3. After the masters' update: the scale Adam step of entries [lo, hi)
//    (restarted at the freeze); returns 1 when it ran (ranks then share the
//    scales they updated), and then with frozen codes the quantized masters
//    follow the scales.
int qat_run_update(QatRun *run, long step);
void qat_run_sync(QatRun *run, long step, float *master);
