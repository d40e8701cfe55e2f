#!/usr/bin/env bash
# tests/bench.sh: the driver `make bench` calls. It builds nothing: it runs the
# C benchmarks that are already built and, in the same run, the reference
# frameworks on the same work, then prints one summary table.
#
#   1. every BENCH_DIR/bench_* binary (bench_matmul, bench_model,
#      bench_attention, bench_loss_bf16, ...), with OMP_NUM_THREADS=THREADS;
#      the fp32 FMA peaks they measure are kept;
#      (bench_sampler: the batched sampler's decode, set beside bench_mnn's
#      MNN decode of the same model in the summary);
#   2. tests/bench_torch_step.py: the same pocket-0.3b training step in torch +
#      transformers (fp32 and autocast bf16, sdpa attention, same threads, same
#      B and T); the AdamW step is timed separately;
#   3. tests/bench_tokenize.py: `pocket tokenize` beside HF tokenizers on the
#      same documents, 1 and THREADS threads, with a token-for-token check.
#   4. tests/bench_mnn.py: the MNN runtime's prefill/decode speed on our
#      pocket-0.3b package (both graph forms) and on MNN's official exporter's
#      package of the same weights, sizes, and the two packages' logits;
#   5. tests/bench_dist.sh (when build-mpi/pocket and mpirun exist): data
#      parallel on this machine, its communication and memory per rank;
#
# The summary's "% of peak" divides each GFLOP/s figure by the HIGHEST fp32 FMA
# peak measured in this run (other work on a shared machine can only lower a
# measurement), so it can differ from the fraction a bench printed with its own.
# bf16 figures use the same fp32 peak and can pass 100% (vdpbf16ps does twice
# the work of an FMA). The last line gives our step speed over PyTorch's, like
# for like (fp32 / fp32, bf16 / autocast bf16) and bf16 over torch fp32.
#
# usage: tests/bench.sh [POCKET [BENCH_DIR]]
# env:   POCKET_KERNELS (unset: the fastest kernels; avx2 measures the AVX2 path, see `pocket --help`),
#        POCKET (./pocket), BENCH_DIR (build/tests), PYTHON (tests/.venv/bin/python),
#        BENCH_THREADS (2), BENCH_TOKENIZE_MB (4), BENCH_REPS (3, tokenizer runs per side),
#        BENCH_MNN_DIR (BENCH_DIR/../bench-mnn)
#
# Timings on a shared machine are noisy: every figure is the best of several
# repetitions (each bench says how many), since other work can only slow a run.
set -uo pipefail

POCKET=${1:-${POCKET:-./pocket}}
BENCH_DIR=${2:-${BENCH_DIR:-build/tests}}
PYTHON=${PYTHON:-tests/.venv/bin/python}
THREADS=${BENCH_THREADS:-2}
TOKENIZE_MB=${BENCH_TOKENIZE_MB:-4}
REPS=${BENCH_REPS:-3}
# bench_mnn's checkpoint and packages (1.5 GB) are kept here between runs.
MNN_DIR=${BENCH_MNN_DIR:-$(dirname "$BENCH_DIR")/bench-mnn}
HERE=$(cd "$(dirname "$0")" && pwd)

fail() { echo "pocket bench: $*" >&2; exit 1; }
case $POCKET in /*) ;; *) POCKET=$PWD/$POCKET ;; esac
[ -x "$POCKET" ] || fail "$POCKET is not an executable pocket binary (build it first: make)"
[ -d "$BENCH_DIR" ] || fail "$BENCH_DIR: no such folder of benchmark binaries (build them first: make bench)"
command -v "$PYTHON" >/dev/null 2>&1 ||
    fail "$PYTHON not found: the reference side needs the test venv (make tests/.venv/ok)"

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/pocket-bench.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
SUMMARY=$LOGS/summary.tsv   # what, who, threads, throughput, GFLOP/s, peak RSS, note (% of peak added at the end)
PEAKS=""                    # "where value" lines, one per fp32 peak measured
failed=""
start=$(date +%s)

section() { printf '\n######## %s\n' "$*"; }
row() { local IFS=$'\t'; echo "$*" >>"$SUMMARY"; }
highest_peak() { printf '%s' "$PEAKS" | awk '$2 > p { p = $2 } END { if (p > 0) print p }'; }

echo "pocket bench: $(uname -m), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
echo "  load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo "  pocket $POCKET, benches in $BENCH_DIR, reference Python $PYTHON, $THREADS threads"
# The CPU model, the instruction sets found and the kernels chosen (POCKET_KERNELS, when set, forces them for
# every C benchmark below; the reference frameworks pick their own).
"$POCKET" --version | sed 's/^/  /'

# ---- 1. the C benchmarks ---------------------------------------------------
for b in "$BENCH_DIR"/bench_*; do
    if [ ! -f "$b" ] || [ ! -x "$b" ]; then continue; fi
    name=$(basename "$b")
    case $name in *.*) continue ;; esac   # objects and dependency files beside the binaries
    log=$LOGS/$name.log
    case $name in
        bench_matmul) section "bench_matmul: the three training matmuls on pocket-0.3b shapes, $THREADS threads (ours, then OpenBLAS sgemm)"
                      args=("$THREADS") ;;
        bench_model)  section "bench_model: pocket-0.3b fwd+bwd, B=1, fp32 / bf16 matmuls, recompute off / on, OMP_NUM_THREADS=$THREADS (ours)"
                      args=() ;;
        bench_loss_bf16) section "bench_loss_bf16: loss curves of bf16 vs fp32 matmuls on a small model, same data and seed (ours)"
                      args=() ;;
        bench_attention) section "bench_attention: causal GQA attention of one pocket-0.3b layer, forward and backward (ours)"
                      args=() ;;
        bench_sampler) section "bench_sampler: the batched sampler decoding pocket-0.3b, 64 rows and one, bf16 / fp32 matmuls (ours; MNN's decode in bench_mnn)"
                      args=() ;;
        *)            section "$name (OMP_NUM_THREADS=$THREADS)"
                      args=() ;;
    esac
    # The small model's many short parallel regions suffer from spinning
    # OpenMP threads whenever the machine is not idle; passive waiting costs
    # it nothing measurable.
    wait_policy=${OMP_WAIT_POLICY:-}
    [ "$name" = bench_loss_bf16 ] && wait_policy=PASSIVE
    if ! env OMP_NUM_THREADS="$THREADS" ${wait_policy:+OMP_WAIT_POLICY="$wait_policy"} "$b" "${args[@]}" 2>&1 | tee "$log"; then
        failed="$failed $name"
        continue
    fi
    case $name in
        bench_model)
            # "== bench_model: fp32 FMA peak (2 threads, avx512): 235.4 GFLOP/s"
            p=$(sed -n 's/.*fp32 FMA peak ([^)]*): \([0-9.]*\) GFLOP\/s.*/\1/p' "$log" | head -1)
            [ -n "$p" ] && PEAKS="$PEAKS"$'\n'"bench_model $p"
            # "pocket-0.3b fwd+bwd B=1 T=512 matmul=bf16 recompute=off: 17.3 tokens/s, 34.0 GFLOP/s = 14.4% of
            #  fp32 peak, step 29.67 s (best of 2), peak RSS 3.10 GB"
            sed -n 's/.* fwd+bwd B=1 T=\([0-9]*\) matmul=\([a-z0-9]*\) recompute=\([a-z]*\): \([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s.*(best of \([0-9]*\)), peak RSS \([0-9.]*\) GB.*/\1 \2 \3 \4 \5 \6 \7/p' "$log" |
                while read -r T prec rc tps gf n rss; do
                    who="pocket $prec"; [ "$rc" = on ] && who="$who recompute"
                    row "model fwd+bwd T=$T" "$who" "$THREADS" "$tps tok/s" "$gf" "$rss GB" "best of $n after warm-up"
                done
            # "pocket-0.3b QAT fwd+bwd (int4 fake-quant + STE) B=1 T=512 matmul=fp32 recompute=off: 16.0 tokens/s, ..."
            sed -n 's/.* QAT fwd+bwd ([^)]*) B=1 T=\([0-9]*\) matmul=\([a-z0-9]*\) [^:]*: \([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s.* peak RSS \([0-9.]*\) GB.*/\1 \2 \3 \4 \5/p' "$log" |
                while read -r T prec tps gf rss; do
                    q=$(sed -n 's/QAT step throughput: \([0-9.]*\)%.*/\1/p' "$log")
                    row "model QAT fwd+bwd T=$T" "pocket $prec" "$THREADS" "$tps tok/s" "$gf" "$rss GB" "$q% of the plain step"
                done
            # "recompute at T=1024 (fp32): peak RSS 4.40 GB off, 2.90 GB on (saves 1.50 GB, 34%); step ..."
            sed -n 's/^recompute at T=1024 (fp32): peak RSS \([0-9.]*\) GB off, \([0-9.]*\) GB on (saves \([0-9.]*\) GB, \([0-9]*\)%); step .*(\([0-9-]*\)% more time).*/\1 \2 \3 \4 \5/p' "$log" |
                while read -r off on saved pct slower; do
                    row "recompute saving T=1024" "pocket fp32" "$THREADS" "-" "-" "$off -> $on GB" "saves $saved GB ($pct%), step +$slower% time"
                done ;;
        bench_loss_bf16)
            # "loss curve agreement bf16 vs fp32 (200 steps): max |loss diff| / loss 1.07e-01 (step 34), of 10-step
            #  means 2.47e-02, mean over the last 20 steps 1.15e-02; ..."
            sed -n 's/^loss curve agreement bf16 vs fp32 (\([0-9]*\) steps): max |loss diff| \/ loss \([0-9.e+-]*\) .*of 10-step means \([0-9.e+-]*\), mean over the last 20 steps \([0-9.e+-]*\);.*/\1 \2 \3 \4/p' "$log" |
                while read -r steps worst smooth tail; do
                    base=$(sed -n 's/.*one ulp up: max \([0-9.e+-]*\) .*of 10-step means \([0-9.e+-]*\),.*/\1 \/ \2/p' "$log")
                    row "loss curve bf16 vs fp32" "pocket" "$THREADS" "-" "-" "-" "$steps steps: max rel diff $worst, 10-step means $smooth, last 20 $tail (fp32 nudged 1 ulp: $base)"
                done ;;
        bench_sampler)
            # "sampler batched, bf16 matmuls   rows 64, 16-token prompts +  64 new:   250.1 new tokens/s,  180.2 GFLOP/s =
            #  40.1% of the bf16 peak"
            sed -n 's/^sampler \(.*[^ ]\) *rows *\([0-9]*\), [0-9]*-token prompts + *\([0-9]*\) new: *\([0-9.]*\) new tokens\/s, *\([0-9.]*\) GFLOP\/s = *\([0-9.]*\)% of the \([a-z0-9]*\) peak.*/\2|\3|\4|\5|\6|\7|\1/p' "$log" |
                while IFS='|' read -r rows new tps gf pct peak what; do
                    row "decode, $rows rows x $new new" "pocket sampler" "$THREADS" "$tps tok/s" "$gf" "-" "$what; $pct% of the $peak peak"
                done ;;
        bench_attention)
            # "attention avx512 T=1024 (14/2 heads of 64): forward 12.50 ms 150.2 GFLOP/s = 63.8% of peak, backward
            #  27.50 ms 136.6 GFLOP/s = 58.0% of peak (best of 5)"
            sed -n 's/^attention \([a-z0-9+]*\) T=\([0-9]*\) [^:]*: forward \([0-9.]*\) ms \([0-9.]*\) GFLOP\/s.*backward \([0-9.]*\) ms \([0-9.]*\) GFLOP\/s.*(best of \([0-9]*\)).*/\1 \2 \3 \4 \5 \6 \7/p' "$log" |
                while read -r kern T fms fgf bms bgf n; do
                    row "attention layer T=$T" "pocket $kern" "$THREADS" "fwd $fms / bwd $bms ms" "$fgf / $bgf" "-" "causal FLOPs, best of $n"
                done ;;
        bench_matmul)
            # OpenBLAS in a process of its own, so neither library's spinning
            # idle threads slow the other.
            # With our kernels forced to AVX2, OpenBLAS gets its AVX2 (Haswell) kernels, like for like.
            blas_core=()
            case ${POCKET_KERNELS:-} in avx2*) blas_core=(OPENBLAS_CORETYPE=Haswell) ;; esac
            echo "(OpenBLAS sgemm, same shapes: OPENBLAS_L2_SIZE unset for this command only; ${blas_core[*]:-OPENBLAS_CORETYPE unset})"
            env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "${blas_core[@]}" OMP_NUM_THREADS="$THREADS" "$b" "$THREADS" --blas 2>&1 |
                tee "$LOGS/bench_matmul_blas.log" | grep -v '^== bench_matmul: \(kernel\|bf16\)'
            cat "$LOGS/bench_matmul_blas.log" >>"$log"
            # "== bench_matmul: kernel avx512, 2 threads, fp32 FMA peak 235.8 GFLOP/s (measured 235.7 before, 235.8 after)"
            p=$(sed -n 's/.*fp32 FMA peak \([0-9.]*\) GFLOP\/s.*/\1/p' "$log" | head -1)
            [ -n "$p" ] && PEAKS="$PEAKS"$'\n'"bench_matmul $p"
            # "gate/up     1024   896   2560 bf16 |  120.1 GF/s  51.0% pk | ... | ..."
            awk -F'|' -v th="$THREADS" '/ GF\/s .*% pk/ {
                f = "";
                for (i = 2; i <= 4; i++) { split($i, v, " +"); f = f (f ? " / " : "") v[2] }
                shape = $1; sub(/ +$/, "", shape); gsub(/  +/, " ", shape);
                prec = shape; sub(/.* /, "", prec); sub(/ [a-z0-9]+$/, "", shape);
                who = prec == "blas" ? "OpenBLAS sgemm" : "pocket " prec
                printf "matmul %s\t%s\t%s\tfwd / dX / dW\t%s\t-\tbench_matmul, best of 3+\n", shape, who, th, f }' "$log" >>"$SUMMARY" ;;
    esac
done
PEAK=$(highest_peak)
[ -n "$PEAK" ] || echo "pocket bench: no fp32 peak measured by the C benches; no fraction of peak" >&2

# ---- 2. the same training step in PyTorch ----------------------------------
section "bench_torch_step: the same pocket-0.3b step in torch + transformers (reference), $THREADS threads"
echo "(OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this command only: they slow current numpy/torch builds)"
# With our kernels forced to AVX2, PyTorch is held to AVX2 too (ATen's kernels, MKL, oneDNN), like for like.
# Its autocast bf16 then has no bf16 kernels and takes minutes a step (320 s at T=1024 here): fp32 only.
torch_isa=() torch_precisions=fp32,bf16
case ${POCKET_KERNELS:-} in avx2*)
    torch_isa=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2)
    torch_precisions=fp32
    echo "(POCKET_KERNELS=$POCKET_KERNELS: PyTorch runs with ${torch_isa[*]}, fp32 only)" ;;
esac
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" "${torch_isa[@]}" \
    "$PYTHON" "$HERE/bench_torch_step.py" --threads "$THREADS" --precisions "$torch_precisions" \
    ${PEAK:+--peak "$PEAK"} --summary "$SUMMARY" ||
    failed="$failed bench_torch_step"

# ---- 3. tokenizer throughput beside HF tokenizers ---------------------------
section "bench_tokenize: pocket tokenize vs HF tokenizers, same documents, 1 and $THREADS threads"
"$PYTHON" "$HERE/bench_tokenize.py" --pocket "$POCKET" --threads "1,$THREADS" --mb "$TOKENIZE_MB" \
    --reps "$REPS" --summary "$SUMMARY" || failed="$failed bench_tokenize"

# ---- 4. the MNN runtime on our package, beside MNN's own exporter -------------
section "bench_mnn: MNN runtime (PyPI MNN 3.6.1) on our pocket-0.3b package and on llmexport's, $THREADS threads"
"$PYTHON" "$HERE/bench_mnn.py" "$POCKET" "$MNN_DIR" --threads "$THREADS" --llmexport --summary "$SUMMARY" ||
    failed="$failed bench_mnn"

# ---- 5. data parallel: 2 ranks x 1 thread against 1 rank x 2 threads --------
MPI_POCKET=${BENCH_MPI_POCKET:-build-mpi/pocket}
if [ -x "$MPI_POCKET" ] && command -v mpirun >/dev/null 2>&1; then
    section "bench_dist: pocket-0.3b data parallel on this machine (MPI), ZeRO-1 memory and communication"
    bash "$HERE/bench_dist.sh" "$MPI_POCKET" "$(dirname "$BENCH_DIR")/bench-dist" || failed="$failed bench_dist"
fi

# ---- summary ---------------------------------------------------------------
section "summary ($(( $(date +%s) - start )) s, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
if [ -n "$PEAK" ]; then
    echo "% of peak: GFLOP/s over the highest fp32 FMA peak measured in this run, $PEAK GFLOP/s on $THREADS threads" \
         "(bf16 rows too: their own peak is twice that)" \
         "(measured:$(printf '%s' "$PEAKS" | awk 'NF { printf " %s %s", $1, $2 }'))"
fi
echo "each figure is the best of its repetitions (see the sections above); tokenize MB/s count document text bytes"
{
    printf 'what\twho\tthreads\tthroughput\tGFLOP/s\tpeak RSS\tnote\n'
    cat "$SUMMARY"
} | awk -F'\t' -v peak="${PEAK:-0}" '
    function pct(gf,   n, v, i, s) {   # "a / b / c" GFLOP/s -> "x% / y% / z%"
        if (peak <= 0 || gf !~ /^[0-9]/) return "-"
        n = split(gf, v, " / "); s = ""
        for (i = 1; i <= n; i++) s = s (i > 1 ? " / " : "") sprintf("%.1f%%", 100 * v[i] / peak)
        return s
    }
    {   # insert the "% of peak" column after GFLOP/s
        n = 0
        for (i = 1; i <= NF; i++) {
            cell[NR, ++n] = $i
            if (i == 5) cell[NR, ++n] = (NR == 1 ? $i : pct($5))
        }
        if (NR == 1) cell[NR, 6] = "% of peak"
        if (n > nf) nf = n
        for (i = 1; i <= n; i++) if (length(cell[NR, i]) > w[i]) w[i] = length(cell[NR, i])
    }
    END {
        for (r = 1; r <= NR; r++) {
            line = ""
            for (i = 1; i <= nf; i++) line = line sprintf(i < nf ? "%-" w[i] "s | " : "%s", cell[r, i])
            print line
            if (r == 1) {
                sep = ""
                for (i = 1; i <= nf; i++) { d = sprintf("%" w[i] "s", ""); gsub(/ /, "-", d); sep = sep (i > 1 ? "-+-" : "") d }
                print sep
            }
        }
    }'
# Step speed against PyTorch, like for like, from the rows above.
awk -F'\t' '$1 ~ /^model fwd\+bwd T=/ { T = substr($1, 17); tps[T, $2] = $4 + 0; if (!(T in seen)) { seen[T] = 1; order[++nt] = T } }
    END {
        split("pocket fp32|torch sdpa fp32|pocket bf16|torch sdpa autocast bf16", k, "|")
        for (i = 1; i <= nt; i++) {
            T = order[i]
            if (!(tps[T, k[1]] > 0 && tps[T, k[2]] > 0)) continue
            printf "pocket/torch step speed at T=%s: fp32 vs fp32 %.2fx", T, tps[T, k[1]] / tps[T, k[2]]
            if (tps[T, k[3]] > 0 && tps[T, k[4]] > 0) printf "; bf16 vs autocast bf16 %.2fx", tps[T, k[3]] / tps[T, k[4]]
            if (tps[T, k[3]] > 0) printf "; pocket bf16 vs torch fp32 %.2fx", tps[T, k[3]] / tps[T, k[2]]
            printf "\n"
        }
    }' "$SUMMARY"
if [ -n "$failed" ]; then
    echo "pocket bench: failed:$failed" >&2
    exit 1
fi
