#!/usr/bin/env bash
# What each [distill] source costs on SmolLM2-135M-Instruct (vocabulary 49,152)
# in qat.ini's run (QAT g64, 2 x 512 tokens a step, bf16 matmuls): STEPS steps
# with the teacher's forward in every step (source = forward) and on the
# teacher's top-k logits precomputed by pocket teacher-topk (source = topk),
# plus the precomputation: tokens/s of the steps, wall seconds, peak resident
# memory (GNU time) and the top-k dataset's size. Both runs read the same small
# slice of the training text (the first LINES documents of make bench-qat's
# corpus, BENCH_QAT_DIR, default runs/qat-bench). Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${BENCH_QAT_DIR:-runs/qat-bench}
STEPS=${STEPS:-20}
K=${K:-64}
LINES=${LINES:-12}
W=$OUT/distill-cost
POCKET=./pocket
[ -x /usr/bin/time ] || { echo "distill_cost.sh: needs GNU time (/usr/bin/time; Debian package time)" >&2; exit 1; }
rm -rf "$W" && mkdir -p "$W"
lscpu | grep -E "^Model name|^CPU\(s\):"

# timed NAME CMD...: the command's wall seconds and peak resident kB into $W/NAME.time
timed() {
    local name=$1
    shift
    echo "distill_cost: $name"
    /usr/bin/time -f "%e %M" -o "$W/$name.time" "$@" > "$W/$name.log" 2>&1 || { tail -n 5 "$W/$name.log"; exit 1; }
}
head -n "$LINES" "$OUT/corpus/train.jsonl" > "$W/rows.jsonl"
$POCKET tokenize --tokenizer "$OUT/float.h5" "$W/rows.jsonl" --out "$W/rows.h5" > /dev/null
run=(recipes/qat-bench/qat.ini --set model.init="$OUT/float.h5" --set data.val="$OUT/val.h5"
     --set train.steps="$STEPS" --set train.eval_interval=0 --set train.save_interval=0)
timed forward $POCKET train "${run[@]}" --set data.train="$W/rows.h5" --set train.run_dir="$W/run-forward"
timed topk-precompute $POCKET teacher-topk --teacher "$OUT/float.h5" --data "$W/rows.h5" --out "$W/topk.h5" \
    --k "$K" --seq-len 512 --batch 2 --matmul bf16
timed topk $POCKET train "${run[@]}" --set data.train="$W/topk.h5" --set distill.source=topk \
    --set train.run_dir="$W/run-topk"
python3 - "$W" "$STEPS" "$K" <<'PY'
import json, os, re, statistics, sys
w, steps, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def cost(name):
    sec, kb = open(f"{w}/{name}.time").read().split()
    return float(sec), int(kb) / 2**20
def step_rate(name):
    rows = [json.loads(l) for l in open(f"{w}/run-{name}/metrics.jsonl")]
    return statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > 1)
tokens = re.search(r"over (\d+) of its", open(f"{w}/topk-precompute.log").read())
print(f"\n[distill] source, {steps} steps of 2 x 512 tokens (QAT g64, bf16 matmuls), k = {k}:\n")
print("| what | tokens/s (median step) | wall s | peak memory | extra disk |")
print("| --- | --- | --- | --- | --- |")
for name, label in [("forward", "QAT run, source = forward"), ("topk", "QAT run, source = topk")]:
    sec, gib = cost(name)
    print(f"| {label} | {step_rate(name):.0f} | {sec:.0f} | {gib:.2f} GiB | |")
sec, gib = cost("topk-precompute")
size = os.path.getsize(f"{w}/topk.h5") / 2**20
n = int(tokens.group(1)) if tokens else 0
print(f"| pocket teacher-topk over the same text ({n} tokens) | {n / sec:.0f} (whole command) "
      f"| {sec:.0f} | {gib:.2f} GiB | {size:.1f} MiB |")
PY
