"""LoRA adapters judged by PEFT: `pocket export --lora ADAPTER --format peft`
must load with PeftModel.from_pretrained onto the `pocket export --format hf`
of its base, and give the logits of `pocket forward --lora` within 1e-4.

Two adapters: one trained by `pocket train` ([lora], a tiny Qwen3 with the
fixture tokenizer, every target, enough steps that B is far from PEFT's
zeros; with [lora] dropout 0 and 0.1: PEFT's eval mode and pocket forward
never drop), and the PEFT fixture adapter (tests/fixtures/lora, written by PEFT
itself) imported with `pocket import` and exported again.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import PeftModel
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
TOKENS = [5, 17, 300, 42, 1000, 7, 7, 99, 1499, 3, 250, 64]

torch.set_num_threads(2)

CONFIG = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 48, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 12, "intermediate_size": 100, "vocab_size": 1505,
          "max_position_embeddings": 128, "tie_word_embeddings": True, "eos_token_id": 1502,
          "pad_token_id": 1500, "rope_theta": 10000.0}


def peft_logits(hf_dir, peft_dir, tokens):
    base = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, peft_dir).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0].numpy()


def pocket_logits(run_pocket, workdir, ckpt, adapter, tokens):
    tok = workdir / "tokens.txt"
    tok.write_text(" ".join(map(str, tokens)))
    dump = workdir / "dump.safetensors"
    args = ["forward", "--ckpt", ckpt, "--tokens-file", tok, "--dump", dump]
    if adapter:
        args += ["--lora", adapter]
    run_pocket(*args)
    return load_file(str(dump))["logits"]


def check(run_pocket, workdir, ckpt, adapter, tokens, dropout=None):
    run_pocket("export", "--ckpt", ckpt, "--format", "hf", "--out", workdir / "hf")
    run_pocket("export", "--ckpt", ckpt, "--lora", adapter, "--format", "peft", "--out", workdir / "peft")
    cfg = json.loads((workdir / "peft" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and not cfg["use_dora"]
    print(f"lora_dropout {cfg['lora_dropout']} (PEFT in eval mode and pocket forward do not drop)")
    if dropout is not None:   # the recipe's rate reaches PEFT's config
        assert cfg["lora_dropout"] == pytest.approx(dropout)
    want = peft_logits(str(workdir / "hf"), str(workdir / "peft"), tokens)
    got = pocket_logits(run_pocket, workdir, ckpt, adapter, tokens)
    base = pocket_logits(run_pocket, workdir, ckpt, None, tokens)
    err, effect = np.abs(got - want).max(), np.abs(got - base).max()
    print(f"logits max|pocket --lora - PEFT| {err:.2e}; the adapter moves them by up to {effect:.2e}")
    assert err <= 1e-4
    assert effect > 100 * max(err, 1e-6)   # the comparison sees the adapter, not just the base


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_trained_adapter(run_pocket, workdir, dropout):
    (workdir / "config.json").write_text(json.dumps(CONFIG))
    tok = ROOT / "tests/fixtures/tok/tokenizer.json"
    run_pocket("init", "--model", workdir / "config.json", "--tokenizer", tok, "--out", workdir / "init.h5")
    run_pocket("tokenize", "--tokenizer", tok, ROOT / "tests/fixtures/tok/corpus.txt", ROOT / "tests/fixtures/data/corpus",
               "--out", workdir / "cpt.h5")
    (workdir / "lora.ini").write_text(
        f"[model]\ninit = {workdir}/init.h5\n[data]\ntrain = {workdir}/cpt.h5\n[train]\nmode = cpt\nmicro_batch = 4\n"
        f"seq_len = 32\nsteps = 20\neval_interval = 0\nthreads = 2\nrun_dir = {workdir}/run\n[optim]\nlr = 0.02\n"
        f"warmup = 0\n[lora]\nenabled = 1\nrank = 8\nalpha = 16\ndropout = {dropout}\n")
    run_pocket("train", workdir / "lora.ini")
    check(run_pocket, workdir, workdir / "init.h5", workdir / "run/ckpt-00000020.h5", TOKENS, dropout)


@pytest.mark.parametrize("base,adapter", [("qwen3-untied", "qwen3-untied-all"), ("qwen3-tied", "qwen3-tied-qvdown")])
def test_imported_adapter(run_pocket, workdir, base, adapter):
    run_pocket("import", ROOT / "tests/fixtures/hf" / base, "--out", workdir / "base.h5")
    run_pocket("import", ROOT / "tests/fixtures/lora" / adapter, "--base", workdir / "base.h5", "--out",
               workdir / "adapter.h5")
    tokens = [int(x) for x in (ROOT / "tests/fixtures/hf" / base / "tokens.txt").read_text().split()]
    check(run_pocket, workdir, workdir / "base.h5", workdir / "adapter.h5", tokens)
