#!/usr/bin/env bash
# tests/bench_shared.sh POCKET CKPT [POCKET_BEFORE]: tokens/s of `pocket generate`
# (decode) and of SFT training steps with the machine to ourselves and with
# one CPU-bound process beside them (a shell busy loop), with OpenMP's default
# wait policy (OMP_WAIT_POLICY unset in a pocket that does not set it, i.e.
# POCKET_BEFORE; else ACTIVE as the nearest stand-in) and with pocket's
# passive one. CKPT: a checkpoint with a tokenizer (e.g. the SmolLM2 import).
set -euo pipefail
POCKET=$1 CKPT=$2 BEFORE=${3:-}
WORK=$(mktemp -d)
trap 'kill $HOG 2>/dev/null || true; rm -rf "$WORK"' EXIT
HOG=
hog_on() { ( while :; do :; done ) & HOG=$!; }
hog_off() { kill $HOG 2>/dev/null || true; wait $HOG 2>/dev/null || true; HOG=; }

decode() {   # binary, env -> decode tok/s
    env $2 "$1" generate --ckpt "$CKPT" --int4 --chat --prompt "Tell me a long story about a lighthouse." \
        --max-new 48 --ids 2>&1 >/dev/null | sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p'
}

printf '{"messages": [{"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Blue, like the sea on a clear summer morning."}]}\n%.0s' $(seq 8) >"$WORK/chat.jsonl"
"$POCKET" tokenize --chat --tokenizer "$CKPT" "$WORK/chat.jsonl" --out "$WORK/sft.h5" >/dev/null
cat >"$WORK/r.ini" <<INI
[model]
init = $CKPT
[data]
train = $WORK/sft.h5
[train]
mode = sft
micro_batch = 2
seq_len = 64
steps = 40
eval_interval = 0
save_interval = 0
threads = 2
[optim]
lr = 1e-5
warmup = 1
INI
train() {   # binary, env -> mean tokens/s of steps 2..4 (stopped there: the final checkpoint is not timed)
    rm -rf "$WORK/run"
    env $2 "$1" train "$WORK/r.ini" --set train.run_dir="$WORK/run" >/dev/null 2>&1 &
    local pid=$!
    until [ "$(cat "$WORK/run/metrics.jsonl" 2>/dev/null | wc -l)" -ge 4 ]; do sleep 0.2; done
    kill $pid; wait $pid 2>/dev/null || true
    grep -o '"tokens_per_s": *[0-9.]*' "$WORK/run/metrics.jsonl" | sed -n 2,4p | awk -F: '{s += $2} END {printf "%.1f", s / NR}'
}

DEFAULT_BIN=${BEFORE:-$POCKET} DEFAULT_ENV=${BEFORE:+OMP_NUM_THREADS=2}
[ -n "$BEFORE" ] || DEFAULT_ENV="OMP_WAIT_POLICY=ACTIVE"
echo "| | decode tokens/s | training tokens/s |"
echo "| --- | --- | --- |"
for load in alone busy; do
    [ $load = busy ] && hog_on
    echo "| $load, OpenMP default wait | $(decode "$DEFAULT_BIN" "$DEFAULT_ENV") | $(train "$DEFAULT_BIN" "$DEFAULT_ENV") |"
    echo "| $load, pocket (passive wait) | $(decode "$POCKET" OMP_NUM_THREADS=2) | $(train "$POCKET" OMP_NUM_THREADS=2) |"
    [ $load = busy ] && hog_off
done
