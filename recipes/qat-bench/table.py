"""The QAT benchmark's table (recipes/qat-bench/run.sh) from its results folder.

    python recipes/qat-bench/table.py RESULTS_DIR

Each RESULTS_DIR/*.json is one package's figures from tests/mnn_quality.py on
the held-out split, plus the fields run.sh adds: grid, row (the table's
label), order, and for QAT runs tokens and minutes. Prints one Markdown table
per grid, the share of RTN's KL each package removes, and the QAT runs' cost.
"""
import json
import sys
from pathlib import Path


def main():
    results = [json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("*.json"))]
    for grid in sorted({r["grid"] for r in results}):
        rows = sorted((r for r in results if r["grid"] == grid), key=lambda r: (r["order"], r["row"]))
        # every row of a table must be judged on the same positions (BENCH_QAT_WINDOWS), or its figures do not compare
        sets = {(r["positions"], round(r["ref_ppl"], 6)) for r in rows}
        if len(sets) > 1:
            names = ", ".join(f"{r['row']} ({r['positions']})" for r in rows)
            sys.exit(f"table.py: {grid}: rows judged on different positions, rejudge them with one "
                     f"BENCH_QAT_WINDOWS: {names}")
        rtn = next((r for r in rows if r.get("kind") == "rtn"), None)
        ref = rows[0]["ref_ppl"]
        print(f"\n{grid}, {rows[0]['positions']} held-out positions, judged on the MNN runtime's logits "
              f"(memory {rows[0].get('memory', 'normal')}):\n")
        print("| package | perplexity | mean KL to float | top-1 agreement | RTN's KL removed |")
        print("| --- | --- | --- | --- | --- |")
        print(f"| float (the reference, transformers) | {ref:.3f} | 0 | 100% | |")
        for r in rows:
            removed = f"{100 * (1 - r['kl_mean'] / rtn['kl_mean']):.0f}%" if rtn and r is not rtn else ""
            print(f"| {r['row']} | {r['ppl']:.3f} | {r['kl_mean']:.4f} ± {r['kl_stderr']:.4f} | "
                  f"{100 * r['top1']:.2f}% | {removed} |")
        runs = [r for r in rows if "tokens" in r]
        if runs:
            print()
            for r in runs:
                print(f"- {r['row']}: {r['tokens'] / 1e3:.0f}k tokens, {r['minutes']:.1f} minutes of training"
                      + (f" (+ {r['synth_minutes']:.1f} minutes of pocket synth)" if "synth_minutes" in r else ""))


if __name__ == "__main__":
    main()
