#!/usr/bin/env bash
# make qat-experiment: how much of the int4 round-to-nearest (RTN) loss does
# quantization-aware training (QAT) win back, on the demo corpus?
#
#   recipes/qat-experiment/run.sh        (what `make qat-experiment` runs, from the repo root)
#
# Stages (everything under runs/qat-experiment/):
#   (a) pretrain.ini        12.7M-parameter model from random weights until the
#                           validation loss flattens -> pretrain.h5
#   (b) fp32.ini            from (a), fp32 for a fixed budget: the fair baseline
#   (c) qat-g64.ini         from (a), QAT int4 group 64 asymmetric, same budget
#   (d) qat-g128.ini        ... group 128 asymmetric
#   (e) qat-g64-sym.ini     ... group 64 symmetric
# then full passes over the demo's held-out set (runs/demo/data/cpt-val.h5):
# (b) in fp32 and with RTN on each grid (pocket eval --int4-group/-symmetric),
# each QAT model with its own int4 scales (pocket eval --int4), and writes
# runs/qat-experiment/summary.md. The demo corpus and datasets are made by the
# demo's own stages (recipes/demo/get_corpus.sh, pocket tokenize) when
# runs/demo/data does not hold them yet.
#
# Running it again skips finished stages and resumes an interrupted training;
# `rm -rf runs/qat-experiment` starts over. QATEXP_POCKET=path uses that
# binary and skips the build (for developers).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
EXP=recipes/qat-experiment
RUN=runs/qat-experiment
DEMO_RUN=runs/demo
POCKET=${QATEXP_POCKET:-./pocket}
TOKENIZER=recipes/demo/tokenizer.json
TRAIN_DATA=$DEMO_RUN/data/cpt-train.h5
VAL_DATA=$DEMO_RUN/data/cpt-val.h5
# Evaluation rows as in training: 8 x 256 tokens, attention inside documents.
EVAL_ARGS=(--batch 8 --seq-len 256 --doc-mask)

interrupted=0
trap 'interrupted=1' INT TERM
# check_interrupt, train_logged, loss_of
RUN_NAME=qat-experiment
source recipes/lib.sh

start_all=$(date +%s.%N)
since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
stage() { printf '\n== %s\n' "$1"; }

# pocket train (lib.sh), then a check that it finished.
train() {
    local recipe=$1 log=$2
    train_logged "$recipe" "$log"
    if ! tail -n 3 "$log" | grep -q '^done: '; then
        echo "qat-experiment: $recipe did not finish (see $log); run again to resume" >&2
        exit 1
    fi
}

# The newest checkpoint of a run directory (keep_last = 1: the final one).
final_ckpt() { ls "$1"/ckpt-*.h5 | sort | tail -n 1; }

# pocket eval over the whole validation set, kept in eval/NAME.txt (skipped
# when that is newer than the checkpoint).
evaluate() {
    local name=$1 ckpt=$2
    shift 2
    local out=$RUN/eval/$name.txt
    if [ -s "$out" ] && [ "$out" -nt "$ckpt" ] && [ "$out" -nt "$VAL_DATA" ]; then
        echo "$name: done before: $(tail -n 1 "$out")"
        return
    fi
    mkdir -p "$RUN/eval"
    "$POCKET" eval --ckpt "$ckpt" --data "$VAL_DATA" "${EVAL_ARGS[@]}" "$@" > "$out.tmp"
    check_interrupt
    mv "$out.tmp" "$out"
    echo "$name: $(tail -n 1 "$out")"
}
eval_s_of() { sed -n 's/.*tokens (\([0-9.]*\) s)$/\1/p' "$RUN/eval/$1.txt"; }

# From a run's metrics.jsonl: training seconds (the steps' own times plus the
# evaluations during training, summed over resumed invocations), tokens and
# tokens/s of the steps.
run_stats() {
    awk '
        match($0, /"tokens_per_s":[0-9.e+-]+/) { tps = substr($0, RSTART + 15, RLENGTH - 15) + 0 }
        match($0, /"tokens":[0-9]+/) { tok = substr($0, RSTART + 9, RLENGTH - 9) + 0 }
        /"tokens_per_s"/ { dt = (tok - prev) / tps; step_s += dt; prev = tok }
        match($0, /"eval_s":[0-9.e+-]+/) { eval_s += substr($0, RSTART + 9, RLENGTH - 9) }
        END { printf "%.0f %d %.0f\n", step_s + eval_s, prev, prev / step_s }' "$1/metrics.jsonl"
}

# ---------------------------------------------------------------------------
stage "build"
if [ -n "${QATEXP_POCKET:-}" ]; then
    echo "using $POCKET (QATEXP_POCKET set: not building)"
else
    make -s deps
    make -s -j"$(nproc)"
fi

stage "data (the demo's corpus and tokenizer)"
if [ -s "$TRAIN_DATA" ] && [ -s "$VAL_DATA" ]; then
    echo "done before: $TRAIN_DATA, $VAL_DATA"
else
    # The demo's corpus stage, then its two pre-training datasets.
    bash recipes/demo/get_corpus.sh "$DEMO_RUN/corpus"
    mkdir -p "$DEMO_RUN/data"
    [ -s "$TRAIN_DATA" ] || "$POCKET" tokenize --tokenizer "$TOKENIZER" "$DEMO_RUN/corpus/train" --out "$TRAIN_DATA"
    [ -s "$VAL_DATA" ] || "$POCKET" tokenize --tokenizer "$TOKENIZER" "$DEMO_RUN/corpus/val" --out "$VAL_DATA"
    check_interrupt
    # what recipes/demo/run.sh records for the datasets it finds
    [ -f "$DEMO_RUN/tokenizer.sha256" ] || sha256sum "$TOKENIZER" | cut -c1-64 > "$DEMO_RUN/tokenizer.sha256"
fi
mkdir -p "$RUN"

stage "(a) pre-training (pretrain.ini)"
train $EXP/pretrain.ini "$RUN/pretrain.log"
# One stable name for the starting point of (b)-(e) (a hard link: the run
# directory may delete its own name later).
PRETRAINED=$RUN/pretrain.h5
src=$(final_ckpt "$RUN/pretrain")
if ! [ "$PRETRAINED" -ef "$src" ]; then ln -f "$src" "$PRETRAINED"; fi
echo "$PRETRAINED = $src"

RUNS=(fp32 qat-g64 qat-g128 qat-g64-sym)
for r in "${RUNS[@]}"; do
    stage "($r) from pretrain.h5 ($r.ini)"
    train "$EXP/$r.ini" "$RUN/$r.log"
done

stage "evaluation on $VAL_DATA (whole set)"
evaluate pretrain-fp32 "$PRETRAINED"
evaluate pretrain-rtn-g64 "$PRETRAINED" --int4-group 64
FP32=$(final_ckpt "$RUN/fp32")
evaluate fp32 "$FP32"
evaluate rtn-g64 "$FP32" --int4-group 64
evaluate rtn-g128 "$FP32" --int4-group 128
evaluate rtn-g64-sym "$FP32" --int4-group 64 --int4-symmetric
for r in qat-g64 qat-g128 qat-g64-sym; do
    evaluate "$r" "$(final_ckpt "$RUN/$r")" --int4
done

# ---------------------------------------------------------------------------
read -r pre_s pre_tok pre_tps <<< "$(run_stats "$RUN/pretrain")"
read -r fp_s fp_tok fp_tps <<< "$(run_stats "$RUN/fp32")"
fp32_loss=$(loss_of fp32)
row() {   # setting, rtn eval, qat eval, qat run
    local rtn qat s tok tps
    rtn=$(loss_of "$2")
    qat=$(loss_of "$3")
    read -r s tok tps <<< "$(run_stats "$RUN/$4")"
    awk -v name="$1" -v f="$fp32_loss" -v r="$rtn" -v q="$qat" -v s="$s" -v tps="$tps" 'BEGIN {
        printf "| %s | %.4f | %.4f | %.4f | %.4f | **%.0f%%** | %.0f s (%.0f tokens/s) |\n",
               name, f, r, q, r - f, 100 * (r - q) / (r - f), s, tps }'
}
{
    echo "# QAT experiment: int4 RTN vs QAT ($(date -u +%Y-%m-%d))"
    echo
    echo "Model: recipes/qat-experiment/config.json, $(sed -n 's/.*params \([0-9.]*M\).*/\1/p' "$RUN/pretrain.log" | head -n 1) parameters."
    echo "Held-out loss over the whole of $VAL_DATA ($(sed -n 's/.* over \([0-9]*\) tokens.*/\1/p' "$RUN/eval/fp32.txt") tokens, rows of 256, document mask)."
    echo "Budget after pre-training: $fp_tok tokens for the fp32 baseline and for each QAT run."
    echo
    echo "| setting | fp32 | RTN int4 | QAT int4 | RTN gap | recovered by QAT | QAT run time |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    row "group 64, asymmetric" rtn-g64 qat-g64 qat-g64
    row "group 128, asymmetric" rtn-g128 qat-g128 qat-g128
    row "group 64, symmetric" rtn-g64-sym qat-g64-sym qat-g64-sym
    echo
    echo "fp32 = (b) the pre-trained model trained on in fp32 for the same budget; RTN = (b) rounded to"
    echo "nearest on that grid (pocket eval --int4-group/--int4-symmetric); QAT = (c)-(e) with their own"
    echo "int4 scales (pocket eval --int4); recovered = (RTN - QAT) / (RTN - fp32)."
    echo
    printf 'Pre-trained model (a): fp32 %.4f, RTN int4 g64 %.4f; %s tokens in %s s (%s tokens/s).\n' \
        "$(loss_of pretrain-fp32)" "$(loss_of pretrain-rtn-g64)" "$pre_tok" "$pre_s" "$pre_tps"
    printf 'Its validation loss during training (%s): %s.\n' "16k tokens per evaluation" \
        "$(sed -n 's/.*"step":\([0-9]*\),"val_loss":\([0-9.]*\).*/step \1 \2/p' "$RUN/pretrain/metrics.jsonl" | tail -n 4 | paste -sd, - | sed 's/,/, /g')"
    printf 'fp32 baseline (b): %s s (%s tokens/s).\n' "$fp_s" "$fp_tps"
    eval_total=0
    for f in "$RUN"/eval/*.txt; do
        eval_total=$(awk -v a="$eval_total" -v b="$(eval_s_of "$(basename "$f" .txt)")" 'BEGIN { print a + b }')
    done
    printf 'Final evaluations: %.0f s. Wall time of this invocation of run.sh: %s s (stages done before take ~0 s).\n' \
        "$eval_total" "$(since "$start_all")"
} > "$RUN/summary.md.tmp"
mv "$RUN/summary.md.tmp" "$RUN/summary.md"
echo
cat "$RUN/summary.md"
