#!/usr/bin/env python3
"""TRL's DPOTrainer on the tour's preference pairs, with the hyperparameters of recipes/tour/dpo.ini: the
reference framework measured beside pocket (recipes/tour/dpo.sh).

    PY=tests/.venv/bin/python
    $PY recipes/tour/dpo_trl.py --model HF_DIR --train PAIRS.jsonl --val PAIRS_VAL.jsonl --out RESULT.json
        [--steps N] [--batch 4] [--accum 2] [--lr 1e-5] [--beta 0.1] [--sft-weight 0] [--warmup 5] [--threads 2]

HF_DIR is the SFT checkpoint exported by pocket export --format hf (the model pocket's run starts from, in
float32). The reference is a frozen copy of it run beside the policy (TRL's default; --precompute: its
log-probabilities computed once first, as pocket does); AdamW with betas (0.9, 0.999), eps 1e-8, no weight decay,
gradient clipping at 1, linear warmup then cosine to 0, float32 on the CPU. --sft-weight W > 0 adds TRL's "sft" loss
type weighted W (loss_type ["sigmoid", "sft"], loss_weights [1, W]), as the recipe's [preference] sft_weight. Writes the wall time of the training,
the process's peak resident memory and TRL's evaluation metrics on the held-out pairs (eval_rewards/accuracies,
eval_rewards/margins, ...) as JSON.
"""
import argparse
import json
import resource
import sys
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer


def load(path):
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    return Dataset.from_list(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--sft-weight", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--precompute", action="store_true", help="precompute the reference log-probabilities")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    losses = {"loss_type": ["sigmoid"]}
    if args.sft_weight > 0:
        losses = {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, args.sft_weight]}

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    cfg = DPOConfig(output_dir=tempfile.mkdtemp(), max_steps=args.steps, per_device_train_batch_size=args.batch,
                    gradient_accumulation_steps=args.accum, per_device_eval_batch_size=1,
                    learning_rate=args.lr, lr_scheduler_type="cosine", warmup_steps=args.warmup, weight_decay=0.0,
                    adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0, beta=args.beta,
                    max_length=args.max_length, precompute_ref_log_probs=args.precompute,
                    bf16=False, fp16=False, use_cpu=True, seed=args.seed, logging_steps=10, eval_strategy="no",
                    save_strategy="no", report_to=[], dataloader_num_workers=0, **losses)
    trainer = DPOTrainer(model=model, args=cfg, train_dataset=load(args.train), eval_dataset=load(args.val),
                         processing_class=tok)
    t0 = time.time()
    trainer.train()
    seconds = time.time() - t0
    metrics = trainer.evaluate()
    result = {"train_seconds": seconds, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "steps": args.steps, "pairs_per_step": args.batch * args.accum, "lr": args.lr, "beta": args.beta,
              "sft_weight": args.sft_weight,
              "precompute_ref_log_probs": args.precompute,
              "torch": torch.__version__, "threads": args.threads,
              "eval": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
