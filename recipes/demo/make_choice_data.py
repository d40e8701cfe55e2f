#!/usr/bin/env python3
"""The Dec demo task: the category of a product title, one of 9 fixed answers.

    python3 recipes/demo/make_choice_data.py OUT_DIR [--train N] [--val N] [--seed S]

Writes, from the same titles (make_sft_data.py's generator, Chinese and
English, with the category word taken out of the title so it must be
inferred from brand, size and the other words):

  OUT_DIR/choice-{train,val}.jsonl  for `pocket tokenize --choice`:
      {"prompt": "<instruction>\\n<title>", "candidates": [the 9 categories], "label": "<category>"}
  OUT_DIR/sft-{train,val}.jsonl     the same examples for `pocket tokenize --chat`, the
      category as the assistant's reply (generative SFT, scored by exact match)

The validation titles never occur in the training set. Python 3 standard
library only; the same seed gives the same files.
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_sft_data as titles  # noqa: E402

CANDIDATES = ["phone", "laptop", "tablet", "shoes", "clothing", "kitchen", "bag", "display", "audio"]
CATEGORY = {
    "手机": "phone", "Smartphone": "phone", "笔记本电脑": "laptop", "Laptop": "laptop",
    "平板电脑": "tablet", "Tablet": "tablet", "运动鞋": "shoes", "Running Shoes": "shoes",
    "T恤": "clothing", "卫衣": "clothing", "羽绒服": "clothing", "牛仔裤": "clothing",
    "T-Shirt": "clothing", "Hoodie": "clothing", "Jeans": "clothing",
    "保温杯": "kitchen", "电饭煲": "kitchen", "空气炸锅": "kitchen",
    "Water Bottle": "kitchen", "Rice Cooker": "kitchen", "Air Fryer": "kitchen",
    "双肩包": "bag", "行李箱": "bag", "Backpack": "bag", "Suitcase": "bag",
    "显示器": "display", "电视": "display", "Monitor": "display", "TV": "display",
    "Headphones": "audio",
}
INSTRUCTION = {"zh": "这个商品属于哪个品类？", "en": "Which category is this product?"}


def example(rng, lang):
    title, attrs = titles.make_title(rng, lang)
    # The category word out: the answer must come from the rest of the title.
    title = " ".join(w for w in title.split(" ") if w and w not in attrs["category"].split(" "))
    return title, lang, CATEGORY[attrs["category"]]


def generate(n_train, n_val, seed):
    rng = random.Random(seed)
    seen, train, val = set(), [], []
    for target, out in ((n_val, val), (n_train, train)):
        while len(out) < target:
            title, lang, label = example(rng, "zh" if rng.random() < 0.5 else "en")
            if title in seen:
                continue
            seen.add(title)
            out.append((INSTRUCTION[lang] + "\n" + title, label))
    return train, val


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=3000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20250102)
    args = ap.parse_args()
    train, val = generate(args.train, args.val, args.seed)
    assert set(CATEGORY.values()) == set(CANDIDATES)
    os.makedirs(args.out_dir, exist_ok=True)
    for name, rows in (("train", train), ("val", val)):
        titles.write_jsonl(os.path.join(args.out_dir, f"choice-{name}.jsonl"),
                           [{"prompt": p, "candidates": CANDIDATES, "label": y} for p, y in rows])
        titles.write_jsonl(os.path.join(args.out_dir, f"sft-{name}.jsonl"),
                           [{"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": y}]}
                            for p, y in rows])
    print("  wrote %d training and %d held-out titles (choice and SFT forms) to %s" % (len(train), len(val),
                                                                                       args.out_dir))


if __name__ == "__main__":
    main()
