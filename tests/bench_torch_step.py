"""The reference side of the model-step benchmark: the same training step as
tests/bench_model.c (pocket-0.3b, random weights, B=1) in PyTorch with
transformers' Qwen3ForCausalLM, on the same number of threads, in fp32 and
with torch.autocast("cpu", dtype=torch.bfloat16) (bf16 matmuls from fp32
master weights, as pocket's [train] matmul = bf16), so that each of our two
precisions has a like-for-like reference.

What is timed, like bench_model.c: forward + loss + backward of one sequence,
gradients zeroed (kept allocated) outside the timer, best of `--steps` steps
after one warm-up step. The AdamW step is timed on its own afterwards and
reported separately (bench_model.c has no optimizer step), and the peak RSS is
read before the optimizer state exists, so it covers the same things as ours:
parameters, gradients, activations (plus the Python, torch and transformers
libraries themselves, which the report states).

GFLOP/s use the same count as model/config.c config_train_flops_per_token:
6 x (matmul parameters) + 12 x layers x heads x head_dim x T per token. The
matmul parameter count is taken from the torch model itself (every 2-D
weight, the tied embedding once) and checked against the formula.

Under autocast the forward runs inside the autocast context and the backward
outside it, as PyTorch documents; the peak RSS of each precision is measured
from a reset high-water mark (Linux), so the bf16 figure does not inherit the
fp32 one.

usage: bench_torch_step.py [--threads 2] [--T 512] [--steps 2] [--mem-T 1024]
                           [--precisions fp32,bf16] [--attn sdpa|eager]
                           [--adamw-steps 2] [--peak GFLOPS] [--summary FILE]
                           [--layers 28]
Thread count must be fixed before torch starts its pools, so run this script
with OMP_NUM_THREADS set to the same number (tests/bench.sh does).
"""
import argparse
import os
import re
import resource
import sys
import tempfile
import time


def rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1048576.0   # KiB on Linux


def vm_gb(field):
    """A Vm* line of /proc/self/status in GB (VmHWM: peak RSS since start or the last reset)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1048576.0
    return float("nan")


def reset_peak_rss():
    """Start VmHWM again from the current RSS (Linux 4.0+), so a later peak
    covers only what ran since."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def mkl_path(torch):
    """The first line MKL prints in verbose mode names the code path it chose
    for this CPU (e.g. "Intel(R) AVX-512 ... enabled processors"); it goes to
    fd 1 from C, so fd 1 is pointed at a file while one small linear runs."""
    if not torch.backends.mkl.is_available():
        return "no MKL"
    a = torch.randn(64, 64)
    sys.stdout.flush()
    with tempfile.TemporaryFile() as f:
        saved = os.dup(1)
        os.dup2(f.fileno(), 1)
        try:
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                torch.nn.functional.linear(a, a)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        out = f.read().decode(errors="replace")
    m = re.search(r"MKL_VERBOSE (.*?) Product build \S+ for .*?architecture (.*?), Lnx", out)
    gemm = "SGEMM" if "SGEMM" in out else "no SGEMM call seen"
    return f"{m.group(1)}, code path for \"{m.group(2)}\", {gemm} for an fp32 linear" if m \
        else "MKL (path not reported)"


def blas_backend(torch):
    """The BLAS torch was built with and the SIMD level its own kernels use."""
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = m.group(1) if m else "unknown"
    return f"BLAS {blas} ({mkl_path(torch) if blas == 'mkl' else 'MKL not used'}), " \
           f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()}"


def flops_per_token(cfg, T):
    """model/config.c config_train_flops_per_token, written again in Python."""
    H, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    matmul = cfg.num_hidden_layers * (2 * H * q + 2 * H * kv + 3 * H * cfg.intermediate_size) + cfg.vocab_size * H
    attn = 12.0 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * T
    return 6.0 * matmul + attn, matmul


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2, help="timed steps after the warm-up; the best is reported")
    ap.add_argument("--mem-T", type=int, default=1024, help="one more step at this T for the memory figure (0: none)")
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    ap.add_argument("--precisions", default="fp32,bf16",
                    help="comma list: fp32 (plain), bf16 (torch.autocast cpu bfloat16)")
    ap.add_argument("--adamw-steps", type=int, default=2, help="timed AdamW steps (0: none)")
    ap.add_argument("--peak", type=float, default=0.0, help="fp32 FMA peak in GFLOP/s measured by the C benches (tests/bench.sh passes it)")
    ap.add_argument("--summary", help="append tab-separated summary rows here (see tests/bench.sh)")
    ap.add_argument("--layers", type=int, default=28, help="fewer layers for a quick try (then not pocket-0.3b)")
    args = ap.parse_args()

    t_import = time.perf_counter()
    import torch
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.set_num_threads(args.threads)
    import_s = time.perf_counter() - t_import
    print(f"== bench_torch_step: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    print(f"  kernels: {blas_backend(torch)}")
    print(f"  OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}, "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', 'unset')}; imports took {import_s:.1f} s, "
          f"RSS after imports {vm_gb('VmRSS'):.2f} GB")

    cfg = Qwen3Config(vocab_size=65536, hidden_size=896, intermediate_size=2560, num_hidden_layers=args.layers,
                      num_attention_heads=14, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
                      rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=max(args.T, args.mem_T, 2048),
                      attention_bias=False, attention_dropout=0.0)
    torch.manual_seed(1)
    model = Qwen3ForCausalLM._from_config(cfg, attn_implementation=args.attn, dtype=torch.float32)
    model.train()
    matmul_params = sum(p.numel() for p in model.parameters() if p.dim() == 2)   # the tied embedding once
    _, matmul_formula = flops_per_token(cfg, args.T)
    if matmul_params != matmul_formula:
        sys.exit(f"bench_torch_step: the model has {matmul_params} matmul parameters, the formula {matmul_formula}")
    n_params = sum(p.numel() for p in model.parameters())
    name = "pocket-0.3b" if args.layers == 28 else f"pocket-0.3b-{args.layers}L"
    attn = model.config._attn_implementation
    print(f"  {name}: {n_params / 1e6:.1f} M parameters ({matmul_params / 1e6:.1f} M in matmuls), fp32, B=1, "
          f"attention {attn}, loss = transformers' own (labels=input ids, shifted inside)")
    for p in model.parameters():   # gradients allocated once, as bench_model's memory plan does
        p.grad = torch.zeros_like(p)
    rss_model = vm_gb("VmRSS")

    def step(T, gen, prec):
        ids = torch.randint(0, cfg.vocab_size, (1, T), generator=gen)
        model.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss   # mean over the T-1 shifted targets, as ours
        loss.backward()
        return time.perf_counter() - t0, loss.item()

    def report(T, dt, how, prec, steps_only):
        fpt, _ = flops_per_token(cfg, T)
        gflops = fpt * T / dt / 1e9
        frac = 100 * gflops / args.peak if args.peak > 0 else None
        peak = rss_gb()
        during = vm_gb('VmHWM') if steps_only else peak
        label = "fp32" if prec == "fp32" else "autocast bf16"
        print(f"torch {name} fwd+bwd B=1 T={T} ({attn}, {label}): {T / dt:.1f} tokens/s, {gflops:.1f} GFLOP/s"
              + (f" = {frac:.1f}% of fp32 peak" if frac is not None else "")
              + f", step {dt:.2f} s ({how}), peak RSS {during:.2f} GB ("
              + (f"highest during the {label} steps; " if steps_only else "whole process; ")
              + f"after building model and grads {rss_model:.2f} GB)")
        return (f"model fwd+bwd T={T}", f"torch {attn} {label}", args.threads, f"{T / dt:.1f} tok/s",
                f"{gflops:.1f}", f"{during:.2f} GB", how)

    rows = []
    for prec in [p.strip() for p in args.precisions.split(",") if p.strip()]:
        if prec not in ("fp32", "bf16"):
            sys.exit(f"bench_torch_step: unknown precision {prec!r} (fp32, bf16)")
        gen = torch.Generator().manual_seed(7)
        steps_only = reset_peak_rss()   # VmHWM from here on covers this precision's steps alone
        dt, loss = step(args.T, gen, prec)
        print(f"  {prec}: warmup step {dt:.2f} s (loss {loss:.4f})")
        n = max(1, args.steps)
        best = min(step(args.T, gen, prec)[0] for _ in range(n))
        rows.append(report(args.T, best, f"best of {n}", prec, steps_only))
        if args.mem_T:
            dt, _ = step(args.mem_T, gen, prec)
            rows.append(report(args.mem_T, dt, "1 step", prec, steps_only))

    if args.adamw_steps > 0:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        opt.step()   # creates m and v (not timed)
        times = []
        for _ in range(args.adamw_steps):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        print(f"torch AdamW step ({n_params / 1e6:.1f} M parameters, torch's default foreach): {min(times):.3f} s "
              f"(best of {args.adamw_steps}), peak RSS with the optimizer state {rss_gb():.2f} GB")
        rows.append(("AdamW step alone", "torch", args.threads, f"{min(times):.3f} s/step", "-",
                     f"{rss_gb():.2f} GB", f"best of {args.adamw_steps}"))

    if args.summary:
        with open(args.summary, "a", encoding="utf-8") as f:
            for r in rows:
                f.write("\t".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
