"""recipes/spec/draft_plan.py: the expected speed-up of a DFlash draft in MNN 3.6.1 and the block it recommends.

  - the arithmetic (plan_blocks, expected_speedup) against cases computed by hand, among them the SmolLM2 figures
    of docs/speculative.md (2.63 tokens per pass; 22.4, 26.1, 2.6 and 0.1 ms: 2.05x, MNN measured 2.01x);
  - which evaluation of metrics.jsonl it reads (the one marked best, best.h5's, or the last; the first named
    validation set);
  - the script end to end on a tiny target's package with a draft trained for a few steps with evaluations (the
    target and draft of test_spec_runtime.py): a verdict, and the JSON with every figure;
  - bad input in one line on stderr naming the file, exit 1.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("MNN")
from test_mnn_runtime import make_checkpoint   # noqa: E402
from test_spec_runtime import CFG, train_draft   # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes/spec/draft_plan.py"
sys.path.insert(0, str(SCRIPT.parent))
from draft_plan import PlanError, expected_speedup, plan_blocks, read_run   # noqa: E402

VERDICTS = ("the draft does not pay on this machine: ship the package without it", "retrain with block = ",
            "keep block = ")


# ---- the arithmetic

def test_smollm2_figures_of_the_docs():
    # 2.63 x 22.4 / (26.1 + 2.6 + 0.1) = 58.912 / 28.8 = 2.0456
    assert round(expected_speedup(2.63, 22.4, 26.1, 2.6, 0.1), 2) == 2.05
    p = plan_blocks(4, 22.4, {4: 26.1}, 2.6, 0.1, tokens_at_block=2.63)
    assert [r["block"] for r in p["rows"]] == [4]
    assert p["expected_speedup"] == pytest.approx(58.912 / 28.8)
    assert p["rows"][0]["step_cost_decode_steps"] == pytest.approx(28.8 / 22.4)
    assert p["pays"] and p["recommended_block"] is None and p["best_block"] == 4


def test_every_block_from_the_shares():
    # shares 0.8, 0.5, 0.33: tokens 1.8, 2.3, 2.63; the draft's cost 2.6 + 0.1 at every block
    p = plan_blocks(4, 22.4, {2: 23.0, 3: 24.6, 4: 26.1}, 2.6, 0.1, shares=[0.8, 0.5, 0.33])
    got = {r["block"]: r for r in p["rows"]}
    assert got[2]["tokens_per_pass"] == pytest.approx(1.8) and got[3]["tokens_per_pass"] == pytest.approx(2.3)
    assert got[2]["speedup"] == pytest.approx(1.8 * 22.4 / 25.7)    # 1.5689
    assert got[3]["speedup"] == pytest.approx(2.3 * 22.4 / 27.3)    # 1.8872
    assert got[4]["speedup"] == pytest.approx(2.63 * 22.4 / 28.8)   # 2.0456
    assert [r["estimate"] for r in p["rows"]] == [True, True, False]
    assert p["best_block"] == 4 and p["recommended_block"] is None and p["pays"]


def test_a_smaller_block_is_recommended():
    # shares 0.9, 0.8, 0.1, verifying 4 tokens costs twice 1: b=2 1.9 x 10 / 12 = 1.583, b=3 2.7 x 10 / 13 = 2.077,
    # b=4 2.8 x 10 / 21 = 1.333
    p = plan_blocks(4, 10, {2: 11, 3: 12, 4: 20}, 1, 0, shares=[0.9, 0.8, 0.1])
    assert p["expected_speedup"] == pytest.approx(28 / 21)
    assert p["best_block"] == p["recommended_block"] == 3 and p["best_speedup"] == pytest.approx(27 / 13)


def test_within_five_percent_keeps_the_block():
    # b=2 1.6 x 10 / 11 = 1.4545, b=3 1.65 x 10 / 11.5 = 1.4348: b=2 is 1.4% better, not recommended
    p = plan_blocks(3, 10, {2: 10, 3: 10.5}, 1, 0, shares=[0.6, 0.05])
    assert p["best_block"] == 2 and p["recommended_block"] is None and p["pays"]
    assert p["best_speedup"] / p["expected_speedup"] == pytest.approx((16 / 11) / (16.5 / 11.5))


def test_below_1_1_does_not_pay():
    # 1.1 x 10 / (12 + 1 + 0.1) = 0.840
    p = plan_blocks(2, 10, {2: 12}, 1, 0.1, shares=[0.1])
    assert p["expected_speedup"] == pytest.approx(11 / 13.1) and not p["pays"]
    # the best block decides: 1.09x at the draft's block and 1.11x at a smaller one
    assert plan_blocks(2, 10, {2: 10}, 0, 0, tokens_at_block=1.09)["pays"] is False
    p = plan_blocks(3, 10, {2: 10, 3: 13}, 0, 0, shares=[0.11, 0.3])   # 1.11x at 2, 1.41 x 10 / 13 = 1.085x at 3
    assert p["pays"] and p["best_block"] == 2 and p["recommended_block"] is None


def test_the_generate_figure_replaces_the_evaluation_at_the_block_only():
    p = plan_blocks(3, 10, {2: 10, 3: 11}, 1, 0, shares=[0.9, 0.8], tokens_at_block=2.2)
    assert [r["tokens_per_pass"] for r in p["rows"]] == [pytest.approx(1.9), 2.2]
    assert p["expected_speedup"] == pytest.approx(22 / 12)


def test_bad_arithmetic_input():
    with pytest.raises(ValueError):
        plan_blocks(4, 10, {2: 1, 3: 1, 4: 1}, 1, 0, shares=[0.5, 0.4])   # 2 shares for block 4
    with pytest.raises(ValueError):
        plan_blocks(4, 10, {4: 1}, 1, 0, shares=[0.5, 0.4, 0.3])         # no t_verify at 2 and 3
    with pytest.raises(ValueError):
        plan_blocks(4, 10, {4: 1}, 1, 0)                                 # no acceptance at all


# ---- which evaluation

def write_run(d, lines):
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps(j) + "\n" for j in lines))
    return d


def evaluation(step, loss, shares, name=None, best=False):
    p = f"val_{name}_" if name else "val_"
    return {"step": step, p + "loss": loss, **{f"{p}accept_{i + 1}": s for i, s in enumerate(shares)},
            p + "accept_length": 1 + sum(shares), **({"best": True} if best else {})}


def test_the_evaluation_of_best_h5(tmp_path):
    lines = [evaluation(0, 9.0, [0, 0, 0], best=True), {"step": 1, "loss": 8.0},
             evaluation(100, 2.0, [0.5, 0.3, 0.1], best=True), evaluation(200, 2.0, [0.6, 0.4, 0.2]),
             evaluation(300, 2.5, [0.7, 0.5, 0.3])]
    r = read_run(write_run(tmp_path / "a", lines), 4)
    assert r["step"] == 100 and r["shares"] == [0.5, 0.3, 0.1] and "best.h5" in r["which"]   # the last marked
    unmarked = [{k: v for k, v in j.items() if k != "best"} for j in lines]   # a run from before the mark
    r = read_run(write_run(tmp_path / "b", unmarked), 4)
    assert r["step"] == 300 and r["accept_length"] == pytest.approx(2.5) and "last" in r["which"]


def test_a_named_validation_set(tmp_path):
    lines = [{**evaluation(10, 1.0, [0.9], "a", best=True), **evaluation(10, 3.0, [0.1], "b")},
             {**evaluation(20, 2.0, [0.8], "a"), **evaluation(20, 1.0, [0.2], "b")}]
    r = read_run(write_run(tmp_path / "ab", lines), 2)
    assert r["step"] == 10 and r["set"] == "a" and r["shares"] == [0.9]   # the first set, of the marked evaluation


def test_a_block_unlike_the_runs(tmp_path):
    run = write_run(tmp_path / "r", [evaluation(5, 1.0, [0.5, 0.2, 0.1])])
    with pytest.raises(PlanError, match="metrics.jsonl: the run trains a draft of block 4, the package's draft has "
                                        "block 8"):
        read_run(run, 8)


# ---- the script

def plan(*args, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def drafted(tmp_path_factory, run_pocket):
    """test_spec_runtime.py's target and draft, the draft trained 8 steps with an evaluation every 4, and the
    package with it."""
    d = tmp_path_factory.mktemp("plan")
    ckpt, _ = make_checkpoint(d, "target", CFG, run_pocket)
    train_draft(d, ckpt, run_pocket, evaluate=True)
    pkg = d / "pkg"
    run_pocket("export", "--ckpt", ckpt, "--format", "mnn", "--memory", "normal", "--sampler", "greedy",
               "--draft", d / "run/best.h5", "--out", pkg)
    (d / "accept.json").write_text(json.dumps({"prompts": 3, "same_output": 1.0, "passes": 10, "tokens": 25,
                                               "mean_acceptance": 2.5}))
    return {"dir": d, "pkg": pkg, "run": d / "run", "accept": d / "accept.json"}


def test_the_script_on_a_package(drafted, tmp_path):
    out = tmp_path / "plan.json"
    p = plan("--package", drafted["pkg"], "--run", drafted["run"], "--accept", drafted["accept"], "--threads", 2,
             "--json", out)
    print(p.stdout)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    expected = [ln for ln in lines if ln.startswith("expected decode speed-up with this draft: ")]
    assert len(expected) == 1 and expected[0].endswith("x")
    assert lines[-1].startswith(VERDICTS)
    assert any(ln.startswith("acceptance, evaluation at step 8 (best.h5's") for ln in lines)
    assert any("2.50 tokens per target pass (used at block 4)" in ln for ln in lines)
    j = json.loads(out.read_text())
    assert set(j) == {"package", "run", "accept", "costs", "block", "rows", "expected_speedup", "best_block",
                      "best_speedup", "recommended_block", "pays", "verdict"}
    assert j["block"] == 4 and [r["block"] for r in j["rows"]] == [2, 3, 4] and j["verdict"] == lines[-1]
    assert j["run"]["step"] == 8 and len(j["run"]["shares"]) == 3 and j["accept"]["mean_acceptance"] == 2.5
    c = j["costs"]
    assert set(c["t_verify_ms"]) == {"2", "3", "4"} and c["threads"] == 2 and c["context"] == 60
    assert all(x > 0 for x in [c["t_decode_ms"], c["t_dflash_ms"], c["t_fc_ms"], *c["t_verify_ms"].values()])
    for r in j["rows"]:
        assert set(r) == {"block", "tokens_per_pass", "step_cost_ms", "step_cost_decode_steps", "speedup", "estimate"}
        cost = c["t_verify_ms"][str(r["block"])] + c["t_dflash_ms"] + c["t_fc_ms"]
        assert r["speedup"] == pytest.approx(r["tokens_per_pass"] * c["t_decode_ms"] / cost)
    assert j["rows"][-1]["tokens_per_pass"] == 2.5   # generate's figure at the draft's block
    assert j["expected_speedup"] == j["rows"][-1]["speedup"]
    assert expected[0] == f"expected decode speed-up with this draft: {j['expected_speedup']:.2f}x"


def bad(args, named):
    p = plan(*args)
    assert p.returncode == 1, p.stdout + p.stderr
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and str(named) in err, err
    return err


def test_bad_input(drafted, tmp_path):
    pkg, run = drafted["pkg"], drafted["run"]
    empty = tmp_path / "empty"
    empty.mkdir()
    bad(["--package", pkg, "--run", empty], empty / "metrics.jsonl")
    steps_only = write_run(tmp_path / "steps", [{"step": 1, "loss": 3.0}])
    assert "no evaluation with acceptance" in bad(["--package", pkg, "--run", steps_only], steps_only / "metrics.jsonl")
    plain = tmp_path / "plain"
    shutil.copytree(pkg, plain)
    cfg = json.loads((plain / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if "dflash" not in k
                                                   and k != "speculative_type"}))
    assert "no DFlash draft" in bad(["--package", plain, "--run", run], plain / "config.json")
    other = tmp_path / "block8"
    shutil.copytree(pkg, other)
    (other / "config.json").write_text(json.dumps({**cfg, "dflash_block_size": 8}))
    assert "block 4" in bad(["--package", other, "--run", run], run / "metrics.jsonl")
    junk = tmp_path / "accept.json"
    junk.write_text('{"prompts": 3}')
    bad(["--package", pkg, "--run", run, "--accept", junk], junk)


def test_the_verdict_lines():
    from draft_plan import report
    costs = {"threads": 2, "context": 60, "t_decode_ms": 10, "t_verify_ms": {2: 11, 3: 12, 4: 20}, "t_dflash_ms": 1,
             "t_fc_ms": 0}
    run = {"path": "m.jsonl", "step": 5, "which": "the last one", "set": None, "shares": [0.9, 0.8, 0.1],
           "accept_length": 2.8}
    lines = report(plan_blocks(4, 10, costs["t_verify_ms"], 1, 0, shares=run["shares"]), run, None, costs)
    assert lines[-2:] == ["expected decode speed-up with this draft: 1.33x",
                          "retrain with block = 3 for an expected 2.08x (an estimate)"]
    assert sum("(estimate)" in ln for ln in lines) == 2
    lines = report(plan_blocks(4, 10, {2: 11, 3: 12, 4: 13}, 1, 0, shares=[0.9, 0.8, 0.7]), run, None, costs)
    assert lines[-2:] == ["expected decode speed-up with this draft: 2.43x",   # 3.4 x 10 / 14
                          "keep block = 4: no smaller block is expected to do more than 5% better"]
    accept = {"path": "a.json", "prompts": 3, "mean_acceptance": 3.4}
    lines = report(plan_blocks(4, 10, {4: 20}, 1, 0, tokens_at_block=3.4), None, accept, costs)
    assert lines[-1] == "expected decode speed-up with this draft: 1.62x" and "(estimate" not in "".join(lines)
    lines = report(plan_blocks(4, 10, {4: 20}, 1, 0, tokens_at_block=2.2), None, accept, costs)   # 1.05x
    assert lines[-1] == "the draft does not pay on this machine: ship the package without it"
