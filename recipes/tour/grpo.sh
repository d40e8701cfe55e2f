#!/usr/bin/env bash
# recipes/tour/grpo.sh: the tour's GRPO step measured (docs/rl.md): SmolLM2-135M-Instruct after the tour's SFT
# (runs/tour/sft/best.h5), GRPO on its own samples of the title -> JSON task (recipes/tour/grpo.ini: rewards
# json_fields + exact against the reference JSON), then the held-out exact match of the SFT and GRPO models on the
# 200 titles recipes/tour/dpo.sh holds out (another seed than the SFT set's), in float and as int4 packages in the
# MNN runtime after the tour's QAT step (recipes/tour/qat.ini) on each. Run from the repository root after the
# README's tour and recipes/tour/dpo.sh's first stage (runs/tour/dpo-val.h5); everything goes under runs/tour/.
# Stages whose output exists are skipped; RESULTS=runs/tour/grpo-results.txt gets the figures.
set -euo pipefail
PY=${PY:-tests/.venv/bin/python}
P=./pocket
T=runs/tour
for f in $T/sft/best.h5 $T/dpo-val.h5; do
    [ -f $f ] || { echo "grpo.sh: $f is missing: run the README's tour and recipes/tour/dpo.sh first" >&2; exit 1; }
done
time_v() { /usr/bin/time -f "%e s wall, %U s user + %S s system CPU, peak RSS %M kB" -o "$1" "${@:2}"; }
G=$T/grpo/ckpt-00000040.h5

# 1. GRPO from the SFT model.
[ -f $G ] || time_v $T/grpo-time.txt $P train recipes/tour/grpo.ini
# 2. Exact match on the 200 held-out titles in float, then the tour's QAT step and the int4 package in MNN.
[ -f $T/sft-em.txt ] || $P eval --ckpt $T/sft/best.h5 --data $T/dpo-val.h5 --exact-match 200 --max-batches 1 \
    --seq-len 352 > $T/sft-em.txt
[ -f $T/grpo-em.txt ] || $P eval --ckpt $G --data $T/dpo-val.h5 --exact-match 200 --max-batches 1 --seq-len 352 \
    > $T/grpo-em.txt
[ -f $T/qat/best.h5 ] || $P train recipes/tour/qat.ini
[ -f $T/grpo-qat/best.h5 ] || $P train recipes/tour/qat.ini --set model.init=$G --set train.run_dir=$T/grpo-qat
for m in qat grpo-qat; do
    [ -d $T/$m-mnn ] || $P export --ckpt $T/$m/best.h5 --format mnn --sampler greedy --out $T/$m-mnn
    [ -f $T/$m-mnn-em.json ] || $PY tests/mnn_exact_match.py --package $T/$m-mnn --data $T/dpo-val.h5 --n 200 \
        --json $T/$m-mnn-em.json
done

{
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
    echo "GRPO run: $(cat $T/grpo-time.txt 2>/dev/null || echo 'time not recorded')"
    $PY -c "import json,sys; L=[json.loads(l) for l in open(sys.argv[1]) if '\"reward\"' in l]; f=lambda a: sum(x['reward'] \
for x in a)/len(a); print('mean reward, first 5 updates', round(f(L[:5]),3), 'last 5', round(f(L[-5:]),3), '; rollout \
tokens/s', round(sum(x['rollout_tokens_per_s'] for x in L)/len(L),1))" $T/grpo/metrics.jsonl
    for m in sft grpo; do echo "$m float: $(grep '^exact match' $T/$m-em.txt)"; done
    for m in qat grpo-qat; do
        $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'int4 in MNN: exact match', \
r['exact_match'], 'of', r['examples'])" $T/$m-mnn-em.json $m
    done
} | tee ${RESULTS:-$T/grpo-results.txt}
