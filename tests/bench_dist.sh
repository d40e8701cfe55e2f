#!/usr/bin/env bash
# tests/bench_dist.sh: data-parallel training of pocket-0.3b on this machine,
# in one run: 1 rank x 2 threads (grad_accum 2) against 2 ranks x 1 thread
# (micro-batch 1 each: the same global batch), at T=512. Prints tokens/s,
# the seconds of each step spent in communication (waiting included), the
# bytes each rank sends a step, the peak RSS of every rank (its share of the
# AdamW state halves), and from those the all-reduce time and the scaling
# efficiency on 10, 25 and 100 Gb/s networks for 2 to 64 machines.
#
# usage: tests/bench_dist.sh POCKET_BUILT_WITH_MPI [WORK_DIR]   (make bench runs it)
set -euo pipefail
POCKET=${1:?an MPI-built pocket (make MPI=1)}
WORK=${2:-/tmp/pocket-bench-dist}
HERE=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_DIST_STEPS:-5}
mkdir -p "$WORK"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
"$POCKET" tokenize --tokenizer "$HERE/recipes/demo/tokenizer.json" "$HERE/tests/fixtures/tok/corpus.txt" \
    --out "$WORK/cpt.h5" >/dev/null
cat >"$WORK/bench.ini" <<EOF
[model]
init = pocket-0.3b
tokenizer = $HERE/recipes/demo/tokenizer.json
[data]
train = $WORK/cpt.h5
[train]
mode = cpt
micro_batch = 1
seq_len = 512
steps = $STEPS
save_interval = 0
keep_last = 1
[optim]
warmup = 1
EOF

# run NAME RANKS THREADS ACCUM: trains, prints each rank's peak RSS (GB).
run() {
    local name=$1 ranks=$2 threads=$3 accum=$4 launch=""
    rm -rf "$WORK/$name"
    [ "$ranks" -gt 1 ] && launch="mpirun --allow-run-as-root --oversubscribe -np $ranks"
    OMP_NUM_THREADS=$threads $launch /usr/bin/time -f "peak_rss_kb %M" "$POCKET" train "$WORK/bench.ini" \
        --set train.run_dir="$WORK/$name" --set train.threads="$threads" --set train.grad_accum="$accum" \
        >"$WORK/$name.log" 2>&1
}

# The mean of a metric over the steps after the first (warm-up) one.
mean_metric() {
    grep -o "\"$2\":[0-9.e+-]*" "$WORK/$1/metrics.jsonl" | tail -n +2 | cut -d: -f2 |
        awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n; else print "-" }'
}

run one 1 2 2
run one-mb 1 2 1   # the memory of one rank with the same micro-batch and no accumulation buffer
run two 2 1 1
one_tok=$(mean_metric one tokens_per_s)
two_tok=$(mean_metric two tokens_per_s)
comm=$(mean_metric two comm_s)
step=$(awk -v t="$two_tok" 'BEGIN { printf "%.3f", 1024 / t }')
sent=$(grep -o 'sends [0-9.]* MiB a step' "$WORK/two.log" | grep -o '[0-9.]*')
rss_one=$(grep -o 'peak_rss_kb [0-9]*' "$WORK/one.log" | awk '{ printf "%.2f", $2 / 1048576 }')
rss_one_mb=$(grep -o 'peak_rss_kb [0-9]*' "$WORK/one-mb.log" | awk '{ printf "%.2f", $2 / 1048576 }')
rss_two=$(grep -o 'peak_rss_kb [0-9]*' "$WORK/two.log" | awk '{ printf "%s%.2f", (NR > 1 ? " / " : ""), $2 / 1048576 }')
params=$(grep -o 'params [0-9.]* MiB' "$WORK/one.log" | head -1 | grep -o '[0-9.]*')
echo "== bench_dist: pocket-0.3b, T=512, 1024 tokens a step (the same global batch), $STEPS steps, means after the first"
echo "1 rank x 2 threads (grad_accum 2): $one_tok tokens/s, peak RSS $rss_one GB ($rss_one_mb GB with grad_accum 1:" \
     "no second gradient buffer)"
echo "2 ranks x 1 thread: $two_tok tokens/s, step $step s of which $comm s in communication; each rank sends" \
     "$sent MiB a step; peak RSS per rank $rss_two GB (the AdamW state is $(awk -v p="$params" \
     'BEGIN { printf "%.2f", 2 * p / 1024 }') GB on one rank, half of it on each of two)"
# A ring all-reduce sends 2 (W-1)/W of the gradients per rank; compute per
# step is the one-rank step time of the global batch, spread over W machines
# that each hold a micro-batch like this one.
awk -v mib="$sent" -v one="$one_tok" 'BEGIN {
    bytes_per_param = mib * 1048576;   # 2 (W-1)/W x 4 B x N at W = 2, so 4N B
    compute = 512 / one;               # one micro-batch of 512 tokens on a machine like this one
    printf "network  ranks: %s\n", "   2      8     16     64   (all-reduce s per step; scaling efficiency, no overlap)";
    split("10 25 100", gbps, " ");
    for (i = 1; i <= 3; i++) {
        line = sprintf("%3d Gb/s", gbps[i]);
        split("2 8 16 64", ws, " ");
        for (j = 1; j <= 4; j++) {
            w = ws[j]; t = 2 * (w - 1) / w * bytes_per_param / (gbps[i] * 1e9 / 8);
            line = line sprintf("  %.2f s %3.0f%%", t, 100 * compute / (compute + t));
        }
        print line;
    }
}'
