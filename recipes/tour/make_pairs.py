#!/usr/bin/env python3
"""Preference pairs for the demo's title -> JSON task from a fine-tuned model's own wrong answers.

    python3 recipes/tour/make_pairs.py --ckpt CKPT.h5 --data DATA.jsonl --out PAIRS.jsonl
        [--samples 4] [--temperature 1.0] [--seed 1] [--rows 16] [--pocket ./pocket]

DATA.jsonl is chat JSONL as recipes/demo/make_sft_data.py writes it (a user
turn with the instruction and the title, the assistant's right JSON). The
checkpoint (the SFT model) samples --samples answers to each prompt at
--temperature with `pocket generate --batch-file` (its chat template, seeded:
the same run gives the same file); the first answer that is not the right
JSON is the rejected response, the right JSON the chosen one. Prompts the
model never got wrong give no pair. Writes TRL's conversational format, which
pocket tokenize --pairs and TRL's DPOTrainer both read:

    {"prompt": [{"role": "user", ...}], "chosen": [{"role": "assistant", ...}],
     "rejected": [{"role": "assistant", ...}]}

and prints how often the model was wrong. Python 3 standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True, help="the fine-tuned checkpoint (.h5)")
    ap.add_argument("--data", required=True, help="chat JSONL: user prompt, assistant's right answer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pocket", default="./pocket")
    args = ap.parse_args()

    rows = [json.loads(line) for line in open(args.data, encoding="utf-8") if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        prompts, answers = os.path.join(tmp, "prompts.jsonl"), os.path.join(tmp, "answers.jsonl")
        with open(prompts, "w", encoding="utf-8") as f:
            for i, r in enumerate(rows):
                f.write(json.dumps({"id": i, "messages": r["messages"][:-1]}, ensure_ascii=False) + "\n")
        subprocess.run([args.pocket, "generate", "--ckpt", args.ckpt, "--batch-file", prompts, "--out", answers,
                        "--samples", str(args.samples), "--temperature", str(args.temperature), "--max-new",
                        str(args.max_new), "--rows", str(args.rows), "--seed", str(args.seed)], check=True)
        sampled = [json.loads(line) for line in open(answers, encoding="utf-8")]
    wrong = {}
    for s in sampled:
        right = rows[s["id"]]["messages"][-1]["content"]
        if s["completion"].strip() != right:
            wrong.setdefault(s["id"], []).append(s["completion"].strip())
    with open(args.out, "w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            if i not in wrong:
                continue
            f.write(json.dumps({"prompt": r["messages"][:-1],
                                "chosen": [{"role": "assistant", "content": r["messages"][-1]["content"]}],
                                "rejected": [{"role": "assistant", "content": wrong[i][0]}]},
                               ensure_ascii=False) + "\n")
    n_wrong = sum(len(v) for v in wrong.values())
    print(f"{args.out}: {len(wrong)} pairs: the model was wrong on {len(wrong)} of {len(rows)} prompts at least once "
          f"in {args.samples} samples at temperature {args.temperature} ({n_wrong} of {len(sampled)} samples wrong)")


if __name__ == "__main__":
    sys.exit(main())
