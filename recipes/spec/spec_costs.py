"""What the parts of one step of MNN 3.6.1's DFlash decoding cost in the runtime, for a package with a draft.

tests/bench_spec_steps.py prints them; recipes/spec/draft_plan.py weighs them against the draft's acceptance.
Everything runs in the MNN runtime (memory normal, precision high as DFlash's fc runtime, N threads), with every
input made before the clock starts:
  dflash.mnn on a block at a fixed context of C rows, and on contexts one row longer each call (as decoding
      grows it: the module is planned again for every new shape);
  dflash_fc.mnn on 1..block rows in turn (the rows each step accepted) and on a fixed count;
  the target (llm.mnn through MNN.llm) on k tokens at a context of C rows: k = 1 is decoding, k = block is
      verifying a block.
Each figure is the median of 50 calls (the target's: 20), in ms; the target's include the Python binding's call.
"""
import json
import os
import statistics
import time

import numpy as np

DRAFT_FILES = ("llm.mnn", "dflash.mnn", "dflash.mnn.weight", "dflash_fc.mnn")


def timed(f, n=50):
    f()
    out = []
    for i in range(n):
        t = time.perf_counter()
        f(i)
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3


def draft_shape(pkg):
    """(block, target layers the draft reads, hidden width) of a package with a draft; ValueError naming the file
    when it has none."""
    pkg = pkg.rstrip("/") + "/"
    for name in ("config.json", "llm_config.json"):
        if not os.path.isfile(pkg + name):
            raise ValueError(f"{pkg}{name}: missing (not an MNN package: pocket export --format mnn)")
    try:
        with open(pkg + "config.json") as f:
            cfg = json.load(f)
        with open(pkg + "llm_config.json") as f:
            H = int(json.load(f)["hidden_size"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{pkg}config.json or llm_config.json: not an MNN package's config")
    if not isinstance(cfg, dict) or cfg.get("speculative_type") != "dflash" or "dflash_block_size" not in cfg:
        raise ValueError(f"{pkg}config.json: no DFlash draft in this package (pocket export --format mnn --draft)")
    for name in DRAFT_FILES:
        if not os.path.isfile(pkg + name):
            raise ValueError(f"{pkg}{name}: missing (the package's config names a draft)")
    return int(cfg["dflash_block_size"]), len(cfg["dflash_target_layer_ids"]), H


def time_draft(pkg, threads, context):
    """dflash.mnn and dflash_fc.mnn: {draft_fixed_ms, draft_growing_ms, fc_fixed_ms, fc_varying_ms}."""
    import MNN.expr as F
    import MNN.nn as nn
    pkg = pkg.rstrip("/") + "/"
    B, n_t, H = draft_shape(pkg)

    def module(name, ins, outs, weight=None):
        rt = nn.create_runtime_manager(({"backend": 0, "precision": "high", "numThread": threads},))
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
    fixed = draft_inputs(context)
    growing = [draft_inputs(context + i) for i in range(52)]
    r = {"draft_fixed_ms": timed(lambda i=0: draft.forward(fixed)[0].read()),
         "draft_growing_ms": timed(lambda i=0: draft.forward(growing[i + 1])[0].read())}
    fc = module("dflash_fc.mnn", ["target_hidden"], ["context_hidden"])
    rows = [var(rng.standard_normal((1, k % B + 1, n_t * H))) for k in range(52)]
    r["fc_fixed_ms"] = timed(lambda i=0: fc.forward([rows[B - 1]])[0].read())
    r["fc_varying_ms"] = timed(lambda i=0: fc.forward([rows[i + 1]])[0].read())
    return r


def time_target(pkg, threads, context, sizes):
    """The target on k tokens for each k of sizes: {k: ms}. Each size starts again from a context of `context`
    rows (generate_init empties the cache), which its 21 calls then grow by 21 k rows."""
    import MNN.llm as llm
    m = llm.create(pkg.rstrip("/") + "/config.json")
    m.set_config({"memory": "normal", "thread_num": threads, "use_template": False})
    m.load()
    out = {}
    for k in sizes:
        m.generate_init()
        m.forward(list(range(10, 10 + context)))
        out[k] = timed(lambda i=0: m.forward(list(range(100 + i, 100 + i + k))), 20)
    return out
