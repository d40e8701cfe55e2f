"""Exact match of an MNN package in the MNN runtime on SFT data, scored as
`pocket eval --exact-match` scores a checkpoint.

    python tests/mnn_exact_match.py --package DIR --data VAL.h5 [--n 200] [--memory normal|low] [--json OUT.json]

For each of the first N examples of the SFT dataset VAL.h5 (`pocket tokenize
--chat`): the prompt is everything before the last trained span (the final
assistant reply), the reference is that span (the reply and its end-of-turn
token); the runtime's greedy generation from the prompt (a fresh start per
example, tests/interop/mnn_run.py) must reproduce it token for token.

--answers CKPT.h5 also scores the answer, as `[rl] rewards = number` does: the
last number of the generated reply (up to its end-of-turn token, decoded with
the checkpoint's tokenizer) equals the last number of the reference.
"""
import argparse
import json
import os
import re
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


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def last_number(text):
    found = NUMBER.findall(text)
    return float(found[-1]) if found else None


def answer_hits(ckpt, got, ex):
    """How many replies end on the reference's number (the reference's end-of-turn token ends each reply)."""
    import h5py
    from tokenizers import Tokenizer
    with h5py.File(ckpt, "r") as f:
        tok = Tokenizer.from_str(f["tokenizer/tokenizer.json"][()].tobytes().decode("utf-8"))
    hits = 0
    for g, (_, r) in zip(got, ex):
        end = g.index(r[-1]) if r[-1] in g else len(g)
        want, have = last_number(tok.decode(r[:-1])), last_number(tok.decode(g[:end]))
        hits += want is not None and have is not None and abs(have - want) <= 1e-9 * max(1.0, abs(want))
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", required=True)
    ap.add_argument("--data", required=True, help="SFT token dataset (pocket tokenize --chat)")
    ap.add_argument("--n", type=int, default=200, help="examples to score (default 200)")
    ap.add_argument("--memory", choices=["normal", "low"], default="normal")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write {examples, exact_match[, answer_match]} here")
    ap.add_argument("--answers", metavar="CKPT.h5", help="also score the reply's last number (its tokenizer)")
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
    if a.answers:
        r["answer_match"] = answer_hits(a.answers, got, ex) / len(ex)
    print(f"{a.package} on {a.data}: exact match {100 * r['exact_match']:.1f}% of {len(ex)} examples"
          + (f", answer right {100 * r['answer_match']:.1f}%" if a.answers else "") + f" (MNN memory {a.memory})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
