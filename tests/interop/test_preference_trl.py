"""Preference tuning judged by TRL 1.16.0: `pocket eval --loss sigmoid|robust|ipo|simpo` on a pairs dataset must
print the loss and the metrics TRL's own trainers compute on the same batch, and its per-pair log-probabilities
(`--dump-pairs`) must be transformers'.

Two tiny Qwen3 models with a small byte-level BPE tokenizer (built here, ids below the models' 256): the policy
is tests/fixtures/hf/qwen3-untied, the reference a seeded perturbation of it saved by transformers; both imported
with `pocket import`. Five text pairs (prompt, chosen, rejected).

  * DPO losses: TRL's DPOTrainer (policy and ref_model given, precompute_ref_log_probs off, float32) tokenizes the
    pairs, its collator makes one batch of them all, and its compute_loss gives the loss and the logged metrics.
    The pairs dataset pocket reads is written (h5py) from that very batch: document 2g = prompt + chosen,
    2g+1 = prompt + rejected, /loss_mask 1 on the response tokens (the collator's completion_mask).
  * SimPO: TRL's CPOTrainer (loss_type simpo, cpo_alpha = the sft weight) in the same way, through its
    get_batch_loss_metrics.
  * Cases (loss, beta, label_smoothing, simpo_gamma, sft_weight) as tests/fixtures/pref. A DPO case with sft
    weight w is DPOTrainer's loss_type [loss, "sft"] weighted [1, w]. DPOTrainer 1.16.0 ignores
    label_smoothing for "sigmoid"; pocket's sigmoid with label smoothing e is conservative DPO,
    -(1-e) logsigmoid(x) - e logsigmoid(-x), which equals DPOTrainer's loss_type [sigmoid, robust] weighted
    [2(1-e), -(1-2e)] at label_smoothing e, so that is the TRL reference of that case.

Tolerances: loss and metrics within 1e-5 relative to TRL's value, absolute below magnitude 1 (both sides compute in
float32); rewards/accuracies exactly. Dumped log-probabilities (summed over the response tokens, each sequence fed
alone) within 1e-5 relative to transformers' in float64, absolute below magnitude 1; the token counts exactly.
"""
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

trl = pytest.importorskip("trl")   # the only reason to skip: everything else here is pinned for it

import datasets   # noqa: E402
import h5py   # noqa: E402
import torch   # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers   # noqa: E402
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast   # noqa: E402
from trl import DPOConfig, DPOTrainer   # noqa: E402
from trl.experimental.cpo import CPOConfig, CPOTrainer   # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests/fixtures/hf/qwen3-untied"
EOS = "<|endoftext|>"
PAIRS = [
    ("The cat", " sat on the mat.", " ate the hat."),
    ("Q: what is two and two?\nA:", " four", " five, or three"),
    ("Say hi", " hi there!", " no."),
    ("List three colors:", " red, green and blue", " the sea"),
    ("Once", " upon a time", " in a town, at night, a cat"),
]
# loss, beta, label_smoothing, simpo_gamma, sft_weight (the cases of tests/fixtures/pref)
CASES = [("sigmoid", 0.1, 0.0, 0.0, 0.0), ("sigmoid", 0.5, 0.2, 0.0, 0.0), ("robust", 0.1, 0.1, 0.0, 0.0),
         ("ipo", 0.1, 0.0, 0.0, 0.0), ("simpo", 2.0, 0.0, 1.0, 0.0), ("simpo", 2.0, 0.1, 0.5, 0.0),
         ("sigmoid", 0.1, 0.0, 0.0, 1.0), ("simpo", 2.0, 0.0, 0.5, 0.5)]
METRICS = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
           "logps/rejected"]
TOL = 1e-5

torch.set_num_threads(2)


def gpt2_byte_glyphs():
    """GPT-2's byte -> character table, which byte-level BPE vocabularies are spelled in."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    glyph, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in glyph:
            glyph[b], extra = chr(256 + extra), extra + 1
    return glyph


def write_tokenizer(path):
    """A byte-level BPE tokenizer.json: printable ASCII and newline, a few merges, and EOS, 108 ids."""
    glyph = gpt2_byte_glyphs()
    vocab = {glyph[b]: i for i, b in enumerate(list(range(32, 127)) + [10])}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("o", "n"), ("e", "r"), ("a", "t"),
              ("Ġ", "s"), ("e", "n"), ("Ġ", "o")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOS, special=True)])
    tok.save(str(path))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, run_pocket):
    d = tmp_path_factory.mktemp("preference")
    tok_json = d / "tokenizer.json"
    write_tokenizer(tok_json)
    policy_dir, ref_dir = d / "policy-hf", d / "ref-hf"
    policy_dir.mkdir()
    for f in POLICY.iterdir():
        if f.name.endswith(".json") or f.name.startswith("model"):
            shutil.copy(f, policy_dir / f.name)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(12)   # a reference under which 3 of the 5 pairs are won
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.03 * torch.randn(p.shape, generator=g))
    model.save_pretrained(ref_dir)
    for folder in (policy_dir, ref_dir):
        shutil.copy(tok_json, folder / "tokenizer.json")
    run_pocket("import", policy_dir, "--out", d / "policy.h5")
    run_pocket("import", ref_dir, "--out", d / "ref.h5")
    tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_json), eos_token=EOS, pad_token=EOS)
    vocab_size = max(tok.get_vocab().values()) + 1
    assert vocab_size <= model.config.vocab_size
    return {"dir": d, "policy_dir": policy_dir, "ref_dir": ref_dir, "policy": d / "policy.h5", "ref": d / "ref.h5",
            "tokenizer": tok, "hash": hashlib.sha256(tok_json.read_bytes()).hexdigest(), "vocab_size": vocab_size,
            "dataset": datasets.Dataset.from_dict({"prompt": [p for p, _, _ in PAIRS],
                                                   "chosen": [c for _, c, _ in PAIRS],
                                                   "rejected": [r for _, _, r in PAIRS]})}


def load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()


def dpo_reference(s, case):
    """DPOTrainer's loss and logged metrics on one batch of all pairs, and that batch's documents
    [(ids, response mask)] in pocket's order (chosen0, rejected0, chosen1, ...)."""
    loss, beta, eps, _, sft = case
    kw = {"loss_type": [loss]}
    if loss == "sigmoid" and eps > 0:   # conservative DPO (module docstring)
        kw = {"loss_type": ["sigmoid", "robust"], "loss_weights": [2 * (1 - eps), -(1 - 2 * eps)]}
    if sft > 0:
        kw = {"loss_type": kw["loss_type"] + ["sft"], "loss_weights": kw.get("loss_weights", [1.0]) + [sft]}
    # bf16=False: TRL's configs default to bf16, under which the prepared ref_model would run in autocast.
    args = DPOConfig(output_dir=str(s["dir"] / "trl"), report_to=[], use_cpu=True, bf16=False, beta=beta,
                     label_smoothing=eps, precompute_ref_log_probs=False, per_device_eval_batch_size=len(PAIRS),
                     disable_tqdm=True, **kw)
    trainer = DPOTrainer(model=load(s["policy_dir"]), ref_model=load(s["ref_dir"]), args=args,
                         train_dataset=s["dataset"], eval_dataset=s["dataset"], processing_class=s["tokenizer"])
    batch = next(iter(trainer.get_eval_dataloader()))
    n = len(PAIRS)
    assert batch["input_ids"].shape[0] == 2 * n
    trainer.model.eval()
    with torch.no_grad():
        value = trainer.compute_loss(trainer.model, batch).item()
    logged = trainer._metrics["eval"]
    docs = []
    for g in range(n):
        for row in (g, n + g):   # the batch is [chosen..., rejected...]
            keep = batch["attention_mask"][row].bool()
            docs.append((batch["input_ids"][row][keep].tolist(), batch["completion_mask"][row][keep].tolist()))
    return value, {k: logged[k][-1] for k in METRICS}, docs


def cpo_reference(s, case):
    """CPOTrainer's (simpo) loss and metrics on one batch of all pairs, and that batch's documents."""
    _, beta, eps, gamma, sft = case
    args = CPOConfig(output_dir=str(s["dir"] / "trl"), report_to=[], use_cpu=True, bf16=False, loss_type="simpo",
                     cpo_alpha=sft, beta=beta, label_smoothing=eps, simpo_gamma=gamma,
                     per_device_eval_batch_size=len(PAIRS), disable_tqdm=True, remove_unused_columns=False)
    trainer = CPOTrainer(model=load(s["policy_dir"]), args=args, train_dataset=s["dataset"],
                         eval_dataset=s["dataset"], processing_class=s["tokenizer"])
    batch = next(iter(trainer.get_eval_dataloader()))
    with torch.no_grad():
        value, logged = trainer.get_batch_loss_metrics(trainer.model, batch, train_eval="eval")
    docs = []
    for g in range(len(PAIRS)):
        for side in ("chosen", "rejected"):
            keep = batch[f"{side}_attention_mask"][g].bool()
            docs.append((batch[f"{side}_input_ids"][g][keep].tolist(),
                         (batch[f"{side}_labels"][g][keep] != -100).long().tolist()))
    return value.item(), {k: logged["eval_" + k] for k in METRICS}, docs


def write_pairs(path, docs, s):
    """A pairs token dataset as the contract has it (docs/ARCHITECTURE.md "Token datasets", kind pairs)."""
    tokens = np.concatenate([np.asarray(ids, np.uint16) for ids, _ in docs])
    mask = np.concatenate([np.asarray(m, np.uint8) for _, m in docs])
    offsets = np.concatenate([[0], np.cumsum([len(ids) for ids, _ in docs])]).astype(np.uint64)
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=tokens)
        f.create_dataset("doc_offsets", data=offsets)
        f.create_dataset("loss_mask", data=mask)
        f.attrs["kind"] = "pairs"
        f.attrs["tokenizer_hash"] = s["hash"]
        counts = {"vocab_size": s["vocab_size"], "n_tokens": len(tokens), "n_docs": len(docs),
                  "n_pairs": len(docs) // 2, "n_dropped": 0, "n_truncated": 0, "n_skipped": 0, "format_version": 1}
        for name, value in counts.items():
            f.attrs[name] = np.uint64(value)


_LOGPS = {}


def transformers_logps(folder, docs):
    """Each document alone from position 0, float64: the summed log-probability of its response tokens."""
    key = (str(folder), repr(docs))
    if key not in _LOGPS:
        _LOGPS[key] = _transformers_logps(folder, docs)
    return _LOGPS[key]


def _transformers_logps(folder, docs):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for ids, mask in docs:
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0], -1)
            out.append(sum(float(logp[t - 1, ids[t]]) for t in range(1, len(ids)) if mask[t]))
    return out


def within(got, want):
    return abs(got - want) <= TOL * max(1.0, abs(want))


def pocket_eval(run_pocket, s, data, case, dump):
    loss, beta, eps, gamma, sft = case
    # --batch 8: every pair in one pass, TRL's one batch (the sft term is a mean over a pass's chosen tokens)
    args = ["eval", "--ckpt", s["policy"], "--data", data, "--loss", loss, "--beta", beta, "--dump-pairs", dump,
            "--batch", 8]
    if loss != "simpo":
        args += ["--ref", s["ref"]]
    if eps > 0:
        args += ["--label-smoothing", eps]
    if loss == "simpo":
        args += ["--simpo-gamma", gamma]
    if sft > 0:
        args += ["--sft-weight", sft]
    out = run_pocket(*args).stdout
    values = dict(re.findall(r"^([\w/]+): (\S+)\s*$", out, re.M))
    missing = [k for k in ["pairs", "loss", *METRICS] if k not in values]
    assert not missing, f"pocket eval printed no {missing}:\n{out}"
    return {k: float(v) for k, v in values.items()}, [json.loads(line) for line in Path(dump).read_text().splitlines()]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-b{c[1]}-e{c[2]}-g{c[3]}-s{c[4]}" for c in CASES])
def test_loss_matches_trl(run_pocket, setup, case):
    s, loss = setup, case[0]
    want_loss, want, docs = (cpo_reference if loss == "simpo" else dpo_reference)(s, case)
    data = s["dir"] / f"pairs-{'cpo' if loss == 'simpo' else 'dpo'}.h5"
    write_pairs(data, docs, s)
    got, dumped = pocket_eval(run_pocket, s, data, case, s["dir"] / f"dump-{CASES.index(case)}.jsonl")

    # The data, from transformers: no pair's rewards tie (so accuracies cannot flip on rounding).
    pol = transformers_logps(s["policy_dir"], docs)
    n_tok = [sum(m) for _, m in docs]
    if loss == "simpo":
        gaps = [case[1] * (pol[2 * g] / n_tok[2 * g] - pol[2 * g + 1] / n_tok[2 * g + 1]) for g in range(len(PAIRS))]
    else:
        ref = transformers_logps(s["ref_dir"], docs)
        gaps = [case[1] * ((pol[2 * g] - ref[2 * g]) - (pol[2 * g + 1] - ref[2 * g + 1])) for g in range(len(PAIRS))]
    assert min(abs(x) for x in gaps) > 1e-3, gaps

    print(f"{case}: loss pocket {got['loss']:.9g} TRL {want_loss:.9g}; "
          + ", ".join(f"{k} {got[k]:.6g}/{want[k]:.6g}" for k in METRICS))
    assert got["pairs"] == len(PAIRS)
    assert within(got["loss"], want_loss), (got["loss"], want_loss)
    assert got["rewards/accuracies"] == pytest.approx(want["rewards/accuracies"], abs=1e-6)
    for k in METRICS:
        assert within(got[k], want[k]), (k, got[k], want[k])

    dumped = sorted(dumped, key=lambda p: p["pair"])   # the loader's order: a seeded shuffle
    assert [p["pair"] for p in dumped] == list(range(len(PAIRS)))
    worst = 0.0
    for p in dumped:
        g = p["pair"]
        assert (p["chosen_tokens"], p["rejected_tokens"]) == (n_tok[2 * g], n_tok[2 * g + 1])
        pairs = [("chosen_logp", pol[2 * g]), ("rejected_logp", pol[2 * g + 1])]
        if loss != "simpo":
            pairs += [("ref_chosen_logp", ref[2 * g]), ("ref_rejected_logp", ref[2 * g + 1])]
        for key, want_logp in pairs:
            assert within(p[key], want_logp), (g, key, p[key], want_logp)
            worst = max(worst, abs(p[key] - want_logp))
    print(f"  dumped log-probabilities within {worst:.2e} of transformers (float64)")
