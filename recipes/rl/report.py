"""make bench-rl's figures: each GRPO seed's training curve and the int4 packages' held-out scores in MNN.

    python3 recipes/rl/report.py RUNS_DIR [SEED ...] [--svg OUT.svg]

Reads RUNS_DIR/grpo-seed<S>/metrics.jsonl and RUNS_DIR/<name>-mnn-em.json (tests/mnn_exact_match.py's) for the
SFT model and each seed; prints the figures and, with --svg, draws each seed's training reward (the share of
sampled replies exactly right, or, in a run without the exact reward, whose answer is right; a moving mean over
10 updates) against the update, with the SFT and GRPO packages' held-out exact match in MNN as horizontal marks.
Plain Python: no plotting library.
"""
import argparse
import json
import os

# The training curve: the first of these rewards the run has (exact: the whole reply right; number: its answer).
CURVES = [("rewards/exact/mean", "sampled replies exactly right"), ("rewards/number/mean", "sampled answers right")]


def steps_of(path):
    with open(path) as f:
        return [j for j in map(json.loads, f) if "reward" in j]


def moving_mean(xs, k=10):
    return [sum(xs[max(0, i - k + 1):i + 1]) / (i + 1 - max(0, i - k + 1)) for i in range(len(xs))]


def held_out(runs, name):
    path = os.path.join(runs, name + "-mnn-em.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def svg(curves, marks, out):
    """curves: [(label, [y])], marks: [(label, y)]; y in [0, 1]."""
    W, H, L, B, T = 640, 360, 50, 40, 20
    n = max([len(c) for _, c in curves] + [1])
    x = lambda i: L + (W - L - 20) * i / max(1, n - 1)
    y = lambda v: T + (H - T - B) * (1 - v)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="11">' % (W, H), '<rect width="100%" height="100%" fill="white"/>']
    for v in (0, 0.25, 0.5, 0.75, 1):
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - 20, y(v), y(v)))
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>' % (L - 5, y(v) + 4, 100 * v))
    for i in range(0, n, max(1, n // 6)):
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(i), H - B + 15, i + 1))
    parts.append('<text x="%d" y="%d" text-anchor="middle">update</text>' % ((W + L) // 2, H - 8))
    for k, (label, ys) in enumerate(curves):
        pts = " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v in enumerate(ys))
        parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (colors[k % 4], pts))
        parts.append('<text x="%d" y="%d" fill="%s">%s</text>' % (L + 10, T + 14 * (k + 1), colors[k % 4], label))
    for k, (label, v) in enumerate(marks):
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>'
                     % (L, W - 20, y(v), y(v)))
        parts.append('<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>' % (W - 22, y(v) - 3, label))
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs")
    ap.add_argument("seeds", nargs="*")
    ap.add_argument("--svg")
    args = ap.parse_args()
    curves, marks = [], []
    sft = held_out(args.runs, "sft")
    if sft:
        print("%-12s int4 in MNN, %d held-out problems: answer right %.1f%%, whole reply exact %.1f%%"
              % ("sft", sft["examples"], 100 * sft["answer_match"], 100 * sft["exact_match"]))
        marks.append(("SFT, held-out exact match (MNN) %.1f%%" % (100 * sft["exact_match"]), sft["exact_match"]))
    for seed in args.seeds:
        steps = steps_of(os.path.join(args.runs, "grpo-seed%s" % seed, "metrics.jsonl"))
        key, what = next((k, w) for k, w in CURVES if k in steps[0])
        answer = [s[key] for s in steps]
        first, last = answer[:10], answer[-10:]
        tps = sum(s["rollout_tokens_per_s"] for s in steps) / len(steps)
        print("GRPO seed %s: %d updates; %s %.1f%% over the first 10, %.1f%% over the last 10; "
              "total reward %.3f -> %.3f; KL to the start %.3f over the last 10; rollout tokens/s %.1f"
              % (seed, len(steps), what, 100 * sum(first) / len(first), 100 * sum(last) / len(last),
                 sum(s["reward"] for s in steps[:10]) / len(first), sum(s["reward"] for s in steps[-10:]) / len(last),
                 sum(s["kl"] for s in steps[-10:]) / len(last), tps))
        curves.append(("seed %s: %s (mean of 10 updates)" % (seed, what), moving_mean(answer)))
        r = held_out(args.runs, "grpo-seed%s" % seed)
        if r:
            print("%-12s int4 in MNN, %d held-out problems: answer right %.1f%%, whole reply exact %.1f%%"
                  % ("grpo-seed" + seed, r["examples"], 100 * r["answer_match"], 100 * r["exact_match"]))
            marks.append(("seed %s, held-out exact match (MNN) %.1f%%" % (seed, 100 * r["exact_match"]),
                          r["exact_match"]))
    if args.svg:
        svg(curves, marks, args.svg)


if __name__ == "__main__":
    main()
