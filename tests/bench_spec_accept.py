"""Mean acceptance length of a DFlash draft on held-out prompts, with pocket generate --draft.

    python tests/bench_spec_accept.py --pocket ./pocket --ckpt T.h5 --draft D.h5 --data VAL.h5
                                      [--limit N] [--max-new N] [--out RESULT.json]

For each document of VAL.h5 (a pocket SFT dataset: its prompt is the tokens
before the first one with loss), runs the target greedily with the draft and
without it (`pocket generate --int4`), and checks the two outputs are the same
ids. Mean acceptance length = new tokens after the first / target passes over
drafted blocks, summed over the prompts (MNN 3.6.1's "accepted per step").
"""
import argparse
import json
import os
import re
import subprocess

from bench_spec_mnn import prompts_of


def generate(pocket, ckpt, ids, max_new, draft=None):
    cmd = [pocket, "generate", "--ckpt", ckpt, "--prompt-ids", " ".join(map(str, ids)), "--ids", "--max-new",
           str(max_new)]
    cmd += ["--draft", draft] if draft else ["--int4"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench_spec_accept: {' '.join(cmd[:6])} ...: {p.stderr.strip()}")
    out = [int(x) for x in p.stdout.split()]
    m = re.search(r"\((\d+) passes", p.stderr)
    return out, int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pocket", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--out")
    a = ap.parse_args()
    prompts = prompts_of(a.data, a.limit)
    same = passes = tokens = 0
    for ids in prompts:
        plain, _ = generate(a.pocket, a.ckpt, ids, a.max_new)
        spec, n = generate(a.pocket, a.ckpt, ids, a.max_new, a.draft)
        same += plain == spec
        passes += n
        tokens += max(len(spec) - 1, 0)
    r = {"prompts": len(prompts), "same_output": same / len(prompts), "passes": passes, "tokens": tokens,
         "mean_acceptance": tokens / max(passes, 1)}
    print(f"{len(prompts)} prompts: mean acceptance {r['mean_acceptance']:.2f} tokens per target pass; same output as "
          f"without the draft on {100 * r['same_output']:.0f}%")
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump(r, f, indent=1)
        os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
