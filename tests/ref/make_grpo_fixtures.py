#!/usr/bin/env python3
"""Write the GRPO reference fixture, tests/fixtures/grpo/expected.safetensors, in float64.

The policy is the tiny model tests/fixtures/hf/qwen3-untied, loaded by transformers in float64 and float64
throughout (float64_decoder.use_float64), as make_preference_fixtures.py, whose float64 stand-in for TRL's fused LM
head this script reuses. Two seeded
prompts of 6 tokens, each with a group of two sampled completions of 7 seeded tokens; a completion's mask ends
early on some (lengths 7, 5, 6, 3: a completion that stopped), so the masked tokens are its trailing ones. Each
sequence (prompt + completion) is fed alone from position 0; a completion token's log-probability is read at the
position before it. The old policy's and the reference's per-token log-probabilities are fixed inputs: the
policy's plus seeded offsets within +-0.3 and +-0.5 (so ratios leave the clip range both ways), rounded to float32
as the C side reads them. Advantages are fixed: 1.3, -0.4, -0.9, 0.6.

The loss (grpo.h), per token with r = exp(logp - old), A its completion's advantage:

    -min(r A, clamp(r, 1 - eps_low, 1 + eps_high) A) + beta r (exp(ref - logp) - (ref - logp) - 1)

(the KL estimate weighted by the ratio: TRL's default use_bias_correction_kl, the unbiased reverse-KL gradient)

normalised "grpo" (each completion's mean over its tokens, then the mean over completions) or "bnpo" (the sum over
every token / their number). Metrics, means over the tokens: kl (the weighted estimate), the share clipped low (r < 1 - eps_low, A < 0)
and high (r > 1 + eps_high, A > 0).

Checked before anything is written (the script stops on a miss): TRL 1.16.0's GRPOTrainer, on a fresh float64
policy whose fused LM head is the float64 stand-in, runs its own _compute_loss on the batch of these prompts,
completions, masks, advantages and old and reference log-probabilities, then backward: its loss and every
parameter's gradient must equal ours within 1e-10 relative (1e-9 for gradients), its logged kl and clip ratios
within 1e-7 (it means them in float32); torch.autograd.gradcheck of the loss as a function of the log-probabilities.

Stored (float32; integers as exact float32 values):
  prompt<g> [6], completion<k> [7]          token ids (completion k answers prompt k // 2)
  n_tokens [4]                              each completion's counted tokens
  logps [4, 7], logps_lo [4, 7]             the policy's per-token log-probabilities (hi + lo = float64; 0 masked)
  old_logps [4, 7], ref_logps [4, 7]        the inputs as the C side reads them
  advantages [4]
  case<c>.params [4]    eps_low, eps_high, beta, norm (0 grpo, 1 bnpo)
  case<c>.loss [1], case<c>.metrics [3]     kl, clip low, clip high (means over tokens)
  case<c>.dlogps [4, 7]                     d loss / d logps
  case<c>.grad.<hf name>                    d loss / d parameter, for the cases in GRAD_CASES
  case<c>.floor32 [1]   for those cases, PyTorch's own float32 run (model and log-probabilities in float32, the
                        loss in float64) against the float64 gradient, whole (float32_floor)
  adv.rewards [12], adv.group, adv.batch, adv.none [12]
                        3 groups of 4 rewards and their advantages as GRPOTrainer computes them (its
                        scale_rewards group, batch, none; its own nanstd)

Run from the repo root with the pinned venv (tests/ref/README.md; needs trl):
    tests/.venv/bin/python tests/ref/make_grpo_fixtures.py
"""
import argparse
import os
import sys
import tempfile
import types

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from float64_decoder import float32_floor, use_float64   # noqa: E402
from make_preference_fixtures import close, fused_head_float64, save_float32, tiny_tokenizer, worst_grad_diff   # noqa: E402

torch.set_default_dtype(torch.float64)

MODEL = "tests/fixtures/hf/qwen3-untied"
NORMS = ["grpo", "bnpo"]
# eps_low, eps_high, beta, norm
CASES = [(0.2, 0.2, 0.0, "grpo"), (0.2, 0.28, 0.04, "grpo"), (0.2, 0.2, 0.04, "bnpo"), (0.1, 0.1, 0.5, "bnpo")]
GRAD_CASES = (1, 2)
PROMPT_LEN, COMPLETION_LEN, LENGTHS = 6, 7, (7, 5, 6, 3)
ADVANTAGES = (1.3, -0.4, -0.9, 0.6)
SEED = 20241206


def grpo_loss(logps, old, ref, mask, adv, eps_low, eps_high, beta, norm):
    """Our definition (module docstring). logps, old, ref, mask: [4, 7]; adv: [4]."""
    a = adv[:, None]
    r = torch.exp(logps - old)
    per = -torch.min(r * a, torch.clamp(r, 1 - eps_low, 1 + eps_high) * a)
    x = ref - logps
    kl = (torch.exp(x) - x - 1) * r
    if beta != 0:
        per = per + beta * kl
    if norm == "grpo":
        loss = ((per * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    else:
        loss = (per * mask).sum() / mask.sum().clamp(min=1)
    n = mask.sum()
    low = ((r < 1 - eps_low) & (a < 0)).double()
    high = ((r > 1 + eps_high) & (a > 0)).double()
    metrics = torch.stack([(kl * mask).sum() / n if beta != 0 else torch.tensor(0.0), (low * mask).sum() / n,
                           (high * mask).sum() / n]).detach()
    return loss, metrics


def token_logps(model, prompts, completions):
    """Each prompt + completion alone from position 0: the completion tokens' log-probabilities [4, 7]."""
    rows = []
    for k, comp in enumerate(completions):
        ids = torch.tensor([prompts[k // 2] + comp])
        logp = torch.log_softmax(model(input_ids=ids).logits[0], -1)
        pos = torch.arange(PROMPT_LEN - 1, PROMPT_LEN + COMPLETION_LEN - 1)
        rows.append(logp[pos, torch.tensor(comp)])
    return torch.stack(rows)


def case_pass(model, prompts, completions, old, ref, mask, adv, case):
    """One forward and backward of the case: its loss, metrics, the per-token log-probabilities (their .grad d loss /
    d logps) and every parameter's gradient by name; the log-probabilities in the model's dtype, the loss in
    float64."""
    model.zero_grad()
    logps = token_logps(model, prompts, completions)
    logps.retain_grad()
    value, metrics = grpo_loss(logps.to(torch.float64), old, ref, mask, adv, *case)
    value.backward()
    return value, metrics, logps, {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def check_grpo_trainer(prompts, completions, mask, old, ref, case, ours_loss, ours_metrics, ours_grads):
    """TRL 1.16.0's GRPOTrainer._compute_loss on our batch, with a float64 policy: loss, metrics, gradients."""
    import datasets
    from trl import GRPOConfig, GRPOTrainer
    eps_low, eps_high, beta, norm = case
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False, loss_type=norm, beta=beta,
                          epsilon=eps_low, epsilon_high=eps_high, num_generations=2, per_device_train_batch_size=2,
                          disable_tqdm=True)
        dummy = datasets.Dataset.from_dict({"prompt": ["ab", "cd"]})
        trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                              args=args, train_dataset=dummy, processing_class=tiny_tokenizer())
        trainer.model.forward = types.MethodType(fused_head_float64, trainer.model)
        inputs = {"prompt_ids": torch.tensor([prompts[k // 2] for k in range(4)]),
                  "prompt_mask": torch.ones(4, PROMPT_LEN, dtype=torch.long),
                  "completion_ids": torch.tensor(completions), "completion_mask": mask.long(),
                  "advantages": torch.tensor(ADVANTAGES), "old_per_token_logps": old}
        if beta != 0:
            inputs["ref_per_token_logps"] = ref
        model.zero_grad()
        trl_loss = trainer._compute_loss(trainer.model, inputs)
        trl_loss.backward()
        logged = trainer._metrics["train" if trainer.model.training else "eval"]
    assert close(trl_loss.detach(), ours_loss), (case, float(trl_loss), float(ours_loss))
    trl_metrics = [logged["kl"][-1] if beta != 0 else 0.0, logged["clip_ratio/low_mean"][-1],
                   logged["clip_ratio/high_mean"][-1]]
    # TRL means its metrics in float32
    assert close(trl_metrics, ours_metrics, 1e-7), (case, trl_metrics, ours_metrics.tolist())
    return abs(trl_loss.item() - ours_loss.item()), worst_grad_diff(model, ours_grads, case)


def trl_advantages(rewards, group, scale):
    """Advantages as TRL 1.16.0's GRPOTrainer makes them (sum_then_normalize, its default), with its own nanstd."""
    from trl.trainer.utils import nanstd
    mean = torch.nanmean(rewards.view(-1, group), dim=1).repeat_interleave(group, dim=0)
    if scale == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(rewards.view(-1, group), dim=1).repeat_interleave(group, dim=0)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + 1e-4)
    return advantages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/grpo")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    use_float64()

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(SEED)
    prompts = [torch.randint(0, vocab, (PROMPT_LEN,), generator=g).tolist() for _ in range(2)]
    completions = [torch.randint(0, vocab, (COMPLETION_LEN,), generator=g).tolist() for _ in range(4)]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(COMPLETION_LEN)] for n in LENGTHS])
    adv = torch.tensor(ADVANTAGES)
    with torch.no_grad():
        logps0 = token_logps(model, prompts, completions)
    # the inputs as float32, so that the C side reads the very values used here
    old = (logps0 + (torch.rand(logps0.shape, generator=g) - 0.5) * 0.6).to(torch.float32).to(torch.float64)
    ref = (logps0 + (torch.rand(logps0.shape, generator=g) - 0.5) * 1.0).to(torch.float32).to(torch.float64)

    x = logps0.clone().requires_grad_(True)
    for case in CASES:
        f = lambda lp: grpo_loss(lp, old, ref, mask, adv, *case)[0]
        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-9, rtol=1e-7), case

    out = {"n_tokens": mask.sum(-1), "logps": logps0 * mask,
           "logps_lo": (logps0 - logps0.to(torch.float32).to(torch.float64)) * mask,
           "old_logps": old * mask, "ref_logps": ref * mask, "advantages": adv}
    for i, p in enumerate(prompts):
        out[f"prompt{i}"] = torch.tensor(p)
    for k, c in enumerate(completions):
        out[f"completion{k}"] = torch.tensor(c)
    # Advantages of 3 groups of 4 rewards (the second group all equal), each way of scaling them.
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.7, 0.7, 0.7, 0.7, -1.0, 2.0, 0.0, 0.0])
    out["adv.rewards"] = rewards
    for scale in ("group", "batch", "none"):
        out[f"adv.{scale}"] = trl_advantages(rewards, 4, scale)
    report = []
    for c, case in enumerate(CASES):
        eps_low, eps_high, beta, norm = case
        value, metrics, logps, grads = case_pass(model, prompts, completions, old, ref, mask, adv, case)
        assert close(logps.detach(), logps0, 1e-13)
        out[f"case{c}.params"] = torch.tensor([eps_low, eps_high, beta, NORMS.index(norm)])
        out[f"case{c}.loss"] = value.detach().reshape(1)
        out[f"case{c}.metrics"] = metrics
        out[f"case{c}.dlogps"] = logps.grad.detach()
        if c in GRAD_CASES:
            for name, gr in grads.items():
                out[f"case{c}.grad.{name}"] = gr
            floor = float32_floor(model, grads,
                                  lambda m: case_pass(m, prompts, completions, old, ref, mask, adv, case)[3])
            out[f"case{c}.floor32"] = torch.tensor([floor])
        dl, dg = check_grpo_trainer(prompts, completions, mask, old, ref, case, value.detach(), metrics, grads)
        floor = f"; PyTorch float32's whole gradient within {out[f'case{c}.floor32'].item():.2e}" \
            if c in GRAD_CASES else ""
        report.append(f"case{c} {case}: loss {value.item():.9f}{floor}; GRPOTrainer |dloss| {dl:.1e}, "
                      f"max |dgrad| {dg:.1e}; metrics {[round(float(m), 6) for m in metrics]}")

    path = save_float32(out, args.out)
    print("\n".join(report))
    print(f"wrote {path}: {len(out)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    sys.exit(main())
