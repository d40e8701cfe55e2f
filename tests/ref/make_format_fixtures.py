#!/usr/bin/env python3
"""Write the SFT format fixtures under tests/fixtures/data/formats/.

Each file in a format users hold comes with its OpenAI-messages equivalent
(NAME.openai.jsonl, one line per record, in order), which `pocket tokenize
--chat` must turn into the same token ids and loss masks:

    sharegpt.jsonl   {"conversations": [{"from", "value"}]}: human/gpt and user/assistant speakers,
                     a system first turn, a top-level "system"

A top-level "system" (ShareGPT, Alpaca) or system cell that is empty means no
system turn, as LLaMA-Factory reads an empty system.
    alpaca.jsonl     {"instruction", "input", "output"}: with and without input (empty, absent, null),
                     only an input, "system", "history"; the user turn as LLaMA-Factory's
                     AlpacaDatasetConverter builds it: the non-empty of instruction and input joined by "\\n"
    table.csv        header prompt,completion,system; written by Python's csv module (RFC 4180 quoting:
                     commas, doubled quotes and newlines inside quoted fields), CRLF rows, a UTF-8 BOM
                     as spreadsheets write it
    table.tsv        header prompt,completion; tab-separated, "\\n" rows, quoted where a field holds a tab,
                     a quote or a newline
    named.csv        header id,question,answer (read with --prompt-column question
                     --completion-column answer; the id column is unused)

The tables and JSON lines are written by Python's csv and json modules, not
by the code under test. Run from the repository root:
    tests/.venv/bin/python tests/ref/make_format_fixtures.py
"""
import csv
import json
import os

OUT = "tests/fixtures/data/formats"


def msgs(*turns, system=None):
    m = [{"role": "system", "content": system}] if system is not None else []
    for i, t in enumerate(turns):
        m.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
    return m


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def sharegpt():
    rows, want = [], []
    rows.append({"conversations": [{"from": "human", "value": "Do you repair e-bikes?"},
                                   {"from": "gpt", "value": "Yes, we repair most e-bikes."}]})
    want.append(msgs("Do you repair e-bikes?", "Yes, we repair most e-bikes."))
    rows.append({"conversations": [{"from": "system", "value": "You are a concise assistant."},
                                   {"from": "human", "value": "List three primes."},
                                   {"from": "gpt", "value": "2, 3 and 5."},
                                   {"from": "human", "value": "And the next one?"},
                                   {"from": "gpt", "value": "7"}]})
    want.append(msgs("List three primes.", "2, 3 and 5.", "And the next one?", "7",
                     system="You are a concise assistant."))
    rows.append({"system": "", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]})
    want.append(msgs("Hi", "Hello."))
    rows.append({"system": "Answer in Chinese.",
                 "conversations": [{"from": "user", "value": "Say hello."},
                                   {"from": "assistant", "value": "你好！"}]})
    want.append(msgs("Say hello.", "你好！", system="Answer in Chinese."))
    rows.append({"id": "x7", "conversations": [{"from": "human", "value": "Quote \"this\", please.\nTwo lines."},
                                               {"from": "gpt", "value": "\"this\"\nDone."}]})
    want.append(msgs("Quote \"this\", please.\nTwo lines.", "\"this\"\nDone."))
    return rows, want


def alpaca_user(instruction, inp):
    return "\n".join(p for p in (instruction, inp) if p)


def alpaca():
    rows = [
        {"instruction": "Translate to French.", "input": "good morning", "output": "Bonjour"},
        {"instruction": "Name a primary colour.", "input": "", "output": "Red."},
        {"instruction": "Give the capital of Japan.", "output": "Tokyo."},
        {"instruction": "Summarise.", "input": None, "output": "Short."},
        {"instruction": "", "input": "What is 2 + 2?", "output": "4"},
        {"system": "You are terse.", "instruction": "Reverse the word.", "input": "stressed", "output": "desserts"},
        {"system": "", "instruction": "Spell cat.", "output": "C-A-T"},
        {"instruction": "And in German?", "input": "", "output": "Guten Morgen",
         "history": [["Translate to French: good morning", "Bonjour"]]},
    ]
    want = []
    for r in rows:
        m = [{"role": "system", "content": r["system"]}] if r.get("system") else []
        for q, a in r.get("history", []):
            m += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        m += [{"role": "user", "content": alpaca_user(r["instruction"], r.get("input"))},
              {"role": "assistant", "content": r["output"]}]
        want.append(m)
    return rows, want


TABLE = [  # prompt, completion, system
    ("Do you repair e-bikes?", "Yes, we repair most e-bikes, including motors.", ""),
    ("Say \"hi\", then stop.", "\"hi\"", "You follow instructions exactly."),
    ("Write two lines.", "Line one,\nline two.", ""),
    ("你好，请介绍你自己。", "我是一个小助手。", "Answer in Chinese."),
    ("Tabs\tinside?", "Yes:\tone tab.", ""),
]


def table_csv():
    path = os.path.join(OUT, "table.csv")
    with open(path, "w", encoding="utf-8-sig", newline="") as f:   # a BOM, CRLF rows (csv's default)
        w = csv.writer(f)
        w.writerow(["prompt", "completion", "system"])
        for p, c, s in TABLE:
            w.writerow([p, c, s])
    return [msgs(p, c, system=s or None) for p, c, s in TABLE]   # an empty system cell: no system turn


def table_tsv():
    path = os.path.join(OUT, "table.tsv")
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["prompt", "completion"])
        for p, c, _ in TABLE:
            w.writerow([p, c])
    return [msgs(p, c) for p, c, _ in TABLE]


def named_csv():
    path = os.path.join(OUT, "named.csv")
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "question", "answer"])
        for i, (p, c, _) in enumerate(TABLE[:3]):
            w.writerow([i, p, c])
    return [msgs(p, c) for p, c, _ in TABLE[:3]]


def main():
    os.makedirs(OUT, exist_ok=True)
    rows, want = sharegpt()
    write_jsonl(os.path.join(OUT, "sharegpt.jsonl"), rows)
    write_jsonl(os.path.join(OUT, "sharegpt.openai.jsonl"), [{"messages": m} for m in want])
    rows, want = alpaca()
    write_jsonl(os.path.join(OUT, "alpaca.jsonl"), rows)
    write_jsonl(os.path.join(OUT, "alpaca.openai.jsonl"), [{"messages": m} for m in want])
    write_jsonl(os.path.join(OUT, "table.openai.jsonl"), [{"messages": m} for m in table_csv()])
    write_jsonl(os.path.join(OUT, "table.tsv.openai.jsonl"), [{"messages": m} for m in table_tsv()])
    write_jsonl(os.path.join(OUT, "named.openai.jsonl"), [{"messages": m} for m in named_csv()])


if __name__ == "__main__":
    main()
