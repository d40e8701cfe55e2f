"""Multi-step arithmetic word problems with a numeric answer, Chinese and English: a verifiable task for GRPO.

    python3 recipes/rl/make_arith_data.py OUT_DIR [--train 1000] [--val 50] [--test 200] [--seed 20261207]

Writes OUT_DIR/train.jsonl, val.jsonl and test.jsonl (chat examples, {"messages": [user, assistant]}; the
three sets from one seeded stream, so no problem repeats across them). Each problem takes two or three steps
of +, - and x on numbers below 100 (a story of a shop, a library, a farm, a school...); the reply is the
steps written out, one equation each, then the answer: "37 - 12 = 25; 3 x 8 = 24; 25 + 24 = 49. Answer: 49"
("...。答案：49" in Chinese). The last number of the reply is the answer, which is what `[rl] rewards = number`
checks; the steps are what SFT teaches and what the rewards make right. Every reply is checked by evaluating
its equations before it is written.
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo"))
from make_sft_data import write_jsonl  # noqa: E402  (the demo's: a temporary file renamed)

# A story: (English template, Chinese template); {a} the start, then each step's number. Steps are
# ("+", n), ("-", n) or ("*", k, n): k groups of n added.
THINGS = [("apples", "个苹果", "a shop", "商店"), ("books", "本书", "a library", "图书馆"),
          ("eggs", "个鸡蛋", "a farm", "农场"), ("pencils", "支铅笔", "a school", "学校"),
          ("bottles of water", "瓶水", "a store", "超市"), ("tickets", "张票", "a cinema", "电影院"),
          ("parcels", "个包裹", "a post office", "邮局"), ("cups", "个杯子", "a cafe", "咖啡店")]

BOXES = [("boxes", "箱"), ("bags", "袋"), ("crates", "筐"), ("packs", "包")]


def step_text(op, rng, thing, box):
    """The English and Chinese clause of one step."""
    if op[0] == "+":
        return (rng.choice(["it gets {n} more", "{n} more arrive", "it buys {n} more"]).format(n=op[1]),
                rng.choice(["又来了{n}{u}", "又买了{n}{u}", "又收到{n}{u}"]).format(n=op[1], u=thing[1]))
    if op[0] == "-":
        return (rng.choice(["it sells {n}", "{n} are given away", "{n} are used"]).format(n=op[1]),
                rng.choice(["卖出了{n}{u}", "送出了{n}{u}", "用掉了{n}{u}"]).format(n=op[1], u=thing[1]))
    k, n = op[1], op[2]
    return ("{k} {b} of {n} arrive".format(k=k, b=box[0], n=n),
            "又运来{k}{b}，每{b}{n}{u}".format(k=k, b=box[1], n=n, u=thing[1]))


def problem(rng):
    """One problem: (English prompt, Chinese prompt, the steps as (lhs, value) pairs, the answer)."""
    while True:
        start = rng.randint(10, 99)
        ops = []
        for _ in range(rng.choice([2, 2, 3])):
            kind = rng.choice("+-*")
            ops.append(("+", rng.randint(2, 60)) if kind == "+" else ("-", rng.randint(2, 60)) if kind == "-"
                       else ("*", rng.randint(2, 9), rng.randint(3, 25)))
        total, ok = start, True
        for op in ops:
            total += op[1] if op[0] == "+" else -op[1] if op[0] == "-" else op[1] * op[2]
            ok = ok and total > 0
        if ok and total < 1000:
            break
    thing, box = rng.choice(THINGS), rng.choice(BOXES)
    clauses = [step_text(op, rng, thing, box) for op in ops]
    en = "{p} has {a} {t}. Then {c}. How many {t} does it have now?".format(
        p=thing[2][0].upper() + thing[2][1:], a=start, t=thing[0], c=", then ".join(c[0] for c in clauses))
    zh = "{p}有{a}{u}，{c}。现在{p}有多少{u2}？".format(p=thing[3], a=start, u=thing[1],
                                             c="，然后".join(c[1] for c in clauses), u2=thing[1][1:] or thing[1])
    steps, total = [], start
    for op in ops:
        if op[0] == "*":
            steps.append(("%d x %d" % (op[1], op[2]), op[1] * op[2]))
            steps.append(("%d + %d" % (total, op[1] * op[2]), total + op[1] * op[2]))
            total += op[1] * op[2]
        else:
            value = total + op[1] if op[0] == "+" else total - op[1]
            steps.append(("%d %s %d" % (total, op[0], op[1]), value))
            total = value
    return en, zh, steps, total


def reply(steps, answer, chinese):
    eqs = ["%s = %d" % s for s in steps]
    return ("；".join(eqs) + "。答案：%d" % answer) if chinese else ("; ".join(eqs) + ". Answer: %d" % answer)


def check(row):
    """The reply's equations hold and its last number is the answer."""
    text = row["messages"][1]["content"].replace("；", "; ").replace("。答案：", ". Answer: ")
    body, answer = text.rsplit(". Answer: ", 1)
    for eq in body.split("; "):
        lhs, rhs = eq.split(" = ")
        a, op, b = lhs.split(" ")
        assert {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b)}[op] == int(rhs), eq
    assert int(rhs) == int(answer), text


def generate(n, seed):
    rng, seen, rows = random.Random(seed), set(), []
    while len(rows) < n:
        en, zh, steps, answer = problem(rng)
        chinese = rng.random() < 0.5
        prompt = zh if chinese else en
        if prompt in seen:
            continue
        seen.add(prompt)
        rows.append({"messages": [{"role": "user", "content": prompt},
                                  {"role": "assistant", "content": reply(steps, answer, chinese)}]})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--val", type=int, default=50)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261207)
    args = ap.parse_args()
    rows = generate(args.train + args.val + args.test, args.seed)
    for r in rows:
        check(r)
    os.makedirs(args.out_dir, exist_ok=True)
    parts = {"train": rows[:args.train], "val": rows[args.train:args.train + args.val],
             "test": rows[args.train + args.val:]}
    for name, part in parts.items():
        write_jsonl(os.path.join(args.out_dir, name + ".jsonl"), part)
    print("  wrote %d training, %d validation and %d test problems to %s" % (args.train, args.val, args.test,
                                                                           args.out_dir))


if __name__ == "__main__":
    main()
