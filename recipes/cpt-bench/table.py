#!/usr/bin/env python3
"""make bench-cpt's table and plot: each replay share's Chinese and English held-out losses before the first update
and after the last, from the runs' metrics.jsonl (the evaluations of steps 0 and the last), and what each set gave.

    python3 recipes/cpt-bench/table.py RUN_DIR SHARE...      (writes RUN_DIR/table.md and RUN_DIR/replay.svg)
"""
import json
import os
import sys


def evaluations(path):
    """The run's evaluation lines (those with val_zh_loss), in order, and its last train_sets report."""
    evals, sets = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            j = json.loads(line)
            if "val_zh_loss" in j:
                evals.append(j)
            if "train_sets" in j:
                sets = j["train_sets"]
    return evals, sets


def svg(rows, path):
    """Two panels against the replay share: the held-out loss after the run (dots and a line) and before it
    (dashed), Chinese above, English below."""
    W, H, L, R, T, B = 560, 250, 70, 20, 40, 45
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{2 * H + 30}" font-family="sans-serif" '
           f'font-size="12">', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{L}" y="20" font-size="14">SmolLM2-135M continued on Chinese: held-out loss by English replay share</text>']
    shares = [r["share"] for r in rows]
    x0, x1 = min(shares), max(shares) if max(shares) > min(shares) else min(shares) + 1
    for p, (key, name, colour) in enumerate((("zh", "Chinese", "#d62728"), ("en", "English", "#1f77b4"))):
        top = 30 + p * H
        ys = [r[key + "_after"] for r in rows] + [r[key + "_before"] for r in rows]
        y0, y1 = min(ys), max(ys)
        pad = 0.1 * (y1 - y0 or 1)
        y0, y1 = y0 - pad, y1 + pad
        px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
        py = lambda y: top + T + (y1 - y) / (y1 - y0) * (H - T - B)
        for i in range(5):
            yv = y0 + (y1 - y0) * i / 4
            out.append(f'<line x1="{L}" x2="{W - R}" y1="{py(yv):.1f}" y2="{py(yv):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{L - 6}" y="{py(yv) + 4:.1f}" text-anchor="end">{yv:.3f}</text>')
        for s in shares:
            out.append(f'<text x="{px(s):.1f}" y="{top + H - B + 18}" text-anchor="middle">{s:g}%</text>')
        out.append(f'<text x="{(W + L) / 2}" y="{top + H - B + 36}" text-anchor="middle">English replay, share of the '
                   f'training tokens</text>')
        before = rows[0][key + "_before"]
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{py(before):.1f}" y2="{py(before):.1f}" stroke="{colour}" '
                   f'stroke-dasharray="5,4"/>')
        pts = " ".join(f"{px(r['share']):.1f},{py(r[key + '_after']):.1f}" for r in rows)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>')
        for r in rows:
            out.append(f'<circle cx="{px(r["share"]):.1f}" cy="{py(r[key + "_after"]):.1f}" r="3.5" fill="{colour}"/>')
        out.append(f'<text x="{L}" y="{top + T - 10}" fill="{colour}">{name} held-out loss after the run (dashed: '
                   f'before, {before:.4f})</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def main():
    run, shares = sys.argv[1], [float(s) for s in sys.argv[2:]]
    rows = []
    for s in shares:
        evals, sets = evaluations(os.path.join(run, f"replay-{s:g}", "metrics.jsonl"))
        first, last = evals[0], evals[-1]
        assert first["step"] == 0, f"replay-{s:g}: no evaluation before the first update"
        tokens = {os.path.basename(t["path"]): t["tokens"] for t in sets}
        rows.append({"share": s, "steps": last["step"], "zh_tokens": tokens.get("zh-train.h5", 0),
                     "en_tokens": tokens.get("en-replay.h5", 0),
                     "zh_before": first["val_zh_loss"], "zh_after": last["val_zh_loss"],
                     "en_before": first["val_en_loss"], "en_after": last["val_en_loss"]})
    base = rows[0]
    gain0 = base["zh_before"] - base["zh_after"]
    rise0 = base["en_after"] - base["en_before"]
    lines = ["| English replay | tokens: Chinese / English | Chinese loss: before -> after | Chinese gain | "
             "of the 0% gain | English loss: before -> after | English rise | of the 0% rise |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        gain, rise = r["zh_before"] - r["zh_after"], r["en_after"] - r["en_before"]
        of_gain = f"{100 * gain / gain0:.1f}%" if gain0 > 0 else "-"
        of_rise = f"{100 * rise / rise0:.1f}%" if rise0 > 0 else "-"
        lines.append(f"| {r['share']:g}% | {r['zh_tokens']:,} / {r['en_tokens']:,} | {r['zh_before']:.4f} -> "
                     f"{r['zh_after']:.4f} | {gain:.4f} | {of_gain} | {r['en_before']:.4f} -> "
                     f"{r['en_after']:.4f} | {rise:+.4f} | {of_rise} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(run, "table.md"), "w", encoding="utf-8") as f:
        f.write(table)
    svg(rows, os.path.join(run, "replay.svg"))
    print(table, end="")
    print(f"wrote {run}/table.md and {run}/replay.svg")


if __name__ == "__main__":
    main()
