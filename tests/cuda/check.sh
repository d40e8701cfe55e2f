#!/usr/bin/env bash
# tests/cuda/check.sh: the GPU check, run ON the GPU machine (an H200: x86-64,
# driver + CUDA 13, PyTorch and transformers in its python3, no Debian -dev
# libraries, no package registry), from the repository root, with the folder
# tests/cuda/prepare.sh made here carried along (.cuda-carry). In under 8
# minutes it writes into $OUT (default ./cuda-check-out):
#   report.txt   one line per step (PASS/FAIL, seconds) and the benchmark lines
#   tests.log    the full output of every test
#   bench.log    the full output of bench_cuda and of the PyTorch benchmark
#   pocket-0.3b.config.json   the model both benchmarks ran
# Steps: test_cuda_math (host), the op tests with the GPU as a device
# (POCKET_REQUIRE_CUDA=1: no GPU is a failure, not a skip), test_cuda_model
# (GPU step vs CPU step), whether `pocket` finds all its libraries, bench_cuda
# (pocket-0.3b step at T=1024 and 4096), tests/bench_cuda_torch.py (the same
# model in PyTorch + transformers: sdpa, then torch.compile). Each step has a
# time limit; the exit status is 1 when any step failed.
#
# Libraries: the binaries link libcublasLt/libcudart 13 and libnccl 2 (found where the
# machine keeps them: /usr/local/cuda*, or the nvidia-* Python wheels) and a
# few Debian libraries (jansson, cmocka; pocket: hdf5 and its chain). The
# carried .debs are unpacked with dpkg -x into a private prefix, and only the
# libraries the machine lacks are linked into a folder that goes on
# LD_LIBRARY_PATH for our binaries alone (never for python3).
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-.cuda-carry}
OUT=${OUT:-$PWD/cuda-check-out}
mkdir -p "$OUT"
REPORT=$OUT/report.txt TESTS=$OUT/tests.log BENCH=$OUT/bench.log
: >"$REPORT"; : >"$TESTS"; : >"$BENCH"
T0=$(date +%s)
failed=""
say() { echo "$*" | tee -a "$REPORT"; }
elapsed() { echo $(($(date +%s) - T0)); }

say "== pocket-train GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(cat "$CARRY/commit" 2>/dev/null || echo '?') (binaries), $(git rev-parse --short HEAD 2>/dev/null || echo '?') (tree)"
[ -d "$CARRY/bin" ] || { say "FAIL: no $CARRY/bin here: run tests/cuda/prepare.sh first and carry $CARRY"; exit 1; }
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
say "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# ---- libraries
PREFIX=/tmp/pocket-prefix LIBDIR=/tmp/pocket-libs
rm -rf "$PREFIX" "$LIBDIR"
mkdir -p "$PREFIX" "$LIBDIR"
# dpkg -x, or where dpkg is missing the same in Python (a .deb is an ar archive holding data.tar.*).
unpack() {
    if command -v dpkg >/dev/null 2>&1; then dpkg -x "$1" "$2"; return; fi
    python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
pos = 8   # "!<arch>\n", then 60-byte member headers
while pos + 60 <= len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(data[pos + 60:pos + 60 + size])).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
PY
}
for deb in "$CARRY"/debs/*.deb; do unpack "$deb" "$PREFIX" || say "note: unpacking $deb failed"; done
CUDA_DIRS=""
libpath() { echo "$LIBDIR${CUDA_DIRS:+:$CUDA_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; }
missing() { LD_LIBRARY_PATH="$(libpath)" ldd "$1" 2>/dev/null | awk '/not found/{print $1}'; }
for lib in libcublasLt.so.13 libcudart.so.13 libnccl.so.2; do
    missing "$CARRY/bin/test_ops_fast" | grep -qx "$lib" || continue
    found=$(find /usr/local /usr/lib /usr/lib64 /opt /lib 2>/dev/null -name "$lib" | head -1)
    [ -z "$found" ] && found=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null |
                               xargs -r -I{} find {} -name "$lib" 2>/dev/null | head -1)
    [ -n "$found" ] && CUDA_DIRS="${CUDA_DIRS:+$CUDA_DIRS:}$(dirname "$found")"
done
for pass in 1 2 3 4; do   # a library taken from the prefix can need another one
    added=0
    for b in "$CARRY"/bin/*; do
        for lib in $(missing "$b"); do
            [ -e "$LIBDIR/$lib" ] && continue
            f=$(find "$PREFIX" -name "$lib" 2>/dev/null | head -1)
            [ -n "$f" ] && ln -sf "$f" "$LIBDIR/$lib" && added=1
        done
    done
    [ $added = 0 ] && break
done
taken=$(ls "$LIBDIR" | tr '\n' ' ')
say "libraries: CUDA from ${CUDA_DIRS:-the default search path}; from the carried packages: ${taken:-none}"
for b in "$CARRY"/bin/*; do
    m=$(missing "$b" | tr '\n' ' ')
    [ -n "$m" ] && say "FAIL: $(basename "$b") still misses: $m" && failed="$failed libs:$(basename "$b")"
done

# ---- steps
export POCKET_REQUIRE_CUDA=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} OMP_WAIT_POLICY=PASSIVE NVIDIA_TF32_OVERRIDE=0
BUDGET=${BUDGET:-470}   # seconds for everything: each step's limit is cut to what is left
# step NAME LIMIT LOG CMD...: runs CMD with our libraries, output to LOG, a line in the report.
step() {
    local name=$1 limit=$2 log=$3
    shift 3
    local left=$((BUDGET - $(elapsed)))
    if [ $left -lt 15 ]; then say "SKIP  $name: the ${BUDGET}s budget is spent"; failed="$failed $name"; return; fi
    [ $limit -gt $left ] && limit=$left
    local t=$(date +%s) part=$OUT/.step.log
    { echo; echo "######## $name: $*"; } >>"$log"
    LD_LIBRARY_PATH="$(libpath)" timeout "$limit" "$@" >"$part" 2>&1
    local rc=$?
    local dt=$(($(date +%s) - t))
    cat "$part" >>"$log"
    if [ $rc = 0 ]; then say "PASS  $name (${dt}s)"
    else
        if [ $rc = 124 ]; then say "FAIL  $name: over its ${limit}s limit"; else say "FAIL  $name: exit $rc (${dt}s)"; fi
        failed="$failed $name"
        { grep -E "^ERROR|FAILED|[Ee]rror" "$part" | head -4; tail -2 "$part"; } | sed 's/^/      /' | tee -a "$REPORT"
    fi
    rm -f "$part"
}
step test_cuda_math 60 "$TESTS" "$CARRY/bin/test_cuda_math"
for t in test_ops_fast test_ops_attention test_ops_classifier test_ops_torch test_matmul test_optim test_quant; do
    step "$t" 120 "$TESTS" "$CARRY/bin/$t"
done
step test_cuda_model 180 "$TESTS" "$CARRY/bin/test_cuda_model"
grep -E "GPU:|devices \(|B=[0-9]+ T=|same bits" "$TESTS" | grep -E "cuda|GPU|B=" | sort -u | head -20 | sed 's/^/      /' >>"$REPORT"
step "pocket --help (its libraries load)" 20 "$TESTS" "$CARRY/bin/pocket" --help
# pocket train with [train] device = cuda against the CPU runs prepare.sh made:
# the same losses step by step (fp32 both; the order of sums differs). Then
# the collectives through NCCL with one rank (train.nccl = always): the same
# bits as without NCCL in fp32, and within the CPU bound with a bf16 sum.
# compare_losses NAME REF GOT FIRST_TOL ALL_TOL: relative bounds on the first and every step's loss.
compare_losses() {
    python3 - "$@" >>"$REPORT" 2>&1 <<'PY' || failed="$failed compare:$1"
import json, sys
name, ref, got, first_tol, all_tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
def losses(p):
    return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j}
a, b = losses(ref), losses(got)
worst = max(abs(b[s] - a[s]) / abs(a[s]) if s in b else float("inf") for s in a)
first, last = min(a), max(a)
ok = len(b) == len(a) and abs(b[first] - a[first]) <= first_tol * abs(a[first]) and worst <= all_tol
print(f"{'PASS' if ok else 'FAIL'}  {name}: {len(b)}/{len(a)} steps, loss {a[first]:.6f} -> {a[last]:.6f} (reference), "
      f"{b.get(first, 0):.6f} -> {b.get(last, 0):.6f}; worst relative difference {worst:.1e} (bound {all_tol:g})")
sys.exit(0 if ok else 1)
PY
}
TR=$CARRY/train
for mode in cpt qat; do
    rm -rf "$OUT/train-$mode" "$OUT/train-$mode-nccl"
    step "pocket train $mode on cuda" 90 "$TESTS" "$CARRY/bin/pocket" train "$TR/$mode.ini" \
        --set train.device=cuda --set train.run_dir="$OUT/train-$mode"
    compare_losses "train $mode, cuda vs cpu" "$TR/$mode-cpu/metrics.jsonl" "$OUT/train-$mode/metrics.jsonl" 1e-4 2e-2
    step "pocket train $mode on cuda, NCCL (1 rank)" 90 "$TESTS" "$CARRY/bin/pocket" train "$TR/$mode.ini" \
        --set train.device=cuda --set train.nccl=always --set train.run_dir="$OUT/train-$mode-nccl"
    compare_losses "train $mode, NCCL vs none" "$OUT/train-$mode/metrics.jsonl" "$OUT/train-$mode-nccl/metrics.jsonl" 0 0
done
# Checkpoints are the same files on both: the GPU's step 30 resumed on the CPU
# to 40, and the CPU's resumed on the GPU; steps 31-40 agree.
rm -rf "$OUT/resume-on-gpu"
cp -r "$TR/cpt-cpu" "$OUT/resume-on-gpu"
step "resume a CPU checkpoint on cuda" 60 "$TESTS" "$CARRY/bin/pocket" train "$TR/cpt.ini" --set train.steps=40 \
    --set train.device=cuda --set train.run_dir="$OUT/resume-on-gpu"
step "resume a cuda checkpoint on the CPU" 60 "$TESTS" "$CARRY/bin/pocket" train "$TR/cpt.ini" --set train.steps=40 \
    --set train.run_dir="$OUT/train-cpt"
compare_losses "resumed: cuda->cpu vs cpu->cuda" "$OUT/resume-on-gpu/metrics.jsonl" "$OUT/train-cpt/metrics.jsonl" 1e-4 2e-2
rm -rf "$OUT/train-cpt-bf16"
step "pocket train cpt on cuda, NCCL bf16 sum" 90 "$TESTS" "$CARRY/bin/pocket" train "$TR/cpt.ini" \
    --set train.device=cuda --set train.nccl=always --set train.grad_reduce=bf16 --set train.run_dir="$OUT/train-cpt-bf16"
compare_losses "train cpt, NCCL bf16 sum vs cpu" "$TR/cpt-cpu/metrics.jsonl" "$OUT/train-cpt-bf16/metrics.jsonl" 1e-4 2e-2

step bench_cuda 180 "$BENCH" "$CARRY/bin/bench_cuda" --config-out "$OUT/pocket-0.3b.config.json"
grep "^bench_cuda\|^== bench_cuda" "$BENCH" | sed 's/^/      /' | tee -a "$REPORT"
left=$((BUDGET - $(elapsed)))
if [ $left -gt 60 ] && [ -s "$OUT/pocket-0.3b.config.json" ]; then
    # python3 runs without our LD_LIBRARY_PATH (its own CUDA libraries).
    t=$(date +%s)
    { echo; echo "######## torch: tests/bench_cuda_torch.py (deadline $((left - 20))s)"; } >>"$BENCH"
    PYTHONUNBUFFERED=1 timeout "$left" python3 tests/bench_cuda_torch.py --config "$OUT/pocket-0.3b.config.json" \
        --deadline $((left - 20)) >>"$BENCH" 2>&1
    rc=$?
    if [ $rc = 0 ]; then say "PASS  bench_cuda_torch ($(($(date +%s) - t))s)"
    else
        say "FAIL  bench_cuda_torch: exit $rc"
        failed="$failed bench_cuda_torch"
        tail -3 "$BENCH" | sed 's/^/      /' | tee -a "$REPORT"
    fi
    grep "^torch" "$BENCH" | sed 's/^/      /' | tee -a "$REPORT"
else
    say "SKIP  bench_cuda_torch: ${left}s left of the ${BUDGET}s budget"
fi

if [ -n "$failed" ]; then say "== $(elapsed)s in all; FAILED:$failed"; else say "== $(elapsed)s in all; all steps passed"; fi
[ -z "$failed" ]
