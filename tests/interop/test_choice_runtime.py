"""The decision head (`[train] mode = choice`) judged by the real runtimes.

A tiny Qwen3 with the fixture tokenizer learns a toy choice task (the colour a
prompt names, among 5 candidates); then on every held-out example:

  (a) the MNN 3.6.1 runtime (PyPI `mnn`, MNN.llm) running the exported package
      with `memory: normal` gives each candidate the score `pocket choose --int4`
      gives (logits[choice_token_id] at the last position of prompt + candidate)
      within 2e-4, and picks the same candidate;
  (b) transformers on the HF export gives `pocket choose`'s fp32 scores within
      1e-4 (its config.json carries pocket_choice_token_id);
  (c) `pocket eval`'s accuracy and expected calibration error equal numpy's,
      computed here from the per-group scores `--dump-scores` writes (10
      equal-width bins of the top probability, (b/10, (b+1)/10]);
  (d) with LoRA (the head row frozen with the base): an adapter taught another
      rule on the Dec model, exported as lora.mnn beside the base package (a
      QLoRA adapter) and as a PEFT folder (a float one): MNN 3.6.1 gives
      `pocket choose --int4 --lora`'s scores within 2e-4 and the same pick,
      PeftModel on the HF export `pocket choose --lora`'s within 1e-4.

Two vocabularies: one with rows past the tokenizer's 1505 tokens (the head takes
the first), and one the tokenizer fills (the trainer appends a row).
"""
import json
from pathlib import Path

import numpy as np
import pytest

MNN = pytest.importorskip("MNN")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# The MNN runner, its settings and the job runner of the package's own tests.
from test_mnn_runtime import RUNNER, run_mnn   # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOK = ROOT / "tests/fixtures/tok/tokenizer.json"
COLOURS = ["red", "blue", "green", "black", "white"]
BASE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "eos_token_id": 1502, "pad_token_id": 1500,
}
VOCABS = {"spare-rows": (1536, 1505), "appended": (1505, 1505)}   # vocab_size, the head row


WORDS = ["a", "the", "my", "one", "big", "small", "old", "new"]


def line(i, colour, w1, w2):
    # The candidates in a rotating order, so the position does not give the answer away.
    k = i % len(COLOURS)
    return {"prompt": f"{w1} {colour} {w2}", "candidates": COLOURS[k:] + COLOURS[:k], "label": colour}


@pytest.fixture(scope="module", params=list(VOCABS))
def trained(request, tmp_path_factory, run_pocket):
    vocab, head = VOCABS[request.param]
    d = tmp_path_factory.mktemp("choice")
    (d / "config.json").write_text(json.dumps({**BASE, "vocab_size": vocab}))
    run_pocket("init", "--model", d / "config.json", "--tokenizer", TOK, "--seed", 5, "--out", d / "init.h5")
    # Held-out prompts hold words the training prompts never do.
    train = [line(i, c, a, b) for i, (c, a, b) in enumerate((c, a, b) for c in COLOURS for a in WORDS[:6] for b in WORDS[:6])]
    held = [line(i, COLOURS[i % 5], WORDS[6 + i % 2], WORDS[(i * 3) % 8]) for i in range(12)]
    for name, rows in (("train", train), ("held", held)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        run_pocket("tokenize", "--tokenizer", d / "init.h5", "--choice", d / f"{name}.jsonl", "--out", d / f"{name}.h5")
    (d / "r.ini").write_text(
        f"[model]\ninit = {d}/init.h5\n[data]\ntrain = {d}/train.h5\nval = {d}/held.h5\n[train]\nmode = choice\n"
        f"micro_batch = 4\nseq_len = 256\nsteps = 150\neval_interval = 150\nsave_interval = 0\nrun_dir = {d}/run\n"
        "seed = 3\n[optim]\nlr = 3e-3\nwarmup = 10\n")
    log = run_pocket("train", d / "r.ini", timeout=600).stdout
    assert f"decision head: lm_head row {head}" in log
    ckpt = d / "run/best.h5"
    run_pocket("export", "--ckpt", ckpt, "--format", "mnn", "--out", d / "pkg")
    run_pocket("export", "--ckpt", ckpt, "--format", "hf", "--out", d / "hf")
    return {"dir": d, "ckpt": ckpt, "held": held, "head": head}


def choose(run_pocket, ckpt, row, *flags):
    out = run_pocket("choose", "--ckpt", ckpt, "--prompt", row["prompt"], "--candidates", *row["candidates"],
                     "--json", *flags).stdout
    return json.loads(out)


def test_mnn_runtime_scores_and_picks(trained, run_pocket, tmp_path):
    cfg = json.loads((trained["dir"] / "pkg/llm_config.json").read_text())
    assert cfg["pocket_choice"]["token_id"] == trained["head"]
    worst, right = 0.0, 0
    for row in trained["held"]:
        ref = choose(run_pocket, trained["ckpt"], row, "--int4")
        assert ref["choice_id"] == trained["head"]
        seqs = [ref["prompt_ids"] + c for c in ref["candidate_ids"]]
        got = run_mnn(trained["dir"] / "pkg", tmp_path, choice={"token_id": trained["head"], "seqs": seqs})
        want = np.array(ref["scores"])
        have = np.array(got["scores"])
        worst = max(worst, float(np.abs(have - want).max()))
        assert np.abs(have - want).max() <= 2e-4, (row, want, have)
        assert int(np.argmax(have)) == ref["pick"], (row, want, have)
        right += row["candidates"][ref["pick"]] == row["label"]
    print(f"MNN vs pocket choose --int4: max |score diff| {worst:.2e}; {right}/{len(trained['held'])} right")
    assert right >= len(trained["held"]) - 1   # the toy task is learnt


def test_transformers_scores_from_hf_export(trained, run_pocket):
    hf = trained["dir"] / "hf"
    assert json.loads((hf / "config.json").read_text())["pocket_choice_token_id"] == trained["head"]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf), torch_dtype=torch.float32).eval()
    for row in trained["held"][:6]:
        ref = choose(run_pocket, trained["ckpt"], row, "--alone")
        for c, want in zip(ref["candidate_ids"], ref["scores"]):
            with torch.no_grad():
                logits = model(torch.tensor([ref["prompt_ids"] + c])).logits[0, -1]
            assert abs(float(logits[trained["head"]]) - want) <= 1e-4


def test_eval_accuracy_and_ece_match_numpy(trained, run_pocket):
    d = trained["dir"]
    out = run_pocket("eval", "--ckpt", trained["ckpt"], "--data", d / "held.h5", "--dump-scores", d / "s.jsonl").stdout
    rows = [json.loads(x) for x in (d / "s.jsonl").read_text().splitlines()]
    assert sorted(r["group"] for r in rows) == list(range(len(trained["held"])))
    conf, right = [], []
    for r in rows:
        s = np.array(r["scores"], dtype=np.float64)
        p = np.exp(s - s.max())
        p /= p.sum()
        conf.append(p.max())
        right.append(float(np.argmax(s) == r["label"]))
        # the dump's label is the dataset's, from the JSONL
        held = trained["held"][r["group"]]
        assert held["candidates"][r["label"]] == held["label"]
    conf, right = np.array(conf), np.array(right)
    bins = np.clip(np.ceil(conf * 10).astype(int) - 1, 0, 9)
    ece = sum((bins == b).sum() / len(conf) * abs(right[bins == b].mean() - conf[bins == b].mean())
              for b in range(10) if (bins == b).any())
    acc = right.mean()
    assert f"accuracy {100 * acc:.1f}% ({int(right.sum())} of {len(rows)} groups)" in out, out
    assert f"ECE {ece:.4f}" in out, (out, ece)


def next_colour_adapter(trained, run_pocket, tmp, base):
    """An adapter taught another rule (the next colour in the list) on the Dec
    base by a short LoRA choice run; base: fp32 or int4 (QLoRA)."""
    d = trained["dir"]
    nxt = [{**r, "label": COLOURS[(COLOURS.index(r["label"]) + 1) % len(COLOURS)]}
           for r in (json.loads(x) for x in (d / "train.jsonl").read_text().splitlines())]
    (tmp / "next.jsonl").write_text("".join(json.dumps(r) + "\n" for r in nxt))
    run_pocket("tokenize", "--tokenizer", trained["ckpt"], "--choice", tmp / "next.jsonl", "--out", tmp / "next.h5")
    (tmp / "lora.ini").write_text(
        f"[model]\ninit = {trained['ckpt']}\n[data]\ntrain = {tmp}/next.h5\n[train]\nmode = choice\n"
        f"micro_batch = 4\nseq_len = 256\nsteps = 40\neval_interval = 0\nsave_interval = 0\nrun_dir = {tmp}/run\n"
        f"seed = 3\n[optim]\nlr = 1e-2\nwarmup = 5\n[lora]\nenabled = 1\nrank = 4\nalpha = 8\nbase = {base}\n")
    run_pocket("train", tmp / "lora.ini", timeout=600)
    return tmp / "run/ckpt-00000040.h5"


def test_mnn_runtime_scores_with_qlora_adapter(trained, run_pocket, tmp_path):
    """Dec with LoRA: the head row is frozen with the base, so the adapter ships
    as any other (lora.mnn beside the base package) and the phone reads the same
    logit. A QLoRA adapter (against the int4 model) taught another rule (the next
    colour in the list) on the Dec base: MNN with lora.mnn gives `pocket choose
    --int4 --lora`'s scores within 2e-4 and the same pick, on every held-out
    example, and the adapter moves the scores (else the check would be the
    base's)."""
    adapter = next_colour_adapter(trained, run_pocket, tmp_path, "int4")
    pkg = tmp_path / "pkg"
    run_pocket("export", "--ckpt", trained["ckpt"], "--format", "mnn", "--out", pkg)
    run_pocket("export", "--ckpt", trained["ckpt"], "--format", "mnn", "--lora", adapter, "--out", pkg, "--force")
    assert (pkg / "lora.mnn").exists()
    refs = [choose(run_pocket, trained["ckpt"], row, "--int4", "--lora", adapter) for row in trained["held"]]
    seqs = [ref["prompt_ids"] + c for ref in refs for c in ref["candidate_ids"]]
    runs = run_mnn(pkg, tmp_path, runner=RUNNER.with_name("mnn_lora_run.py"), loras=["lora.mnn"],
                   runs=[[1, "logits", s] for s in seqs])["runs"]
    last = [np.array(r[-1], np.float32)[trained["head"]] for r in runs]
    worst, moved, at = 0.0, 0.0, 0
    for row, ref in zip(trained["held"], refs):
        have = np.array(last[at:at + len(ref["scores"])])
        at += len(ref["scores"])
        want = np.array(ref["scores"])
        base = np.array(choose(run_pocket, trained["ckpt"], row, "--int4")["scores"])
        worst, moved = max(worst, float(np.abs(have - want).max())), max(moved, float(np.abs(want - base).max()))
        assert np.abs(have - want).max() <= 2e-4, (row, want, have)
        assert int(np.argmax(have)) == ref["pick"], (row, want, have)
    print(f"MNN with lora.mnn vs pocket choose --int4 --lora: max |score diff| {worst:.2e} (the adapter moves the "
          f"scores by up to {moved:.2f})")
    assert moved > 0.1


def test_peft_scores_with_adapter(trained, run_pocket, tmp_path):
    """The same with a float adapter exported for PEFT: PeftModel on the HF
    export of the Dec base gives `pocket choose --lora`'s scores (its logit of
    the head row) within 1e-4."""
    peft = pytest.importorskip("peft")
    adapter = next_colour_adapter(trained, run_pocket, tmp_path, "fp32")
    run_pocket("export", "--ckpt", trained["ckpt"], "--lora", adapter, "--format", "peft", "--out", tmp_path / "peft")
    base = transformers.AutoModelForCausalLM.from_pretrained(str(trained["dir"] / "hf"), torch_dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, str(tmp_path / "peft")).eval()
    worst, moved = 0.0, 0.0
    for row in trained["held"][:6]:
        ref = choose(run_pocket, trained["ckpt"], row, "--alone", "--lora", adapter)
        plain = choose(run_pocket, trained["ckpt"], row, "--alone")
        for c, want, was in zip(ref["candidate_ids"], ref["scores"], plain["scores"]):
            with torch.no_grad():
                have = float(model(torch.tensor([ref["prompt_ids"] + c])).logits[0, -1, trained["head"]])
            worst, moved = max(worst, abs(have - want)), max(moved, abs(want - was))
            assert abs(have - want) <= 1e-4, (row, c, want, have)
    print(f"PEFT vs pocket choose --lora: max |score diff| {worst:.2e} (the adapter moves the scores by up to "
          f"{moved:.2f})")
    assert moved > 0.1
