// grpo_train.h: train.mode = grpo, GRPO with verifiable rewards (TRL's
// GRPOTrainer, strictly on-policy). The objective (objective.h) makes each
// training micro-batch itself: train.micro_batch / rl.group prompts of the
// training set (an SFT set: an example's text before its final reply is the
// prompt, the reply the reference the rewards compare with), each sampled
// rl.group times by the batched sampler (model/sampler.h) from the weights
// the step runs (with [qat] the fake-quantized ones, so what is rewarded is
// the int4 model; with [lora] base and adapter). One completion a row; the
// rewards (reward.h, [rl] rewards) give each its reward, grpo_advantages
// normalises them within the group, and model/grpo.h's clipped loss trains
// on the completion tokens. With rl.beta > 0 a second model, model.init,
// gives the reference log-probabilities of the KL penalty. The rollouts
// (rollout.h) follow from the step alone, so resume is bit-exact with no
// sampler state in the checkpoint; rollouts.jsonl adds each completion's
// rewards and advantage.
//
// Evaluations (data.val, an SFT set) report the next-token loss of its
// replies; `pocket eval --exact-match` judges the task.
#pragma once
#include "objective.h"
