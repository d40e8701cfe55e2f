#!/usr/bin/env bash
# tests/cuda/prepare.sh: run HERE, on a machine without a GPU, before the GPU
# check. The GPU machine has the NVIDIA driver, CUDA 13 and PyTorch, but no
# Debian -dev libraries and no package registry, so everything is built here
# and carried there:
#   1. `make CUDA=1` builds the test binaries, bench_cuda and pocket (sm_90,
#      host code for x86-64-v3) into build-cuda/;
#   2. the binaries tests/cuda/check.sh runs are copied, stripped, into
#      .cuda-carry/bin (a folder .git/info/exclude names, so git ignores it);
#   3. the Debian packages of every shared library they load (found with ldd
#      and dpkg -S), except glibc, libstdc++ and libgcc (on every Linux) and
#      CUDA's own (on the GPU machine), are fetched with `apt-get download`
#      into .cuda-carry/debs; check.sh unpacks only the ones missing there;
#   4. a tiny model, a CPT dataset and two recipes (fp32 CPT; W4A16 QAT with
#      learned scales and frozen codes) go to .cuda-carry/train, each trained
#      here on the CPU: check.sh trains them again with [train] device = cuda
#      and compares the losses step by step.
# Then, from a session with the GPU tool: run `bash tests/cuda/check.sh` with
# carry [".cuda-carry"] (cuda/README.md has the exact call).
# usage: tests/cuda/prepare.sh        env: JOBS (make -j, default nproc)
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=.cuda-carry
BINS="test_cuda_math test_ops_fast test_ops_attention test_ops_classifier test_ops_torch test_matmul test_optim
      test_quant test_cuda_model bench_cuda"

command -v nvcc >/dev/null || { echo "prepare.sh: nvcc is not on PATH (the CUDA toolkit builds the GPU code)" >&2; exit 1; }
targets="build-cuda/pocket"
for b in $BINS; do targets="$targets build-cuda/tests/$b"; done
make CUDA=1 -j"${JOBS:-$(nproc)}" $targets

rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/debs"
for b in $BINS; do cp "build-cuda/tests/$b" "$CARRY/bin/"; done
cp build-cuda/pocket "$CARRY/bin/"
strip "$CARRY"/bin/*
git rev-parse HEAD >"$CARRY/commit"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx "/$CARRY/" "$exclude" 2>/dev/null || echo "/$CARRY/" >>"$exclude"

# The packages behind every library the binaries load.
pkgs="libgomp1"
for lib in $(ldd "$CARRY"/bin/* | awk '/=> \//{print $3}' | sort -u); do
    case $lib in */cuda*/*|*libcublas*|*libcudart*) continue ;; esac
    owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null) ||
        { echo "prepare.sh: no Debian package owns $lib" >&2; exit 1; }
    pkg=${owner%%:*}
    case $pkg in libc6|libgcc-s1|libstdc++6) continue ;; esac
    pkgs="$pkgs $pkg"
done
pkgs=$(echo "$pkgs" | tr ' ' '\n' | sort -u | tr '\n' ' ')
if ! (cd "$CARRY/debs" && apt-get download $pkgs >/dev/null 2>&1); then
    apt-get update -qq
    (cd "$CARRY/debs" && apt-get download $pkgs >/dev/null)
fi
# The CPU reference runs for check.sh's `pocket train` on the GPU.
TR=$CARRY/train
mkdir -p "$TR"
cat >"$TR/config.json" <<'JSON'
{"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "intermediate_size": 128, "vocab_size": 1505, "max_position_embeddings": 256,
 "tie_word_embeddings": true, "eos_token_id": 1502, "pad_token_id": 1500, "rope_theta": 10000.0}
JSON
P=build-cuda/pocket
$P init --model "$TR/config.json" --tokenizer tests/fixtures/tok/tokenizer.json --out "$TR/init.h5" >/dev/null
$P tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/tok/corpus.txt tests/fixtures/data/corpus \
   --out "$TR/cpt.h5" >/dev/null
for mode in cpt qat; do
    # Paths relative to the repository root, where both machines run it.
    {
        printf '[model]\ninit = %s/init.h5\n[data]\ntrain = %s/cpt.h5\n[train]\nmode = cpt\n' "$TR" "$TR"
        printf 'micro_batch = 4\nseq_len = 64\nsteps = 30\nsave_interval = 30\nthreads = 2\n'
        printf '[optim]\nlr = 0.003\nwarmup = 3\n'
        [ $mode = qat ] && printf '[qat]\nenabled = 1\ngroup = 16\nstart_step = 5\nlearn_scales = 1\nscale_lr = 1e-3\nfreeze_codes_step = 20\n'
    } >"$TR/$mode.ini"
    rm -rf "$TR/$mode-cpu"
    $P train "$TR/$mode.ini" --set train.run_dir="$TR/$mode-cpu" >"$TR/$mode-cpu.log" 2>&1 ||
        { echo "prepare.sh: the CPU reference run $mode failed:" >&2; tail -5 "$TR/$mode-cpu.log" >&2; exit 1; }
    # The losses are the reference; CPT's last checkpoint also goes (check.sh resumes it on the GPU).
    [ $mode = cpt ] || rm -f "$TR/$mode-cpu"/*.h5
done

echo "prepare.sh: $CARRY holds $(ls "$CARRY/bin" | wc -l) binaries and $(ls "$CARRY/debs" | wc -l) packages" \
     "($pkgs), $(du -sh "$CARRY" | cut -f1) in all; carry it to the GPU machine (cuda/README.md)"
