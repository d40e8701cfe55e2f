"""What a DFlash draft will gain in MNN 3.6.1 on this machine, before shipping it, and which block pays best.

    python recipes/spec/draft_plan.py --package PKG --run RUN_DIR [--accept ACCEPT.json]
                                      [--threads N] [--context C] [--json OUT]

PKG is the package `pocket export --format mnn --draft` made, RUN_DIR the draft's run directory (its
metrics.jsonl), ACCEPT.json tests/bench_spec_accept.py's output (the acceptance `pocket generate --draft` measured;
used at the draft's block when given). The costs are timed here in the MNN runtime (recipes/spec/spec_costs.py):
the target decoding one token (t_decode) and verifying k tokens (t_verify(k), k = 2 .. block), dflash.mnn on a
block at a context one row longer each call (t_dflash) and dflash_fc.mnn on the accepted rows (t_fc). Then

    expected speed-up(b) = tokens per target pass(b) x t_decode / (t_verify(b) + t_dflash + t_fc)

where tokens per pass(b) = 1 + accept_1 + ... + accept_{b-1}, the evaluation's shares of blocks whose accepted
prefix reaches i. At the draft's block this is its acceptance length; at a smaller block b it estimates a draft
trained at block b (the draft's attention inside a block is not causal, so such a draft accepts differently), at
the draft's own cost (a smaller block's is not more). The best block is recommended when it beats the draft's
by more than 5%; below 1.1x at the best block the draft does not pay. Exit 0 with a verdict, 1 on bad input.
"""
import argparse
import ctypes
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_costs import draft_shape, time_draft, time_target   # noqa: E402  (MNN itself is imported when timing)

RECOMMEND_MARGIN = 0.05   # a retraining is worth recommending only beyond the timings' noise
PAYS_AT = 1.1             # below this the draft's gain is within what a different prompt or machine changes


class PlanError(Exception):
    """Bad input: one line naming the file."""


# ---- the arithmetic (plain numbers in, plain numbers out)

def expected_speedup(tokens_per_pass, t_decode, t_verify, t_dflash, t_fc):
    """Decoding tokens/s with the draft over without it: a step gives tokens_per_pass tokens for the target's pass
    on the block plus the draft's pass and its fc, against one target pass per token."""
    return tokens_per_pass * t_decode / (t_verify + t_dflash + t_fc)


def plan_blocks(block, t_decode, t_verify, t_dflash, t_fc, shares=None, tokens_at_block=None):
    """The expected speed-up of every block b = 2 .. block (only `block` without shares) and the verdict.

    shares: accept_1 .. accept_{block-1}; tokens_at_block: a measured acceptance length at `block` that replaces
    1 + sum(shares) there; t_verify: {k: ms} for every k in the rows. Returns a dict of rows ({block,
    tokens_per_pass, step_cost_ms, step_cost_decode_steps, speedup, estimate}), expected_speedup (at `block`),
    best_block, best_speedup, recommended_block (the best when it beats `block` by more than RECOMMEND_MARGIN,
    else None) and pays (best_speedup >= PAYS_AT)."""
    if block < 2:
        raise ValueError(f"block {block}: a draft's block is at least 2")
    if shares is None and tokens_at_block is None:
        raise ValueError("neither the acceptance shares nor an acceptance length")
    if shares is not None and len(shares) != block - 1:
        raise ValueError(f"{len(shares)} acceptance shares for block {block} (want {block - 1})")
    if min(t_decode, t_dflash, t_fc) < 0 or t_decode == 0:
        raise ValueError("a negative cost, or a decoding step of no time")
    rows = []
    for b in range(2, block + 1) if shares is not None else [block]:
        if b == block and tokens_at_block is not None:
            tokens = tokens_at_block
        else:
            tokens = 1 + sum(shares[:b - 1])
        if b not in t_verify:
            raise ValueError(f"no t_verify for block {b}")
        cost = t_verify[b] + t_dflash + t_fc
        rows.append({"block": b, "tokens_per_pass": tokens, "step_cost_ms": cost,
                     "step_cost_decode_steps": cost / t_decode,
                     "speedup": expected_speedup(tokens, t_decode, t_verify[b], t_dflash, t_fc),
                     "estimate": b != block})
    at_block = rows[-1]["speedup"]
    best = max(rows, key=lambda r: r["speedup"])   # the first of equals: the smaller block
    better = best["block"] != block and best["speedup"] > (1 + RECOMMEND_MARGIN) * at_block
    return {"block": block, "rows": rows, "expected_speedup": at_block, "best_block": best["block"],
            "best_speedup": best["speedup"], "recommended_block": best["block"] if better else None,
            "pays": best["speedup"] >= PAYS_AT}


# ---- the inputs

ACCEPT_KEY = re.compile(r"val_(?:([A-Za-z0-9_-]+)_)?accept_(\d+|length)")


def read_run(run, block):
    """The acceptance shares of the draft's run: the evaluation pocket train marked "best": true last (best.h5's),
    else the last one (a run from before the marker); with several validation sets, the first set's figures.
    Returns {path, step, which, set, shares, accept_length, block}."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        raise PlanError(f"{path}: missing (the draft's run directory is pocket train's run_dir)")
    evals = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                j = json.loads(line)
            except ValueError:
                raise PlanError(f"{path}: line {n} is not JSON")
            if isinstance(j, dict) and any(ACCEPT_KEY.fullmatch(k) for k in j):
                evals.append(j)
    if not evals:
        raise PlanError(f"{path}: no evaluation with acceptance figures (val_accept_1 ...): train the draft with "
                        f"[data] val and train.eval_interval > 0")
    marked = [j for j in evals if j.get("best") is True]
    j, which = (marked[-1], "best.h5's") if marked else (evals[-1], "the last one")
    keys = [m for m in map(ACCEPT_KEY.fullmatch, j) if m]
    name = keys[0].group(1)   # the trainer writes the sets in the recipe's order
    prefix = f"val_{name}_" if name else "val_"
    # The run's block: the positions its evaluation reports, 1 .. block-1.
    run_block = 1 + max((int(m.group(2)) for m in keys if m.group(1) == name and m.group(2).isdigit()), default=0)
    if run_block != block:
        raise PlanError(f"{path}: the run trains a draft of block {run_block}, the package's draft has block "
                        f"{block}: a package exported from another draft")
    missing = [f"{prefix}accept_{i}" for i in range(1, block) if not isinstance(j.get(f"{prefix}accept_{i}"),
                                                                                 (int, float))]
    if missing:
        raise PlanError(f"{path}: the evaluation at step {j.get('step')} has no {missing[0]}")
    shares = [float(j[f"{prefix}accept_{i}"]) for i in range(1, block)]
    return {"path": str(path), "step": j.get("step"), "which": which, "set": name, "shares": shares,
            "accept_length": float(j.get(f"{prefix}accept_length", 1 + sum(shares))), "block": run_block}


def read_accept(path):
    """tests/bench_spec_accept.py's output: the acceptance length pocket generate --draft measured."""
    try:
        with open(path) as f:
            j = json.load(f)
    except OSError as e:
        raise PlanError(f"{path}: {(e.strerror or str(e)).lower()}")
    except ValueError:
        raise PlanError(f"{path}: not JSON")
    if not isinstance(j, dict) or not isinstance(j.get("mean_acceptance"), (int, float)) or j["mean_acceptance"] < 1:
        raise PlanError(f"{path}: no mean_acceptance of at least 1 (tests/bench_spec_accept.py's output)")
    return {"path": str(path), "mean_acceptance": float(j["mean_acceptance"]), "prompts": j.get("prompts")}


def read_package(pkg):
    """(block, the runtime's thread count) of a package with a draft."""
    try:
        block = draft_shape(str(pkg))[0]
    except ValueError as e:
        raise PlanError(str(e))
    except (OSError, KeyError, TypeError):
        raise PlanError(f"{pkg}/config.json: not a package's config (or llm_config.json is not)")
    cfg = json.load(open(pkg / "config.json"))
    return block, int(cfg.get("thread_num", 2))


def measure(pkg, block, threads, context):
    """The costs in ms: t_decode, t_verify {k: ms}, t_dflash, t_fc, and the other figures spec_costs times."""
    parts = time_draft(str(pkg), threads, context)
    target = time_target(str(pkg), threads, context, range(1, block + 1))
    return {"t_decode_ms": target[1], "t_verify_ms": {k: target[k] for k in range(2, block + 1)},
            "t_dflash_ms": parts["draft_growing_ms"], "t_fc_ms": parts["fc_varying_ms"], "parts_ms": parts}


# ---- the report

def report(plan, run, accept, costs):
    """The lines printed: the acceptance used, the costs, the table and the verdict."""
    out = []
    if run:
        s = " ".join(f"{x:.2f}" for x in run["shares"])
        out.append(f"acceptance, evaluation at step {run['step']} ({run['which']}) of {run['path']}"
                   f"{' set ' + run['set'] if run['set'] else ''}: {run['accept_length']:.2f} tokens per target "
                   f"pass; accept_1..{plan['block'] - 1} {s}")
    if accept:
        out.append(f"acceptance, pocket generate --draft ({accept['path']}, {accept['prompts']} prompts): "
                   f"{accept['mean_acceptance']:.2f} tokens per target pass (used at block {plan['block']})")
    v = ", ".join(f"{k} {t:.3g}" for k, t in costs["t_verify_ms"].items())
    out.append(f"costs in MNN on this machine ({costs['threads']} threads, context {costs['context']} rows), ms: "
               f"decode {costs['t_decode_ms']:.3g}; verify {v}; dflash.mnn {costs['t_dflash_ms']:.3g}; "
               f"dflash_fc.mnn {costs['t_fc_ms']:.3g}")
    out.append("block  tokens per pass  step cost (decode steps)  expected speed-up")
    for r in plan["rows"]:
        out.append(f"{r['block']:5d}  {r['tokens_per_pass']:15.2f}  {r['step_cost_decode_steps']:24.2f}  "
                   f"{r['speedup']:16.2f}x" + ("  (estimate)" if r["estimate"] else ""))
    if any(r["estimate"] for r in plan["rows"]):
        out.append(f"(estimate: a draft trained at that block, from this draft's evaluation shares accept_1..b-1 "
                   f"and its cost at block {plan['block']}; such a draft accepts differently)")
    out.append(f"expected decode speed-up with this draft: {plan['expected_speedup']:.2f}x")
    if not plan["pays"]:
        out.append("the draft does not pay on this machine: ship the package without it")
    elif plan["recommended_block"]:
        out.append(f"retrain with block = {plan['recommended_block']} for an expected {plan['best_speedup']:.2f}x "
                   f"(an estimate)")
    elif len(plan["rows"]) > 1:
        out.append(f"keep block = {plan['block']}: no smaller block is expected to do more than "
                   f"{100 * RECOMMEND_MARGIN:.0f}% better")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", required=True, type=Path, help="the MNN package with the draft")
    ap.add_argument("--run", type=Path, help="the draft's run directory (its metrics.jsonl)")
    ap.add_argument("--accept", type=Path, help="tests/bench_spec_accept.py's JSON (pocket generate --draft)")
    ap.add_argument("--threads", type=int, help="the runtime's threads (default: the package's thread_num)")
    ap.add_argument("--context", type=int, default=60, help="context rows the costs are timed at (default 60)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    a = ap.parse_args()
    if not a.run and not a.accept:
        ap.error("give --run (the draft's run directory) or --accept (bench_spec_accept.py's JSON), or both")
    try:
        block, package_threads = read_package(a.package)
        run = read_run(a.run, block) if a.run else None
        accept = read_accept(a.accept) if a.accept else None
    except PlanError as e:
        print(f"draft_plan: {e}", file=sys.stderr)
        return 1
    threads = a.threads or package_threads
    costs = {"threads": threads, "context": a.context, **measure(a.package, block, threads, a.context)}
    plan = plan_blocks(block, costs["t_decode_ms"], costs["t_verify_ms"], costs["t_dflash_ms"], costs["t_fc_ms"],
                       shares=run["shares"] if run else None,
                       tokens_at_block=accept["mean_acceptance"] if accept else None)
    for line in report(plan, run, accept, costs):
        print(line)
    if a.json:
        figures = {"package": str(a.package), "run": run, "accept": accept, "costs": costs, **plan,
                   "verdict": report(plan, run, accept, costs)[-1]}
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps(figures, indent=1) + "\n")
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    rc = main()
    # MNN.llm's exit handlers may crash after the target was used: leave without them, output flushed
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)
    os._exit(rc)
