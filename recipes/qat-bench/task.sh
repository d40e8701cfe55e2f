#!/usr/bin/env bash
# The task half of make bench-qat (run.sh calls it after the text tables):
# SmolLM2-135M-Instruct fine-tuned on the demo's business task (product title
# -> JSON attributes, recipes/demo/make_sft_data.py: 3000 training and 200
# held-out titles), then shipped as int4 three ways -- RTN, llmexport --hqq,
# and pocket QAT on the task's data distilled from the fine-tuned model -- each
# package's exact match on the 200 held-out titles in the MNN runtime
# (tests/mnn_exact_match.py, memory normal), beside the fine-tuned float
# model's (pocket eval --exact-match, fp32). Every stage is skipped when its
# output exists. Environment as run.sh (BENCH_QAT_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${BENCH_QAT_DIR:-runs/qat-bench}/task
FLOAT=${BENCH_QAT_DIR:-runs/qat-bench}/float.h5
POCKET=./pocket
PY=tests/.venv/bin/python
HERE=recipes/qat-bench
mkdir -p "$OUT/results"
log() { echo "bench-qat task: $*"; }

[ -f "$OUT/data/val.jsonl" ] || python3 recipes/demo/make_sft_data.py "$OUT/data" --train 3000 --val 200
for split in train val; do
    [ -f "$OUT/sft-$split.h5" ] ||
        $POCKET tokenize --chat --tokenizer "$FLOAT" "$OUT/data/$split.jsonl" --out "$OUT/sft-$split.h5"
done

# the fine-tuned float model
if [ ! -f "$OUT/sft/done" ]; then
    $POCKET train $HERE/task-sft.ini --set model.init="$FLOAT" --set data.train="$OUT/sft-train.h5" \
        --set data.val="$OUT/sft-val.h5" --set train.run_dir="$OUT/sft"
    touch "$OUT/sft/done"
fi
SFT=$(ls "$OUT/sft"/ckpt-*.h5 | tail -n 1)
[ -f "$OUT/results/float.txt" ] ||
    $POCKET eval --ckpt "$SFT" --data "$OUT/sft-val.h5" --exact-match 200 --max-batches 1 > "$OUT/results/float.txt"

# exact SUFFIX PACKAGE: the package's exact match in the runtime
exact() {
    [ -f "$OUT/results/$1.json" ] && return 0
    log "exact match of $1 in the MNN runtime"
    $PY tests/mnn_exact_match.py --package "$2" --data "$OUT/sft-val.h5" --n 200 --json "$OUT/results/$1.json"
}

# RTN of the fine-tuned model
[ -f "$OUT/rtn.h5" ] || $POCKET quantize --ckpt "$SFT" --group 64 --out "$OUT/rtn.h5"
[ -f "$OUT/rtn-mnn/llm.mnn.weight" ] || $POCKET export --ckpt "$OUT/rtn.h5" --format mnn --out "$OUT/rtn-mnn" >/dev/null
exact rtn "$OUT/rtn-mnn"

# llmexport --hqq on its HF export
[ -d "$OUT/sft-hf" ] || $POCKET export --ckpt "$SFT" --format hf --out "$OUT/sft-hf"
if [ ! -f "$OUT/llmexport-hqq/llm.mnn.weight" ]; then
    (cd "$OUT" && "$ROOT/$PY" "$ROOT/tests/llmexport_run.py" --path sft-hf --export mnn --dst_path llmexport-hqq \
        --quant_bit 4 --quant_block 64 --hqq > llmexport-hqq.log 2>&1) || { tail -n 20 "$OUT/llmexport-hqq.log"; exit 1; }
fi
exact llmexport-hqq "$OUT/llmexport-hqq"

# pocket QAT on the task's data, distilled from the fine-tuned model (the default teacher: model.init)
if [ ! -f "$OUT/qat/done" ]; then
    $POCKET train $HERE/task-qat.ini --set model.init="$SFT" --set data.train="$OUT/sft-train.h5" \
        --set data.val="$OUT/sft-val.h5" --set train.run_dir="$OUT/qat"
    touch "$OUT/qat/done"
fi
[ -f "$OUT/qat-mnn/llm.mnn.weight" ] ||
    $POCKET export --ckpt "$(ls "$OUT/qat"/ckpt-*.h5 | tail -n 1)" --format mnn --out "$OUT/qat-mnn" >/dev/null
exact qat "$OUT/qat-mnn"

$PY - "$OUT/results" <<'PY'
import json, re, sys
from pathlib import Path
d = Path(sys.argv[1])
float_em = re.search(r"exact match: ([0-9.]+)% of (\d+)", (d / "float.txt").read_text())
print("\nThe task (product title -> JSON attributes), 200 held-out titles, exact match:\n")
print("| model | exact match |")
print("| --- | --- |")
print(f"| fine-tuned float model (pocket eval, fp32) | {float(float_em.group(1)):.1f}% |")
for name, label in [("rtn", "RTN (pocket quantize), MNN runtime"), ("llmexport-hqq", "llmexport --hqq, MNN runtime"),
                    ("qat", "pocket QAT distilled from the fine-tuned model, MNN runtime")]:
    r = json.loads((d / f"{name}.json").read_text())
    print(f"| {label} | {100 * r['exact_match']:.1f}% |")
PY
