#!/usr/bin/env bash
# tests/bench_isa.sh: the pocket-0.3b training step (B=1, T, fp32 and bf16
# matmuls) once per instruction set this CPU runs, each against the FMA peak of
# the vectors its kernels use (measured in the same process), beside PyTorch's
# fp32 step held to the same instruction set where it can be; `make bench-isa`
# calls it. It builds nothing.
#
#   avx512    the native build (BUILD_NATIVE), AVX-512 kernels
#   avx2      the x86-64-v3 build (BUILD_V3: everything outside the kernels
#             compiled for AVX2 + FMA too) with POCKET_KERNELS=avx2, as an
#             AVX2-only CPU runs; PyTorch with ATen, MKL and oneDNN held to AVX2
#   portable  the x86-64-v3 build's plain-C kernels (vectorised by the compiler
#             for AVX2); no PyTorch row (it has no such mode)
#   neon      AArch64's native build; PyTorch as it comes
# A set the CPU cannot run (pocket --version refuses it) is skipped.
#
# Ends with a Markdown table (docs/performance.md's per-instruction-set table) naming
# the machine: CPU model, cores, instruction sets, load average, date.
#
# usage: tests/bench_isa.sh
# env:   BENCH_T (1024), BENCH_STEPS (2, timed steps after a warm-up; the best counts), BENCH_THREADS (2),
#        BENCH_SETS (every set above), BENCH_PRESET (pocket-0.3b; a smaller preset for a quick try), BUILD_NATIVE (build), BUILD_V3 (build-x86-64-v3),
#        PYTHON (tests/.venv/bin/python; unset or missing: no PyTorch column), BENCH_TORCH (1; 0: skip it)
set -uo pipefail
T=${BENCH_T:-1024}
STEPS=${BENCH_STEPS:-2}
PRESET=${BENCH_PRESET:-pocket-0.3b}
THREADS=${BENCH_THREADS:-2}
NATIVE=${BUILD_NATIVE:-build}
V3=${BUILD_V3:-build-x86-64-v3}
PYTHON=${PYTHON:-tests/.venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
fail() { echo "bench_isa: $*" >&2; exit 1; }

case $(uname -m) in
    x86_64) SETS=${BENCH_SETS:-avx512 avx2 portable} ;;
    aarch64) SETS=${BENCH_SETS:-neon portable} ;;
    *) SETS=${BENCH_SETS:-portable} ;;
esac
# The plain build's pocket is ./pocket (the Makefile's rule); the others sit in their folder.
pocket_of() { [ "$1" = build ] && echo ./pocket || echo "$1/pocket"; }
build_of() { case $1 in avx2|portable) [ "$(uname -m)" = x86_64 ] && echo "$V3" || echo "$NATIVE" ;; *) echo "$NATIVE" ;; esac; }
torch_env_of() {
    case $1 in
        avx512|neon) echo "" ;;
        avx2) echo "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" ;;
        *) echo "-" ;;
    esac
}
torch_ok=1
{ [ "${BENCH_TORCH:-1}" = 0 ] || ! command -v "$PYTHON" >/dev/null 2>&1; } && torch_ok=0

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/pocket-bench-isa.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "bench_isa: $(uname -m), $(nproc) cores (${model:-unknown model}), $THREADS threads, T=$T, $(date -u +%F)"
echo "  load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"

ROWS=$LOGS/rows
for set in $SETS; do
    build=$(build_of "$set")
    bench=$build/tests/bench_model
    [ -x "$bench" ] || fail "$bench not built (make bench-isa builds it)"
    if ! POCKET_KERNELS=$set "$(pocket_of "$build")" --version >/dev/null 2>&1; then
        echo "== $set: this CPU cannot run it (skipped)"
        continue
    fi
    echo "== $set: $bench $PRESET $T $STEPS plain (POCKET_KERNELS=$set)"
    log=$LOGS/$set.log
    POCKET_KERNELS=$set OMP_NUM_THREADS=$THREADS "$bench" "$PRESET" "$T" "$STEPS" plain 2>&1 | tee "$log" ||
        fail "$bench failed for $set"
    isa=$(sed -n 's/^== bench_model: cpu .*; instruction sets: \(.*\); kernels: .*/\1/p' "$log" | head -1)
    peak=$(sed -n 's/^== bench_model: fp32 FMA peak ([^)]*): \([0-9.]*\) GFLOP.*/\1/p' "$log")
    f32=$(grep "matmul=fp32 recompute=off" "$log" | sed -n 's/.*: \([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s = \([0-9.]*\)% .*/\1 \2 \3/p')
    b16=$(grep "matmul=bf16 recompute=off" "$log" | sed -n 's/.*: \([0-9.]*\) tokens\/s, .*/\1/p')
    ratio=$(sed -n 's/^bf16 step throughput: \([0-9.]*\)x.*/\1/p' "$log")
    kern=$(grep -m1 '^== bench_model: fp32 FMA peak' "$log" | sed -n 's/.*([0-9]* threads, \([^)]*\)).*; bf16 matmul kernel \([^;]*\);.*/\1, bf16 \2/p')
    [ -n "$f32" ] && [ -n "$b16" ] || fail "no step figures in $set's output"
    torch="-"
    tenv=$(torch_env_of "$set")
    if [ "$torch_ok" = 1 ] && [ "$tenv" != "-" ]; then
        echo "== $set: PyTorch fp32 step held to the same instruction set (${tenv:-its defaults})"
        tlog=$LOGS/$set.torch.log
        # shellcheck disable=SC2086
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" $tenv \
            "$PYTHON" "$HERE/bench_torch_step.py" --threads "$THREADS" --T "$T" --steps "$STEPS" --mem-T 0 \
            --adamw-steps 0 --precisions fp32 --peak "$peak" 2>&1 | tee "$tlog" || echo "bench_isa: PyTorch failed for $set"
        torch=$(sed -n "s/^torch .*fwd+bwd B=1 T=$T .*: \([0-9.]*\) tokens\/s.*/\1/p" "$tlog" | head -1)
        torch=${torch:--}
    fi
    echo "$set|$build|$kern|$isa|$peak|$f32|$b16|$ratio|$torch" >>"$ROWS"
done
[ -s "$ROWS" ] || fail "no instruction set ran"

echo
echo "## $PRESET step, B=1, T=$T, $THREADS threads: $(uname -m), ${model:-unknown model}, $(nproc) cores,"
echo "## instruction sets $(head -1 "$ROWS" | cut -d'|' -f4), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u +%F)"
echo
echo "| kernels (build) | FMA peak of their vectors | fp32 step | fraction of that peak | bf16 step (x fp32) | PyTorch fp32, same ISA | ours / PyTorch |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
while IFS='|' read -r set build kern _isa peak f32 b16 ratio torch; do
    read -r tok gf pct <<<"$f32"
    vs="-"
    [ "$torch" != "-" ] && vs=$(awk -v a="$tok" -v b="$torch" 'BEGIN { printf "%.2fx", a / b }')
    tcol=$torch
    [ "$torch" != "-" ] && tcol="$torch tokens/s"
    echo "| $set: $kern ($build) | $peak GFLOP/s | $tok tokens/s, $gf GFLOP/s | $pct% | $b16 tokens/s (${ratio}x) | $tcol | $vs |"
done <"$ROWS"
