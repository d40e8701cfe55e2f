"""make bench-rl's task pieces (recipes/rl/): the arithmetic problems and the step reward program.

  - make_arith_data.py: every reply's equations hold and end on the answer; the three sets share no prompt;
  - steps_reward.py: the share of the reference's equations the completion writes right, over the larger count,
    on cases worked by hand; run as pocket runs a reward program (one JSON line in, one number out, flushed,
    while its stdin stays open).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "recipes", "rl"))
from steps_reward import steps_reward  # noqa: E402

REF = "3 x 21 = 63; 91 + 63 = 154; 154 + 8 = 162. Answer: 162"


def test_arith_data(tmp_path):
    subprocess.run([sys.executable, os.path.join(ROOT, "recipes/rl/make_arith_data.py"), str(tmp_path),
                    "--train", "60", "--val", "10", "--test", "20"], check=True, capture_output=True)
    prompts = {}
    for name in ("train", "val", "test"):
        rows = [json.loads(line) for line in open(tmp_path / (name + ".jsonl"))]
        prompts[name] = {r["messages"][0]["content"] for r in rows}
        for r in rows:
            reply = r["messages"][1]["content"]
            # the step reward gives the reference itself full credit
            assert steps_reward(reply, reply) == 1.0, reply
    assert len(prompts["train"]) == 60 and len(prompts["val"]) == 10 and len(prompts["test"]) == 20
    assert not (prompts["train"] & prompts["test"]) and not (prompts["train"] & prompts["val"])


@pytest.mark.parametrize("completion, want", [
    (REF, 1.0),
    ("3 x 21 = 63; 91 + 63 = 154. Answer: 154", 2 / 3),                          # a step missing
    ("3 x 21 = 63; 91 + 63 = 144; 144 + 8 = 152. Answer: 152", 1 / 3),         # a slip carried on
    ("3 x 21 = 63; 91 + 63 = 154; 154 + 8 = 162; 1 + 1 = 2. Answer: 162", 3 / 4),  # an extra equation costs
    ("3 x 21 = 63; 3 x 21 = 63; 3 x 21 = 63. Answer: 63", 1 / 3),               # repeating one counts once
    ("91 + 63 = 154；3 x 21 = 63；154 + 8 = 162。答案：162", 1.0),               # order and punctuation aside
    ("Answer: 162", 0.0),
])
def test_steps_reward_by_hand(completion, want):
    assert steps_reward(completion, REF) == pytest.approx(want)


def test_steps_reward_as_a_program():
    # pocket writes a line and waits for the answer before the next: each must come back at once
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "recipes/rl/steps_reward.py")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    answers = []
    for completion in (REF, "3 x 21 = 63. Answer: 63"):
        p.stdin.write(json.dumps({"id": "x:1", "prompt": "p", "completion": completion, "reference": REF}) + "\n")
        p.stdin.flush()
        answers.append(float(p.stdout.readline()))
    p.stdin.close()
    assert p.wait(timeout=10) == 0
    assert answers == [1.0, pytest.approx(1 / 3)]
