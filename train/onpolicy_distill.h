// onpolicy_distill.h: train.mode = onpolicy_distill, distillation on the
// model's own samples (Agarwal et al.'s on-policy GKD; TRL's GKDTrainer with
// lmbda = 1 and beta = 1). Each training micro-batch is made by the
// rollouts (rollout.h, [rl]'s sampling) with the weights the step runs; a
// teacher (distill.h: [distill] teacher, else model.init, frozen; the same
// tokenizer, vocabulary and hidden size) scores every position of each
// completion in its own forward, and the loss is the per-token reverse KL,
// T^2 KL(model_T || teacher_T) at [distill] temperature T, over the new
// tokens: the model is held to the teacher where it itself goes.
//
// With [qat] the samples come from the fake-quantized weights and the
// teacher defaults to model.init in float: on-policy QAT, the int4 model
// trained on the text it will itself produce, towards the float model it
// came from. With [lora] the adapter learns.
//
// Metrics: kl (per token, without T^2), completions/mean_length,
// completions/clipped_ratio, rollout_tokens_per_s; rollouts.jsonl keeps each
// completion. Evaluations (data.val, an SFT set) report the next-token loss
// of its replies.
#pragma once
#include "objective.h"
