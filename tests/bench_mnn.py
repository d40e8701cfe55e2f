"""MNN runtime speed of our pocket-0.3b package (random weights), for `make bench`.

    python tests/bench_mnn.py POCKET WORKDIR [--threads N] [--llmexport]

Makes a pocket-0.3b checkpoint (random weights, the fixture tokenizer), exports
it with both graph forms, and times the PyPI `mnn` runtime on each package
with memory "low" (int4 weights, int8 dynamic activations: the deployment
default) and "normal" (weights dequantized to fp32 at load, the numerics of
`pocket forward --int4`): prefill of a 256-token prompt (tokens/s) and greedy
decoding of 64 tokens after it (tokens/s). Each figure is the best of 3 runs,
each run in a fresh process. Prints one line per package and setting, and
the package size.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT, NEW, REPS = 256, 64, 3

TIMER = r"""
import json, sys, time
import MNN.llm as llm
pkg, mem, threads, prompt, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = llm.create(pkg + "/config.json")
m.set_config({"memory": mem, "thread_num": threads, "sampler_type": "greedy", "use_template": False})
m.load()
ids = [(97 * i + 13) % 1400 + 10 for i in range(prompt)]
m.generate_init(); m.forward(ids[:32])                      # warm-up
m.generate_init(); t = time.perf_counter(); m.forward(ids); prefill = time.perf_counter() - t
m.generate_init(); t = time.perf_counter(); out = m._c_obj.generate(ids, new); total = time.perf_counter() - t
print(json.dumps({"prefill_tps": prompt / prefill, "decode_tps": len(out) / max(total - prefill, 1e-9)}))
"""


def run_timer(pkg, mem, threads):
    best = {}
    for _ in range(REPS):
        out = subprocess.run([sys.executable, "-c", TIMER, str(pkg), mem, str(threads), str(PROMPT), str(NEW)],
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"bench_mnn: the runtime failed on {pkg}: {out.stderr[-2000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for k, v in r.items():
            best[k] = max(best.get(k, 0.0), v)
    return best


def size_of(d):
    return sum(p.stat().st_size for p in Path(d).iterdir())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pocket")
    ap.add_argument("workdir")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "pocket-0.3b.h5"
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    if not ckpt.exists():
        subprocess.run([a.pocket, "init", "--model", "pocket-0.3b", "--tokenizer",
                        str(ROOT / "tests/fixtures/tok/tokenizer.json"), "--out", str(ckpt)],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    for graph in ["fused", "plain"]:
        pkg = work / f"mnn-{graph}"
        subprocess.run([a.pocket, "export", "--ckpt", str(ckpt), "--format", "mnn", "--graph", graph, "--force",
                        "--out", str(pkg)], check=True, env=env, stdout=subprocess.DEVNULL)
        print(f"mnn package ({graph} graph): {size_of(pkg) / 1e6:.1f} MB "
              f"(llm.mnn.weight {(pkg / 'llm.mnn.weight').stat().st_size / 1e6:.1f} MB)", flush=True)
        for mem in ["low", "normal"]:
            r = run_timer(pkg, mem, a.threads)
            print(f"mnn runtime {graph:5s} memory={mem:6s} {a.threads} threads: prefill {r['prefill_tps']:7.1f} tok/s "
                  f"({PROMPT} tokens), decode {r['decode_tps']:6.1f} tok/s ({NEW} tokens)", flush=True)


if __name__ == "__main__":
    main()
