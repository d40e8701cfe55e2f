// int4.h: run a loaded model with int4 weights (W4A16 inference): the
// checkpoint's QAT scales and zero points when it has them, else round-to-
// nearest from the float weights (group 64, asymmetric, as deployed, unless
// the caller asks for another grid). `pocket forward/eval/generate --int4`
// use it.
#pragma once
#include "../model/model.h"
#include "../qat/qat.h"

// Fills q, allocates *effective (the dequantized weights) and points the
// model's views at it. log (optional) says which scales were used.
int int4_use_weights(Model *m, const char *ckpt_path, QatState *q, float **effective, FILE *log, PtError *e);
// The same with the RTN grid of a float checkpoint chosen by the caller
// (rtn_spec; NULL = int4_default_spec). A checkpoint with QAT scales keeps
// its own grid: a rtn_spec that differs from it is an error, not a silent
// switch to another quantization.
int int4_use_weights_spec(Model *m, const char *ckpt_path, const QuantSpec *rtn_spec, QatState *q,
                          float **effective, FILE *log, PtError *e);
// The int4 state the model deploys with: the checkpoint's QAT state (its own
// grid), else RTN of its float weights with rtn_spec (NULL = int4_default_spec).
// *from_qat says which. On failure q is freed. `pocket export` and the int4
// runs above share it, so an export holds the codes `--int4` runs.
int int4_load_state(const ModelBundle *b, const char *ckpt_path, const QuantSpec *rtn_spec, QatState *q,
                    int *from_qat, PtError *e);
// The default deployment spec for a config: group 64, asymmetric, and the
// embedding quantized when it is also the (tied) lm_head.
void int4_default_spec(const ModelConfig *c, QuantSpec *spec, int *quant_embedding);
