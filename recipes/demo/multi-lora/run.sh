#!/usr/bin/env bash
# Multi-LoRA on the phone runtime: two adapters trained on two demo tasks,
# loaded into one MNN process over one base package, each answering its own
# task as it does alone. Run after `make demo` (it needs runs/demo/cpt and the
# demo's data) and `make check` (MNN in tests/.venv):
#
#     bash recipes/demo/multi-lora/run.sh
#
#   task A  product title -> JSON attributes (the demo's SFT task, recipes/demo/demo-lora.ini)
#   task B  product title -> "department: brand" (make_department_data.py here)
#
# Both are QLoRA adapters (rank 16, every projection) on the int4 model of
# runs/demo/cpt/best.h5; the package is exported once (greedy sampler) and
# each adapter as its own .mnn beside it. Prints the exact match on 200
# held-out examples per task: `pocket eval --int4 --lora`, MNN with the
# adapter alone, MNN with both loaded and switched at every example.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
RUN=runs/demo
HERE=recipes/demo/multi-lora
POCKET=${DEMO_POCKET:-./pocket}
PY=tests/.venv/bin/python
BASE=$RUN/cpt/best.h5
N=${EXACT_MATCH_EXAMPLES:-200}
[ -s "$BASE" ] || { echo "multi-lora: $BASE is missing: run make demo first" >&2; exit 1; }

[ -s $RUN/dept-data/val.jsonl ] || python3 $HERE/make_department_data.py $RUN/dept-data
for split in train val; do
    [ -s $RUN/data/dept-$split.h5 ] ||
        "$POCKET" tokenize --tokenizer recipes/demo/tokenizer.json --chat $RUN/dept-data/$split.jsonl \
            --out $RUN/data/dept-$split.h5
done

# Both adapters with demo-lora.ini's settings, LORA_STEPS steps (default 1500:
# its 500 leave these adapters far from converged), each in its own run
# directory; training resumes or skips what is done.
STEPS=${LORA_STEPS:-1500}
OUT=$RUN/multi-lora
"$POCKET" train recipes/demo/demo-lora.ini --set train.steps=$STEPS --set train.run_dir=$OUT/attributes
"$POCKET" train recipes/demo/demo-lora.ini --set train.steps=$STEPS --set train.run_dir=$OUT/department \
    --set data.train=$RUN/data/dept-train.h5 --set data.val=$RUN/data/dept-val.h5
A=$(ls $OUT/attributes/ckpt-*.h5 | sort | tail -n 1)
B=$(ls $OUT/department/ckpt-*.h5 | sort | tail -n 1)

for t in "A $A $RUN/data/sft-val.h5" "B $B $RUN/data/dept-val.h5"; do
    set -- $t
    echo "task $1, pocket eval --int4 --lora $2:"
    "$POCKET" eval --ckpt "$BASE" --int4 --lora "$2" --data "$3" --seq-len 128 --exact-match "$N" | grep "exact match"
done

PKG=$OUT/package
"$POCKET" export --ckpt "$BASE" --format mnn --sampler greedy --out $PKG --force
"$POCKET" export --ckpt "$BASE" --format mnn --lora "$A" --out $PKG/attributes.mnn --force
"$POCKET" export --ckpt "$BASE" --format mnn --lora "$B" --out $PKG/department.mnn --force
$PY $HERE/mnn_exact_match.py $PKG "$N" attributes.mnn:$RUN/data/sft-val.h5 department.mnn:$RUN/data/dept-val.h5
