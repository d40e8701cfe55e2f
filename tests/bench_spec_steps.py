"""What one step of MNN 3.6.1's DFlash decoding costs, part by part, for a package with a draft.

    python tests/bench_spec_steps.py PACKAGE [--threads N] [--context C]

Times, in the MNN runtime (memory normal, precision high as DFlash's fc runtime, N threads), with every input made
before the clock starts:
  dflash.mnn on a block at a fixed context of C rows, and on contexts one row longer each call (as decoding
      grows it: the module is planned again for every new shape);
  dflash_fc.mnn on 1..block rows in turn (the rows each step accepted) and on a fixed count;
  the target (llm.mnn through MNN.llm) decoding one token, and verifying a block of `block` tokens.
Each figure is the median of 50 calls (the target's: 20), in ms; the target's include the Python binding's
call.
"""
import argparse
import json
import statistics
import time

import numpy as np


def timed(f, n=50):
    f()
    out = []
    for i in range(n):
        t = time.perf_counter()
        f(i)
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("package")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=60)
    a = ap.parse_args()
    import MNN.expr as F
    import MNN.llm as llm
    import MNN.nn as nn
    pkg = a.package.rstrip("/") + "/"
    cfg = json.load(open(pkg + "config.json"))
    B, n_t = cfg["dflash_block_size"], len(cfg["dflash_target_layer_ids"])
    with open(pkg + "llm_config.json") as f:
        H = json.load(f)["hidden_size"]

    def module(name, ins, outs, weight=None):
        rt = nn.create_runtime_manager(({"backend": 0, "precision": "high", "numThread": a.threads},))
        if weight:
            rt.set_external(pkg + weight)
        return nn.load_module_from_file(pkg + name, ins, outs, runtime_manager=rt, shape_mutable=True, rearrange=True)

    def var(x, i32=False):
        x = np.asarray(x, np.int32 if i32 else np.float32)
        return F.const(x.flatten().tolist(), list(x.shape), F.NCHW, F.int if i32 else F.float)

    rng = np.random.default_rng(0)
    draft = module("dflash.mnn", ["noise_embedding", "context_hidden", "attention_mask", "q_position_ids",
                                  "k_position_ids"], ["logits"], "dflash.mnn.weight")

    def draft_inputs(C):
        return [var(rng.standard_normal((1, B, H))), var(rng.standard_normal((1, C, H))),
                var(np.zeros((1, 1, B, C + B))), var(np.arange(C, C + B)[None], True),
                var(np.arange(C + B)[None], True)]
    fixed = draft_inputs(a.context)
    growing = [draft_inputs(a.context + i) for i in range(52)]
    r = {"draft_fixed_ms": timed(lambda i=0: draft.forward(fixed)[0].read()),
         "draft_growing_ms": timed(lambda i=0: draft.forward(growing[i + 1])[0].read())}
    fc = module("dflash_fc.mnn", ["target_hidden"], ["context_hidden"])
    rows = [var(rng.standard_normal((1, k % B + 1, n_t * H))) for k in range(52)]
    r["fc_fixed_ms"] = timed(lambda i=0: fc.forward([rows[B - 1]])[0].read())
    r["fc_varying_ms"] = timed(lambda i=0: fc.forward([rows[i + 1]])[0].read())
    m = llm.create(pkg + "config.json")
    m.set_config({"memory": "normal", "thread_num": a.threads, "use_template": False})
    m.load()
    m.generate_init()
    m.forward(list(range(10, 10 + a.context)))
    # (the cache grows by every call: 20 calls each keep it inside a small model's context)
    r["target_1_ms"] = timed(lambda i=0: m.forward([100 + i]), 20)
    r["target_block_ms"] = timed(lambda i=0: m.forward(list(range(100 + i, 100 + i + B))), 20)
    print(json.dumps({"package": a.package, "block": B, "context": a.context, "threads": a.threads,
                      **{k: round(v, 3) for k, v in r.items()}}))


if __name__ == "__main__":
    main()
