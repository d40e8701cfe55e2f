"""Reference fixtures for tests/test_quant.c and tests/test_qat.c.

Writes tests/fixtures/quant/quant.safetensors (about 90 KB) with an independent
torch implementation of the int4 rule of model/ops/quant.h (the one quantizer
that training and every exporter use), and torch's own bf16/fp16 rounding for
the A16 check:

  w                      F32 [8, 256]  test weights (see make_weights)
  g{G}_{asym|sym}_scale  F32 [8, 256/G] fp16 scale, as float32
  g{G}_{asym|sym}_zero   F32 [8, 256/G] fp16 zero, as float32 (0 for sym)
  g{G}_{asym|sym}_codes  U8  [8, 256]   codes 0..15
  g{G}_{asym|sym}_deq    F32 [8, 256]   (codes - 8) * scale (+ zero), float32
  a16_in                 F32 [N]       activations incl. ties, subnormals, overflow, inf, nan
  a16_bf16 / a16_fp16    F32 [N]       a16_in.to(bfloat16 / float16).float()

for G in 32, 64, 128. The rule (asymmetric): per (row, group) mn, mx;
s = (mx - mn) / 15 in float32; scale = fp16(s); zero = fp16(mn + 8 * s);
u = clamp(round_half_even((x - zero) / scale) + 8, 0, 15) with the fp16 values;
scale 0 -> u = 8. Symmetric: scale = fp16(max|x| / 7), zero 0, u clamped to 1..15.

Run from the repo root:  tests/.venv/bin/python tests/ref/make_quant_fixtures.py
Deterministic (fixed seed, single thread): a rerun rewrites identical bytes.
"""
import os
import sys

import torch
from safetensors.torch import save_file

ROWS, COLS = 8, 256


def make_weights():
    g = torch.Generator().manual_seed(1234)
    w = torch.zeros(ROWS, COLS, dtype=torch.float32)
    w[0] = torch.randn(COLS, generator=g) * 0.02                      # typical weights
    w[1] = torch.randn(COLS, generator=g) * 3.0                       # wide, with outliers
    w[1, 5], w[1, 77], w[1, 200] = 40.0, -35.0, 50.0
    w[2] = 0.5 + 1.5 * torch.rand(COLS, generator=g)                  # all positive
    # Exact half-step ties for the asymmetric grid: every 32-block holds 0 and
    # 1.875, so scale = 0.125 and zero = 1.0 exactly for every group size, and
    # odd multiples of 1/16 fall exactly between two codes.
    k = torch.arange(COLS) % 32
    w[3] = torch.where(k == 0, 0.0, torch.where(k == 1, 1.875, ((k - 2) % 31) * 0.0625))
    # Ties for the symmetric grid: max|x| = 1.75 -> scale 0.25; x / scale = odd / 2.
    w[4] = torch.where(k == 0, 1.75, torch.where(k == 1, -1.75, ((k - 2) % 29) * 0.125 - 1.75))
    # Constant groups (0.3 is not fp16-exact) and a range too small for an fp16
    # scale (it rounds to 0).
    w[5, :128] = 0.3
    w[5, 128:] = 1e-3 + torch.arange(128, dtype=torch.float32) * 1e-9
    # Subnormal fp16 scales: range ~1e-5 around 1e-3.
    w[6] = 1e-3 + torch.rand(COLS, generator=g) * 1e-5
    # An all-zero half and large values.
    w[7, 128:] = torch.randn(128, generator=g) * 1000.0
    return w


def rtn(w, group, sym):
    rows, cols = w.shape
    x = w.reshape(rows, cols // group, group)
    if sym:
        amax = x.abs().amax(-1)
        scale = (amax / 7).to(torch.float16)
        zero = torch.zeros_like(scale)
        lo = 1
    else:
        mn, mx = x.amin(-1), x.amax(-1)
        s = (mx - mn) / 15
        scale = torch.where(mx == mn, torch.zeros_like(s), s).to(torch.float16)
        zero = (mn + 8 * s).to(torch.float16)
        lo = 0
    sf, zf = scale.float()[..., None], zero.float()[..., None]
    safe = torch.where(sf == 0, torch.ones_like(sf), sf)
    u = (torch.round((x - zf) / safe) + 8).clamp(lo, 15)   # torch.round: half to even
    u = torch.where(sf == 0, torch.full_like(u, 8.0), u)
    deq = (u - 8) * sf
    if not sym:
        deq = deq + zf
    return (scale.float(), zero.float(), u.to(torch.uint8).reshape(rows, cols), deq.reshape(rows, cols))


def a16_inputs():
    g = torch.Generator().manual_seed(99)
    special = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, -65520.0, 1e6, 6.1e-5, 6.0e-8, 2.9802322e-8,
               2.9802326e-8, 1e-9, 1e-40, float("inf"), float("-inf"), float("nan"), 3.0e38, -3.4e38]
    # Exact bf16 ties (low 16 bits 0x8000, both parities) and fp16 ties (low 13 bits 0x1000).
    ties = torch.tensor([0x3F808000, 0x3F818000, 0xBF808000, 0x3F801000, 0x3F803000, 0x477FF000, 0x387FF000],
                        dtype=torch.int64).to(torch.int32).view(torch.float32)
    rnd = torch.randn(200, generator=g) * torch.logspace(-9, 6, 200)
    return torch.cat([torch.tensor(special, dtype=torch.float32), ties, rnd.float()])


def main():
    torch.set_num_threads(1)
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/quant"
    os.makedirs(out, exist_ok=True)
    w = make_weights()
    tensors = {"w": w}
    for group in (32, 64, 128):
        for sym in (False, True):
            scale, zero, codes, deq = rtn(w, group, sym)
            name = f"g{group}_{'sym' if sym else 'asym'}"
            tensors[f"{name}_scale"] = scale.contiguous()
            tensors[f"{name}_zero"] = zero.contiguous()
            tensors[f"{name}_codes"] = codes.contiguous()
            tensors[f"{name}_deq"] = deq.contiguous()
    x = a16_inputs()
    tensors["a16_in"] = x
    tensors["a16_bf16"] = x.to(torch.bfloat16).float()
    tensors["a16_fp16"] = x.to(torch.float16).float()
    path = os.path.join(out, "quant.safetensors")
    save_file(tensors, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, torch {torch.__version__})")


if __name__ == "__main__":
    main()
