// int4_grid.h: the int4 grid, the one quantizer. Fake-quant in training, RTN
// PTQ and every exporter use these definitions, so an exported package holds
// exactly the codes the QAT model trained with. The functions here run on the
// host (qat/, formats/ and export/ call them); the backends implement the
// grid's per-step ops on their own memory (backend.h's quant_* ops: the CPU's
// model/ops/quant.c, the GPU's cuda/quant.cu), with the inline code rule below
// as their per-element arithmetic.
//
// Representation of a weight W[rows, cols] (HF [out, in]): each row is cut
// into groups of G consecutive input elements (cols % G == 0). Per (row, group)
// there is one fp16 `scale` and one fp16 `zero`, kept in float arrays of
// rows * cols / G entries, row-major then group (the order MNN stores alpha
// in). Every stored value is exactly representable in fp16, so the exporters
// convert with f32_to_f16 losslessly. Each element has a code u in 0..15:
//
//     asymmetric (default):  w = ((float)u - 8) * scale + zero   u in 0..15
//     symmetric:             w = ((float)u - 8) * scale          u in 1..15, zero = 0
//
// all in fp32 arithmetic, multiply then add (the build uses -std=c11, so gcc
// never fuses them into an fma). `zero` is the value at code 8, as MNN stores
// it (export/mnn_weights.c writes it unchanged).
//
// Codes are decided by quant_codes() only:
//     u = clamp(round_half_even((x - zero) / scale) + 8, lo, 15)   lo = 0 (asym) or 1 (sym)
// against the fp16-rounded scale/zero, so dequantization gives the nearest grid
// point. A group with scale 0 gets code 8 everywhere (it dequantizes to zero).
//
// Exporters:
//   MNN (IDSTQuan in MNN's schema/default/CaffeOp.fbs): codes packed by
//     quant_pack4 as they are (high nibble first); alpha = fp16 [zero, scale]
//     pairs per group (asym) or fp16 scale (sym), in the order of these
//     arrays; aMin = 1 for asym.
//   GGUF (block_q4_0/q4_1 in ggml's src/ggml-common.h): blocks of 32 with
//     byte j = element j (low nibble) | element j+16 (high nibble): unpack our
//     codes first, then repack.
//     Symmetric -> Q4_0 exactly: d = scale, the same codes, for each of the
//     G/32 blocks of a group. Asymmetric -> Q4_1 with d = scale, the same codes,
//     m = fp16(zero - 8*scale): exact only when that value is fp16-representable.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"

#define QUANT_GROUP_DEFAULT 64
#define QUANT_CODE_MID 8      // the code whose value is `zero`
#define QUANT_CODE_MAX 15
// Tensors below this many elements are done on one thread: an OpenMP region
// costs more than the work (tiny test models, small k/v projections).
#define QUANT_PARALLEL_MIN (1 << 16)

typedef struct {
    int group;       // G: input elements per (row, group); 32, 64 (default) or 128 in practice
    int symmetric;   // 0: asymmetric (scale, zero), 1: symmetric (scale only, zero = 0)
} QuantSpec;

// Lowest code of the spec: 0 (asymmetric) or 1 (symmetric).
static inline int quant_code_min(const QuantSpec *q) { return q->symmetric ? 1 : 0; }

// Checks that the group is even and >= 2 and that cols % group == 0 (and the
// shape is positive). `what` names the tensor (and file) in the message.
int quant_check(const QuantSpec *q, int64_t rows, int64_t cols, const char *what, PtError *e);
// rows * cols / group (the length of the scale and zero arrays).
size_t quant_n_groups(const QuantSpec *q, int64_t rows, int64_t cols);

// Round-to-nearest init from float weights w[rows*cols] (asymmetric):
//     mn, mx = min, max of the group
//     scale = fp16((mx - mn) / 15)          (fp32 division)
//     zero  = fp16(mn + 8 * ((mx - mn) / 15))   (unrounded fp32 scale, as llmexport)
//     mx == mn -> scale 0, zero = fp16(mn) (all codes 8)
// symmetric: scale = fp16(max|x| / 7), zero = 0.
// zero may be NULL for symmetric. Fails (naming `what`, row and group) on a
// non-finite weight or a scale/zero beyond the fp16 range.
int quant_init_rtn(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, float *scale, float *zero,
                   const char *what, PtError *e);

// MSE init: per group, tries the range shrunk by QUANT_MSE_STEPS factors
// p = 1, 1 - QUANT_MSE_SHRINK, 1 - 2*QUANT_MSE_SHRINK, ... (mn, mx -> p*mn, p*mx;
// symmetric: max|x| -> p*max|x|), each with fp16-rounded scale/zero and the
// codes of quant_codes, and keeps the one with the smallest squared error
// (p = 1, the RTN choice, on ties). So its error is never above RTN's.
// `sse_rtn` / `sse_mse` (may be NULL) receive the total squared error of the
// RTN and of the chosen parameters, for reporting the gain.
#define QUANT_MSE_STEPS 16
#define QUANT_MSE_SHRINK 0.015f
int quant_init_mse(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, float *scale, float *zero,
                   double *sse_rtn, double *sse_mse, const char *what, PtError *e);

// The ONE code rule (see the top of this file). codes[rows*cols], one code per
// byte. zero may be NULL for symmetric. Shapes must pass quant_check.
void quant_codes(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                 const float *zero, uint8_t *codes);
// w[i] = ((float)codes[i] - 8) * scale + zero (symmetric: without + zero).
void quant_dequant(const QuantSpec *q, const uint8_t *codes, int64_t rows, int64_t cols, const float *scale,
                   const float *zero, float *w, int threads);
// quant_codes then quant_dequant without storing the codes; out may equal w.
// (Vectorised per group: quant_rounded and quant_clamp, as quant_code_of.)
// quant_dequant and quant_fake run on `threads` OpenMP threads (0: OpenMP's
// count): the CPU backend's ops of the same name give them the device's.
void quant_fake(const QuantSpec *q, const float *w, int64_t rows, int64_t cols, const float *scale,
                const float *zero, float *out, int threads);

// Two codes per byte, MNN order (an MSB-first bitstream): byte j holds code
// 2j in its HIGH nibble and code 2j+1 in its LOW nibble; an odd n leaves the
// last low nibble 0. Writes (n + 1) / 2 bytes and returns that count. (GGUF
// Q4_0/Q4_1 pair elements j and j+16 of a 32-block instead; see the top.)
size_t quant_pack4(const uint8_t *codes, size_t n, uint8_t *packed);
void quant_unpack4(const uint8_t *packed, size_t n, uint8_t *codes);

// x at fp16 precision: scales and zero points are kept fp16-exact (MNN stores them so).
static inline float quant_round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// THE code rule, for a group whose scale is not 0: x's rounded position on
// the grid, round half to even of (x - zero) / scale, plus 8 (default FP
// mode), before the clamp. Branch-free, so loops over a group vectorise.
static inline float quant_rounded(float x, float scale, float zero) {
    return __builtin_rintf((x - zero) / scale) + (float)QUANT_CODE_MID;
}

// The clamp of a rounded position to the codes lo..15, in the float domain
// (an inf never reaches an int conversion; NaN fails the second test and
// goes to lo). Comparisons, not fminf/fmaxf, which gcc calls out of line.
static inline float quant_clamp(float r, int lo) {
    float c = r > (float)QUANT_CODE_MAX ? (float)QUANT_CODE_MAX : r;
    return c >= (float)lo ? c : (float)lo;
}

// Whether a rounded position lies on the grid, lo..15: when not, the clamp
// changed the code (x lies more than half a step beyond the outermost grid
// point; NaN counts as off the grid) and the straight-through estimator
// treats the weight as clipped. The QAT backward and quant_ste_mask use this
// one test, so their notion of "clipped" cannot drift apart.
static inline int quant_inside(float r, int lo) { return r >= (float)lo && r <= (float)QUANT_CODE_MAX; }

// The code of one weight (quant_codes and the MSE search): quant_rounded then
// quant_clamp; a group with scale 0 gives every weight the code 8 (it decodes
// to the zero point).
static inline int quant_code_of(float x, float scale, float zero, int lo) {
    if (scale == 0.0f) return QUANT_CODE_MID;
    return (int)quant_clamp(quant_rounded(x, scale, zero), lo);
}

// ---- A16, the activations' half of W4A16: matmul inputs and outputs
// rounded in place to bf16 or fp16 (round to nearest even, as torch's
// .to(bfloat16) / .to(float16); fp16 overflows to +-inf) when [qat] a16 or
// --a16 asks for it. The modes are named here, beside the weights' grid; the
// rounding is the backends' a16_round op.
enum { A16_OFF = 0, A16_BF16 = 1, A16_FP16 = 2 };
// "off", "bf16" or "fp16" -> A16_*; -1 for anything else.
int a16_mode_from_name(const char *name);
