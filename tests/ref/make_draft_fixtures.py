#!/usr/bin/env python3
"""Write the DFlash draft's reference fixture, tests/fixtures/draft/expected.safetensors, with PyTorch.

The draft's pass (model/draft.h) is written here again in torch, in float64,
from its description: the context is hidden_norm(fc(captures)); each draft
layer normalizes the block rows, takes q from them and k, v from the context
rows followed by the block rows (per-head q_norm / k_norm, RoPE at the rows'
positions, grouped-query heads), attends without a causal mask to the
context rows before the block's anchor and to its whole block, then o_proj,
residual, SwiGLU MLP, residual; final norm, the target's lm_head; the loss is
each block position's cross-entropy weighted by exp(-(i-1)/decay) (none at
position 0). Autograd gives every draft weight's gradient; torch's gradcheck
first confirms, in float64, that autograd matches central finite differences
on this very function (a smaller case, every input perturbed).

Stored (float32; integer inputs as exact float32 values): the inputs
(captures, embed, lm_head, every draft weight under its DFlash name,
block_tokens, anchors, targets, pos_weight, and config [H, nq, nkv, hd, V,
theta, eps, layers, block, n_target, d_ff, B, T, A]), and the outputs
logits [R, V], loss [1] (weighted sum), weight [1] (sum of weights of counted
rows), grad.<name> for every draft weight.

Run from the repo root with the pinned venv (tests/ref/README.md):
    tests/.venv/bin/python tests/ref/make_draft_fixtures.py
"""
import argparse
import math
import os

import torch
from safetensors.torch import save_file

torch.set_default_dtype(torch.float64)


def rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    """x [N, heads, hd] at positions pos [N]: rotate-half RoPE, as transformers' Qwen3."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def draft_loss(cfg, W, captures, embed, lm_head, tokens, anchors, targets, pos_weight):
    H, nq, nkv, hd, V, theta, eps, L, blk, nt, F, B, T, A = cfg
    S = B * A
    R = blk * S
    ctx = rms(captures @ W["fc.weight"].T, W["hidden_norm.weight"], eps)          # [B*T, H]
    pos_ctx = torch.arange(T).repeat(B)
    pos_blk = torch.tensor([anchors[s] + i for i in range(blk) for s in range(S)])
    x = embed[tokens]                                                             # [R, H]
    for l in range(L):
        p = f"layers.{l}."
        a = rms(x, W[p + "input_layernorm.weight"], eps)
        q = rope(rms((a @ W[p + "self_attn.q_proj.weight"].T).view(R, nq, hd), W[p + "self_attn.q_norm.weight"], eps),
                 pos_blk, theta)
        def kv(rows, pos):
            k = rms((rows @ W[p + "self_attn.k_proj.weight"].T).view(-1, nkv, hd), W[p + "self_attn.k_norm.weight"], eps)
            return rope(k, pos, theta), (rows @ W[p + "self_attn.v_proj.weight"].T).view(-1, nkv, hd)
        kc, vc = kv(ctx, pos_ctx)
        kb, vb = kv(a, pos_blk)
        att = torch.zeros(R, nq, hd)
        for s in range(S):
            b, n_ctx = s // A, max(0, min(anchors[s], T))
            rows = [i * S + s for i in range(blk)]
            keys = torch.cat([kc[b * T: b * T + n_ctx], kb[rows]], 0)            # [n_ctx + blk, nkv, hd]
            vals = torch.cat([vc[b * T: b * T + n_ctx], vb[rows]], 0)
            for h in range(nq):
                g = h // (nq // nkv)
                sc = q[rows, h] @ keys[:, g].T / math.sqrt(hd)
                att[rows, h] = torch.softmax(sc, -1) @ vals[:, g]
        x = x + att.view(R, nq * hd) @ W[p + "self_attn.o_proj.weight"].T
        m = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        act = torch.nn.functional.silu(m @ W[p + "mlp.gate_proj.weight"].T) * (m @ W[p + "mlp.up_proj.weight"].T)
        x = x + act @ W[p + "mlp.down_proj.weight"].T
    logits = rms(x, W["norm.weight"], eps) @ lm_head.T
    logp = torch.log_softmax(logits, -1)
    loss = torch.zeros(())
    weight = 0.0
    for r in range(R):
        i = r // S
        if i > 0 and targets[r] >= 0:
            loss = loss - pos_weight[i] * logp[r, targets[r]]
            weight += float(pos_weight[i])
    return logits, loss, weight


def names(L):
    out = ["fc.weight", "hidden_norm.weight"]
    for l in range(L):
        for n in ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                  "self_attn.q_norm", "self_attn.k_norm", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                  "mlp.down_proj"]:
            out.append(f"layers.{l}.{n}.weight")
    return out + ["norm.weight"]


def make_case(cfg, seed, anchors):
    H, nq, nkv, hd, V, theta, eps, L, blk, nt, F, B, T, A = cfg
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s, std=0.3: torch.randn(*s, generator=g) * std
    Q, KV = nq * hd, nkv * hd
    shapes = {"fc.weight": (H, nt * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for l in range(L):
        p = f"layers.{l}."
        shapes.update({p + "input_layernorm.weight": (H,), p + "self_attn.q_proj.weight": (Q, H),
                       p + "self_attn.k_proj.weight": (KV, H), p + "self_attn.v_proj.weight": (KV, H),
                       p + "self_attn.o_proj.weight": (H, Q), p + "self_attn.q_norm.weight": (hd,),
                       p + "self_attn.k_norm.weight": (hd,), p + "post_attention_layernorm.weight": (H,),
                       p + "mlp.gate_proj.weight": (F, H), p + "mlp.up_proj.weight": (F, H),
                       p + "mlp.down_proj.weight": (H, F)})
    W = {n: (1 + rnd(*shapes[n], std=0.2)) if len(shapes[n]) == 1 else rnd(*shapes[n]) for n in names(L)}
    S = B * A
    R = blk * S
    captures = rnd(B * T, nt * H, std=1.0)
    embed, lm_head = rnd(V, H, std=1.0), rnd(V, H, std=0.5)
    seq = torch.randint(0, V, (B, T + blk), generator=g)
    mask_token = V - 1
    tokens = [int(seq[s // A, anchors[s]]) if i == 0 else mask_token for i in range(blk) for s in range(S)]
    targets = []
    for i in range(blk):
        for s in range(S):
            p = anchors[s] + i
            targets.append(-1 if i == 0 or p >= T + blk - 1 or (i == 2 and s == 1) else int(seq[s // A, p]))
    decay = 2.0
    pos_weight = [0.0] + [math.exp(-(i - 1) / decay) for i in range(1, blk)]
    return W, captures, embed, lm_head, tokens, targets, pos_weight


def gradcheck_small():
    """Autograd of draft_loss against central differences, in float64, on a small case."""
    cfg = (8, 2, 1, 4, 11, 10000.0, 1e-6, 1, 3, 2, 6, 1, 4, 2)
    anchors = [0, 3]
    W, captures, embed, lm_head, tokens, targets, pw = make_case(cfg, 7, anchors)
    keys = names(cfg[7])

    def f(*ws):
        return draft_loss(cfg, dict(zip(keys, ws)), captures, embed, lm_head, tokens, anchors, targets, pw)[1]

    ws = [W[k].clone().requires_grad_(True) for k in keys]
    assert torch.autograd.gradcheck(f, ws, eps=1e-6, atol=1e-8, rtol=1e-6), "autograd disagrees with finite differences"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/draft")
    args = ap.parse_args()
    gradcheck_small()
    # H, nq, nkv, hd, V, theta, eps, layers, block, n_target, d_ff, B, T, A
    cfg = (32, 4, 2, 8, 48, 10000.0, 1e-6, 2, 4, 2, 40, 2, 9, 2)
    anchors = [3, 9, 0, 6]   # block 1 sees the whole context, block 2 none
    W, captures, embed, lm_head, tokens, targets, pw = make_case(cfg, 1234, anchors)
    for w in W.values():
        w.requires_grad_(True)
    logits, loss, weight = draft_loss(cfg, W, captures, embed, lm_head, tokens, anchors, targets, pw)
    loss.backward()
    f32 = lambda t: t.detach().to(torch.float32).contiguous()
    out = {"config": f32(torch.tensor(cfg)), "captures": f32(captures), "embed": f32(embed), "lm_head": f32(lm_head),
           "block_tokens": f32(torch.tensor(tokens)), "anchors": f32(torch.tensor(anchors)),
           "targets": f32(torch.tensor(targets)), "pos_weight": f32(torch.tensor(pw)), "logits": f32(logits),
           "loss": f32(loss.reshape(1)), "weight": f32(torch.tensor([weight]))}
    for n, w in W.items():
        out["w." + n] = f32(w)
        out["grad." + n] = f32(w.grad)
    os.makedirs(args.out, exist_ok=True)
    save_file(out, os.path.join(args.out, "expected.safetensors"))
    print(f"wrote {args.out}/expected.safetensors: loss {loss.item():.6f}, weight {weight:.4f}")


if __name__ == "__main__":
    main()
