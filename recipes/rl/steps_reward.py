"""The arithmetic task's step reward, a [rl] reward program (docs/rl.md): the share of the reference's equations
that the completion writes down, right (each "a op b = c" once), over the larger of the two counts, so that extra
or wrong equations cost as missing ones do. A completion that follows the worked answer step by step earns the
credit of every step it gets right, where `number` pays only for the last.

    [rl] rewards = number; program=python3 recipes/rl/steps_reward.py

Reads one JSON line per completion on stdin ({"id", "prompt", "completion", "reference"}), writes one number per
line and flushes it.
"""
import json
import re
import sys
from collections import Counter

EQUATION = re.compile(r"(\d+) ([+\-x]) (\d+) = (\d+)")


def steps_reward(completion, reference):
    want = Counter(EQUATION.findall(reference))
    got = Counter(EQUATION.findall(completion))
    if not want:
        return 0.0
    return sum((want & got).values()) / max(sum(want.values()), sum(got.values()))


def main():
    for line in sys.stdin:
        row = json.loads(line)
        print(steps_reward(row["completion"], row["reference"]), flush=True)


if __name__ == "__main__":
    main()
