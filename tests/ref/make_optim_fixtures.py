"""Reference values for train/optim.c, written by the real PyTorch / transformers code.

Writes (small JSON, committed):
  tests/fixtures/optim/adamw.json      torch.optim.AdamW steps and clip_grad_norm_
  tests/fixtures/optim/schedules.json  transformers' LR schedulers, lr at every step

Run from the repo root:  tests/.venv/bin/python tests/ref/make_optim_fixtures.py [--out DIR]
Single-threaded, fixed seeds: a rerun with the pinned versions (tests/ref/README.md)
gives byte-identical files.

Our AdamWConfig holds float32 hyperparameters, so every hyperparameter and lr given
to torch here is first rounded to float32; the C test reads the same values.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
from transformers import optimization as hf_opt


def f32(x):
    return float(np.float32(x))


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


# Tensors of the fake model: odd sizes (padding in the C flat buffer), decay on
# matrices only, like the tensor table's TF_DECAY flag.
TENSORS = [
    {"name": "w1", "shape": [5, 7], "decay": True, "scale": 0.3, "grad_scale": 1.0},
    {"name": "norm", "shape": [9], "decay": False, "scale": 1.0, "grad_scale": 0.01},
    {"name": "w2", "shape": [16, 3], "decay": True, "scale": 2.0, "grad_scale": 10.0},
    {"name": "bias", "shape": [1], "decay": False, "scale": 0.5, "grad_scale": 1e-3},
]

ADAMW_CASES = [
    # PyTorch-typical LLM settings; lrs vary per step as a schedule would set them.
    {"name": "llm", "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
     "lrs": [1e-3, 2e-3, 3e-3, 2.5e-3, 1e-3], "seed": 1},
    # A large eps (its place in the denominator matters), low beta1 (PyTorch's other
    # lerp form), strong decay and a zero-lr first step (warmup's first update).
    {"name": "odd", "beta1": 0.3, "beta2": 0.99, "eps": 1e-3, "weight_decay": 0.5,
     "lrs": [0.0, 0.05, 0.02, 0.01], "seed": 2},
]


def make_grads(gen, step):
    grads = {}
    for t in TENSORS:
        g = torch.randn(t["shape"], generator=gen, dtype=torch.float32) * t["grad_scale"]
        # exact zeros in a few places (on the first step m and v stay 0 there)
        g.reshape(-1)[(step * 3) % g.numel()] = 0.0
        grads[t["name"]] = g
    return grads


def adamw_case(case):
    gen = torch.Generator().manual_seed(case["seed"])
    params = {t["name"]: (torch.randn(t["shape"], generator=gen) * t["scale"]).requires_grad_(True)
              for t in TENSORS}
    params0 = {n: flat(p) for n, p in params.items()}
    decay = [params[t["name"]] for t in TENSORS if t["decay"]]
    no_decay = [params[t["name"]] for t in TENSORS if not t["decay"]]
    hp = {k: f32(case[k]) for k in ("beta1", "beta2", "eps", "weight_decay")}
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1.0, betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], foreach=False, fused=False)
    steps = []
    for s, lr in enumerate(case["lrs"]):
        lr = f32(lr)
        for group in opt.param_groups:
            group["lr"] = lr
        grads = make_grads(gen, s)
        for n, p in params.items():
            p.grad = grads[n].clone()
        opt.step()
        steps.append({
            "lr": lr,
            "grads": {n: flat(g) for n, g in grads.items()},
            "params": {n: flat(p) for n, p in params.items()},
            "m": {n: flat(opt.state[p]["exp_avg"]) for n, p in params.items()},
            "v": {n: flat(opt.state[p]["exp_avg_sq"]) for n, p in params.items()},
        })
    return {"name": case["name"], **hp, "params0": params0, "steps": steps}


def clip_case(seed, max_norm, grad_mul):
    gen = torch.Generator().manual_seed(seed)
    params = {t["name"]: torch.zeros(t["shape"], requires_grad=True) for t in TENSORS}
    for t in TENSORS:
        p = params[t["name"]]
        p.grad = torch.randn(t["shape"], generator=gen) * t["grad_scale"] * grad_mul
    grads = {n: flat(p.grad) for n, p in params.items()}
    max_norm = f32(max_norm)
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm, foreach=False)
    return {"max_norm": max_norm, "grads": grads, "norm": float(norm),
            "clipped": {n: flat(p.grad) for n, p in params.items()}}


def schedule_lrs(make_sched, base_lr, total):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make_sched(opt)
    lrs = []
    for _ in range(total + 1):
        lrs.append(float(sched.get_last_lr()[0]))
        opt.step()
        sched.step()
    return lrs


def wsd_decay_steps(frac, total, warmup):
    # the rule train/optim.c documents: round(decay_fraction * total), at most total - warmup
    d = int(math.floor(f32(frac) * total + 0.5))
    return max(0, min(d, total - warmup))


def schedule_cases():
    base = f32(3e-4)
    out = []

    def add(kind, warmup, total, min_ratio, frac, make, compare_from=0, reference=""):
        out.append({"kind": kind, "warmup": warmup, "total": total, "min_lr_ratio": f32(min_ratio),
                    "decay_fraction": f32(frac), "base_lr": base, "compare_from": compare_from,
                    "reference": reference, "lrs": schedule_lrs(make, base, total)})

    add("cosine", 10, 100, 0.0, 0.0,
        lambda o: hf_opt.get_cosine_schedule_with_warmup(o, 10, 100),
        reference="get_cosine_schedule_with_warmup")
    add("cosine", 7, 53, 0.1, 0.0,
        lambda o: hf_opt.get_cosine_with_min_lr_schedule_with_warmup(o, 7, 53, min_lr_rate=f32(0.1)),
        reference="get_cosine_with_min_lr_schedule_with_warmup")
    add("cosine", 0, 40, 0.05, 0.0,
        lambda o: hf_opt.get_cosine_with_min_lr_schedule_with_warmup(o, 0, 40, min_lr_rate=f32(0.05)),
        reference="get_cosine_with_min_lr_schedule_with_warmup")
    add("linear", 10, 60, 0.0, 0.0,
        lambda o: hf_opt.get_linear_schedule_with_warmup(o, 10, 60),
        reference="get_linear_schedule_with_warmup")
    # transformers' linear always ends at 0; with a floor, the wsd scheduler without
    # a stable phase is the same line (its warmup differs, so compare after it).
    add("linear", 5, 45, 0.2, 0.0,
        lambda o: hf_opt.get_wsd_schedule(o, 5, 40, num_stable_steps=0, decay_type="linear",
                                          min_lr_ratio=f32(0.2)),
        compare_from=5, reference="get_wsd_schedule(stable=0, linear)")
    add("constant", 12, 30, 0.0, 0.0,
        lambda o: hf_opt.get_constant_schedule_with_warmup(o, 12),
        reference="get_constant_schedule_with_warmup")
    add("constant", 0, 10, 0.0, 0.0,
        lambda o: hf_opt.get_constant_schedule_with_warmup(o, 0),
        reference="get_constant_schedule_with_warmup")
    for warmup, total, frac, min_ratio in [(10, 100, 0.2, 0.0), (8, 77, 0.3, 0.1), (0, 50, 0.25, 0.1)]:
        decay = wsd_decay_steps(frac, total, warmup)
        add("wsd", warmup, total, min_ratio, frac,
            lambda o, w=warmup, t=total, d=decay, r=min_ratio: hf_opt.get_wsd_schedule(
                o, w, d, num_training_steps=t, decay_type="linear", min_lr_ratio=f32(r)),
            # transformers warms up from min_lr_ratio, we from 0: same only when it is 0
            compare_from=0 if min_ratio == 0.0 else warmup, reference="get_wsd_schedule(linear)")
    return out


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/optim")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    tensors = [{k: t[k] for k in ("name", "shape", "decay")} for t in TENSORS]
    write_json(os.path.join(args.out, "adamw.json"), {
        "tensors": tensors,
        "adamw": [adamw_case(c) for c in ADAMW_CASES],
        # one case where clipping scales down, one where the norm is under the limit
        "clip": [clip_case(11, 1.0, 1.0), clip_case(12, 1000.0, 1.0)],
    })
    write_json(os.path.join(args.out, "schedules.json"), {"cases": schedule_cases()})


if __name__ == "__main__":
    main()
