#!/usr/bin/env bash
# tests/bench_shared.sh POCKET CKPT: tokens/s of `pocket generate` (decode) and
# of SFT training steps with the machine to ourselves and with one CPU-bound
# process beside them (a shell busy loop), under three OpenMP waits: libgomp's
# default (OMP_WAIT_POLICY=ACTIVE stands in: pocket sets PASSIVE when nothing
# is set), a short spin (GOMP_SPINCOUNT=1000) and pocket's passive one.
# CKPT: a checkpoint with a tokenizer (e.g. the SmolLM2 import).
set -euo pipefail
POCKET=$1 CKPT=$2
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

echo "| | decode tokens/s | training tokens/s |"
echo "| --- | --- | --- |"
for load in alone busy; do
    [ $load = busy ] && hog_on
    for wait in "spin (ACTIVE):OMP_WAIT_POLICY=ACTIVE" "short spin:GOMP_SPINCOUNT=1000" "pocket's passive wait:"; do
        env="OMP_NUM_THREADS=2 ${wait#*:}"
        echo "| $load, ${wait%%:*} | $(decode "$POCKET" "$env") | $(train "$POCKET" "$env") |"
    done
    [ $load = busy ] && hog_off
done
