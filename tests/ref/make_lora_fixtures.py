#!/usr/bin/env python3
"""Write the LoRA reference fixtures under tests/fixtures/lora/ with PEFT.

For each case this loads a tiny model of tests/fixtures/hf/ (written by
make_model_fixtures.py) in fp32 with eager attention, wraps it with PEFT's
get_peft_model(LoraConfig(...)), overwrites every lora_A and lora_B with our
own random draws N(0, 0.2^2) (PEFT's init leaves B = 0, which would hide dA),
save_pretrained()s the adapter (adapter_config.json and
adapter_model.safetensors exactly as PEFT writes them), then reloads it with
PeftModel.from_pretrained onto a fresh copy of the base and records on the
model's tokens.txt:

    expected.safetensors   logits [N, V] f32, loss [1] f32 (labels = input_ids),
                           grad.<PEFT name> f32 for every lora_A / lora_B
                           (the name as saved: without the adapter name)

With dropout (the -dropout case), PEFT's lora_dropout modules are replaced
by the masks pocket draws (model/ops/dropout_mask.h, written again here in
numpy from its description: splitmix64 of (seed, element index)), since
torch's RNG cannot be matched: the fixture checks PEFT's formula
y = base(x) + B A dropout(x) * alpha/r with those masks held fixed.

Run from the repo root with the pinned venv (tests/ref/README.md):
    tests/.venv/bin/python tests/ref/make_lora_fixtures.py [--out tests/fixtures/lora]
"""
import argparse
import os
import shutil

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

# name -> (base model under tests/fixtures/hf, rank, alpha, target modules, seed)
CASES = {
    # every projection, r = 4, scale 2
    "qwen3-untied-all": ("qwen3-untied", 4, 8, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"], 11),
    # a subset on the tied bf16 model, r = 2, scale 2.5
    "qwen3-tied-qvdown": ("qwen3-tied", 2, 5, ["q_proj", "v_proj", "down_proj"], 12),
}
# name -> (the case above it reuses, dropout rate, the micro-batch's mask seed)
DROPOUT_CASES = {"qwen3-tied-qvdown-dropout": ("qwen3-tied-qvdown", 0.25, 0x5EED)}
TARGET_INDEX = {"q_proj": 0, "k_proj": 1, "v_proj": 2, "o_proj": 3, "gate_proj": 4, "up_proj": 5, "down_proj": 6}
STD = 0.2
M64 = (1 << 64) - 1


def splitmix64(seed, i):
    """The i-th output of splitmix64 from seed, for an array i of uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class FixedMask(torch.nn.Module):
    """Inverted dropout with pocket's mask of (layer, target): kept values times float32(1/(1-p))."""

    def __init__(self, seed, layer, target, p):
        super().__init__()
        child = int(splitmix64(seed ^ 0xD1B54A32D192ED03, np.array([layer * 7 + target], dtype=np.uint64))[0])
        self.child, self.p = child, p
        self.scale = np.float32(1.0) / (np.float32(1.0) - np.float32(p))

    def forward(self, x):
        n = x.numel()
        h = splitmix64(self.child, np.arange(n, dtype=np.uint64))
        keep = (h >> np.uint64(32)) >= np.uint64(int(float(np.float32(self.p)) * 4294967296.0))
        mask = torch.from_numpy(keep.reshape(x.shape).astype(np.float32))
        return x * (mask * float(self.scale))


def load_base(hf_dir):
    return AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")


def make(name, out_root):
    dropout, mask_seed = 0.0, None
    if name in DROPOUT_CASES:
        plain, dropout, mask_seed = DROPOUT_CASES[name]
        base_name, r, alpha, targets, seed = CASES[plain]
        seed += 100
    else:
        base_name, r, alpha, targets, seed = CASES[name]
    hf_dir = os.path.join("tests/fixtures/hf", base_name)
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    torch.manual_seed(seed)
    model = get_peft_model(load_base(hf_dir), LoraConfig(r=r, lora_alpha=alpha, target_modules=targets,
                                                         lora_dropout=dropout, bias="none"))
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters()):
            if "lora_" in pname:
                p.copy_(torch.randn(p.shape) * STD)
    model.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))   # the model card PEFT adds: not needed

    ref = PeftModel.from_pretrained(load_base(hf_dir), out, is_trainable=True)
    if mask_seed is not None:
        for mname, mod in ref.named_modules():
            if hasattr(mod, "lora_dropout") and "default" in mod.lora_dropout:
                layer = int(mname.split(".layers.")[1].split(".")[0])
                mod.lora_dropout["default"] = FixedMask(mask_seed, layer, TARGET_INDEX[mname.split(".")[-1]], dropout)
    ids = [int(x) for x in open(os.path.join(hf_dir, "tokens.txt")).read().split()]
    input_ids = torch.tensor([ids])
    res = ref(input_ids=input_ids, labels=input_ids)
    res.loss.backward()
    tensors = {"logits": res.logits[0].detach().contiguous(), "loss": res.loss.detach().reshape(1)}
    n = 0
    for pname, p in ref.named_parameters():
        if "lora_" in pname:
            tensors["grad." + pname.replace(".default", "")] = p.grad.detach().contiguous()
            n += 1
    save_file(tensors, os.path.join(out, "expected.safetensors"))
    print(f"{name}: r={r} alpha={alpha} {len(targets)} targets, {n} adapter tensors, loss {res.loss.item():.6f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/lora")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in a.cases or list(CASES) + list(DROPOUT_CASES):
        make(name, a.out)


if __name__ == "__main__":
    main()
