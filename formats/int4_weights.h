// int4_weights.h: the int4 model a checkpoint deploys as: its int4 state
// (the checkpoint's QAT scales, else round-to-nearest from its float weights)
// and the weights that state makes, which `--int4` inference, the exporters
// and QLoRA training (the frozen base) all run on.
#pragma once
#include "../model/bundle.h"
#include "../qat/qat.h"

// The default deployment spec for a config: group 64, asymmetric, and the
// embedding quantized when it is also the (tied) lm_head.
void int4_default_spec(const ModelConfig *c, QuantSpec *spec, int *quant_embedding);
// The grid of the int4 state a checkpoint of config c deploys with (as
// int4_load_state chooses it), read without its weights.
int int4_read_spec(const ModelConfig *c, const char *ckpt_path, const QuantSpec *rtn_spec, QuantSpec *spec,
                   int *quant_embedding, int *from_qat, PtError *e);
// The int4 state the model deploys with: the checkpoint's QAT state (its own
// grid), else RTN of its float weights with rtn_spec (NULL = int4_default_spec).
// *from_qat says which. On failure q is freed.
int int4_load_state(const ModelBundle *b, const char *ckpt_path, const QuantSpec *rtn_spec, QatState *q,
                    int *from_qat, PtError *e);
// out (b->tt.total floats, host memory) = the weights the deployed int4
// model runs: every quantized tensor dequantized, an untied embedding left
// in float rounded to bf16 as the packages store it, the rest as in b.
// Computed on the host, no device, on `threads` threads (0: OpenMP's count).
void int4_weights(const QatState *q, const ModelBundle *b, int threads, float *out);

// A LoRA base as it runs: with int4, b->params (loaded from ckpt) replaced by
// the weights of the int4 model it deploys as (int4_load_state's default grid,
// then int4_weights); without, b is left as it is. *from_qat and *spec (either
// may be NULL) say which int4 state; QLoRA training and `pocket import` of a
// PEFT adapter hash what this leaves (formats/lora_checkpoint.h).
int int4_lora_base(ModelBundle *b, const char *ckpt, int int4, int threads, int *from_qat, QuantSpec *spec,
                   PtError *e);
