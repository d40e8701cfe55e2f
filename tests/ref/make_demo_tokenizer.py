#!/usr/bin/env python3
"""Train the demo's byte-level BPE tokenizer: recipes/demo/tokenizer.json.

The pipeline is the Qwen2/Qwen3 one, as in make_tokenizer_fixtures.py: NFC,
the Qwen2 Split regex, ByteLevel(use_regex=False), a ByteLevel decoder, and
the Qwen3 added tokens after the BPE vocabulary (<|endoftext|>, <|im_start|>,
<|im_end|> special; <think>, </think> not special). It is trained with HF
tokenizers on the demo corpus's training split and the SFT training set,
which recipes/demo/run.sh writes under runs/demo/ (run it up to the SFT data
step first, or run get_corpus.sh and make_sft_data.py by hand).

    tests/.venv/bin/python tests/ref/make_demo_tokenizer.py [--vocab 6144]
    tests/.venv/bin/python tests/ref/make_demo_tokenizer.py --verify ./pocket

--verify encodes held-out documents and SFT examples with HF tokenizers and
with `pocket tokenize --print-ids`, and fails on the first difference.
"""
import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers import models

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL = ["<think>", "</think>"]
OUT = "recipes/demo/tokenizer.json"
CORPUS = "runs/demo/corpus"
SFT = "runs/demo/sft-data"


def jsonl_texts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)["text"]


def sft_texts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            for m in json.loads(line)["messages"]:
                yield m["content"]


def training_texts(corpus, sft):
    files = sorted(glob.glob(os.path.join(corpus, "train", "*.jsonl")))
    if not files:
        sys.exit("no corpus under %s/train: run recipes/demo/get_corpus.sh first" % corpus)
    for p in files:
        yield from jsonl_texts(p)
    yield from sft_texts(os.path.join(sft, "train.jsonl"))


def train(texts, vocab):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # The added tokens take the last ids, so the BPE part gets vocab - 5.
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIAL) - len(NON_SPECIAL), min_frequency=2,
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL])
    return tok


def samples(corpus, sft, per_file=30):
    """Held-out text for checks: the first documents of each val file and
    the rendered SFT examples."""
    out = []
    for p in sorted(glob.glob(os.path.join(corpus, "val", "*.jsonl"))):
        out += list(jsonl_texts(p))[:per_file]
    with open(os.path.join(sft, "val.jsonl"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= 100:
                break
            msgs = json.loads(line)["messages"]
            out.append("<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>" %
                       (msgs[0]["content"], msgs[1]["content"]))
    return out


def verify(tok_path, pocket, corpus, sft):
    tok = Tokenizer.from_file(tok_path)
    texts = samples(corpus, sft)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.txt")
        for i, text in enumerate(texts):
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            got = subprocess.run([pocket, "tokenize", "--tokenizer", tok_path, "--print-ids", path],
                                 check=True, capture_output=True, text=True).stdout.split()
            want = tok.encode(text).ids
            if [int(x) for x in got] != want:
                sys.exit("sample %d differs: HF %s... pocket %s...\n%r" % (i, want[:20], got[:20], text[:200]))
    print("pocket and HF tokenizers agree on %d held-out samples" % len(texts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=6144)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--sft", default=SFT)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--verify", metavar="POCKET", help="compare with pocket tokenize --print-ids instead")
    args = ap.parse_args()
    assert tokenizers.__version__ == "0.23.3", tokenizers.__version__
    if args.verify:
        verify(args.out, args.verify, args.corpus, args.sft)
        return

    tok = train(training_texts(args.corpus, args.sft), args.vocab)
    tj = json.loads(tok.to_str())
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    tok = Tokenizer.from_file(args.out)
    assert tok.get_vocab_size(with_added_tokens=True) == args.vocab
    ids = {t: tok.token_to_id(t) for t in SPECIAL + NON_SPECIAL}
    assert sorted(ids.values()) == list(range(args.vocab - 5, args.vocab)), ids
    # Compression on held-out text, and the round trip that byte-level BPE promises.
    chars = toks = 0
    for text in samples(args.corpus, args.sft):
        enc = tok.encode(text).ids
        assert tok.decode(enc, skip_special_tokens=False) == text, text[:80]
        chars += len(text)
        toks += len(enc)
    raw = open(args.out, "rb").read()
    print("wrote %s: vocab %d, %d bytes, sha256 %s, %.2f characters per token on held-out text, ids %s" %
          (args.out, args.vocab, len(raw), hashlib.sha256(raw).hexdigest()[:16], chars / toks, ids))


if __name__ == "__main__":
    main()
