#!/usr/bin/env python3
"""A second task for the speculative draft: a customer's message to a shop -> JSON of its details.

    python3 recipes/spec/make_extract_data.py OUT_DIR [--train N] [--val N] [--seed S]

Writes OUT_DIR/train.jsonl and OUT_DIR/val.jsonl as chat JSONL for `pocket tokenize --chat`, like
recipes/demo/make_sft_data.py. The prompt is an instruction and an English message of four to seven sentences
(a greeting, the order, what went wrong, where and when it was delivered, what the customer wants, and sentences
that carry nothing the reply needs, in a shuffled order); the reply is compact JSON with the keys always in the
order name, order, product, quantity, city, date, issue, request:

    {"name":"Maria Lopez","order":"B-48213","product":"wireless earbuds","quantity":2,"city":"Leeds",
     "date":"March 14","issue":"damaged","request":"replacement"}

Six values are copied from the message, most of them words that occur in no other prompt (names, order numbers,
dates), so a draft must copy them from the context rather than learn them; issue and request are labels the
message words in several ways. Unlike the title task, the reply depends on a longer text (about 110 tokens of
SmolLM2's). The validation messages never occur in the training set. Python 3 standard library only; the same
seed gives the same files.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo"))
from make_sft_data import write_task  # noqa: E402  (the demo's command line and writer)

KEYS = ("name", "order", "product", "quantity", "city", "date", "issue", "request")

FIRST = ["Maria", "James", "Aisha", "Tom", "Chen", "Priya", "Lucas", "Emma", "Omar", "Sofia", "Daniel", "Yuki",
         "Grace", "Mateo", "Hannah", "Ivan", "Leila", "Noah", "Zoe", "Ravi", "Elena", "Samuel", "Mei", "Jonas"]
LAST = ["Lopez", "Smith", "Khan", "Becker", "Wang", "Patel", "Silva", "Novak", "Haddad", "Rossi", "Kim", "Tanaka",
        "Murphy", "Garcia", "Schmidt", "Petrov", "Nasser", "Brown", "Dubois", "Iyer", "Moreau", "Okafor", "Li",
        "Larsen"]
PRODUCTS = ["wireless earbuds", "coffee grinder", "desk lamp", "running shoes", "yoga mat", "electric kettle",
            "phone case", "backpack", "bluetooth speaker", "air fryer", "office chair", "winter jacket",
            "water bottle", "keyboard", "smart watch", "rice cooker", "hair dryer", "tennis racket", "blender",
            "camping tent", "baby monitor", "wall clock", "laptop stand", "travel pillow"]
CITIES = ["Leeds", "Austin", "Lyon", "Osaka", "Toronto", "Porto", "Denver", "Krakow", "Dublin", "Perth", "Seville",
          "Bristol", "Nairobi", "Quebec", "Malmo", "Tucson", "Bergen", "Graz", "Cork", "Adelaide"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}

# issue label -> ways a message says it ({p} the product)
ISSUES = {
    "damaged": ["The {p} arrived with a cracked side.", "When I opened the box the {p} was broken.",
                "The {p} was damaged in transit."],
    "late": ["The {p} came nine days after the promised date.", "Delivery of the {p} was very late.",
             "I waited more than two weeks for the {p}."],
    "wrong item": ["Instead of the {p} I received something else entirely.", "The parcel did not contain the {p} "
                   "I ordered.", "You sent me the wrong item, not the {p}."],
    "missing parts": ["The {p} is missing some of its parts.", "Several pieces of the {p} were not in the box.",
                      "The {p} came without the parts listed in the manual."],
    "not working": ["The {p} stopped working after one day.", "The {p} does not turn on at all.",
                    "The {p} has not worked since I unpacked it."],
}
# request label -> ways a message asks for it
REQUESTS = {
    "refund": ["I would like my money back.", "Please refund the full amount.", "I want a refund."],
    "replacement": ["Please send me a new one.", "I would like a replacement.", "Could you replace it?"],
    "repair": ["Can you repair it for me?", "I would like it fixed.", "Please arrange a repair."],
}
FILLER = ["I have been a customer of your shop for {n} years.", "My neighbour recommended your store.",
          "The weather here has been terrible all week.", "I usually love your products.",
          "I paid with my credit card.", "My previous {n} orders were all fine.",
          "I already tried calling your hotline twice.", "The courier was friendly, at least.",
          "I bought it as a birthday present.", "Your website was easy to use."]
GREETINGS = ["Hello,", "Hi there,", "Dear support team,", "Good morning,", "To whom it may concern,"]
INSTRUCTIONS = ["Extract the order details from this customer message as JSON:",
                "Read the message and return name, order, product, quantity, city, date, issue and request as JSON:"]


def make_message(rng):
    """One message and its details; the detail sentences and two or three fillers in a random order."""
    d = {"name": rng.choice(FIRST) + " " + rng.choice(LAST),
         "order": "%s-%05d" % (rng.choice("ABCDEFGHKMNPRST"), rng.randrange(10000, 100000)),
         "product": rng.choice(PRODUCTS), "quantity": rng.randint(1, 6), "city": rng.choice(CITIES),
         "date": "%s %d" % (rng.choice(MONTHS), rng.randint(1, 28)),
         "issue": rng.choice(sorted(ISSUES)), "request": rng.choice(sorted(REQUESTS))}
    q = d["quantity"]
    count = str(q) if rng.random() < 0.5 else NUMBER_WORDS[q]
    noun = d["product"] if q == 1 else d["product"] + ("es" if d["product"].endswith(("sh", "ch", "s")) else "s")
    body = [rng.choice(["I ordered %s %s under order %s.", "My order %s was for %s %s."]),
            rng.choice(ISSUES[d["issue"]]).format(p=d["product"]),
            rng.choice(["It was delivered to my address in %s on %s.", "The parcel reached %s on %s."])
            % (d["city"], d["date"]),
            rng.choice(REQUESTS[d["request"]])]
    if body[0].startswith("I ordered"):
        body[0] = body[0] % (count, noun, d["order"])
    else:
        body[0] = body[0] % (d["order"], count, noun)
    body += [f.format(n=rng.randint(2, 9)) for f in rng.sample(FILLER, rng.randint(2, 3))]
    rng.shuffle(body)
    sign = rng.choice(["Thanks, %s", "Regards, %s", "Best wishes, %s", "- %s"]) % d["name"]
    return " ".join([rng.choice(GREETINGS)] + body + [sign]), d


def example(rng, lang=None):
    message, d = make_message(rng)
    answer = json.dumps({k: d[k] for k in KEYS}, ensure_ascii=False, separators=(",", ":"))
    return message, {"messages": [{"role": "user", "content": rng.choice(INSTRUCTIONS) + "\n" + message},
                                  {"role": "assistant", "content": answer}]}


def generate(n_train, n_val, seed):
    rng = random.Random(seed)
    seen, train, val = set(), [], []
    for target, out in ((n_val, val), (n_train, train)):   # validation first: its messages are reserved
        while len(out) < target:
            message, ex = example(rng)
            if message in seen:
                continue
            seen.add(message)
            out.append(ex)
    return train, val


def check(rows):
    """Keys in the fixed order; every copied value occurs in the message, the labels are known."""
    for r in rows:
        message = r["messages"][0]["content"].split("\n", 1)[1]
        ans = json.loads(r["messages"][1]["content"])
        assert tuple(ans) == KEYS, ans
        for k in ("name", "order", "product", "city", "date"):
            assert ans[k] in message, (k, ans[k], message)
        assert ans["issue"] in ISSUES and ans["request"] in REQUESTS, ans
        assert str(ans["quantity"]) in message or NUMBER_WORDS[ans["quantity"]] in message, message


def main():
    write_task(__doc__, generate, check, 1000, 100, 20261208)


if __name__ == "__main__":
    main()
