#!/usr/bin/env python3
"""Write the preference-tuning reference fixture, tests/fixtures/pref/expected.safetensors, in float64.

The policy is the tiny model tests/fixtures/hf/qwen3-untied, loaded by
transformers in float64 and float64 throughout (float64_decoder.use_float64:
transformers alone keeps a Qwen3's RMSNorm, RoPE angles and attention softmax in
float32). Three pairs of seeded token ids (prompt,
chosen and rejected response, all inside the vocabulary); each of the six
sequences (prompt + response) is fed alone from position 0, and its
log-probability is the sum over its response tokens t of log p(token t |
tokens < t), read at position t-1. The reference log-probabilities are fixed
inputs: the policy's plus seeded offsets within +-0.4, so the rewards are not
zero.

The losses, with z_c = logp_c - ref_c and z_r = logp_r - ref_r per pair, n_c
and n_r the response lengths, b beta, e label_smoothing, g simpo_gamma, the
mean over the pairs:

  sigmoid  -(1-e) logsigmoid(b (z_c - z_r)) - e logsigmoid(-b (z_c - z_r))   (conservative DPO)
  robust   (-(1-e) logsigmoid(b (z_c - z_r)) + e logsigmoid(-b (z_c - z_r))) / (1-2e)
  ipo      (z_c/n_c - z_r/n_r - 1/(2b))^2
  simpo    -(1-e) logsigmoid(x) - e logsigmoid(-x), x = b (a_c - a_r) - g, a = logp/n (no reference)

and, with w = sft_weight > 0, plus w (-sum over pairs of logp_c) / (sum of n_c): the chosen responses' mean
next-token loss over all their tokens, TRL's "sft" loss type (DPOTrainer loss_type [loss, "sft"] weighted
[1, w]; CPOTrainer's cpo_alpha = w for simpo).

sigmoid (e = 0), robust and ipo are TRL 1.16.0's DPOTrainer loss types, simpo
its CPOTrainer's (experimental.cpo, cpo_alpha 0). DPOTrainer 1.16.0 ignores
label_smoothing for "sigmoid"; the e > 0 form is TRL's conservative sigmoid as
its CPOTrainer computes it (there on chosen - rejected without a reference),
and equals DPOTrainer with loss_type [sigmoid, robust] weighted
[2(1-e), -(1-2e)] at label_smoothing e, which is how it is checked.

Metrics as TRL logs them, means over the pairs: rewards/chosen = b z_c,
rewards/rejected = b z_r, rewards/accuracies = share of pairs with
b z_c > b z_r, rewards/margins = b (z_c - z_r), logps/chosen and logps/rejected
(summed); for simpo as CPOTrainer logs them: rewards b a_c and b a_r, logps a_c
and a_r (averages).

Checks, before anything is written (the script stops on a miss):
  - torch.autograd.gradcheck of the loss as a function of the log-probabilities
    and references, every case, on a smaller batch of two pairs;
  - DPO cases: TRL 1.16.0's DPOTrainer, built on a fresh float64 policy with
    precompute_ref_log_probs (so its batch carries our reference
    log-probabilities), runs its compute_loss on the batch its collator makes of
    our pairs, and backward: its loss, its logged metrics and every parameter's
    gradient must equal ours within 1e-10 relative (1e-9 for gradients).
    The fused LM head it puts on the model (trl.kernels, float32) is replaced by
    the same outputs in float64, each row fed alone as above; the loss code is
    the trainer's own;
  - SimPO cases: the same with CPOTrainer (its collator on the features its
    tokenize_row would make of our ids, its get_batch_loss_metrics, backward);
  - the cDPO case also against CPOTrainer.cpo_loss ("sigmoid") on the
    log-ratios, with a stand-in self holding the settings.
Measured: losses within 4e-15, gradients within 9e-16 of TRL's.

Stored (float32; integers as exact float32 values):
  pair<g>.prompt, pair<g>.chosen, pair<g>.rejected   token ids
  logps [6], n_tokens [6], ref_logps [6]             order: chosen0, rejected0, chosen1, ...
  logps_lo [6], ref_logps_lo [6]                     the float64 values' residuals after float32 (hi + lo)
  case<k>.params [5]    loss_id (0 sigmoid, 1 robust, 2 ipo, 3 simpo), beta, label_smoothing, simpo_gamma,
                        sft_weight
  case<k>.loss [1], case<k>.metrics [6]  rewards/chosen, rewards/rejected, rewards/accuracies,
                                         rewards/margins, logps/chosen, logps/rejected
  case<k>.dlogps [6]    d loss / d logps (the per-sequence weights of the backward)
  case<k>.grad.<hf name>  d loss / d parameter for every parameter of the model, for the cases in GRAD_CASES
  case<k>.floor32 [1]   for those cases, PyTorch's own float32 run of the case (model and log-probabilities in
                        float32, the loss in float64) against the float64 gradient, whole (float32_floor)

Run from the repo root with the pinned venv (tests/ref/README.md; needs trl):
    tests/.venv/bin/python tests/ref/make_preference_fixtures.py
"""
import argparse
import os
import sys
import tempfile
import types

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from float64_decoder import float32_floor, use_float64   # noqa: E402

torch.set_default_dtype(torch.float64)

MODEL = "tests/fixtures/hf/qwen3-untied"
LOSSES = ["sigmoid", "robust", "ipo", "simpo"]
# loss, beta, label_smoothing, simpo_gamma, sft_weight
CASES = [("sigmoid", 0.1, 0.0, 0.0, 0.0), ("sigmoid", 0.5, 0.2, 0.0, 0.0), ("robust", 0.1, 0.1, 0.0, 0.0),
         ("ipo", 0.1, 0.0, 0.0, 0.0), ("simpo", 2.0, 0.0, 1.0, 0.0), ("simpo", 2.0, 0.1, 0.5, 0.0),
         ("sigmoid", 0.1, 0.0, 0.0, 1.0), ("simpo", 2.0, 0.0, 0.5, 0.5)]
# Cases whose every-parameter gradient is stored: sigmoid DPO, conservative DPO, IPO, SimPO with label smoothing, DPO
# with the sft term (all cases share one backward given d loss / d logps, stored for every case; all eight would
# make the fixture 1.9 MB).
GRAD_CASES = (0, 1, 3, 5, 6)
PROMPT_LENS = (5, 9, 3)
SEED = 20240607


def pair_loss(logps, ref, n, loss, beta, eps, gamma, sft):
    """Our definitions (module docstring). logps, ref, n: [2P] in the order chosen0, rejected0, ...
    Returns the loss (mean over pairs) and the six metrics."""
    lc, lr = logps[0::2], logps[1::2]
    nc, nr = n[0::2], n[1::2]
    if loss == "simpo":
        ac, ar = lc / nc, lr / nr
        x = beta * (ac - ar) - gamma
        per = -(1 - eps) * F.logsigmoid(x) - eps * F.logsigmoid(-x)
        rc, rr, shown_c, shown_r = beta * ac, beta * ar, ac, ar
    else:
        zc, zr = lc - ref[0::2], lr - ref[1::2]
        x = beta * (zc - zr)
        if loss == "sigmoid":
            per = -(1 - eps) * F.logsigmoid(x) - eps * F.logsigmoid(-x)
        elif loss == "robust":
            per = (-(1 - eps) * F.logsigmoid(x) + eps * F.logsigmoid(-x)) / (1 - 2 * eps)
        elif loss == "ipo":
            per = (zc / nc - zr / nr - 1 / (2 * beta)) ** 2
        else:
            raise ValueError(loss)
        rc, rr, shown_c, shown_r = beta * zc, beta * zr, lc, lr
    rc, rr = rc.detach(), rr.detach()
    metrics = torch.stack([rc.mean(), rr.mean(), (rc > rr).double().mean(), (rc - rr).mean(),
                           shown_c.detach().mean(), shown_r.detach().mean()])
    value = per.mean()
    if sft > 0:
        value = value - sft * lc.sum() / nc.sum()
    return value, metrics


def make_pairs(vocab):
    g = torch.Generator().manual_seed(SEED)
    pairs = []
    for plen in PROMPT_LENS:
        prompt = torch.randint(0, vocab, (plen,), generator=g).tolist()
        while True:
            lc, lr = (int(x) for x in torch.randint(2, 12, (2,), generator=g))
            chosen = torch.randint(0, vocab, (lc,), generator=g).tolist()
            rejected = torch.randint(0, vocab, (lr,), generator=g).tolist()
            if chosen != rejected:
                break
        pairs.append((prompt, chosen, rejected))
    return pairs


def sequence_logps(model, pairs):
    """Each sequence alone from position 0: the summed log-probability of its response tokens."""
    out, n = [], []
    for prompt, *responses in pairs:
        for resp in responses:
            ids = torch.tensor([prompt + resp])
            logp = torch.log_softmax(model(input_ids=ids).logits[0], -1)
            pos = torch.arange(len(prompt) - 1, len(prompt) + len(resp) - 1)
            out.append(logp[pos, torch.tensor(resp)].sum())
            n.append(len(resp))
    return torch.stack(out), torch.tensor(n, dtype=torch.float64)


def case_pass(model, pairs, ref, case):
    """One forward and backward of the case: its loss, metrics, the log-probabilities (their .grad d loss / d logps)
    and every parameter's gradient by name; the log-probabilities in the model's dtype, the loss in float64."""
    model.zero_grad()
    logps, n = sequence_logps(model, pairs)
    logps.retain_grad()
    value, metrics = pair_loss(logps.to(torch.float64), ref, n, *case)
    value.backward()
    return value, metrics, logps, {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def gradcheck_small():
    """Autograd of pair_loss against central differences, every case, on two pairs (inputs logps and refs)."""
    g = torch.Generator().manual_seed(SEED + 1)
    logps = (-20 * torch.rand(4, generator=g) - 1).requires_grad_(True)
    ref = (logps.detach() + torch.rand(4, generator=g) - 0.5).requires_grad_(True)
    n = torch.tensor([3.0, 7.0, 2.0, 5.0])
    for loss, beta, eps, gamma, sft in CASES:
        f = lambda lp, rf: pair_loss(lp, rf, n, loss, beta, eps, gamma, sft)[0]
        assert torch.autograd.gradcheck(f, (logps, ref), eps=1e-6, atol=1e-9, rtol=1e-7), (loss, beta, eps)


def tiny_tokenizer():
    """A processing class for TRL's trainers: only its pad/eos id (inside the vocabulary) is used here."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {chr(c): i for i, c in enumerate(range(ord("a"), ord("z") + 1))}
    vocab["Ġ"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def close(a, b, tol=1e-10):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def save_float32(tensors, folder):
    """The tensors as float32 into folder/expected.safetensors; its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "expected.safetensors")
    save_file({name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}, path)
    return path


def worst_grad_diff(model, ours_grads, case):
    """Every parameter's gradient (after a reference trainer's backward) against ours within 1e-9 relative; the
    largest absolute difference."""
    worst = 0.0
    for name, p in model.named_parameters():
        assert close(p.grad, ours_grads[name], 1e-9), (case, name)
        worst = max(worst, float((p.grad - ours_grads[name]).abs().max()))
    return worst


def rowwise_logits(model, input_ids, attention_mask):
    """The model's float64 logits of a right-padded batch, each row fed alone without its padding, as
    sequence_logps feeds it (transformers keeps RMSNorm, RoPE angles and the attention softmax of a float64 Qwen3 in
    float32, so a padded batch would differ from the single sequences in the 9th digit); zeros on the padding."""
    rows = []
    for b in range(input_ids.shape[0]):
        n = int(attention_mask[b].sum())
        assert bool(attention_mask[b, :n].all())
        logits = type(model).forward(model, input_ids=input_ids[b:b + 1, :n]).logits[0]
        rows.append(F.pad(logits, (0, 0, 0, input_ids.shape[1] - n)))
    return torch.stack(rows)


def fused_head_float64(self, input_ids, attention_mask, labels, fused_lm_head, use_cache=False):
    """Stands in for the fused LM head that DPOTrainer puts on the model (trl.kernels computes the log-probabilities in
    float32): the same outputs in float64, from rowwise_logits, so that the trainer's loss, metrics and gradients can
    be held to ours at 1e-10."""
    assert fused_lm_head
    logits, labels = rowwise_logits(self, input_ids, attention_mask)[:, :-1], labels[:, 1:]
    mask = labels != -100
    logp = torch.log_softmax(logits, -1)
    log_probs = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0] * mask
    return types.SimpleNamespace(log_probs=log_probs, entropy=-(logp.exp() * logp).sum(-1),
                                 mean_logits=logits.mean(-1), is_top1=logits.argmax(-1) == labels)


def plain_forward_float64(self, input_ids, attention_mask, use_cache=False):
    """CPOTrainer's model call, with rowwise_logits."""
    return types.SimpleNamespace(logits=rowwise_logits(self, input_ids, attention_mask))


def check_dpo_trainer(pairs, ref, case, ours_loss, ours_metrics, ours_grads):
    """TRL 1.16.0's DPOTrainer on the float64 policy (a fresh copy: the trainer patches the model's forward): its loss,
    metrics and gradients on our pairs and references."""
    import datasets
    from trl import DPOConfig, DPOTrainer
    loss, beta, eps, _, sft = case
    kw = dict(loss_type=[loss])
    if loss == "sigmoid" and eps > 0:   # cDPO: DPOTrainer's sigmoid has no label smoothing; this weighting is cDPO
        kw = dict(loss_type=["sigmoid", "robust"], loss_weights=[2 * (1 - eps), -(1 - 2 * eps)])
    if sft > 0:
        kw = dict(loss_type=kw["loss_type"] + ["sft"], loss_weights=kw.get("loss_weights", [1.0]) + [sft])
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False, beta=beta, label_smoothing=eps,
                         precompute_ref_log_probs=True, per_device_train_batch_size=1, disable_tqdm=True, **kw)
        dummy = datasets.Dataset.from_dict({"prompt": ["ab"], "chosen": [" c"], "rejected": [" d"]})
        trainer = DPOTrainer(model=model, args=args, train_dataset=dummy, processing_class=tiny_tokenizer())
        trainer.model.forward = types.MethodType(fused_head_float64, trainer.model)
        examples = [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r, "ref_chosen_logps": float(ref[2 * i]),
                     "ref_rejected_logps": float(ref[2 * i + 1])} for i, (p, c, r) in enumerate(pairs)]
        batch = trainer.data_collator(examples)
        assert batch["ref_chosen_logps"].dtype == torch.float64
        model.zero_grad()
        trl_loss = trainer.compute_loss(trainer.model, batch)
        trl_loss.backward()
        mode = "train" if trainer.model.training else "eval"
        logged = trainer._metrics[mode]
        names = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                 "logps/rejected"]
        trl_metrics = [logged[k][-1] for k in names]
        trl_metrics[2] = float(torch.tensor(trl_metrics[2], dtype=torch.float32))   # TRL counts in float32
        ours_metrics = ours_metrics.clone()
        ours_metrics[2] = float(ours_metrics[2].float())
        assert close(trl_loss.detach(), ours_loss), (case, float(trl_loss), float(ours_loss))
        assert close(trl_metrics, ours_metrics), (case, trl_metrics, ours_metrics.tolist())
    return abs(trl_loss.item() - ours_loss.item()), worst_grad_diff(model, ours_grads, case)


def check_cpo_loss(logps, ref, case, ours_loss):
    """cDPO: TRL 1.16.0's CPOTrainer.cpo_loss with loss_type "sigmoid", -(1-e) logsigmoid(b x) - e logsigmoid(-b x)
    of x = chosen - rejected, called on the log-ratios with a stand-in self holding the trainer's settings."""
    from trl.experimental.cpo import CPOTrainer
    loss, beta, eps, gamma, _ = case
    stub = types.SimpleNamespace(alpha=0.0, beta=beta, label_smoothing=eps, loss_type=loss, simpo_gamma=gamma,
                                 accelerator=types.SimpleNamespace(device=torch.device("cpu")))
    losses, _, _ = CPOTrainer.cpo_loss(stub, logps[0::2] - ref[0::2], logps[1::2] - ref[1::2])
    assert close(losses.mean(), ours_loss), (case, float(losses.mean()), float(ours_loss))
    return abs(float(losses.mean()) - float(ours_loss))


def check_cpo_trainer(pairs, case, ours_loss, ours_metrics, ours_grads):
    """SimPO: TRL 1.16.0's CPOTrainer (loss_type simpo, cpo_alpha the case's sft weight) on the float64 policy: its collator's batch of
    our pairs (the features its tokenize_row would give: no BOS, the EOS already ours), its get_batch_loss_metrics,
    and the gradients of that loss."""
    import datasets
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    _, beta, eps, gamma, sft = case
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    tok = tiny_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        args = CPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False, loss_type="simpo", cpo_alpha=sft,
                         beta=beta, label_smoothing=eps, simpo_gamma=gamma, disable_tqdm=True,
                         remove_unused_columns=False)
        dummy = datasets.Dataset.from_dict({"prompt": ["ab"], "chosen": [" c"], "rejected": [" d"]})
        trainer = CPOTrainer(model=model, args=args, train_dataset=dummy, processing_class=tok)
        trainer.model.forward = types.MethodType(plain_forward_float64, trainer.model)
        features = []
        for p, c, r in pairs:
            f = {"prompt_input_ids": p, "prompt_attention_mask": [1] * len(p)}
            for side, resp in (("chosen", c), ("rejected", r)):
                f[f"{side}_input_ids"] = p + resp
                f[f"{side}_attention_mask"] = [1] * (len(p) + len(resp))
                f[f"{side}_labels"] = [-100] * len(p) + resp
            features.append(f)
        batch = trainer.data_collator(features)
        model.zero_grad()
        trl_loss, logged = trainer.get_batch_loss_metrics(trainer.model, batch, train_eval="train")
        trl_loss.backward()
    names = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
             "logps/rejected"]
    trl_metrics = [logged[k] for k in names]
    trl_metrics[2] = float(torch.tensor(trl_metrics[2], dtype=torch.float32))   # TRL counts in float32
    ours_metrics = ours_metrics.clone()
    ours_metrics[2] = float(ours_metrics[2].float())
    assert close(trl_loss.detach(), ours_loss), (case, float(trl_loss), float(ours_loss))
    assert close(trl_metrics, ours_metrics), (case, trl_metrics, ours_metrics.tolist())
    return abs(trl_loss.item() - ours_loss.item()), worst_grad_diff(model, ours_grads, case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/pref")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp())   # the DPOTrainer's precompute cache
    gradcheck_small()
    use_float64()

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    pairs = make_pairs(model.config.vocab_size)
    with torch.no_grad():
        logps0, n = sequence_logps(model, pairs)
    g = torch.Generator().manual_seed(SEED + 2)
    ref = logps0 + (torch.rand(6, generator=g) - 0.5) * 0.8

    # float32 keeps logps to about 4e-6 absolute, which the log-ratios' differences magnify; the residuals
    # (float64 - float32, themselves stored as float32) carry the rest, so hi + lo is the float64 value
    out = {"logps": logps0, "n_tokens": n, "ref_logps": ref,
           "logps_lo": logps0 - logps0.to(torch.float32).to(torch.float64),
           "ref_logps_lo": ref - ref.to(torch.float32).to(torch.float64)}
    for i, (p, c, r) in enumerate(pairs):
        out.update({f"pair{i}.prompt": torch.tensor(p), f"pair{i}.chosen": torch.tensor(c),
                    f"pair{i}.rejected": torch.tensor(r)})
    report = []
    for k, case in enumerate(CASES):
        loss, beta, eps, gamma, sft = case
        value, metrics, logps, grads = case_pass(model, pairs, ref, case)
        assert close(logps.detach(), logps0, 1e-13)
        out[f"case{k}.params"] = torch.tensor([LOSSES.index(loss), beta, eps, gamma, sft])
        out[f"case{k}.loss"] = value.detach().reshape(1)
        out[f"case{k}.metrics"] = metrics
        out[f"case{k}.dlogps"] = logps.grad.detach()
        if k in GRAD_CASES:
            for name, gr in grads.items():
                out[f"case{k}.grad.{name}"] = gr
            floor = float32_floor(model, grads, lambda m: case_pass(m, pairs, ref, case)[3])
            out[f"case{k}.floor32"] = torch.tensor([floor])
        msg = f"case{k} {loss} beta {beta} eps {eps} gamma {gamma} sft {sft}: loss {value.item():.9f}"
        if k in GRAD_CASES:
            msg += f"; PyTorch float32's whole gradient within {out[f'case{k}.floor32'].item():.2e}"
        if loss != "simpo":
            dl, dg = check_dpo_trainer(pairs, ref, case, value.detach(), metrics, grads)
            msg += f"; DPOTrainer |dloss| {dl:.1e}, max |dgrad| {dg:.1e}"
        else:
            dl, dg = check_cpo_trainer(pairs, case, value.detach(), metrics, grads)
            msg += f"; CPOTrainer |dloss| {dl:.1e}, max |dgrad| {dg:.1e}"
        if loss == "sigmoid" and eps > 0:
            msg += f"; cpo_loss (cDPO) |dloss| {check_cpo_loss(logps.detach(), ref, case, value.detach()):.1e}"
        msg += f"; metrics {[round(float(m), 6) for m in metrics]}"
        report.append(msg)

    path = save_float32(out, args.out)
    print("\n".join(report))
    print(f"wrote {path}: {len(out)} tensors, {os.path.getsize(path)} bytes; logps {logps0.tolist()}")


if __name__ == "__main__":
    sys.exit(main())
