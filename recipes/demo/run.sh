#!/usr/bin/env bash
# make demo: from a fresh Debian machine to a fine-tuned model, in one go.
#
#   recipes/demo/run.sh          (what `make demo` runs, from the repo root)
#
# Stages: Debian dependencies, build, corpus (Debian packages, CORPUS.md),
# SFT data (make_sft_data.py), tokenize, init, eval, pre-train (demo-cpt.ini),
# eval, fine-tune (demo-sft.ini), eval, summary. Everything goes under
# runs/demo/. Running it again skips the finished stages (training resumes
# from its last checkpoint); `rm -rf runs/demo` starts over. Each stage
# prints its time; the summary is also written to runs/demo/summary.txt.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DEMO=recipes/demo
RUN=runs/demo
# DEMO_POCKET=path: use that binary and skip the build (for developers).
POCKET=${DEMO_POCKET:-./pocket}
TOKENIZER=$DEMO/tokenizer.json
EXACT_MATCH_EXAMPLES=200

interrupted=0
trap 'interrupted=1' INT TERM

demo_start=$(date +%s.%N)
timings=()
stage_name=""
stage_start=0
stage() {
    stage_end
    stage_name=$1
    stage_start=$(date +%s.%N)
    printf '\n== %s\n' "$stage_name"
}
stage_end() {
    if [ -n "$stage_name" ]; then
        local dt
        dt=$(awk -v a="$(date +%s.%N)" -v b="$stage_start" 'BEGIN { print a - b }')
        printf -- '-- %s: %.1f s\n' "$stage_name" "$dt"
        timings+=("$(printf '%-28s %7.1f s' "$stage_name" "$dt")")
        stage_name=""
    fi
}
# check_interrupt, train_logged, loss_of, ppl_of
RUN_NAME=demo
source recipes/lib.sh

train() {
    train_logged "$1" "$2"
    if tail -n 5 "$2" | grep -q '^interrupted'; then
        echo "demo: training was interrupted; run it again to resume" >&2
        exit 130
    fi
}

# pocket eval, its output kept in runs/demo/eval/NAME.txt (skipped when
# that is newer than the checkpoint and the data).
evaluate() {
    local name=$1 ckpt=$2 data=$3
    shift 3
    local out=$RUN/eval/$name.txt
    if [ -s "$out" ] && [ "$out" -nt "$ckpt" ] && [ "$out" -nt "$data" ]; then
        echo "$name: done before"
        cat "$out"
        return
    fi
    mkdir -p "$RUN/eval"
    "$POCKET" eval --ckpt "$ckpt" --data "$data" "$@" > "$out.tmp"
    check_interrupt
    mv "$out.tmp" "$out"
    cat "$out"
}
em_of() { sed -n 's/^exact match: \([0-9.]*\)%.*/\1/p' "$RUN/eval/$1.txt"; }

# ---------------------------------------------------------------------------
stage "dependencies"
# The Makefile's deps target installs the missing Debian packages (as root):
# compiler, libraries, python3.
make -s deps
for tool in gcc python3 awk apt-get dpkg sha256sum; do
    command -v "$tool" >/dev/null || {
        echo "demo: '$tool' is missing; the demo needs Debian (or Ubuntu) with make deps done as root" >&2
        exit 1
    }
done

stage "build"
if [ -n "${DEMO_POCKET:-}" ]; then
    echo "using $DEMO_POCKET (DEMO_POCKET set: not building)"
else
    make -s -j"$(nproc)"
fi

stage "corpus"
bash $DEMO/get_corpus.sh "$RUN/corpus"

stage "SFT data"
if [ -s "$RUN/sft-data/train.jsonl" ] && [ -s "$RUN/sft-data/val.jsonl" ]; then
    echo "done before: $RUN/sft-data"
else
    python3 $DEMO/make_sft_data.py "$RUN/sft-data"
fi

# Everything below depends on the tokenizer: a changed tokenizer.json
# invalidates the datasets, checkpoints and evaluations.
tok_sum=$(sha256sum "$TOKENIZER" | cut -c1-64)
if [ -f "$RUN/tokenizer.sha256" ] && [ "$(cat "$RUN/tokenizer.sha256")" != "$tok_sum" ]; then
    echo "demo: $TOKENIZER changed; removing the old datasets and runs"
    rm -rf "$RUN/data" "$RUN/init.h5" "$RUN/cpt" "$RUN/sft" "$RUN/eval" "$RUN"/*.log
fi
mkdir -p "$RUN/data"
echo "$tok_sum" > "$RUN/tokenizer.sha256"

stage "tokenize"
tokenize() {
    local out=$1
    shift
    if [ -s "$out" ]; then echo "done before: $out"; return; fi
    "$POCKET" tokenize --tokenizer "$TOKENIZER" "$@" --out "$out"
    check_interrupt
}
tokenize "$RUN/data/cpt-train.h5" "$RUN/corpus/train"
tokenize "$RUN/data/cpt-val.h5" "$RUN/corpus/val"
tokenize "$RUN/data/sft-train.h5" --chat "$RUN/sft-data/train.jsonl"
tokenize "$RUN/data/sft-val.h5" --chat "$RUN/sft-data/val.jsonl"

stage "init"
if [ -s "$RUN/init.h5" ]; then
    echo "done before: $RUN/init.h5"
else
    "$POCKET" init --model $DEMO/config.json --tokenizer "$TOKENIZER" --seed 1234 --out "$RUN/init.h5"
fi

stage "eval before pre-training"
evaluate cpt-before "$RUN/init.h5" "$RUN/data/cpt-val.h5"

stage "pre-training (demo-cpt.ini)"
train $DEMO/demo-cpt.ini "$RUN/cpt.log"
CPT_CKPT=$RUN/cpt/best.h5

stage "eval after pre-training"
evaluate cpt-after "$CPT_CKPT" "$RUN/data/cpt-val.h5"
# SFT rows are short: 128 positions hold any example whole.
evaluate sft-before "$CPT_CKPT" "$RUN/data/sft-val.h5" --seq-len 128 --exact-match $EXACT_MATCH_EXAMPLES

stage "fine-tuning (demo-sft.ini)"
train $DEMO/demo-sft.ini "$RUN/sft.log"
SFT_CKPT=$(ls "$RUN"/sft/ckpt-*.h5 | sort | tail -n 1)

stage "eval after fine-tuning"
evaluate sft-after "$SFT_CKPT" "$RUN/data/sft-val.h5" --seq-len 128 --exact-match $EXACT_MATCH_EXAMPLES
stage_end

# ---------------------------------------------------------------------------
total=$(awk -v a="$(date +%s.%N)" -v b="$demo_start" 'BEGIN { print a - b }')
gain=$(awk -v a="$(em_of sft-after)" -v b="$(em_of sft-before)" 'BEGIN { printf "%.1f", a - b }')
{
    echo
    echo "== demo summary (validation sets: $RUN/data/cpt-val.h5, $RUN/data/sft-val.h5)"
    printf '%-34s %10s %12s %12s\n' "" "val loss" "perplexity" "exact match"
    printf '%-34s %10s %12s %12s\n' "pre-training, before (random init)" "$(loss_of cpt-before)" "$(ppl_of cpt-before)" "-"
    printf '%-34s %10s %12s %12s\n' "pre-training, after" "$(loss_of cpt-after)" "$(ppl_of cpt-after)" "-"
    printf '%-34s %10s %12s %11s%%\n' "SFT task, before fine-tuning" "$(loss_of sft-before)" "$(ppl_of sft-before)" \
        "$(em_of sft-before)"
    printf '%-34s %10s %12s %11s%%\n' "SFT task, after fine-tuning" "$(loss_of sft-after)" "$(ppl_of sft-after)" \
        "$(em_of sft-after)"
    echo "exact-match gain on $EXACT_MATCH_EXAMPLES held-out titles: +$gain points"
    echo
    echo "stage times (this run; stages done before take ~0 s):"
    printf '  %s\n' "${timings[@]}"
    printf '  %-28s %7.1f s\n' "total" "$total"
    echo
    echo "checkpoints: $CPT_CKPT (pre-trained), $SFT_CKPT (fine-tuned)"
} | tee "$RUN/summary.txt"

# One title the model has never seen, as a user would try it.
prompt=$'从商品标题中提取属性，输出JSON：\n小米 12GB+256GB 午夜蓝 手机 5G 官方正品'
echo
echo "try it: $POCKET generate --ckpt $SFT_CKPT --chat --prompt \$'${prompt//$'\n'/\\n}'"
"$POCKET" generate --ckpt "$SFT_CKPT" --chat --max-new 64 --prompt "$prompt" 2>/dev/null
echo
