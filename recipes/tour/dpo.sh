#!/usr/bin/env bash
# recipes/tour/dpo.sh: the tour's DPO step measured (docs/preference.md): SmolLM2-135M-Instruct after the tour's
# SFT (runs/tour/sft/best.h5, recipes/tour/sft.ini), a preference set of its own wrong answers to the title -> JSON
# task, pocket's DPO run (recipes/tour/dpo.ini) and TRL 1.16.0's DPOTrainer on the same pairs and hyperparameters
# beside it; held-out preference accuracy and margin of both, their wall time and peak memory, and the held-out
# exact match of the SFT and DPO models, in float and as int4 packages in the MNN runtime after the tour's QAT step
# (recipes/tour/qat.ini) on each. Run from the repository root after the
# README's tour (it needs ./pocket, tests/.venv and runs/tour/sft/best.h5); everything goes under runs/tour/.
# Stages whose output exists are skipped; RESULTS=runs/tour/dpo-results.txt gets the figures.
set -euo pipefail
PY=${PY:-tests/.venv/bin/python}
P=./pocket
T=runs/tour
D=$T/dpo-data
[ -f $T/sft/best.h5 ] || { echo "dpo.sh: $T/sft/best.h5 is missing: run the README's tour (recipes/tour/sft.ini) first" >&2; exit 1; }
time_v() { /usr/bin/time -f "%e s wall, %U s user + %S s system CPU, peak RSS %M kB" -o "$1" "${@:2}"; }

# 1. Titles the SFT run never saw (another seed), 500 for training pairs, 200 held out.
[ -f $D/train.jsonl ] || python3 recipes/demo/make_sft_data.py $D --train 500 --val 200 --seed 7
# 2. The SFT model's answers, two samples at temperature 0.7 each: a wrong one is the rejected response.
[ -f $D/pairs.jsonl ] || python3 recipes/tour/make_pairs.py --ckpt $T/sft/best.h5 --data $D/train.jsonl \
    --out $D/pairs.jsonl --samples 2 --temperature 0.7 --seed 1
[ -f $D/pairs-val.jsonl ] || python3 recipes/tour/make_pairs.py --ckpt $T/sft/best.h5 --data $D/val.jsonl \
    --out $D/pairs-val.jsonl --samples 2 --temperature 0.7 --seed 2
[ -f $T/pairs.h5 ] || $P tokenize --pairs --tokenizer $T/sft/best.h5 $D/pairs.jsonl --out $T/pairs.h5
[ -f $T/pairs-val.h5 ] || $P tokenize --pairs --tokenizer $T/sft/best.h5 $D/pairs-val.jsonl --out $T/pairs-val.h5
[ -f $T/dpo-val.h5 ] || $P tokenize --chat --tokenizer $T/sft/best.h5 $D/val.jsonl --out $T/dpo-val.h5
PAIRS=$(wc -l < $D/pairs.jsonl)
PASSES=${PASSES:-1}
STEPS=$(( (PASSES * PAIRS + 7) / 8 ))   # PASSES over the pairs at 8 pairs an update

# 3. pocket's DPO run.
[ -f $T/dpo/best.h5 ] || time_v $T/dpo-time.txt $P train recipes/tour/dpo.ini --set train.steps=$STEPS
# 4. Beside it, TRL's DPOTrainer from the same start on the same pairs, batch, lr, beta and schedule: first COMPARE
#    updates of each, pocket (reusing the run's reference.h5: same start, same data, its hashes agree) and TRL (its
#    reference beside the policy, its default), for wall time and peak memory (run this stage on an otherwise idle
#    machine); both evaluated on the same 50 held-out pairs. Then TRL's whole run, STEPS updates, evaluated on every
#    held-out pair, for its accuracy and margin beside pocket's run.
COMPARE=${COMPARE:-10}
[ -d $T/sft-hf ] || $P export --ckpt $T/sft/best.h5 --format hf --out $T/sft-hf
[ -f $D/pairs-val50.jsonl ] || head -50 $D/pairs-val.jsonl > $D/pairs-val50.jsonl
[ -f $T/pairs-val50.h5 ] || $P tokenize --pairs --tokenizer $T/sft/best.h5 $D/pairs-val50.jsonl --out $T/pairs-val50.h5
SHORT=$T/dpo-short/ckpt-$(printf %08d $COMPARE).h5
if [ ! -f $SHORT ]; then
    mkdir -p $T/dpo-short && cp $T/dpo/reference.h5 $T/dpo-short/
    time_v $T/dpo-short-time.txt $P train recipes/tour/dpo.ini --set train.steps=$COMPARE --set train.run_dir=$T/dpo-short \
        --set train.eval_interval=0 --set optim.warmup=2 --set preference.sft_weight=0
fi
[ -f $T/dpo-short-eval.txt ] || $P eval --ckpt $SHORT --ref $T/sft/best.h5 --data $T/pairs-val50.h5 \
    --seq-len 352 > $T/dpo-short-eval.txt   # (the timing pair runs the sigmoid loss alone, both sides)
[ -f $T/dpo-trl.json ] || time_v $T/dpo-trl-time.txt $PY recipes/tour/dpo_trl.py --model $T/sft-hf \
    --train $D/pairs.jsonl --val $D/pairs-val50.jsonl --out $T/dpo-trl.json --steps $COMPARE --batch 4 --accum 2 \
    --lr 1e-5 --beta 0.1 --warmup 2 --threads 2
[ -f $T/dpo-trl-full.json ] || $PY recipes/tour/dpo_trl.py --model $T/sft-hf --train $D/pairs.jsonl \
    --val $D/pairs-val.jsonl --out $T/dpo-trl-full.json --steps $STEPS --batch 4 --accum 2 --lr 1e-5 --beta 0.1 \
    --sft-weight 1 --warmup 5 --threads 2
# 5. Held-out pairs: the DPO model against its start; and how often each model finds the chosen answer more
#    likely per token than the rejected one (SimPO's reward, no reference).
[ -f $T/dpo-eval.txt ] || $P eval --ckpt $T/dpo/best.h5 --ref $T/sft/best.h5 --data $T/pairs-val.h5 --seq-len 352 \
    --sft-weight 1 > $T/dpo-eval.txt
for m in sft dpo; do
    [ -f $T/$m-likelihood.txt ] || $P eval --ckpt $T/$m/best.h5 --data $T/pairs-val.h5 --loss simpo --beta 1 \
        --simpo-gamma 0 --seq-len 352 > $T/$m-likelihood.txt
done
# 6. Exact match on the 200 held-out titles: each float model (pocket eval), then the tour's QAT step on each
#    (recipes/tour/qat.ini: 16 SFT updates through the int4 rounding) and its int4 package in the MNN runtime.
for m in sft dpo; do
    [ -f $T/$m-em.txt ] || $P eval --ckpt $T/$m/best.h5 --data $T/dpo-val.h5 --exact-match 200 --max-batches 1 \
        --seq-len 352 > $T/$m-em.txt
done
[ -f $T/qat/best.h5 ] || $P train recipes/tour/qat.ini
[ -f $T/dpo-qat/best.h5 ] || $P train recipes/tour/qat.ini --set model.init=$T/dpo/best.h5 --set train.run_dir=$T/dpo-qat
for m in qat dpo-qat; do
    [ -d $T/$m-mnn ] || $P export --ckpt $T/$m/best.h5 --format mnn --sampler greedy --out $T/$m-mnn
    [ -f $T/$m-mnn-em.json ] || $PY tests/mnn_exact_match.py --package $T/$m-mnn --data $T/dpo-val.h5 --n 200 \
        --json $T/$m-mnn-em.json
done

metric() { grep "^$2:" "$1" | head -1 | sed 's/^[^:]*: *//'; }
{
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
    echo "pairs: $PAIRS training, $(wc -l < $D/pairs-val.jsonl) held out"
    echo "pocket, $STEPS updates: held-out rewards/accuracies $(metric $T/dpo-eval.txt rewards/accuracies), margin" \
         "$(metric $T/dpo-eval.txt rewards/margins); $(cat $T/dpo-time.txt)"
    echo "likelihood preference (chosen more likely per token): SFT $(metric $T/sft-likelihood.txt rewards/accuracies)," \
         "DPO $(metric $T/dpo-likelihood.txt rewards/accuracies)"
    for m in sft dpo; do echo "$m float: $(grep '^exact match' $T/$m-em.txt)"; done
    for m in qat dpo-qat; do
        $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'int4 in MNN: exact match', \
r['exact_match'], 'of', r['examples'])" $T/$m-mnn-em.json $m
    done
    echo "pocket, $COMPARE updates: held-out rewards/accuracies $(metric $T/dpo-short-eval.txt rewards/accuracies)," \
         "margin $(metric $T/dpo-short-eval.txt rewards/margins); $(cat $T/dpo-short-time.txt)"
    $PY -c "import json,sys; r=json.load(open(sys.argv[1])); e=r['eval']; print('TRL,', r['steps'], 'updates: held-out \
rewards/accuracies', round(e['eval_rewards/accuracies'],4), 'margin', round(e['eval_rewards/margins'],4), '; train', \
round(r['train_seconds'],1), 's')" $T/dpo-trl.json
    echo "TRL process: $(cat $T/dpo-trl-time.txt)"
    $PY -c "import json,sys; r=json.load(open(sys.argv[1])); e=r['eval']; print('TRL,', r['steps'], 'updates: held-out \
rewards/accuracies', round(e['eval_rewards/accuracies'],4), 'margin', round(e['eval_rewards/margins'],4))" $T/dpo-trl-full.json
} | tee ${RESULTS:-$T/dpo-results.txt}
