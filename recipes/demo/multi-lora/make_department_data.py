#!/usr/bin/env python3
"""A second business task on the demo's product titles, for the multi-LoRA
experiment (run.sh here): which department sells the product, and its brand.

    python3 recipes/demo/multi-lora/make_department_data.py OUT_DIR [--train N] [--val N] [--seed S]

The titles come from the demo's own generator (recipes/demo/make_sft_data.py);
the reply is "<department>: <brand>", the department a lookup from the
category (Electronics / Apparel / Home, or 数码 / 服饰 / 家居 for a Chinese
title), so one base model with two adapters answers two different tasks on
the same kind of input. Chat JSONL as make_sft_data.py writes it; the
validation titles never occur in the training set.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import make_sft_data as demo  # noqa: E402

DEPARTMENTS = {
    "Electronics": ["Smartphone", "Laptop", "Tablet", "Monitor", "Headphones", "TV"],
    "Apparel": ["Running Shoes", "T-Shirt", "Hoodie", "Jeans", "Backpack", "Suitcase"],
    "Home": ["Water Bottle", "Rice Cooker", "Air Fryer"],
    "数码": ["手机", "笔记本电脑", "平板电脑", "显示器", "电视"],
    "服饰": ["运动鞋", "T恤", "卫衣", "羽绒服", "牛仔裤", "双肩包", "行李箱"],
    "家居": ["保温杯", "电饭煲", "空气炸锅"],
}
DEPARTMENT_OF = {c: d for d, cats in DEPARTMENTS.items() for c in cats}
INSTRUCTIONS = {"zh": ["这个商品属于哪个部门？回答“部门: 品牌”：", "判断商品的销售部门和品牌："],
                "en": ["Which department sells this product? Answer \"department: brand\":",
                       "Give the department and the brand of this product:"]}


def example(rng, lang):
    title, attrs = demo.make_title(rng, lang)
    answer = "%s: %s" % (DEPARTMENT_OF[attrs["category"]], attrs["brand"])
    return title, {"messages": [{"role": "user", "content": rng.choice(INSTRUCTIONS[lang]) + "\n" + title},
                                {"role": "assistant", "content": answer}]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=3000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20250202)
    args = ap.parse_args()
    missing = [c for c, *_ in demo.ZH_CATEGORIES + demo.EN_CATEGORIES if c not in DEPARTMENT_OF]
    if missing:
        sys.exit("make_department_data.py: no department for %s" % ", ".join(missing))
    train, val = demo.generate(args.train, args.val, args.seed, example)
    os.makedirs(args.out_dir, exist_ok=True)
    demo.write_jsonl(os.path.join(args.out_dir, "train.jsonl"), train)
    demo.write_jsonl(os.path.join(args.out_dir, "val.jsonl"), val)
    print("  wrote %d training and %d held-out examples to %s" % (len(train), len(val), args.out_dir))


if __name__ == "__main__":
    main()
