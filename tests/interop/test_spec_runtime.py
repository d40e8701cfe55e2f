"""A DFlash speculative draft shipped in the MNN package, judged by MNN 3.6.1's runtime (the PyPI wheel).

A tiny target (3 layers, the fixture tokenizer and the Qwen3 chat template) and a draft that `pocket train`
trains for it for a few steps ([draft], sft mode on the fixture chats), exported with `pocket export --format mnn
--draft` (both graph forms, `memory: normal`, greedy):

  (a) the runtime loads the package with DFlash speculative decoding active (its "DFlash: FC module loaded"
      line; the package without the draft prints none) and its greedy tokens equal the package's without the
      draft and `pocket generate --int4`'s on 4 prompts (a fresh runtime per prompt: 3.6.1's DFlash state
      survives a second response on the same object);
  (b) dflash.mnn run alone through MNN's Module API gives the logits of a float64 numpy reference of
      model/draft.h's math over the draft's weights (read with h5py) and the target's int4 lm_head, within
      2e-4; dflash_fc.mnn gives hidden_norm(fc(x));
  (c) llm.mnn's extra output hidden_states equals transformers' hidden states of the draft's target layers over
      the dequantized int4 weights, and its logits are still the target's.
And a draft trained for another target is refused in one line, with nothing written.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

MNN = pytest.importorskip("MNN")
h5py = pytest.importorskip("h5py")
torch = pytest.importorskip("torch")

from test_lora_runtimes import dequant   # noqa: E402  (RTN group 64: the int4 weights `--int4` runs)
from test_mnn_runtime import BASE, PROMPTS, make_checkpoint, pocket_ids   # noqa: E402

CHATS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "chat.jsonl"
CFG = {**BASE, "num_hidden_layers": 3}
DRAFT = {"layers": 1, "block": 4, "target_layers": "0,1", "mask_token": 1500, "anchors": 4, "loss_decay": 7}
GRAPHS = ["fused", "plain"]
RUNTIME = {"memory": "normal", "precision": "high", "sampler_type": "greedy", "thread_num": 2, "use_template": False}
N_NEW = 24
ATOL = 2e-4
STOP = {1500, 1501, 1502}   # the fixture tokenizer's <|endoftext|>, <|im_start|>, <|im_end|>

# One generation in a fresh process. The runtime's own lines (printf) are flushed before the process leaves
# without its exit handlers, which often crash after MNN.llm was used.
RUNNER = r"""
import ctypes, json, os, sys
import MNN.llm as llm
job = json.loads(sys.argv[1])
m = llm.create(job["package"] + "/config.json")
m.set_config(job["config"])
m.load()
m.generate_init()
ids = [int(t) for t in m._c_obj.generate(job["ids"], job["max_new"])]
with open(job["out"], "w") as f:
    json.dump(ids, f)
ctypes.CDLL(None).fflush(None)
os._exit(0)
"""


def mnn_generate(package, ids, tmp):
    """(greedy new ids, the runtime's stdout)."""
    out = tmp / f"gen-{abs(hash((str(package), tuple(ids)))) % 10**8}.json"
    job = {"package": str(package), "config": RUNTIME, "ids": ids, "max_new": N_NEW, "out": str(out)}
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(job)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and out.exists(), f"MNN runtime failed on {package}:\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text()), proc.stdout


def train_draft(d, ckpt, run_pocket, evaluate=False):
    """A draft for the target ckpt trained 8 steps by `pocket train` on the fixture chats in d/run (with evaluate,
    on the same chats as validation every 4 steps, so that the run has a best.h5 and acceptance figures)."""
    data = d / "sft.h5"
    run_pocket("tokenize", "--chat", "--tokenizer", ckpt, CHATS, "--out", data)
    draft_keys = "".join(f"{k} = {v}\n" for k, v in DRAFT.items())
    val, every = (f"val = {data}\n", 4) if evaluate else ("", 0)
    (d / "draft.ini").write_text(
        f"[model]\ninit = {ckpt}\n[data]\ntrain = {data}\n{val}[train]\nmode = sft\nmicro_batch = 2\nseq_len = 64\n"
        f"steps = 8\neval_interval = {every}\neval_batches = 2\nsave_interval = 0\nthreads = 2\nrun_dir = {d}/run\n"
        f"[optim]\nlr = 1e-3\nwarmup = 1\n[draft]\nenabled = 1\n{draft_keys}")
    run_pocket("train", d / "draft.ini", timeout=600)
    return d / "run"


@pytest.fixture(scope="module")
def spec(tmp_path_factory, run_pocket):
    """The target, its draft trained by `pocket train`, and its packages with and without the draft."""
    d = tmp_path_factory.mktemp("spec")
    ckpt, hf = make_checkpoint(d, "target", CFG, run_pocket)
    draft = sorted(train_draft(d, ckpt, run_pocket).glob("ckpt-*.h5"))[-1]
    pkg = {}
    for graph in GRAPHS:
        for name, extra in (("spec", ["--draft", draft]), ("plain", [])):
            pkg[name, graph] = d / f"{name}-{graph}"
            run_pocket("export", "--ckpt", ckpt, "--format", "mnn", "--graph", graph, "--memory", "normal",
                       "--sampler", "greedy", "--out", pkg[name, graph], *extra)
    return {"dir": d, "ckpt": ckpt, "hf": hf, "draft": draft, "pkg": pkg}


def same_greedy(got, want):
    """Equal over the first N_NEW tokens (DFlash may give up to block - 1 more: it stops after a whole step), or up
    to an end token where the reference stops."""
    if len(want) < N_NEW:
        assert want[-1] in STOP and got[:len(want)] == want
    else:
        assert got[:N_NEW] == want[:N_NEW]


@pytest.mark.parametrize("graph", GRAPHS)
def test_dflash_greedy_equals_the_target(spec, run_pocket, graph, tmp_path):
    for text in PROMPTS:
        ids = pocket_ids(run_pocket, tmp_path, text)
        got, log = mnn_generate(spec["pkg"]["spec", graph], ids, tmp_path)
        plain, plain_log = mnn_generate(spec["pkg"]["plain", graph], ids, tmp_path)
        assert "DFlash: FC module loaded" in log and "DFlash" not in plain_log
        ours = [int(x) for x in run_pocket("generate", "--ckpt", spec["ckpt"], "--int4", "--prompt-ids",
                                           " ".join(map(str, ids)), "--max-new", N_NEW, "--temperature", 0,
                                           "--ids").stdout.split()]
        same_greedy(plain, ours)
        same_greedy(got, ours)
        print(f"{graph}: {len(ids)}-token prompt, DFlash {len(got)} tokens = plain {len(plain)} = pocket {len(ours)}")


# ---- the draft's graphs against model/draft.h's math in numpy (float64)

def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    """x [N, heads, D] at positions pos [N], rotate-half."""
    D = x.shape[-1]
    ang = pos[:, None].astype(np.float64) * (1.0 / theta ** (np.arange(0, D, 2) / D))[None, :]
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1)[:, None], np.concatenate([np.sin(ang)] * 2, -1)[:, None]
    return x * cos + np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1) * sin


def draft_logits(W, n_layer, noise, ctx, qpos, kpos, lm_head):
    """model/draft.h: block rows noise [B, H] at qpos over the context ctx [C, H] at kpos[:C] and themselves."""
    H, nh, nkv, D = CFG["hidden_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"], CFG["head_dim"]
    eps, theta = CFG["rms_norm_eps"], CFG["rope_theta"]
    x = noise.astype(np.float64)
    B, C = x.shape[0], ctx.shape[0]
    for l in range(n_layer):
        w = lambda n: W[f"layers.{l}.{n}.weight"].astype(np.float64)
        a = rms(x, w("input_layernorm"), eps)
        q = rope(rms((a @ w("self_attn.q_proj").T).reshape(B, nh, D), w("self_attn.q_norm"), eps), qpos, theta)
        rows = np.concatenate([ctx, a], 0)
        k = rope(rms((rows @ w("self_attn.k_proj").T).reshape(C + B, nkv, D), w("self_attn.k_norm"), eps), kpos, theta)
        v = (rows @ w("self_attn.v_proj").T).reshape(C + B, nkv, D)
        att = np.zeros((B, nh, D))
        for h in range(nh):
            s = q[:, h] @ k[:, h // (nh // nkv)].T / np.sqrt(D)
            p = np.exp(s - s.max(-1, keepdims=True))
            att[:, h] = (p / p.sum(-1, keepdims=True)) @ v[:, h // (nh // nkv)]
        x = x + att.reshape(B, nh * D) @ w("self_attn.o_proj").T
        m = rms(x, w("post_attention_layernorm"), eps)
        gate = m @ w("mlp.gate_proj").T
        x = x + (gate / (1 + np.exp(-gate)) * (m @ w("mlp.up_proj").T)) @ w("mlp.down_proj").T
    return rms(x, W["norm.weight"], eps) @ lm_head.T.astype(np.float64)


def load_module(path, inputs, outputs, weight=None):
    import MNN.nn as nn
    rt = nn.create_runtime_manager(({"backend": 0, "precision": "high", "numThread": 2},))
    if weight:
        rt.set_external(str(weight))
    return nn.load_module_from_file(str(path), inputs, outputs, runtime_manager=rt, shape_mutable=True,
                                    rearrange=True)


def var(a, int32=False):
    import MNN.expr as F
    a = np.asarray(a, np.int32 if int32 else np.float32)
    return F.const(a.flatten().tolist(), list(a.shape), F.NCHW, F.int if int32 else F.float)


def read(v, *shape):
    return np.array(v.read(), np.float32).reshape(shape)


def target_int4(ckpt):
    """HF name -> the int4 model's weights (every matrix RTN group 64, the tied embedding included)."""
    with h5py.File(ckpt, "r") as f:
        return {k: (dequant(f["params"][k][()]) if f["params"][k].ndim == 2 else f["params"][k][()])
                for k in f["params"]}


def dflash_module(pkg):
    names = ["noise_embedding", "context_hidden", "attention_mask", "q_position_ids", "k_position_ids"]
    return load_module(pkg / "dflash.mnn", names, ["logits"], pkg / "dflash.mnn.weight")


def block_logits(dflash, W, n_layer, emb, token, block, C, rng):
    """dflash.mnn's logits and the numpy reference's for the runtime's block at anchor C (the last accepted token,
    then mask tokens) over a random context of C rows."""
    noise = emb[[token] + [DRAFT["mask_token"]] * (block - 1)]
    ctx = rng.standard_normal((C, CFG["hidden_size"])).astype(np.float32)
    qpos, kpos = np.arange(C, C + block), np.arange(C + block)
    out = dflash.forward([var(noise[None]), var(ctx[None]), var(np.zeros((1, 1, block, C + block))),
                          var(qpos[None], True), var(kpos[None], True)])
    return read(out[0], block, -1), draft_logits(W, n_layer, noise, ctx, qpos, kpos, emb)


def test_draft_graphs_compute_the_draft(spec):
    with h5py.File(spec["draft"], "r") as f:
        W = {k: f["params"][k][()] for k in f["params"]}
        n_layer, block = int(f["draft"].attrs["layers"]), int(f["draft"].attrs["block"])
    assert block == DRAFT["block"]
    emb = target_int4(spec["ckpt"])["model.embed_tokens.weight"]   # tied: also the lm_head
    H = CFG["hidden_size"]
    pkg = spec["pkg"]["spec", "fused"]
    dflash = dflash_module(pkg)
    rng = np.random.default_rng(3)
    for C in (1, 9, 30):   # the runtime's block at anchor C: the last accepted token, then mask tokens
        got, ref = block_logits(dflash, W, n_layer, emb, int(rng.integers(0, 1500)), block, C, rng)
        diff = float(np.abs(got - ref).max())
        print(f"dflash.mnn, context {C}: max |logit diff| {diff:.2e}, max |logit| {np.abs(ref).max():.1f}")
        assert diff <= ATOL and (got.argmax(-1) == ref.argmax(-1)).all()
    fc = load_module(pkg / "dflash_fc.mnn", ["target_hidden"], ["context_hidden"])
    x = rng.standard_normal((7, 2 * H)).astype(np.float32) * 3
    got = read(fc.forward([var(x[None])])[0], 7, H)
    ref = rms(x.astype(np.float64) @ W["fc.weight"].T, W["hidden_norm.weight"], CFG["rms_norm_eps"])
    diff = float(np.abs(got - ref).max())
    print(f"dflash_fc.mnn: max diff {diff:.2e}, max |value| {np.abs(ref).max():.1f}")
    assert diff <= ATOL


@pytest.mark.parametrize("graph", GRAPHS)
def test_llm_hidden_states_are_the_target_layers(spec, run_pocket, graph, tmp_path):
    from transformers import AutoModelForCausalLM
    weights = target_int4(spec["ckpt"])
    model = AutoModelForCausalLM.from_pretrained(str(spec["hf"]), dtype=torch.float32)
    sd = model.state_dict()
    with torch.no_grad():
        for name, w in weights.items():
            sd[name].copy_(torch.from_numpy(w))
    ids = pocket_ids(run_pocket, tmp_path, PROMPTS[0])
    with torch.no_grad():
        out = model.eval()(torch.tensor([ids]), output_hidden_states=True)
    layers = [int(x) for x in DRAFT["target_layers"].split(",")]
    assert max(layers) < CFG["num_hidden_layers"] - 1   # transformers' last hidden state is after the final norm
    ref = np.concatenate([out.hidden_states[l + 1][0].numpy() for l in layers], -1)
    pkg = spec["pkg"]["spec", graph]
    llm = load_module(pkg / "llm.mnn", ["input_ids", "attention_mask", "position_ids", "logits_index"],
                      ["logits", "hidden_states"], pkg / "llm.mnn.weight")
    S = len(ids)
    # The prefill as the runtime feeds it: embedded ids [S, 1, H], a scalar mask (the op is causal itself), and
    # logits_index 0: the logits of every row.
    res = llm.forward([var(weights["model.embed_tokens.weight"][ids][:, None, :]), var(np.float32(0)),
                       var(np.arange(S)[None], True), var([0], True)])
    hs, logits = read(res[1], S, -1), read(res[0], S, -1)
    diff = float(np.abs(hs - ref).max())
    print(f"{graph}: hidden_states max diff {diff:.2e} (max |value| {np.abs(ref).max():.1f}); "
          f"logits max diff {np.abs(logits - out.logits[0].numpy()).max():.2e}")
    assert hs.shape == (S, len(layers) * CFG["hidden_size"])
    assert diff <= 1e-5 * np.abs(ref).max()
    assert np.abs(logits - out.logits[0].numpy()).max() <= ATOL


def test_draft_for_another_target_is_refused(spec, pocket, run_pocket, tmp_path):
    other = tmp_path / "other.h5"
    run_pocket("init", "--model", spec["dir"] / "target.json", "--tokenizer", spec["hf"] / "tokenizer.json",
               "--seed", 12, "--out", other)
    out = tmp_path / "pkg"
    proc = subprocess.run([str(pocket), "export", "--ckpt", str(other), "--format", "mnn", "--draft",
                           str(spec["draft"]), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert str(spec["draft"]) in proc.stderr and "sha256" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("pkg")]


# ---- a draft that drafts what the target says: MNN accepts its tokens (and rolls back the rest) and still gives
# the target's output

def doc_prompts(path):
    """The prompts of a pocket SFT dataset: each document's tokens before its first trained one."""
    with h5py.File(path, "r") as f:
        tokens, offsets, mask = f["tokens"][:], f["doc_offsets"][:], f["loss_mask"][:]
    out = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        first = int(np.flatnonzero(mask[a:b])[0])
        out.append([int(t) for t in tokens[a:a + first]])
    return out


@pytest.fixture(scope="module")
def fitted(spec, run_pocket):
    """A draft trained until it knows the target's own replies to the fixture chats (pocket draft-data), and the
    package with it."""
    d = spec["dir"]
    data = d / "replies.h5"
    run_pocket("draft-data", "--ckpt", spec["ckpt"], "--data", d / "sft.h5", "--out", data, "--max-new", N_NEW)
    # two layers: one layer does not memorise these replies past the first drafted token (loss ~1.3 at any step)
    # and a vocabulary of its own: the tokens of the replies (fewer than the target's)
    draft_keys = "".join(f"{k} = {v}\n" for k, v in {**DRAFT, "anchors": 16, "layers": 2, "vocab": 1000}.items())
    (d / "fit.ini").write_text(
        f"[model]\ninit = {spec['ckpt']}\n[data]\ntrain = {data}\n[train]\nmode = sft\nmicro_batch = 2\n"
        f"seq_len = 128\nsteps = 200\neval_interval = 0\nsave_interval = 0\nthreads = 2\nrun_dir = {d}/fit\n"
        f"[optim]\nlr = 3e-3\nwarmup = 5\nschedule = constant\nweight_decay = 0\n[draft]\nenabled = 1\n{draft_keys}")
    run_pocket("train", d / "fit.ini", timeout=900)
    draft = sorted((d / "fit").glob("ckpt-*.h5"))[-1]
    pkg = d / "fitted-fused"
    run_pocket("export", "--ckpt", spec["ckpt"], "--format", "mnn", "--memory", "normal", "--sampler", "greedy",
               "--out", pkg, "--draft", draft)
    return {"draft": draft, "pkg": pkg, "prompts": doc_prompts(data)}


def test_dflash_accepts_drafted_tokens(spec, fitted, run_pocket, tmp_path):
    passes = tokens = 0
    for ids in fitted["prompts"]:
        args = ["--ckpt", spec["ckpt"], "--prompt-ids", " ".join(map(str, ids)), "--max-new", N_NEW, "--ids"]
        ours = [int(x) for x in run_pocket("generate", *args, "--int4").stdout.split()]
        spec_run = run_pocket("generate", *args, "--draft", fitted["draft"])
        assert [int(x) for x in spec_run.stdout.split()] == ours
        n = int(spec_run.stderr.split("(")[-1].split(" passes")[0])
        passes, tokens = passes + n, tokens + len(ours) - 1
        got, log = mnn_generate(fitted["pkg"], ids, tmp_path)
        assert "DFlash: FC module loaded" in log
        same_greedy(got, ours)
    # pocket's loop is MNN's: with most of each block accepted, MNN's output equal to the target's shows its
    # cache rolled back past the rejected rows
    print(f"fitted draft: {tokens / passes:.2f} tokens per target pass over {len(fitted['prompts'])} prompts")
    assert tokens / passes >= 2.0


def test_vocab_draft_graph_scatters_its_tokens(spec, fitted):
    """The fitted draft proposes only its vocabulary: dflash.mnn's logits are the reference's at those ids and
    -FLT_MAX at every other, so the runtime's argmax over all columns picks the best of the vocabulary."""
    with h5py.File(fitted["draft"], "r") as f:
        W = {k: f["params"][k][()] for k in f["params"]}
        n_layer, block = int(f["draft"].attrs["layers"]), int(f["draft"].attrs["block"])
        vocab = f["draft"]["vocab"][()]
        assert int(f["draft"].attrs["vocab"]) == len(vocab)
    emb = target_int4(spec["ckpt"])["model.embed_tokens.weight"]
    assert 0 < len(vocab) < emb.shape[0] and (np.diff(vocab) > 0).all()
    dflash = dflash_module(fitted["pkg"])
    rng = np.random.default_rng(4)
    off = np.setdiff1d(np.arange(emb.shape[0]), vocab)
    for C in (1, 17):
        got, ref = block_logits(dflash, W, n_layer, emb, int(vocab[rng.integers(0, len(vocab))]), block, C, rng)
        diff = float(np.abs(got[:, vocab] - ref[:, vocab]).max())
        print(f"vocabulary of {len(vocab)}: dflash.mnn, context {C}: max |logit diff| on it {diff:.2e}")
        assert diff <= ATOL
        assert (got[:, off] == np.finfo(np.float32).min).all()
        assert (got.argmax(-1) == vocab[ref[:, vocab].argmax(-1)]).all()
