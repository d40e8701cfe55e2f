#!/usr/bin/env python3
"""Write the tiny Hugging Face reference models under tests/fixtures/hf/.

For each model this builds a randomly initialised Qwen3ForCausalLM or
LlamaForCausalLM with transformers, save_pretrained()s it (config.json and
safetensors exactly as transformers writes them), then reloads the saved
directory in fp32 with eager attention and records the real transformers
computation on a fixed token sequence:

    tokens.txt             N space-separated token ids
    expected.safetensors   logits [N, V] f32, loss [1] f32 (labels = input_ids),
                           grad.<hf name> f32 for every parameter

Reloading from disk means the reference sees exactly the stored weights (for
bf16/fp16 checkpoints: the rounded weights upcast to fp32), so a C importer
that reads the same files must reproduce these numbers.

Run from the repo root with the developers' venv:
    tests/.venv/bin/python tests/ref/make_model_fixtures.py [--out tests/fixtures/hf]
"""
import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

# Weights are drawn wider than transformers' default 0.02 so that the logits
# depend visibly on every tensor, and norm weights scatter around 1 so that a
# dropped or misplaced norm weight shows up.
MATRIX_STD = 0.15
NORM_STD = 0.1

COMMON = dict(
    vocab_size=256,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=128,
    pad_token_id=None,   # no padding_idx: every embedding row gets a lookup gradient
)

# name -> (model class, config, storage dtype, max_shard_size or None, seed, tokens N)
MODELS = {
    # head_dim 16 with hidden 48 and 4 heads: head_dim != hidden / heads; GQA ratio 2.
    "qwen3-tied": (
        Qwen3ForCausalLM,
        Qwen3Config(hidden_size=48, intermediate_size=76, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    tie_word_embeddings=True, **COMMON),
        torch.bfloat16, None, 1001, 72,
    ),
    # GQA ratio 3, fp32, split into several shards plus model.safetensors.index.json.
    "qwen3-untied": (
        Qwen3ForCausalLM,
        Qwen3Config(hidden_size=32, intermediate_size=100, num_hidden_layers=3,
                    num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                    tie_word_embeddings=False, **COMMON),
        torch.float32, 100_000, 1002, 80,
    ),
    # Llama: no QK-norm, untied, GQA 1, stored as fp16.
    "llama-noqk": (
        LlamaForCausalLM,
        LlamaConfig(hidden_size=32, intermediate_size=90, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, head_dim=8,
                    tie_word_embeddings=False, **COMMON),
        torch.float16, None, 1003, 64,
    ),
}


def randomize(model, gen):
    """Draw every parameter from our own generator (not transformers' init)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim == 1:     # RMSNorm weights: input/post-attention/final/q/k norms
                p.copy_(1.0 + NORM_STD * noise)
            else:               # embedding, projections, lm_head
                p.copy_(MATRIX_STD * noise)


def make_one(name, out_root):
    cls, config, dtype, shard, seed, n_tokens = MODELS[name]
    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    gen = torch.Generator().manual_seed(seed)
    model = cls(config).to(torch.float32)
    randomize(model, gen)
    model = model.to(dtype)
    save_kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(out_dir, **save_kwargs)

    # The token sequence covers the vocabulary at random, with some repeats.
    tokens = torch.randint(0, config.vocab_size, (n_tokens,), generator=gen)
    with open(os.path.join(out_dir, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in tokens) + "\n")

    # Reference: reload the saved files in fp32 (eager attention) and run the
    # ordinary transformers forward/backward.
    ref = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    assert type(ref) is cls, type(ref)
    stored = dict(model.named_parameters())
    for pname, p in ref.named_parameters():   # the reload must be exactly the stored weights
        assert torch.equal(p.detach(), stored[pname].detach().to(torch.float32)), pname
    ref.train()   # dropout is 0.0 in these configs; train mode as a trainer would run it
    ids = tokens.unsqueeze(0)
    result = ref(input_ids=ids, labels=ids)
    result.loss.backward()

    expected = {
        "logits": result.logits[0].detach().to(torch.float32).contiguous(),
        "loss": result.loss.detach().reshape(1).to(torch.float32).contiguous(),
    }
    params = list(ref.named_parameters())   # tied: lm_head.weight is not listed separately
    for pname, p in params:
        assert p.grad is not None, pname
        expected["grad." + pname] = p.grad.detach().to(torch.float32).contiguous()
    # One metadata key: safetensors orders several keys at random, and the
    # file should be byte-identical when regenerated.
    meta = {"generator": f"tests/ref/make_model_fixtures.py {name}: torch {torch.__version__}, "
                         f"transformers {transformers.__version__}"}
    save_file(expected, os.path.join(out_dir, "expected.safetensors"), metadata=meta)

    files = sorted(os.listdir(out_dir))
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    print(f"{name}: {cls.__name__} dtype={str(dtype).replace('torch.', '')} "
          f"L={config.num_hidden_layers} H={config.hidden_size} heads={config.num_attention_heads}/"
          f"{config.num_key_value_heads} head_dim={config.head_dim} F={config.intermediate_size} "
          f"V={config.vocab_size} tied={cfg.get('tie_word_embeddings')} params={len(params)} "
          f"N={n_tokens} loss={result.loss.item():.6f} "
          f"|logits|max={expected['logits'].abs().max().item():.3f} size={size / 1024:.1f} KiB")
    print("    files: " + " ".join(files))
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/hf", help="output folder (default tests/fixtures/hf)")
    ap.add_argument("models", nargs="*", help="subset of: " + ", ".join(MODELS))
    args = ap.parse_args()
    names = args.models or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit(f"unknown model {n!r}; known: {', '.join(MODELS)}")

    # One thread and deterministic kernels so the numbers do not depend on the machine's core count.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    total = sum(make_one(n, args.out) for n in names)
    print(f"total {total / 1024:.1f} KiB in {args.out}")


if __name__ == "__main__":
    main()
