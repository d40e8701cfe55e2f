"""A float64 Qwen3 / Llama in transformers that is float64 throughout.

Loaded with dtype=torch.float64, transformers still computes three things of these decoders in float32: RMSNorm
(the input is cast to float32 and back), the RoPE angles (inv_freq and position * inv_freq are float32) and the
eager attention softmax (dtype=torch.float32). Their forward and backward then carry float32 rounding, as large as
the float32 C decoder's own, and a reference meant to stand for the exact values does not. `use_float64()` replaces
those three with the same formulas evaluated in the input's dtype (float64); in float32 they are unchanged, so the
float32 fixtures are not touched by it. Import it and call it before the model is built.
"""
import copy
import math

import torch
from torch import nn


def _rms_norm_forward(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _default_rope_parameters(config, device=None, **kwargs):
    base = config.rope_parameters["rope_theta"]
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)), 1.0


@torch.no_grad()
def _rope_forward(self, x, position_ids):
    dtype = torch.promote_types(x.dtype, torch.float32)
    freqs = position_ids[..., None].to(dtype) * self.inv_freq.to(device=x.device, dtype=dtype)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def _eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    groups = module.num_key_value_groups
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1, dtype=query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def use_float64():
    """Patches transformers' Qwen3 and Llama modules (RMSNorm, rotary embedding, eager attention) as described
    above. Models built after the call use them."""
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen3 import modeling_qwen3
    for mod, prefix in ((modeling_qwen3, "Qwen3"), (modeling_llama, "Llama")):
        getattr(mod, prefix + "RMSNorm").forward = _rms_norm_forward
        rope = getattr(mod, prefix + "RotaryEmbedding")
        rope.compute_default_rope_parameters = staticmethod(_default_rope_parameters)
        rope.forward = _rope_forward
        mod.eager_attention_forward = _eager_attention


def float32_floor(model, grads64, grads_of):
    """How far PyTorch's own float32 run of a case lands from its float64 gradients: ||g32 - g64|| / ||g64|| over
    every parameter, g32 = grads_of(a float32 copy of model) (the case's forward and backward; its gradients by
    parameter name), grads64 the float64 ones by name. Rounding to float32 once per operation moves a whole gradient
    of these tiny decoders by about 1e-6; the C tests hold a float32 implementation to 1e-6 or twice this figure."""
    g32 = grads_of(copy.deepcopy(model).to(torch.float32))
    d2 = sum(float(((g32[name].to(torch.float64) - g) ** 2).sum()) for name, g in grads64.items())
    w2 = sum(float((g ** 2).sum()) for g in grads64.values())
    return math.sqrt(d2 / w2)
