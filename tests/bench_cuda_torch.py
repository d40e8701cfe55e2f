"""The PyTorch side of the GPU benchmark: the training step that
tests/bench_cuda.c times (forward + loss + backward of pocket-0.3b with random
weights), in PyTorch + transformers' Qwen3ForCausalLM with the same config
(the config.json bench_cuda --config-out writes), the same T and the same
batch rule (the largest power-of-two B with B x T <= --tokens), on the GPU:

  sdpa      fp32 master weights, torch.autocast("cuda", bfloat16) (bf16
            matmuls, as pocket's MATMUL_BF16), attn_implementation="sdpa"
            (PyTorch picks its flash / memory-efficient kernel);
  compile   the same under torch.compile (default mode), when time allows.

Timed like bench_cuda.c: gradients zeroed outside the timer, best of --steps
steps after one warm-up step (which also compiles), synchronized. TFLOP/s and
MFU use the same count as model/config.c (6 x matmul parameters + 12 L nh hd T
per token) against 989 TFLOP/s dense bf16. Peak memory: PyTorch's allocator
peak (max_memory_allocated) and, like bench_cuda, total minus the least free
memory cudaMemGetInfo reported (that includes the CUDA context).

usage: bench_cuda_torch.py --config CONFIG.json [--T 1024 4096] [--tokens 16384]
                           [--steps 3] [--modes sdpa,compile] [--deadline SECONDS]
--deadline: seconds after which no new configuration starts (compiling the
28-layer model takes a minute or more per shape).
"""
import argparse
import time

PEAK_BF16_TFLOPS = 989.0


def flops_per_token(cfg, T):
    H, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    matmul_params = cfg.num_hidden_layers * (2 * H * q + 2 * H * kv + 3 * H * cfg.intermediate_size) + cfg.vocab_size * H
    return 6.0 * matmul_params + 12.0 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--modes", default="sdpa,compile")
    ap.add_argument("--deadline", type=float, default=300.0)
    args = ap.parse_args()
    start = time.time()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config.from_json_file(args.config)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").cuda()
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"== torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}; "
          f"{type(model).__name__} {n_params / 1e6:.0f}M parameters (fp32 masters), bf16 autocast, sdpa", flush=True)

    for mode in args.modes.split(","):
        run_model = torch.compile(model) if mode == "compile" else model
        for T in args.T:
            if time.time() - start > args.deadline:
                print(f"torch {mode} T={T}: skipped, past the {args.deadline:.0f}s deadline", flush=True)
                continue
            B = 1
            while 2 * B * T <= args.tokens:
                B *= 2
            ids = torch.randint(0, cfg.vocab_size, (B, T), device="cuda")
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            total = torch.cuda.mem_get_info()[1]
            min_free = torch.cuda.mem_get_info()[0]
            best, loss, t_first = float("inf"), float("nan"), 0.0
            for s in range(args.steps + 1):
                model.zero_grad(set_to_none=False)
                torch.cuda.synchronize()
                t0 = time.time()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = run_model(input_ids=ids, labels=ids)
                out.loss.backward()
                torch.cuda.synchronize()
                dt = time.time() - t0
                min_free = min(min_free, torch.cuda.mem_get_info()[0])
                loss = out.loss.item()
                if s == 0:
                    t_first = dt
                else:
                    best = min(best, dt)
            tflops = flops_per_token(cfg, T) * B * T / best / 1e12
            print(f"torch {mode} T={T} B={B} bf16 autocast: {B * T / best:.0f} tokens/s, {tflops:.1f} TFLOP/s, "
                  f"MFU {100 * tflops / PEAK_BF16_TFLOPS:.1f}% of {PEAK_BF16_TFLOPS:.0f}, step {best:.3f} s "
                  f"(best of {args.steps}; first step {t_first:.1f} s), peak GPU memory "
                  f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, {(total - min_free) / 2**30:.2f} GiB "
                  f"in use, loss {loss:.4f}", flush=True)
            del ids, out
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
