"""Exact match of an MNN package in the MNN runtime on SFT data, scored as
`pocket eval --exact-match` scores a checkpoint.

    python tests/mnn_exact_match.py --package DIR --data VAL.h5 [--n 200] [--memory normal|low] [--json OUT.json]

For each of the first N examples of the SFT dataset VAL.h5 (`pocket tokenize
--chat`): the prompt is everything before the last trained span (the final
assistant reply), the reference is that span (the reply and its end-of-turn
token); the runtime's greedy generation from the prompt (a fresh start per
example, tests/interop/mnn_run.py) must reproduce it token for token.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interop", "mnn_run.py")


def examples(path, n):
    """(prompt ids, reference ids) of the first n SFT examples with a trained reply after a prompt."""
    import h5py
    with h5py.File(path, "r") as f:
        tokens, offs, mask = f["tokens"][()], f["doc_offsets"][()], f["loss_mask"][()]
    out = []
    for k in range(len(offs) - 1):
        doc, m = tokens[offs[k]:offs[k + 1]].tolist(), mask[offs[k]:offs[k + 1]]
        trained = np.flatnonzero(m)
        if not len(trained):
            continue
        end = int(trained[-1])
        start = end
        while start > 0 and m[start - 1]:
            start -= 1
        if start == 0:
            continue
        out.append((doc[:start], doc[start:end + 1]))
        if len(out) == n:
            break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", required=True)
    ap.add_argument("--data", required=True, help="SFT token dataset (pocket tokenize --chat)")
    ap.add_argument("--n", type=int, default=200, help="examples to score (default 200)")
    ap.add_argument("--memory", choices=["normal", "low"], default="normal")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write {examples, exact_match} here")
    a = ap.parse_args()
    ex = examples(a.data, a.n)
    if not ex:
        raise SystemExit(f"mnn_exact_match: {a.data} has no SFT example with a reply after a prompt")
    with tempfile.TemporaryDirectory() as d:
        job, res = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(job, "w") as f:
            json.dump({"package": a.package, "max_new": max(len(r) for _, r in ex),
                       "config": {"memory": a.memory, "sampler_type": "greedy", "thread_num": a.threads,
                                  "use_template": False},
                       "generate": [p for p, _ in ex]}, f)
        p = subprocess.run([sys.executable, RUNNER, job, res], capture_output=True, text=True)
        if p.returncode or not os.path.exists(res):
            raise SystemExit("mnn_exact_match: the MNN runtime failed:\n" + p.stderr[-3000:])
        got = json.load(open(res))["generate"]
    hits = sum(g[:len(r)] == r and len(g) >= len(r) for g, (_, r) in zip(got, ex))
    r = {"examples": len(ex), "exact_match": hits / len(ex)}
    print(f"{a.package} on {a.data}: exact match {100 * r['exact_match']:.1f}% of {len(ex)} examples "
          f"(MNN memory {a.memory})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
