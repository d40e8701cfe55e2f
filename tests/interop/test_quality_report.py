"""The quantization quality report, two ways that share no code: `pocket eval
--int4 --ref FLOAT.h5` (C: pocket's int4 and float forwards, its KL) and
tests/mnn_quality.py (the MNN runtime's logits of the exported package, the
float model in transformers, the statistics in numpy), on a tiny model whose
logits are peaked (weights N(0, 0.25^2)) so that RTN group 32 moves them.
Over the same windows the two give the same mean KL, top-1 agreement and
perplexities: the runtime with memory normal computes with the int4 model's
weights in float, as `pocket eval --int4` does, so the figures differ only by
summation order (bounds: 1e-3 relative, and 2 positions of top-1 for near ties).
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_mnn_runtime import BASE, TOK, make_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests/mnn_quality.py"
CORPUS = [ROOT / "tests/fixtures/tok/corpus.txt", ROOT / "tests/fixtures/data/corpus"]


def pocket_report(text):
    kl = float(re.search(r"mean KL divergence ([0-9.e+-]+)", text).group(1))
    top1 = float(re.search(r"top-1 agreement +([0-9.]+)%", text).group(1)) / 100
    ppl, ref_ppl = map(float, re.search(r"perplexity +([0-9.]+) \(loss [0-9.]+\); reference ([0-9.]+)", text).groups())
    positions = int(re.search(r", (\d+) positions", text).group(1))
    return {"kl_mean": kl, "top1": top1, "ppl": ppl, "ref_ppl": ref_ppl, "positions": positions}


def test_mnn_quality_equals_pocket_eval_ref(tmp_path, run_pocket):
    cfg = {**BASE, "hidden_size": 64, "intermediate_size": 128}
    float_ckpt, hf = make_checkpoint(tmp_path, "float", cfg, run_pocket)
    data = tmp_path / "data.h5"
    run_pocket("tokenize", "--tokenizer", TOK / "tokenizer.json", *CORPUS, "--out", data)
    rtn = tmp_path / "rtn.h5"
    run_pocket("quantize", "--ckpt", float_ckpt, "--group", "32", "--out", rtn)
    pkg = tmp_path / "pkg"
    run_pocket("export", "--ckpt", rtn, "--format", "mnn", "--out", pkg)
    ours = pocket_report(run_pocket("eval", "--ckpt", rtn, "--int4", "--data", data, "--seq-len", "64", "--ref",
                                    float_ckpt, timeout=300).stdout)
    out = tmp_path / "mnn.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--package", pkg, "--ref", hf, "--data", data, "--seq-len", "64",
                           "--json", out], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mnn = json.loads(out.read_text())
    print(f"\npocket eval --ref: {ours}\nmnn_quality.py:    {mnn}")
    assert ours["positions"] == mnn["positions"] > 1000
    assert ours["kl_mean"] > 0.01   # a real gap for the comparison to mean something
    assert mnn["kl_mean"] == pytest.approx(ours["kl_mean"], rel=1e-3)
    assert abs(mnn["top1"] - ours["top1"]) * ours["positions"] <= 2
    assert mnn["ppl"] == pytest.approx(ours["ppl"], rel=1e-3)
    assert mnn["ref_ppl"] == pytest.approx(ours["ref_ppl"], rel=1e-4)


def test_quantize_group_is_numpy_rtn(tmp_path, pocket, run_pocket):
    """pocket quantize --group G replaces a checkpoint's int4 state (here the
    shifted one test_mnn_runtime makes, on group 32) with round-to-nearest on G,
    asymmetric or symmetric, every matrix: equal to numpy's RTN of the float
    weights, fp16-rounded; a group that leaves a shorter last group is refused
    with the groups that fit every matrix, and nothing is written."""
    import h5py
    import numpy as np
    from test_mnn_runtime import add_shifted_qat_state, fp16, rtn
    cfg = {**BASE, "hidden_size": 64, "intermediate_size": 96}
    ckpt, _ = make_checkpoint(tmp_path, "m", cfg, run_pocket)
    add_shifted_qat_state(ckpt, group=32)
    for sym in (False, True):
        out = tmp_path / f"q{int(sym)}.h5"
        run_pocket("quantize", "--ckpt", ckpt, "--group", "32", *(["--symmetric"] if sym else []), "--out", out)
        with h5py.File(out, "r") as f:
            q = f["qat"]
            assert int(q.attrs["group"]) == 32 and int(q.attrs["symmetric"]) == int(sym)
            names = [n for n, ds in f["params"].items() if ds.ndim == 2]
            assert sorted(q.keys()) == sorted(names)
            for n in names:
                w = f["params"][n][()]
                g = w.reshape(w.shape[0], -1, 32)
                if sym:
                    want_s, want_z = fp16(np.abs(g).max(-1) / np.float32(7)), np.zeros(g.shape[:2], np.float32)
                else:
                    want_s, want_z = rtn(w, 32)
                np.testing.assert_array_equal(q[n]["scale"][()], want_s, err_msg=n)
                if not sym:
                    np.testing.assert_array_equal(q[n]["zero"][()], want_z, err_msg=n)
    bad = tmp_path / "bad.h5"
    proc = subprocess.run([str(pocket), "quantize", "--ckpt", str(ckpt), "--group", "64", "--out", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and not bad.exists()
    assert proc.stderr.count("\n") == 1 and "96 input columns" in proc.stderr and proc.stderr.endswith("this model: 2, 4, 8, 16, 32\n")
