#!/usr/bin/env python3
"""Exact match of LoRA adapters in MNN's runtime, each alone and all in one process.

    tests/.venv/bin/python recipes/demo/multi-lora/mnn_exact_match.py PACKAGE N \\
        NAME.mnn:VAL.h5 [NAME.mnn:VAL.h5 ...]

For each adapter (a lora.mnn inside PACKAGE) and its SFT validation set: the
first N examples, scored as `pocket eval --exact-match` scores them (the
prompt is everything before the last reply, the reference is that reply with
its end-of-turn token, greedy generation must reproduce it token for token).
Run once per adapter alone in a fresh runtime process, then with all adapters
loaded into one process over the one base, switching adapter at every example
(A, B, A, B, ...). Prints one line per adapter: alone, shared, difference.
The runtime runs in tests/interop/mnn_lora_run.py (its notes say why
create_lora and not apply_lora).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "../../../tests/interop/mnn_lora_run.py")
sys.path.insert(0, os.path.join(HERE, "../../../tests"))
from mnn_exact_match import examples  # noqa: E402  (the SFT examples as pocket eval --exact-match takes them)


def run(package, loras, runs, max_new):
    with tempfile.TemporaryDirectory() as d:
        job, res = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(job, "w") as f:
            json.dump({"package": package, "config": {"sampler_type": "greedy", "thread_num": 2},
                       "loras": loras, "runs": runs, "max_new": max_new}, f)
        p = subprocess.run([sys.executable, RUNNER, job, res], capture_output=True, text=True)
        if p.returncode or not os.path.exists(res):
            sys.exit("MNN runtime failed:\n" + p.stderr[-3000:])
        with open(res) as f:
            return json.load(f)


def main():
    package, n = sys.argv[1], int(sys.argv[2])
    pairs = [a.split(":", 1) for a in sys.argv[3:]]
    sets = [examples(val, n) for _, val in pairs]
    max_new = max(len(ref) for s in sets for _, ref in s)
    score = lambda got, s: 100.0 * sum(g == ref for g, (_, ref) in zip(got, s)) / len(s)
    alone = []
    for i, ((name, _), s) in enumerate(zip(pairs, sets)):
        out = run(package, [name], [[1, "generate", p] for p, _ in s], max_new)
        alone.append(score(out["runs"], s))
    order = [(i, j) for j in range(n) for i in range(len(pairs)) if j < len(sets[i])]
    out = run(package, [name for name, _ in pairs], [[i + 1, "generate", sets[i][j][0]] for i, j in order], max_new)
    shared = [[] for _ in pairs]
    for (i, j), got in zip(order, out["runs"]):
        shared[i].append(got)
    rss = out["rss_kb"]
    for i, (name, val) in enumerate(pairs):
        s = score(shared[i], sets[i])
        print("%-16s %-40s exact match alone %5.1f%%, in one process with the others %5.1f%% (%+.1f points), "
              "%d examples" % (name, val, alone[i], s, s - alone[i], len(sets[i])))
    print("resident memory: %.1f MiB with the base, then %s MiB with each adapter added" %
          (rss[1] / 1024, ", ".join("+%.1f" % ((b - a) / 1024) for a, b in zip(rss[1:], rss[2:]))))



if __name__ == "__main__":
    main()
