#!/usr/bin/env bash
# make demo-choice: the Dec decision head against generative SFT on one task.
#
#   recipes/demo/choice.sh       (from the repo root; DEMO_POCKET=path skips the build)
#
# The category of a product title among 9 fixed answers (make_choice_data.py):
# the same 3,000 training and 200 held-out titles, as choice data and as chats
# whose reply is the category. Both runs start from the same model (the
# pre-trained demo model runs/demo/cpt/best.h5 when `make demo` made one, else
# a fresh init of the demo config) and train with the same budget (steps x
# micro_batch x seq_len, demo-choice.ini and demo-choice-sft.ini). Then: Dec's
# accuracy and calibration, SFT's exact match, and the time to classify one
# held-out title both ways (pocket choose with the prompt in the KV cache,
# pocket generate --chat greedy), averaged over 20 titles. Everything goes
# under runs/demo-choice/; the summary also to runs/demo-choice/summary.txt.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DEMO=recipes/demo
RUN=runs/demo-choice
POCKET=${DEMO_POCKET:-./pocket}
TIMED=20

interrupted=0
trap 'interrupted=1' INT TERM
RUN_NAME=demo-choice
source recipes/lib.sh

if [ -z "${DEMO_POCKET:-}" ]; then make -s -j"$(nproc)"; fi
mkdir -p "$RUN/data" "$RUN/eval"
[ -s "$RUN/data/choice-val.jsonl" ] || python3 $DEMO/make_choice_data.py "$RUN/data"

if [ -s runs/demo/cpt/best.h5 ]; then
    INIT=runs/demo/cpt/best.h5
    start="the pre-trained demo model ($INIT)"
else
    INIT=$RUN/init.h5
    [ -s "$INIT" ] || "$POCKET" init --model $DEMO/config.json --tokenizer $DEMO/tokenizer.json --seed 1234 --out "$INIT"
    start="a fresh init of $DEMO/config.json (no pre-trained demo model: make demo makes one)"
fi
for split in train val; do
    [ -s "$RUN/data/choice-$split.h5" ] ||
        "$POCKET" tokenize --tokenizer "$INIT" --choice "$RUN/data/choice-$split.jsonl" --out "$RUN/data/choice-$split.h5"
    [ -s "$RUN/data/sft-$split.h5" ] ||
        "$POCKET" tokenize --tokenizer "$INIT" --chat "$RUN/data/sft-$split.jsonl" --out "$RUN/data/sft-$split.h5"
    check_interrupt
done

# pocket train with the common start; its time in seconds into $RUN/NAME.time.
train() {
    local name=$1 recipe=$2 t0
    t0=$(date +%s.%N)
    "$POCKET" train "$recipe" --set model.init="$INIT" 2>&1 | tee -a "$RUN/$name.log" |
        grep -v '^step [0-9]*/[0-9]* loss' || true
    check_interrupt
    tail -n 3 "$RUN/$name.log" | grep -q '^done' ||
        { echo "demo-choice: $name training did not finish (see $RUN/$name.log)" >&2; exit 1; }
    awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.0f\n", a - b }' > "$RUN/$name.time"
}
[ -s "$RUN/dec.time" ] || train dec $DEMO/demo-choice.ini
[ -s "$RUN/sft.time" ] || train sft $DEMO/demo-choice-sft.ini
DEC=$RUN/dec/best.h5
SFT=$RUN/sft/best.h5

"$POCKET" eval --ckpt "$DEC" --data "$RUN/data/choice-val.h5" --dump-scores "$RUN/eval/dec-scores.jsonl" |
    tee "$RUN/eval/dec.txt"
"$POCKET" eval --ckpt "$SFT" --data "$RUN/data/sft-val.h5" --seq-len 128 --exact-match 200 | tee "$RUN/eval/sft.txt"
check_interrupt

# One title at a time, as an app asks: the decision head (prompt once in the
# KV cache, then each of the 9 candidates) against greedy generation of the
# reply (prefill, then a token per step until <|im_end|>).
python3 - "$RUN/data/choice-val.jsonl" "$TIMED" > "$RUN/eval/timed.tsv" <<'PY'
import json, sys
for line in open(sys.argv[1]).readlines()[: int(sys.argv[2])]:
    r = json.loads(line)
    print(r["prompt"].replace("\n", "\\n") + "\t" + "\t".join(r["candidates"]))
PY
: > "$RUN/eval/timing.txt"
while IFS=$'\t' read -r -a row; do
    prompt=$(printf '%b' "${row[0]}")
    dec_s=$("$POCKET" choose --ckpt "$DEC" --prompt "$prompt" --candidates "${row[@]:1}" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
    # generate's statistics line: P prompt + N new tokens; prefill and decode rates.
    gen_s=$("$POCKET" generate --ckpt "$SFT" --chat --max-new 16 --prompt "$prompt" 2>&1 >/dev/null |
        sed -n 's/.*: \([0-9]*\) prompt + \([0-9]*\) new tokens.*prefill \([0-9.]*\) tok\/s, decode \([0-9.]*\) tok\/s.*/\1 \2 \3 \4/p' |
        awk '{ printf "%.6f\n", $1 / $3 + ($4 > 0 ? $2 / $4 : 0) }')
    echo "$dec_s $gen_s" >> "$RUN/eval/timing.txt"
    check_interrupt
done < "$RUN/eval/timed.tsv"

acc=$(sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' "$RUN/eval/dec.txt")
ece=$(sed -n 's/.*ECE \([0-9.]*\).*/\1/p' "$RUN/eval/dec.txt")
em=$(sed -n 's/^exact match: \([0-9.]*\)%.*/\1/p' "$RUN/eval/sft.txt")
read -r dec_ms gen_ms < <(awk '{ d += $1; g += $2; n++ } END { printf "%.1f %.1f\n", 1e3 * d / n, 1e3 * g / n }' \
    "$RUN/eval/timing.txt")
{
    echo
    echo "== demo-choice summary: 200 held-out titles, 9 categories; both runs from $start,"
    echo "   $(sed -n 's/^steps = //p' $DEMO/demo-choice.ini) steps of $(sed -n 's/^micro_batch = //p' $DEMO/demo-choice.ini) x $(sed -n 's/^seq_len = //p' $DEMO/demo-choice.ini) tokens"
    printf '%-34s %10s %12s %14s\n' "" "right" "train (s)" "ms per title"
    printf '%-34s %9s%% %12s %14s\n' "Dec (decision head, pocket choose)" "$acc" "$(cat "$RUN/dec.time")" "$dec_ms"
    printf '%-34s %9s%% %12s %14s\n' "SFT (greedy reply, exact match)" "$em" "$(cat "$RUN/sft.time")" "$gen_ms"
    echo "Dec expected calibration error (10 bins): $ece"
    echo "ms per title: the mean over $TIMED held-out titles, model loading excluded, on this machine"
} | tee "$RUN/summary.txt"
