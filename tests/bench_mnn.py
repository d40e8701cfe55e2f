"""MNN runtime speed of our pocket-0.3b package (random weights), for `make bench`.

    python tests/bench_mnn.py POCKET WORKDIR [--threads N] [--llmexport]

Makes a pocket-0.3b checkpoint (random weights, the fixture tokenizer), exports
it with both graph forms, and times the PyPI `mnn` runtime on each package
with memory "low" (int4 weights, int8 dynamic activations: the deployment
default) and "normal" (weights dequantized to fp32 at load, the numerics of
`pocket forward --int4`): prefill of a 256-token prompt (tokens/s) and greedy
decoding (tokens/s): 128 tokens after a 16-token prompt, timed as the
difference between generating 128 and generating 1 token from the same
prompt, so no separately timed prefill is subtracted (that subtraction moved
the figure by 10-30% between runs). Each figure is the best of 3 runs,
each run in a fresh process. Prints one line per package and setting, and
the package size.

--llmexport: the same checkpoint, written as an HF directory, exported by MNN's
official exporter from PyPI (llmexport 0.0.5, 4-bit, block 64; installed from
tests/requirements-bench.txt when missing) and measured the same way, plus the
logits of both packages on one prompt (memory normal).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT, DECODE_PROMPT, NEW, REPS = 256, 16, 128, 3

TIMER = r"""
import json, sys, time
import MNN.llm as llm
pkg, mem, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
prompt, decode_prompt, new = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
m = llm.create(pkg + "/config.json")
m.set_config({"memory": mem, "thread_num": threads, "sampler_type": "greedy", "use_template": False})
m.load()
ids = [(97 * i + 13) % 1400 + 10 for i in range(prompt)]
m.generate_init(); m.forward(ids[:32])                      # warm-up
m.generate_init(); t = time.perf_counter(); m.forward(ids); prefill = time.perf_counter() - t
short = ids[:decode_prompt]
m.generate_init(); t = time.perf_counter(); one = m._c_obj.generate(short, 1); t_one = time.perf_counter() - t
m.generate_init(); t = time.perf_counter(); out = m._c_obj.generate(short, new); t_new = time.perf_counter() - t
print(json.dumps({"prefill_tps": prompt / prefill, "decode_tps": (len(out) - len(one)) / max(t_new - t_one, 1e-9)}))
"""


def run_timer(pkg, mem, threads):
    best = {}
    for _ in range(REPS):
        out = subprocess.run([sys.executable, "-c", TIMER, str(pkg), mem, str(threads), str(PROMPT), str(DECODE_PROMPT),
                              str(NEW)],
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"bench_mnn: the runtime failed on {pkg}: {out.stderr[-2000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for k, v in r.items():
            best[k] = max(best.get(k, 0.0), v)
    return best


LOGITS = r"""
import json, os, sys
import numpy as np
import MNN.llm as llm
m = llm.create(sys.argv[1] + "/config.json")
m.set_config({"memory": "normal", "thread_num": 2, "use_template": False, "all_logits": True})
m.load(); m.generate_init()
ids = [(97 * i + 13) % 1400 + 10 for i in range(64)]
np.save(sys.argv[2], np.array(m.forward(ids).read(), dtype=np.float32).reshape(len(ids), -1))
os._exit(0)
"""


def llmexport_package(pocket, ckpt, work, env):
    try:
        import llmexport  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "-r",
                        str(ROOT / "tests/requirements-bench.txt")], check=True)
    hf, pkg = work / "hf", work / "mnn-llmexport"
    if not (pkg / "config.json").exists():
        subprocess.run([pocket, "export", "--ckpt", str(ckpt), "--format", "hf", "--force", "--out", str(hf)],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        (hf / "tokenizer.json").write_bytes((ROOT / "tests/fixtures/tok/tokenizer.json").read_bytes())
        (hf / "tokenizer_config.json").write_text(json.dumps({
            "chat_template": (ROOT / "tests/fixtures/tok/qwen3_chat_template.jinja").read_text(),
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}))
        t = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "tests/llmexport_run.py"), "--path", str(hf), "--dst_path", str(pkg), "--export", "mnn",
                        "--quant_bit", "4", "--quant_block", "64"], check=True, cwd=work,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"llmexport 0.0.5 export: {time.perf_counter() - t:.0f} s", flush=True)
    for junk in ["llm.mnn.json", "export_args.json", "onnx"]:   # left over by the exporter, not shipped
        p = pkg / junk
        if p.is_file():
            p.unlink()
    return pkg


def logits_of(pkg, out):
    subprocess.run([sys.executable, "-c", LOGITS, str(pkg), str(out)], check=True, capture_output=True, timeout=900)
    import numpy as np
    return np.load(out)


def size_of(d):
    return sum(p.stat().st_size for p in Path(d).iterdir() if p.is_file())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pocket")
    ap.add_argument("workdir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llmexport", action="store_true")
    ap.add_argument("--summary", help="append tab-separated summary rows here (see tests/bench.sh)")
    a = ap.parse_args()
    work = Path(a.workdir).resolve()   # llmexport runs with its cwd inside it
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "pocket-0.3b.h5"
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    if not ckpt.exists():
        subprocess.run([a.pocket, "init", "--model", "pocket-0.3b", "--tokenizer",
                        str(ROOT / "tests/fixtures/tok/tokenizer.json"), "--out", str(ckpt)],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    packages = []
    for graph in ["fused", "plain"]:
        pkg = work / f"mnn-{graph}"
        subprocess.run([a.pocket, "export", "--ckpt", str(ckpt), "--format", "mnn", "--graph", graph, "--force",
                        "--out", str(pkg)], check=True, env=env, stdout=subprocess.DEVNULL)
        packages.append((graph, pkg))
    if a.llmexport:
        packages.append(("llmexport", llmexport_package(a.pocket, ckpt, work, env)))
    rows = []
    for graph, pkg in packages:
        who = "MNN llmexport 0.0.5" if graph == "llmexport" else f"pocket {graph} graph"
        print(f"mnn package ({graph}): {size_of(pkg) / 1e6:.1f} MB "
              f"(llm.mnn.weight {(pkg / 'llm.mnn.weight').stat().st_size / 1e6:.1f} MB)", flush=True)
        for mem in ["low", "normal"]:
            r = run_timer(pkg, mem, a.threads)
            print(f"mnn runtime {graph:9s} memory={mem:6s} {a.threads} threads: prefill {r['prefill_tps']:7.1f} tok/s "
                  f"({PROMPT} tokens), decode {r['decode_tps']:6.1f} tok/s ({NEW} tokens after {DECODE_PROMPT})", flush=True)
            rows.append([f"MNN runtime memory={mem}", who, str(a.threads),
                         f"prefill {r['prefill_tps']:.1f} / decode {r['decode_tps']:.1f} tok/s", "-", "-",
                         f"package {size_of(pkg) / 1e6:.1f} MB"])


    if a.llmexport:
        import numpy as np
        ours, theirs = logits_of(work / "mnn-fused", work / "ours.npy"), logits_of(work / "mnn-llmexport", work / "theirs.npy")
        diff, agree = float(np.abs(ours - theirs).max()), float((ours.argmax(-1) == theirs.argmax(-1)).mean())
        print(f"logits, ours vs llmexport (64 tokens, memory normal): max |diff| {diff:.3g} "
              f"(max |logit| {np.abs(ours).max():.3g}), top-1 agreement {agree:.1%}", flush=True)
        rows.append(["MNN logits, ours vs llmexport", "both", str(a.threads), "-", "-", "-",
                     f"64 tokens: max |diff| {diff:.3g}, top-1 agreement {agree:.1%} (RTN g64: fp16 vs fp32 scales)"])
    if a.summary:
        with open(a.summary, "a", encoding="utf-8") as f:
            for r in rows:
                f.write("\t".join(r) + "\n")


if __name__ == "__main__":
    main()
