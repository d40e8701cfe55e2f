"""Reference GGUF files for tests/test_gguf.c, written by llama.cpp's own Python
package `gguf` (gguf-py, pinned in tests/requirements-ci.txt), never by our C code.

Writes tests/fixtures/gguf/:

- quant_ref.gguf (alignment 64): metadata of every value type, and a float32
  matrix "x" [8 rows x 64] with awkward values (ties, zero and constant blocks,
  half-way cases, large and tiny magnitudes), stored as
  "x.<type>"      x quantized by gguf.quants.quantize (F16, BF16, Q8_0, Q4_0, Q4_1:
                  llama.cpp's reference rounding), raw bytes in that type, and
  "deq.<type>"    gguf.quants.dequantize of those bytes, as F32.
  The C test quantizes "x" itself and must produce the same bytes, and must
  dequantize "x.<type>" to exactly "deq.<type>".
- qwen3-tied.gguf, llama-noqk.gguf: the HF fixture models of tests/fixtures/hf
  converted the way llama.cpp's convert_hf_to_gguf.py does it (key types,
  tensor names, reversed shapes, norms in F32, the other weights in their
  stored dtype, llama q/k rows permuted for interleaved RoPE, no output.weight
  when tied). `pocket import` of these must give the same parameters as
  `pocket import` of the HF folder, bit for bit.

Run from the repo root with a Python that has gguf==0.19.0 and numpy:
    python tests/ref/make_gguf_fixtures.py [--out DIR]
Deterministic: a rerun writes identical files.
"""
import argparse
import json
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests/fixtures/hf"


def awkward_matrix():
    rng = np.random.default_rng(20261129)
    x = np.zeros((8, 64), dtype=np.float32)
    x[0] = rng.normal(0, 0.1, 64)
    # Ties of the largest magnitude (Q4_0 keeps the first), and values on the
    # half-way points of the code grid.
    x[1, :32] = np.linspace(-3, 3, 32)
    x[1, 5] = -3.0
    x[1, 32:] = (np.arange(32) - 16) * 0.375 + 0.1875
    x[2, :32] = 0.0                      # all-zero block: d = 0
    x[2, 32:] = 0.7                      # constant block: Q4_1 d = 0
    x[3, :32] = rng.normal(0, 1000, 32)  # large
    x[3, 32:] = rng.normal(0, 1e-6, 32)  # fp16 subnormal scales
    x[4, :32] = np.arange(32) - 16
    x[4, 32:] = rng.uniform(-1, 1, 32)
    x[5] = rng.standard_t(2, 64)         # heavy tails
    x[6] = np.where(np.arange(64) % 2 == 0, 1.0, -1.0) * rng.uniform(0.5, 1.5, 64)
    x[7] = rng.normal(0, 0.02, 64)
    return x.astype(np.float32)


def write_quant_ref(out: Path):
    w = gguf.GGUFWriter(str(out / "quant_ref.gguf"), arch="test")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "h\u00e9llo \u65e5\u672c")
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", -2.5e-300)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_str", ["a", "bc", "\u65e5\u672c"])
    x = awkward_matrix()
    w.add_tensor("x", x)
    for qt in (Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
        q = gguf.quants.quantize(x, qt)
        raw = q.view(np.uint8) if qt != Q.F16 else q
        w.add_tensor(f"x.{qt.name.lower()}", raw, raw_dtype=qt)
        w.add_tensor(f"deq.{qt.name.lower()}", gguf.quants.dequantize(raw.view(np.uint8), qt).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_safetensors(folder: Path):
    """name -> (dtype string, shape, raw bytes) for every tensor, shards included."""
    files = sorted(folder.glob("model*.safetensors"))
    out = {}
    for f in files:
        data = f.read_bytes()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], data[8 + n + a:8 + n + b])
    return out


def to_f32(dtype, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype=np.float32).copy()
    if dtype == "F16":
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    if dtype == "BF16":
        return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    raise ValueError(dtype)


def llama_permute(w, n_head):
    # convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


BLOCK = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    layer, rest = parts[2], ".".join(parts[3:-1])
    return f"blk.{layer}.{BLOCK[rest]}.weight"


def write_model(out: Path, model: str):
    folder = HF / model
    cfg = json.loads((folder / "config.json").read_text())
    arch = cfg["model_type"]
    w = gguf.GGUFWriter(str(out / f"{model}.gguf"), arch=arch)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_name(model)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if arch == "llama":
        w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model("none")
    tensors = read_safetensors(folder)
    dtypes = {dt for dt, _, _ in tensors.values()}
    assert len(dtypes) == 1, dtypes
    stored = dtypes.pop()
    w.add_file_type({"F32": 0, "F16": 1, "BF16": 32}[stored])
    for name in sorted(tensors, key=lambda n: (n.count("layers"), n)):
        dtype, shape, raw = tensors[name]
        if len(shape) == 1 or name.endswith("norm.weight"):
            w.add_tensor(gguf_name(name), to_f32(dtype, raw).reshape(shape))
            continue
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            n_head = cfg["num_attention_heads"] if ".q_proj." in name else cfg["num_key_value_heads"]
            words = np.frombuffer(raw, dtype=np.uint16).reshape(shape)
            raw = llama_permute(words, n_head).tobytes()
        qt = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16}[dtype]
        elem = np.float32 if dtype == "F32" else (np.float16 if dtype == "F16" else np.uint16)
        arr = np.frombuffer(raw, dtype=elem).reshape(shape)
        if dtype == "BF16":
            arr = arr.view(np.uint8).reshape(shape[0], shape[1] * 2)
        w.add_tensor(gguf_name(name), arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/gguf")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    write_quant_ref(args.out)
    for model in ("qwen3-tied", "llama-noqk"):
        write_model(args.out, model)
    for f in sorted(args.out.glob("*.gguf")):
        print(f"{f}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
