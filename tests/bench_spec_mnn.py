"""Decode speed of an MNN package with and without speculative decoding, on held-out prompts.

    python tests/bench_spec_mnn.py --data VAL.h5 --plain DIR --dflash DIR [--lookahead DIR]
                                   [--limit N] [--max-new N] [--threads N] [--out RESULT.json]

VAL.h5 is a pocket SFT dataset (pocket draft-data's output): each document's
prompt is its tokens before the first one with loss. Every package is run
in the MNN 3.6.1 runtime (memory normal, greedy), a fresh Llm per prompt
(3.6.1 keeps stale KV-cache rows between responses of one Llm when
speculative decoding rolls back), the same threads for all. For each prompt
and package: the output ids, and the decode time: the wall time of
generate() less its prefill (the runtime's own prefill_us), so the draft's
set-up on the prompt (dflash_fc over every prompt position) counts as
decoding; each process first makes one warm-up reply on an Llm of its own
(a process's first reply pays for its allocations). decode tokens/s = (new tokens - 1) / decode time, summed over the
prompts. The speculative packages' outputs must equal the plain package's
(reported as the share of prompts whose ids are identical). A speculative
package's reply is given the plain reply's length as max_new: 3.6.1's DFlash
misses an end token that comes as the target's correction of a block when
generate() runs without an output stream, as it does from Python (its stop
check for that token sits inside the stream's branch), and would decode on
to max_new. Each prompt runs in
its own process: a runtime that crashes on a prompt (MNN 3.6.1's lookahead
does on some) is counted, and the speeds compare the prompts every package
completed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np

RUNNER = r"""
import json, sys, time
import MNN.llm as llm
pkg, threads, max_new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prompts = json.loads(sys.stdin.read())
res = []
def make():
    m = llm.create(pkg + "/config.json")
    m.set_config({"memory": "normal", "thread_num": threads, "sampler_type": "greedy", "use_template": False,
                  "max_new_tokens": max_new})
    m.load()
    m.generate_init()
    return m
# A warm-up reply on an Llm of its own (the first reply of a process pays for its allocations), then the timed one.
w = make()
w._c_obj.generate(prompts[0][:8], 8)
del w
for ids in prompts:
    m = make()
    t = time.perf_counter()
    out = list(m._c_obj.generate(ids, max_new))
    wall = time.perf_counter() - t
    ctx = m._c_obj.get_context()
    prefill = ctx["prefill_us"] / 1e6 if isinstance(ctx, dict) else 0.0
    res.append({"ids": out, "wall_s": wall, "prefill_s": prefill})
    del m
print(json.dumps(res))
"""


def prompts_of(path, limit):
    with h5py.File(path, "r") as f:
        tokens, offsets, mask = f["tokens"][:], f["doc_offsets"][:], f["loss_mask"][:]
    out = []
    for d in range(len(offsets) - 1):
        a, b = int(offsets[d]), int(offsets[d + 1])
        first = np.flatnonzero(mask[a:b])
        if len(first) == 0 or first[0] == 0:
            continue
        out.append([int(x) for x in tokens[a:a + first[0]]])
        if len(out) == limit:
            break
    return out


def run(pkg, prompts, threads, max_new):
    """One process per prompt: MNN 3.6.1's lookahead decoding crashes (SIGSEGV) on some prompts, which then count
    as crashed instead of ending the benchmark. max_new: one count for every prompt, or a list, one per prompt."""
    res = []
    for k, ids in enumerate(prompts):
        n = max_new[k] if isinstance(max_new, list) else max_new
        p = subprocess.run([sys.executable, "-c", RUNNER, pkg, str(threads), str(n)], input=json.dumps([ids]),
                           capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            res.append({"crashed": p.returncode})
            continue
        res.append(json.loads(p.stdout.strip().splitlines()[-1])[0])
    return res


def decode_rate(res, idx, plain=None):
    """New tokens per second of decoding; with plain, only the tokens the plain package gave count (DFlash may run
    up to block - 1 tokens past max_new, in the time measured)."""
    new = sum(max(min(len(res[i]["ids"]), len((plain or res)[i]["ids"])) - 1, 0) for i in idx)
    return new / sum(max(res[i]["wall_s"] - res[i]["prefill_s"], 1e-9) for i in idx)


def summary(name, res, plain=None):
    """Decode tokens/s over the prompts this package completed, and its speed-up over the plain package on the
    same prompts."""
    ok = [i for i, r in enumerate(res) if "ids" in r and (plain is None or "ids" in plain[i])]
    s = {"package": name, "prompts": len(ok), "crashed": sum("crashed" in r for r in res),
         "new_tokens": sum(len(res[i]["ids"]) for i in ok), "decode_tokens_per_s": decode_rate(res, ok, plain),
         "speedup": 1.0}
    if plain is not None:   # DFlash may give up to block - 1 tokens past max_new: compare the plain output's length
        s["same_output"] = sum(res[i]["ids"][:len(plain[i]["ids"])] == plain[i]["ids"] for i in ok) / max(len(ok), 1)
        s["speedup"] = s["decode_tokens_per_s"] / decode_rate(plain, ok)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--plain", required=True)
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--lookahead")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    prompts = prompts_of(a.data, a.limit)
    if not prompts:
        raise SystemExit(f"bench_spec_mnn: {a.data}: no document has a prompt before its first loss token")
    rows, plain = [], run(a.plain, prompts, a.threads, a.max_new)
    rows.append(summary("plain", plain))
    # Each speculative reply gets the plain reply's length as max_new: 3.6.1's DFlash does not stop at an end token
    # that comes as the target's correction when generate() runs without an output stream (as from Python).
    lengths = [len(r["ids"]) if "ids" in r else a.max_new for r in plain]
    for name, pkg in (("dflash", a.dflash), ("lookahead", a.lookahead)):
        if pkg:
            rows.append(summary(name, run(pkg, prompts, a.threads, lengths), plain))
    for r in rows:
        print(f"{r['package']:10s} {r['prompts']} prompts ({r['crashed']} crashed), {r['new_tokens']} new tokens, decode "
              f"{r['decode_tokens_per_s']:8.1f} tokens/s ({r['speedup']:.2f}x)"
              + (f", same output as plain on {100 * r['same_output']:.0f}% of prompts" if "same_output" in r else ""))
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump({"threads": a.threads, "max_new": a.max_new, "rows": rows}, f, indent=1)
        os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
