#!/usr/bin/env python3
"""Write the on-policy distillation fixture, tests/fixtures/onpolicy/expected.safetensors, in float64.

The student is the tiny model tests/fixtures/hf/qwen3-untied, the teacher tests/fixtures/hf/llama-noqk (the same
vocabulary of 256 and hidden size 32, another architecture and depth), both loaded by transformers in float64 and
float64 throughout (float64_decoder.use_float64). Four
seeded sequences of a 6-token prompt and a 7-token completion (the student's own sample, in a run); a completion's
mask ends early on some (lengths 7, 5, 6, 3: a completion that stopped). Each sequence is fed alone from position
0; completion token t is scored at the position before it.

The loss (model/ops/distill.c, reversed): at each scored position the student's KL to the teacher, both at
temperature T,

    T^2 * sum_v ps_T(v) (log ps_T(v) - log pt_T(v))

summed over the scored positions and divided by their number (the trainer's token mean).

Checked before anything is written (the script stops on a miss): TRL 1.16.0's GKDTrainer.generalized_jsd_loss
with beta = 1 (its reverse KL, the on-policy distillation of Agarwal et al. with lmbda = 1), labels -100 off the
completion, times T^2 (TRL leaves the temperature's square out), equals our loss within 1e-12 relative, and so do
the student's gradients through it; torch.autograd.gradcheck of the loss as a function of the student's logits.

Stored (float32; integers as exact float32 values):
  seq<k> [13]                     token ids (prompt then completion)
  n_tokens [4]                    each completion's scored tokens
  case<c>.T [1], case<c>.loss [1], case<c>.kl [1]   the temperature, the loss, the mean KL (without T^2)
  case<c>.grad.<hf name>          d loss / d student parameter
  case<c>.floor32 [1]             PyTorch's own float32 run (student and teacher in float32, the loss in float64)
                                  against the float64 gradient, whole (float32_floor)

Run from the repo root with the pinned venv (tests/ref/README.md; needs trl):
    tests/.venv/bin/python tests/ref/make_onpolicy_fixtures.py
"""
import argparse
import copy
import os
import sys
import warnings

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from float64_decoder import float32_floor, use_float64   # noqa: E402
from make_preference_fixtures import close, save_float32   # noqa: E402

torch.set_default_dtype(torch.float64)

STUDENT, TEACHER = "tests/fixtures/hf/qwen3-untied", "tests/fixtures/hf/llama-noqk"
PROMPT_LEN, COMPLETION_LEN, LENGTHS = 6, 7, (7, 5, 6, 3)
TEMPERATURES = (1.0, 2.0)
SEED = 20261206


def load(path):
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, attn_implementation="eager")
    m.eval()
    return m


def scored_logits(model, seqs):
    """Each sequence alone: the logits at the positions that score completion tokens [4, 7, V]."""
    pos = torch.arange(PROMPT_LEN - 1, PROMPT_LEN + COMPLETION_LEN - 1)
    return torch.stack([model(input_ids=torch.tensor([s])).logits[0, pos] for s in seqs])


def student_pass(model, seqs, loss_of):
    """One forward and backward of loss_of(the scored logits, in float64): the loss and every parameter's gradient
    by name."""
    model.zero_grad()
    value = loss_of(scored_logits(model, seqs).to(torch.float64))
    value.backward()
    return value.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def reverse_kl_loss(zs, zt, mask, T):
    """Our definition (module docstring): the loss and the mean KL without T^2."""
    log_ps = torch.log_softmax(zs / T, -1)
    log_pt = torch.log_softmax(zt / T, -1)
    kl = (log_ps.exp() * (log_ps - log_pt)).sum(-1)
    mean_kl = (kl * mask).sum() / mask.sum()
    return T * T * mean_kl, mean_kl


def trl_reverse_kl(zs, zt, mask, T):
    """TRL 1.16.0's generalized JSD at beta = 1 over the same positions, times T^2."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.gkd import GKDTrainer
    labels = torch.where(mask > 0, torch.zeros_like(mask, dtype=torch.long), torch.full_like(mask, -100, dtype=torch.long))
    return T * T * GKDTrainer.generalized_jsd_loss(zs, zt, labels=labels, beta=1.0, temperature=T, reduction="batchmean")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/onpolicy")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    use_float64()

    student, teacher = load(STUDENT), load(TEACHER)
    assert student.config.vocab_size == teacher.config.vocab_size
    vocab = student.config.vocab_size
    g = torch.Generator().manual_seed(SEED)
    seqs = [torch.randint(0, vocab, (PROMPT_LEN + COMPLETION_LEN,), generator=g).tolist() for _ in range(4)]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(COMPLETION_LEN)] for n in LENGTHS])
    with torch.no_grad():
        zt = scored_logits(teacher, seqs)

    out = {"n_tokens": mask.sum(-1)}
    for k, s in enumerate(seqs):
        out[f"seq{k}"] = torch.tensor(s)
    report = []
    for c, T in enumerate(TEMPERATURES):
        with torch.no_grad():
            z0 = scored_logits(student, seqs)
        x = z0.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(lambda z: reverse_kl_loss(z, zt, mask, T)[0], (x,), eps=1e-6, atol=1e-9,
                                        rtol=1e-7), T
        # the student's gradients through our loss, then through TRL's
        grads = []
        for loss_of in (lambda zs: reverse_kl_loss(zs, zt, mask, T)[0], lambda zs: trl_reverse_kl(zs, zt, mask, T)):
            grads.append(student_pass(student, seqs, loss_of))
        (ours, ours_grads), (trl, trl_grads) = grads
        assert close(trl, ours, 1e-12), (T, float(trl), float(ours))
        for name in ours_grads:
            assert close(trl_grads[name], ours_grads[name], 1e-10), (T, name)
        out[f"case{c}.T"] = torch.tensor([T])
        out[f"case{c}.loss"] = ours.reshape(1)
        out[f"case{c}.kl"] = reverse_kl_loss(z0, zt, mask, T)[1].reshape(1)
        for name, gr in ours_grads.items():
            out[f"case{c}.grad.{name}"] = gr
        with torch.no_grad():
            zt32 = scored_logits(copy.deepcopy(teacher).to(torch.float32), seqs).to(torch.float64)
        floor = float32_floor(student, ours_grads,
                              lambda m: student_pass(m, seqs, lambda zs: reverse_kl_loss(zs, zt32, mask, T)[0])[1])
        out[f"case{c}.floor32"] = torch.tensor([floor])
        report.append(f"case{c} T {T}: loss {ours.item():.9f}; TRL generalized_jsd_loss(beta=1) x T^2 "
                      f"|dloss| {abs(trl.item() - ours.item()):.1e}; PyTorch float32's whole gradient within "
                      f"{out[f'case{c}.floor32'].item():.2e}")

    path = save_float32(out, args.out)
    print("\n".join(report))
    print(f"wrote {path}: {len(out)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    sys.exit(main())
