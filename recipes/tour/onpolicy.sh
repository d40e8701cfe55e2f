#!/usr/bin/env bash
# recipes/tour/onpolicy.sh: on-policy QAT distillation against off-policy distilled QAT on the tour's model
# (docs/qat.md): SmolLM2-135M-Instruct after the tour's SFT (runs/tour/sft/best.h5, the float teacher of both),
# quantized to the deployed int4 grid by
#   offpolicy   recipes/tour/qat.ini's QAT with [distill] on (the KL to the float model on the SFT set's replies),
#               at onpolicy-qat.ini's batch: 16 updates of 4 rows of 176 positions
#   onpolicy    recipes/tour/onpolicy-qat.ini (the KL on the int4 model's own sampled replies), the same budget
# beside round-to-nearest and the tour's own QAT step (the replies' cross-entropy, recipes/tour/qat.ini),
# each exported as an MNN package and judged in the MNN runtime as make bench-qat judges: the KL to the float model
# (transformers, runs/tour/sft-hf) on held-out positions (tests/mnn_quality.py over the 200 titles
# recipes/tour/dpo.sh holds out, runs/tour/dpo-val.h5), and the task's exact match on those titles
# (tests/mnn_exact_match.py). Stages whose output exists are skipped; RESULTS (default runs/tour/onpolicy-results.txt)
# gets the figures.
set -euo pipefail
PY=${PY:-tests/.venv/bin/python}
P=./pocket
T=runs/tour
for f in $T/sft/best.h5 $T/dpo-val.h5 $T/sft.h5; do
    [ -f $f ] || { echo "onpolicy.sh: $f is missing: run the README's tour and recipes/tour/dpo.sh first" >&2; exit 1; }
done
time_v() { /usr/bin/time -f "%e s wall, peak RSS %M kB" -o "$1" "${@:2}"; }

[ -d $T/sft-hf ] || $P export --ckpt $T/sft/best.h5 --format hf --out $T/sft-hf
[ -f $T/offpolicy-qat/best.h5 ] || time_v $T/offpolicy-qat-time.txt $P train recipes/tour/qat.ini \
    --set distill.enabled=1 --set train.micro_batch=4 --set train.seq_len=176 --set train.run_dir=$T/offpolicy-qat
[ -f $T/onpolicy-qat/best.h5 ] || time_v $T/onpolicy-qat-time.txt $P train recipes/tour/onpolicy-qat.ini
# for scale: round-to-nearest of the float model, and the tour's own QAT step (recipes/tour/qat.ini, the replies'
# cross-entropy, 16 updates of 2 x 256)
[ -f $T/rtn/best.h5 ] || { mkdir -p $T/rtn && $P quantize --ckpt $T/sft/best.h5 --group 64 --out $T/rtn/best.h5; }
[ -f $T/qat/best.h5 ] || $P train recipes/tour/qat.ini
for m in rtn qat offpolicy-qat onpolicy-qat; do
    [ -d $T/$m-mnn ] || $P export --ckpt $T/$m/best.h5 --format mnn --sampler greedy --out $T/$m-mnn
    [ -f $T/$m-mnn-em.json ] || $PY tests/mnn_exact_match.py --package $T/$m-mnn --data $T/dpo-val.h5 --n 200 \
        --json $T/$m-mnn-em.json
    [ -f $T/$m-mnn-kl.json ] || $PY tests/mnn_quality.py --package $T/$m-mnn --ref $T/sft-hf --data $T/dpo-val.h5 \
        --seq-len 512 --max-windows 24 --ref-cache $T/sft-ref-cache --json $T/$m-mnn-kl.json
done

{
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
    for m in rtn qat offpolicy-qat onpolicy-qat; do
        [ -f $T/$m-time.txt ] && echo "$m: $(cat $T/$m-time.txt)"
        $PY -c "import json,sys; e=json.load(open(sys.argv[1])); k=json.load(open(sys.argv[2])); print(sys.argv[3], \
'int4 in MNN: exact match', e['exact_match'], 'of', e['examples'], '; KL to float', round(k['kl_mean'], 5), '+-', \
round(k['kl_stderr'], 5), 'over', k['positions'], 'positions; top-1', round(k['top1'], 4))" \
            $T/$m-mnn-em.json $T/$m-mnn-kl.json $m
    done
} | tee ${RESULTS:-$T/onpolicy-results.txt}
