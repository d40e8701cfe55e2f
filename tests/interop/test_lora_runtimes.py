"""LoRA adapters judged by the runtimes that load them.

Adapters are PEFT adapter folders written by PEFT itself (save_pretrained of
get_peft_model over the transformers model of a tiny random checkpoint, A and
B drawn at random so the update is large), made adapter checkpoints by
`pocket import PEFT_DIR --base CKPT [--int4]`. `pocket export --lora` writes
them for:

- MNN 3.6.1 (PyPI wheel): lora.mnn beside the base package, loaded with the
  runtime's create_lora into the process that holds the base (mnn_lora_run.py
  explains why not apply_lora). Its logits for a 64-token prompt equal
  `pocket forward --int4 --lora`, and transformers + PEFT over the base's
  dequantized int4 weights, within the base package's tolerance (2e-4,
  test_mnn_runtime.py), for both graph forms; its greedy 32 tokens equal
  `pocket generate --int4 --lora`'s (and PEFT's) on 4 prompts. MNN's own
  converter reads lora.mnn back: every base op is there unchanged, the
  adapter ops hold A and B x alpha/r, and the layer reads the ADD.
- Multi-LoRA: two adapters (different ranks and targets) in one runtime
  process, switched back and forth: each gives the logits it gives alone,
  the base gives the base's; resident memory after the base and after each
  adapter, on a model whose weights are large enough to see a second copy.
- --merge: the merged package's logits equal transformers over the merged
  weights (W_int4 + alpha/r B A on the base's grid, widened where needed, as
  mnn_lora.h says; quantized here in numpy) within 2e-4; how much of the
  adapter's effect merging loses is printed, with two other grids.
- llama.cpp (llama-cpp-python): gguf-py reads the adapter (keys, types,
  names, shapes); loaded with lora_path on the base GGUF, its greedy 32
  tokens equal `pocket generate --lora` on the weights the files hold, on 4
  prompts, for qwen3 and for the llama architecture (whose q/k rows are
  permuted), f32 and f16. A QLoRA adapter exports to GGUF as well.
- Bad input: no base package in --out, a package of another checkpoint, an
  adapter for another base (hash), a lora_A of the wrong shape, a float-trained
  adapter for MNN: one line, exit 1, nothing written.
"""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

MNN = pytest.importorskip("MNN")
h5py = pytest.importorskip("h5py")
torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

# The tiny base model, the runtime settings and the tolerance of the base package's tests.
from test_mnn_runtime import (ATOL, BASE, N_NEW, RUNTIME, TOK, codes_of, fp16, make_checkpoint, mnn_json,  # noqa: E402
                              rtn, run_mnn)
from test_gguf_llamacpp import llama_cpp, llama_greedy   # noqa: E402,F401 (llama_cpp: a fixture)

RUNNER = Path(__file__).with_name("mnn_lora_run.py")
TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]
MODULES = {t: f"{t}_proj" for t in TARGETS}

LLAMA = {**BASE, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
# Big enough that a second copy of the weights shows in the resident memory:
# 4 layers of 512 wide, llm.mnn.weight ~9 MB, ~36 MB as fp32 at load (memory normal).
WIDE = {**BASE, "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 64, "intermediate_size": 2048, "initializer_range": 0.05}
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. It was the best of times,",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "<|im_start|>user\n\u4f60\u597d\uff01What is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
]


def make_base(d, name, cfg, run_pocket):
    """A checkpoint with the fixture tokenizer, its HF directory and config."""
    ckpt, hf = make_checkpoint(d, name, cfg, run_pocket)
    return {"ckpt": ckpt, "hf": hf, "cfg": cfg, "dir": d, "run_pocket": run_pocket}


def dequant(w, group=64):
    """The int4 weights `--int4` runs: RTN group 64 asymmetric, (u - 8) * scale + zero in fp32."""
    scale, zero = rtn(w, group)
    u = codes_of(w, scale, zero, group).reshape(w.shape[0], -1, group).astype(np.float32)
    return ((u - np.float32(8)) * scale[..., None] + zero[..., None]).reshape(w.shape).astype(np.float32)


def base_weights(base, int4):
    """HF name -> the weights the base runs (its float weights, or the int4 model of every matrix the default
    int4 state quantizes: all of them, the tied embedding included)."""
    with h5py.File(base["ckpt"], "r") as f:
        return {k: (dequant(f["params"][k][()]) if int4 and f["params"][k].ndim == 2 else f["params"][k][()])
                for k in f["params"]}


def peft_model(hf, weights, r=0, alpha=0.0, targets=(), lora=None):
    """transformers over `weights`, with a PEFT LoRA of the given A/B when r > 0."""
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(str(hf), torch_dtype=torch.float32)
    sd = m.state_dict()
    with torch.no_grad():
        for name, w in weights.items():
            sd[name].copy_(torch.from_numpy(w))
    if not r:
        return m.eval()
    pm = peft.get_peft_model(m, peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=[MODULES[t] for t in targets],
                                                lora_dropout=0.0))
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_" in name:
                p.copy_(torch.from_numpy(lora[name.replace(".default", "")]))
    return pm.eval()


def random_lora(cfg, r, targets, seed, std=0.3):
    """PEFT-named A [r, in] and B [out, r], N(0, std^2): large enough to change every greedy choice."""
    g = np.random.default_rng(seed)
    H, Q, KV, F = cfg["hidden_size"], cfg["num_attention_heads"] * cfg["head_dim"], \
        cfg["num_key_value_heads"] * cfg["head_dim"], cfg["intermediate_size"]
    dims = {"q": (H, Q), "k": (H, KV), "v": (H, KV), "o": (Q, H), "gate": (H, F), "up": (H, F), "down": (F, H)}
    out = {}
    for l in range(cfg["num_hidden_layers"]):
        for t in targets:
            part = "self_attn" if t in "qkvo" else "mlp"
            p = f"base_model.model.model.layers.{l}.{part}.{MODULES[t]}"
            i, o = dims[t]
            out[p + ".lora_A.weight"] = (g.standard_normal((r, i)) * std / np.sqrt(i) * 8).astype(np.float32)
            out[p + ".lora_B.weight"] = (g.standard_normal((o, r)) * std).astype(np.float32)
    return out


def adapter(base, name, r, alpha, targets, seed, int4=True, std=0.3, ckpt=None, cast=None):
    """A PEFT adapter folder written by PEFT's save_pretrained with random A and B (cast: applied to them first),
    made an adapter checkpoint of the base (`pocket import --base`, with --int4: a QLoRA adapter)."""
    lora = random_lora(base["cfg"], r, targets, seed, std)
    if cast:
        lora = {k: cast(v) for k, v in lora.items()}
    folder = base["dir"] / f"{name}-peft"
    if not folder.exists():
        peft_model(base["hf"], {}, r, alpha, targets, lora).save_pretrained(str(folder))
    path = base["dir"] / f"{name}.h5"
    base["run_pocket"]("import", folder, "--base", ckpt or base["ckpt"], *(["--int4"] if int4 else []), "--out", path)
    return {"path": path, "r": r, "alpha": alpha, "targets": targets, "lora": lora, "peft": folder}


def run_job(package, tmp, **job):
    return run_mnn(package, tmp, runner=RUNNER, **job)


def ids_of(run_pocket, d, text):
    p = d / "prompt.txt"
    p.write_bytes(text.encode("utf-8"))
    return [int(x) for x in run_pocket("tokenize", "--tokenizer", TOK / "tokenizer.json", "--print-ids", p).stdout.split()]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def hf_greedy(model, ids, n=N_NEW):
    ids = list(ids)
    out = []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([ids + out])).logits[0, -1].argmax()))
    return out


STOP = {1500, 1501, 1502}   # the fixture tokenizer's <|endoftext|>, <|im_start|>, <|im_end|>


def same_greedy(runtime, reference):
    """The runtime stops at an end token; up to there the ids must agree."""
    assert runtime == reference[:len(runtime)]
    assert len(runtime) == len(reference) or runtime[-1] in STOP


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, run_pocket):
    d = tmp_path_factory.mktemp("lora")
    base = make_base(d, "tiny", BASE, run_pocket)
    base["pkg"] = {}
    for graph in ("fused", "plain"):
        base["pkg"][graph] = d / f"pkg-{graph}"
        run_pocket("export", "--ckpt", base["ckpt"], "--format", "mnn", "--graph", graph, "--out", base["pkg"][graph])
    base["one"] = adapter(base, "one", 4, 8.0, TARGETS, seed=1)
    base["two"] = adapter(base, "two", 8, 4.0, ["q", "v", "down"], seed=2)
    return base


def pocket_logits(run_pocket, d, ckpt, ids, *flags):
    (d / "ids.txt").write_text(" ".join(map(str, ids)))
    run_pocket("forward", "--ckpt", ckpt, "--tokens-file", d / "ids.txt", *flags, "--dump", d / "ref.safetensors")
    from safetensors.numpy import load_file
    return load_file(str(d / "ref.safetensors"))["logits"].reshape(len(ids), -1)


def pocket_greedy(run_pocket, ckpt, ids, *flags):
    return [int(x) for x in run_pocket("generate", "--ckpt", ckpt, "--prompt-ids", " ".join(map(str, ids)), *flags,
                                       "--max-new", N_NEW, "--temperature", 0, "--ids").stdout.split()]


@pytest.mark.parametrize("graph", ["fused", "plain"])
def test_mnn_lora_matches_pocket_and_peft(tiny, run_pocket, graph, tmp_path):
    a = tiny["one"]
    pkg = tiny["pkg"][graph]
    run_pocket("export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", a["path"], "--out", pkg, "--force")
    assert (pkg / "lora.mnn").exists()
    ids = ids_of(run_pocket, tmp_path, (TOK / "corpus.txt").read_text(encoding="utf-8"))[:64]
    prompts = [ids_of(run_pocket, tmp_path, p) for p in PROMPTS]
    runs = [[1, "logits", ids], [0, "logits", ids]] + [[1, "generate", p] for p in prompts]
    got = run_job(pkg, tmp_path, loras=["lora.mnn"], runs=runs, max_new=N_NEW)["runs"]
    lora_logits, base_logits = np.array(got[0], np.float32), np.array(got[1], np.float32)
    ours = pocket_logits(run_pocket, tmp_path, tiny["ckpt"], ids, "--int4", "--lora", a["path"])
    w = base_weights(tiny, int4=True)
    ref = peft_model(tiny["hf"], w, a["r"], a["alpha"], a["targets"], a["lora"])
    want = hf_logits(ref, ids)
    diff, diff_peft = float(np.abs(lora_logits - ours).max()), float(np.abs(lora_logits - want).max())
    moved = float(np.abs(want - hf_logits(peft_model(tiny["hf"], w), ids)).max())
    print(f"{graph}: MNN with lora.mnn vs pocket forward --int4 --lora: max |logit diff| {diff:.2e}, vs PEFT on the "
          f"int4 base {diff_peft:.2e}, over {len(ids)} positions (the adapter moves the logits by up to {moved:.1f})")
    assert diff <= ATOL and diff_peft <= ATOL and moved > 1.0
    assert np.abs(base_logits - hf_logits(peft_model(tiny["hf"], w), ids)).max() <= ATOL
    for p, new in zip(prompts, got[2:]):
        assert new == pocket_greedy(run_pocket, tiny["ckpt"], p, "--int4", "--lora", a["path"])
        same_greedy(new, hf_greedy(ref, p))


def test_lora_graph_as_mnn_reads_it(tiny, run_pocket, tmp_path):
    """MNN's converter dumps base and adapter graphs; the adapter graph is the
    base graph plus 3 ops per adapted projection, wired as mnn_lora.h says."""
    pkg = tiny["pkg"]["fused"]
    a = tiny["two"]
    out = pkg / "two.mnn"
    run_pocket("export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", a["path"], "--out", out, "--force")
    base = mnn_json(pkg, tmp_path)
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "llm.mnn").write_bytes(out.read_bytes())
    lora = mnn_json(tmp_path / "l", tmp_path / "l")
    by_name = {op["name"]: op for op in lora["oplists"]}
    for op in base["oplists"]:   # every base op, same type and parameters (weights by the same offsets)
        twin = by_name[op["name"]]
        assert twin["type"] == op["type"] and twin.get("main") == op.get("main"), op["name"]
    n_layer, scale = BASE["num_hidden_layers"], a["alpha"] / a["r"]
    added = [op for op in lora["oplists"] if "/lora_" in op["name"]]
    assert len(lora["oplists"]) == len(base["oplists"]) + 3 * n_layer * len(a["targets"]) == len(by_name)
    assert len(added) == 3 * n_layer * len(a["targets"])
    for l in range(n_layer):
        for t in a["targets"]:
            part = "self_attn" if t in "qkvo" else "mlp"
            stem = f"/layers.{l}/{part}/{MODULES[t]}"
            proj, A, B, add = (by_name[stem + s] for s in ("/Linear", "/lora_A", "/lora_B", "/lora_add"))
            key = f"base_model.model.model.layers.{l}.{part}.{MODULES[t]}"
            wa, wb = a["lora"][key + ".lora_A.weight"], a["lora"][key + ".lora_B.weight"]
            assert A["type"] == B["type"] == "Convolution" and add["type"] == "BinaryOp"
            assert A["inputIndexes"] == proj["inputIndexes"] and B["inputIndexes"] == A["outputIndexes"]
            assert add["inputIndexes"] == proj["outputIndexes"] + B["outputIndexes"] and add["main"]["opType"] == "ADD"
            assert (A["main"]["common"]["outputCount"], A["main"]["common"]["inputCount"]) == wa.shape
            assert (B["main"]["common"]["outputCount"], B["main"]["common"]["inputCount"]) == wb.shape
            # The JSON dump prints 6 decimals.
            assert np.abs(np.float32(A["main"]["weight"]) - wa.ravel()).max() <= 1e-6
            assert np.abs(np.float32(B["main"]["weight"]) - wb.ravel() * np.float32(scale)).max() <= 1e-6
            assert not any(B["main"]["bias"]) and len(B["main"]["bias"]) == wb.shape[0]
            # Only the ADD reads the projection's output; the layer reads the ADD.
            readers = [op["name"] for op in lora["oplists"] if proj["outputIndexes"][0] in op.get("inputIndexes", [])]
            assert readers == [add["name"]], readers
            assert any(add["outputIndexes"][0] in op.get("inputIndexes", []) for op in lora["oplists"])
    out.unlink()


def test_multi_lora_in_one_process(tiny, run_pocket, tmp_path):
    pkg = tiny["pkg"]["fused"]
    for name in ("one", "two"):
        run_pocket("export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", tiny[name]["path"],
                   "--out", pkg / f"{name}.mnn", "--force")
    ids = ids_of(run_pocket, tmp_path, PROMPTS[0] + PROMPTS[2])
    alone = [run_job(pkg, tmp_path, loras=[f"{n}.mnn"], runs=[[1, "logits", ids]])["runs"][0] for n in ("one", "two")]
    base = run_job(pkg, tmp_path, runs=[[0, "logits", ids]])["runs"][0]
    order = [1, 2, 1, 0, 2, 0, 1]
    got = run_job(pkg, tmp_path, loras=["one.mnn", "two.mnn"], runs=[[m, "logits", ids] for m in order])["runs"]
    want = {0: base, 1: alone[0], 2: alone[1]}
    for m, logits in zip(order, got):
        assert np.abs(np.array(logits) - np.array(want[m])).max() <= 1e-6, f"module {m}"
    assert np.abs(np.array(alone[0]) - np.array(alone[1])).max() > 1.0


def test_multi_lora_loads_the_base_weights_once(tmp_path_factory, run_pocket, tmp_path):
    d = tmp_path_factory.mktemp("wide")
    base = make_base(d, "wide", WIDE, run_pocket)
    pkg = d / "pkg"
    run_pocket("export", "--ckpt", base["ckpt"], "--format", "mnn", "--out", pkg)
    for name, r, seed in (("a", 16, 3), ("b", 16, 4)):
        ad = adapter(base, name, r, 32.0, TARGETS, seed, std=0.02)
        run_pocket("export", "--ckpt", base["ckpt"], "--format", "mnn", "--lora", ad["path"], "--out", pkg / f"{name}.mnn")
    ids = ids_of(run_pocket, tmp_path, PROMPTS[0])
    adapter_mb = (pkg / "a.mnn").stat().st_size / 2**20
    for memory in ("normal", "low"):
        out = run_job(pkg, tmp_path, config={**RUNTIME, "memory": memory}, loras=["a.mnn", "b.mnn"],
                      runs=[[1, "logits", ids], [2, "logits", ids]])
        rss = [x / 1024 for x in out["rss_kb"]]
        steps = [rss[i + 1] - rss[i] for i in range(3)]
        print(f"memory={memory}: resident {rss[1]:.1f} MiB with the base (+{steps[0]:.1f} MiB for loading it), "
              f"+{steps[1]:.1f} MiB with one adapter, +{steps[2]:.1f} MiB with the second (llm.mnn.weight "
              f"{out['weight_bytes'] / 2**20:.1f} MiB, each lora.mnn {adapter_mb:.1f} MiB)")
        # memory=normal holds the weights as fp32 (4x the int4 file): a second
        # copy would add about what loading the base added. Each adapter adds
        # its own ops (lora.mnn's size) and little else. The int4 (low) figures
        # are printed only: the allocator's arenas make them jump by a few MiB.
        if memory == "normal":
            assert max(steps[1:]) < 0.2 * steps[0]


def merged_weights(base, a, grid):
    """W' = W_int4 + alpha/r B A (float64 sum, rounded once, as lora_view_merge) on the adapted projections, put
    on an int4 grid: "merge" (what --merge does: the base's RTN scale and zero kept per group, RTN of W' in a
    group with a weight beyond the base's range), "clamp" (the base's grid everywhere) or "rtn" (RTN of W')."""
    w = base_weights(base, int4=True)
    with h5py.File(base["ckpt"], "r") as f:
        for key in a["lora"]:
            if not key.endswith("lora_A.weight"):
                continue
            name = key[len("base_model.model."):-len(".lora_A.weight")] + ".weight"
            A, B = a["lora"][key].astype(np.float64), a["lora"][key.replace("lora_A", "lora_B")].astype(np.float64)
            merged = (w[name] + a["alpha"] / a["r"] * (B @ A)).astype(np.float32)
            scale, zero = rtn(merged, 64) if grid == "rtn" else rtn(f["params"][name][()], 64)
            if grid == "merge":
                g = merged.reshape(merged.shape[0], -1, 64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    pos = np.rint((g - zero[..., None]) / scale[..., None]) + np.float32(8)
                beyond = np.where(scale == 0, (g != zero[..., None]).any(-1), ((pos < 0) | (pos > 15)).any(-1))
                s2, z2 = rtn(merged, 64)
                scale, zero = np.where(beyond, s2, scale), np.where(beyond, z2, zero)
            u = codes_of(merged, scale, zero, 64).reshape(merged.shape[0], -1, 64).astype(np.float32)
            w[name] = ((u - np.float32(8)) * scale[..., None] + zero[..., None]).reshape(merged.shape)
    return w


@pytest.mark.parametrize("std", [0.3, 0.08, 0.02])
def test_merged_package_matches_merged_weights(tiny, run_pocket, std, tmp_path):
    """--merge's package equals transformers on the merged weights (2e-4). How
    much of the adapter an int4 merge loses against PEFT unmerged, for --merge's grid
    and for two others (the base's grid clamped, a new RTN grid everywhere): |merged - unmerged| /
    |unmerged - base| over the logits (0: all of it kept, 1: all of it lost); --merge's is at most the others'."""
    a = adapter(tiny, f"merge-{std}", 4, 8.0, TARGETS, seed=9, std=std)
    out = tmp_path / "merged"
    proc = run_pocket("export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", a["path"], "--merge", "--out", out)
    print(proc.stdout.strip().splitlines()[0])
    ids = ids_of(run_pocket, tmp_path, (TOK / "corpus.txt").read_text(encoding="utf-8"))[:64]
    got = np.array(run_job(out, tmp_path, runs=[[0, "logits", ids]])["runs"][0], np.float32)
    want = hf_logits(peft_model(tiny["hf"], merged_weights(tiny, a, "merge")), ids)
    diff = float(np.abs(got - want).max())
    w = base_weights(tiny, int4=True)
    unmerged = hf_logits(peft_model(tiny["hf"], w, a["r"], a["alpha"], a["targets"], a["lora"]), ids)
    effect = np.abs(unmerged - hf_logits(peft_model(tiny["hf"], w), ids)).mean()
    lost = {}
    for name, grid in (("--merge", "merge"), ("base grid clamped", "clamp"), ("new RTN grid", "rtn")):
        merged = want if grid == "merge" else hf_logits(peft_model(tiny["hf"], merged_weights(tiny, a, grid)), ids)
        lost[name] = float(np.abs(merged - unmerged).mean() / effect)
    print(f"std {std}: merged package vs transformers on the merged weights {diff:.2e}; the adapter moves the logits by "
          f"{effect:.3f} on average; part of that lost by merging: " + ", ".join(f"{k} {v:.2f}" for k, v in lost.items()))
    assert diff <= ATOL
    # Against PEFT unmerged (the reference): --merge's grid loses no more of the adapter than either other grid
    # (measured: 0.27 / 0.83 / 1.00 against at best 0.27 / 0.84 / 1.00).
    assert lost["--merge"] <= min(lost["base grid clamped"], lost["new RTN grid"]) + 0.02


# ---- llama.cpp -------------------------------------------------------------


TIE = 0.05   # llama.cpp multiplies F16 weights by F16-rounded activations: 1e-2..4e-2 on these logits (printed)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("quant", ["f32", "f16"])
def test_gguf_adapter_in_llama_cpp(tmp_path_factory, run_pocket, llama_cpp, arch, quant, tmp_path):
    """The adapter (quant) on the base GGUF of the same type, against `pocket
    generate --lora` on the weights those files hold (the base GGUF imported
    back, the same PEFT folder imported for it; A and B fp16-exact for f16).
    f32 runs at ~1e-5 and the greedy tokens must be identical; on the f16 base
    too, except that a step where pocket's two best logits are within TIE may
    go either way: llama.cpp's token must then be the other one of them, and
    that prompt's comparison ends there (the contexts differ after it)."""
    gguf = pytest.importorskip("gguf")
    d = tmp_path_factory.mktemp(f"gguf-{arch}-{quant}")
    base = make_base(d, arch, BASE if arch == "qwen3" else LLAMA, run_pocket)
    cast = fp16 if quant == "f16" else None
    a = adapter(base, "ad", 4, 8.0, TARGETS, seed=5, int4=False, std=0.15, cast=cast)
    model, path, back = d / f"base-{quant}.gguf", d / "adapter.gguf", d / "back.h5"
    run_pocket("export", "--ckpt", base["ckpt"], "--format", "gguf", "--quant", quant, "--out", model)
    run_pocket("export", "--ckpt", base["ckpt"], "--format", "gguf", "--lora", a["path"], "--quant", quant, "--out", path)
    run_pocket("import", model, "--out", back)
    a_back = adapter(base, "ad", 4, 8.0, TARGETS, seed=5, int4=False, std=0.15, ckpt=back, cast=cast)["path"]
    r = gguf.GGUFReader(str(path))
    kv = {f.name: f for f in r.fields.values()}
    text = lambda k: bytes(kv[k].parts[kv[k].data[0]]).decode()
    assert text("general.type") == "adapter" and text("adapter.type") == "lora" and text("general.architecture") == arch
    assert kv["adapter.lora.alpha"].types == [gguf.GGUFValueType.FLOAT32]
    assert float(kv["adapter.lora.alpha"].parts[-1][0]) == 8.0
    gtype = gguf.GGMLQuantizationType.F32 if quant == "f32" else gguf.GGMLQuantizationType.F16
    tensors = {t.name: t for t in r.tensors}
    assert len(tensors) == 2 * 7 * BASE["num_hidden_layers"]
    H, Q, KV, F = 64, 64, 32, 128
    dims = {"attn_q": (H, Q), "attn_k": (H, KV), "attn_v": (H, KV), "attn_output": (Q, H), "ffn_gate": (H, F),
            "ffn_up": (H, F), "ffn_down": (F, H)}
    for l in range(BASE["num_hidden_layers"]):
        for proj, (i, o) in dims.items():
            ta, tb = tensors[f"blk.{l}.{proj}.weight.lora_a"], tensors[f"blk.{l}.{proj}.weight.lora_b"]
            assert list(ta.shape) == [i, 4] and list(tb.shape) == [4, o] and ta.tensor_type == tb.tensor_type == gtype
    # transformers + PEFT on the same weights: the prompt logits.
    w = {k: (fp16(v) if quant == "f16" and v.ndim == 2 else v) for k, v in base_weights(base, int4=False).items()}
    ref = peft_model(base["hf"], w, a["r"], a["alpha"], a["targets"], a["lora"])
    llm = llama_cpp.Llama(model_path=str(model), lora_path=str(path), n_ctx=512, type_k=0, type_v=0, flash_attn=False,
                          n_threads=int(os.environ.get("OMP_NUM_THREADS", "2")), logits_all=True, verbose=False)
    changed = compared = total = 0
    noise = 0.0
    for p in PROMPTS:
        ids = ids_of(run_pocket, tmp_path, p)
        got, ours = llama_greedy(llm, ids, N_NEW), pocket_greedy(run_pocket, back, ids, "--lora", a_back)
        changed += ours != pocket_greedy(run_pocket, back, ids)
        noise = max(noise, float(np.abs(np.array(llm.scores[:len(ids)]) - hf_logits(ref, ids)).max()))
        total += len(ours)
        k = next((i for i in range(len(ours)) if got[i] != ours[i]), len(ours))
        if k < len(ours):
            top = pocket_logits(run_pocket, tmp_path, back, ids + ours[:k], "--lora", a_back)[-1]
            tie = top[ours[k]] - top[got[k]]
            assert quant == "f16" and tie <= TIE, f"{p[:20]!r}: token {k} differs, pocket's margin {tie:.4f}"
            print(f"{arch}/{quant} {p[:12]!r}: near-tie at token {k} (pocket's margin {tie:.4f}), equal before it")
        compared += k
    print(f"{arch}/{quant}: {compared} of {total} greedy tokens equal to pocket generate --lora; prompt logits "
          f"within {noise:.1e} of transformers + PEFT")
    assert noise <= (1e-4 if quant == "f32" else TIE)
    assert changed == len(PROMPTS)   # the adapter changes every continuation: it is applied, not ignored


def test_qlora_adapter_to_gguf(tiny, run_pocket, tmp_path):
    """A QLoRA adapter (trained against the int4 model) exports to llama.cpp
    too: the file holds its A and B as they are."""
    gguf = pytest.importorskip("gguf")
    a = tiny["one"]
    run_pocket("export", "--ckpt", tiny["ckpt"], "--format", "gguf", "--lora", a["path"], "--out", tmp_path / "q.gguf")
    tensors = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "q.gguf")).tensors}
    gname = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate", "up": "ffn_up",
             "down": "ffn_down"}
    for key, w in a["lora"].items():
        parts = key.split(".")   # base_model.model.model.layers.L.<part>.<x>_proj.lora_A.weight
        layer, proj, ab = int(parts[4]), parts[-3][:-len("_proj")], parts[-2][-1].lower()
        t = tensors[f"blk.{layer}.{gname[proj]}.weight.lora_{ab}"]
        assert np.array_equal(np.asarray(t.data).reshape(w.shape), w), key


# ---- bad input -------------------------------------------------------------


def fails_cleanly(pocket, args, must_say, leaves):
    proc = subprocess.run([str(pocket), *map(str, args)], capture_output=True, text=True)
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and all(s in lines[0] for s in must_say), proc.stderr
    for p in leaves:
        assert not Path(p).exists(), p
    return lines[0]


def test_bad_input(tiny, pocket, run_pocket, tmp_path):
    a = tiny["one"]
    empty = tmp_path / "empty"
    empty.mkdir()
    fails_cleanly(pocket, ["export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", a["path"], "--out", empty],
                  ["no MNN base package", "config.json"], [empty / "lora.mnn"])
    # A package of another checkpoint.
    other = make_base(tmp_path, "other", {**BASE, "initializer_range": 0.2}, run_pocket)
    opkg = tmp_path / "opkg"
    run_pocket("export", "--ckpt", other["ckpt"], "--format", "mnn", "--out", opkg)
    fails_cleanly(pocket, ["export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", a["path"], "--out", opkg],
                  ["llm.mnn.weight", "differs", "another base"], [opkg / "lora.mnn"])
    # An adapter for another base: refused by its hash, for every format.
    for fmt, out in (("mnn", opkg), ("gguf", tmp_path / "x.gguf")):
        fails_cleanly(pocket, ["export", "--ckpt", other["ckpt"], "--format", fmt, "--lora", a["path"], "--out", out],
                      ["sha256", str(a["path"])], [opkg / "lora.mnn", tmp_path / "x.gguf"])
    # A lora_A whose shape is not the base's (the adapter checkpoint edited).
    bad = tmp_path / "bad.h5"
    bad.write_bytes(Path(a["path"]).read_bytes())
    with h5py.File(bad, "r+") as f:
        key = "params/base_model.model.model.layers.1.mlp.up_proj.lora_A.weight"
        del f[key]
        f[key] = np.zeros((4, 32), np.float32)
    pkg = tiny["pkg"]["plain"]
    (pkg / "lora.mnn").unlink(missing_ok=True)
    fails_cleanly(pocket, ["export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", bad, "--out", pkg],
                  ["bad.h5", "up_proj"], [pkg / "lora.mnn"])
    # An adapter trained on the float weights: MNN runs the int4 model.
    f32 = adapter(tiny, "float", 4, 8.0, ["q"], seed=3, int4=False)
    fails_cleanly(pocket, ["export", "--ckpt", tiny["ckpt"], "--format", "mnn", "--lora", f32["path"], "--out", pkg],
                  ["QLoRA"], [pkg / "lora.mnn"])
    fails_cleanly(pocket, ["export", "--ckpt", tiny["ckpt"], "--format", "hf", "--lora", a["path"], "--out",
                           tmp_path / "hf"], ["--lora"], [tmp_path / "hf"])
