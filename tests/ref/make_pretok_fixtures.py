#!/usr/bin/env python3
"""Write tests/fixtures/tok/pretok.json: the fixture tokenizer (tests/fixtures/tok/tokenizer.json)
with other pre-tokenizers and normalizers, and HF tokenizers' ids for every corpus line and the
whole corpus under each. The pre-tokenizers are those of released byte-level BPE models (SmolLM2 /
StarCoder: Digits + ByteLevel; Llama 3's split; DeepSeek-V3's three splits), each Split behaviour
with and without invert, Punctuation, Digits in runs, and the NFKC / NFD normalizers.

Run from the repo root in the venv (tokenizers 0.23.3):
    tests/.venv/bin/python tests/ref/make_pretok_fixtures.py
"""
import json

import tokenizers
from tokenizers import Tokenizer

FIX = "tests/fixtures/tok/"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_V3 = [r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
               "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
               "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"]


def byte_level(use_regex, add_prefix_space=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def split(pattern, behavior="Isolated", invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern}, "behavior": behavior,
            "invert": invert}


def seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


VARIANTS = {
    "smollm": (None, seq({"type": "Digits", "individual_digits": True}, byte_level(True))),
    "llama3": (None, seq(split(LLAMA3), byte_level(False))),
    "deepseek_v3": (None, seq(*[split(p) for p in DEEPSEEK_V3], byte_level(False))),
    "digit_runs": (None, seq({"type": "Digits", "individual_digits": False}, byte_level(True))),
    "punctuation": (None, seq({"type": "Punctuation", "behavior": "Isolated"}, byte_level(True))),
    "removed": (None, seq(split(r"\s+", "Removed"), byte_level(False))),
    "merged_prev": (None, seq(split(r"[,.!?]", "MergedWithPrevious"), byte_level(True))),
    "merged_next": (None, seq(split(r"\s", "MergedWithNext"), byte_level(False))),
    "contiguous": (None, seq(split(r"\p{P}", "Contiguous"), byte_level(True))),
    "invert_isolated": (None, seq(split(r"\p{L}+", "Isolated", invert=True), byte_level(False))),
    "invert_removed": (None, seq(split(r"\w+|[^\w\s]+", "Removed", invert=True), byte_level(False))),
    "literal_merged_next": (None, seq(split(" ", "MergedWithNext", literal=True), byte_level(False))),
    "nfkc": ({"type": "NFKC"}, seq(split(LLAMA3), byte_level(False))),
    "nfd_seq": ({"type": "Sequence", "normalizers": [{"type": "NFD"}]}, byte_level(True)),
}


def main():
    assert tokenizers.__version__ == "0.23.3", tokenizers.__version__
    base = json.load(open(FIX + "tokenizer.json", encoding="utf-8"))
    whole = open(FIX + "corpus.txt", encoding="utf-8", newline="").read()
    lines = whole.split("\n")[:-1]
    out = []
    for name, (norm, pre) in VARIANTS.items():
        tj = dict(base, normalizer=norm, pre_tokenizer=pre)
        tok = Tokenizer.from_str(json.dumps(tj))
        out.append({"name": name, "normalizer": norm, "pre_tokenizer": pre,
                    "lines": [tok.encode(ln).ids for ln in lines], "whole": tok.encode(whole).ids})
    with open(FIX + "pretok.json", "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", FIX + "pretok.json:", len(out), "variants")


if __name__ == "__main__":
    main()
