"""What one step of MNN 3.6.1's DFlash decoding costs, part by part, for a package with a draft.

    python tests/bench_spec_steps.py PACKAGE [--threads N] [--context C]

The parts and how each is timed: recipes/spec/spec_costs.py (also used by recipes/spec/draft_plan.py). Prints
one JSON line: dflash.mnn at a fixed and a growing context, dflash_fc.mnn on a fixed and a varying row count, and
the target decoding one token and verifying a block of `block` tokens, each in ms.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes" / "spec"))
from spec_costs import draft_shape, time_draft, time_target   # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("package")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=60)
    a = ap.parse_args()
    try:
        B = draft_shape(a.package)[0]
    except ValueError as e:
        raise SystemExit(f"bench_spec_steps: {e}")
    r = time_draft(a.package, a.threads, a.context)
    target = time_target(a.package, a.threads, a.context, (1, B))
    r["target_1_ms"], r["target_block_ms"] = target[1], target[B]
    print(json.dumps({"package": a.package, "block": B, "context": a.context, "threads": a.threads,
                      **{k: round(v, 3) for k, v in r.items()}}))


if __name__ == "__main__":
    main()
