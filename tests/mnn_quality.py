"""The quantization quality of an MNN package, judged on the MNN runtime's own
logits: the figures `pocket eval --int4 --ref` prints, from the runtime.

    python tests/mnn_quality.py --package DIR --ref HF_DIR --data DATA.h5 [options] [--json OUT.json]

DATA.h5 is a token dataset (`pocket tokenize`); it is cut into the windows a
CPT run and `pocket eval` cut it into (T + 1 tokens at every multiple of T,
attention over the whole window), each window run through the package in the
MNN runtime (the PyPI wheel MNN, its LLM engine: all logits of one prefill)
and through the float reference, the HF directory HF_DIR (`pocket export
--format hf` of the float checkpoint), in transformers. Over every position:

    KL      sum_v p(v) (log p(v) - log q(v)), p the reference's softmax, q the package's
    top-1   argmax q == argmax p
    loss    -log q(target), -log p(target)   (perplexity = exp of the mean)

in float64 from the float32 logits; printed and, with --json, written as
{"positions", "kl_mean", "kl_stderr", "kl_max", "top1", "ppl", "ref_ppl", "seconds"}.
With --ref-cache DIR the reference's logits of each window are kept there
(float32, 4 bytes x vocabulary per position) and read back by the next run on
the same reference and data, so judging several packages runs the reference
once.
The runtime's settings (--memory normal: weights dequantized to float at load,
float activations, the numerics of `pocket eval --int4`; low: int4 kernels with
int8 dynamic activations, as phones run it) are merged into the package's
config before it loads. One package per process: the runtime keeps global state.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np


def windows(path, T, max_windows):
    import h5py
    with h5py.File(path, "r") as f:
        tokens = np.asarray(f["tokens"][:], dtype=np.int64)
    n = (len(tokens) - 1) // T
    if max_windows:
        n = min(n, max_windows)
    if n == 0:
        raise SystemExit(f"mnn_quality: {path}: {len(tokens)} tokens give no window of {T}+1")
    return [tokens[w * T: w * T + T + 1] for w in range(n)]


def log_softmax(z):
    import torch
    return torch.log_softmax(torch.from_numpy(z).double(), dim=-1)


class Stats:
    def __init__(self):
        self.kl, self.top1, self.loss, self.ref_loss = [], 0, 0.0, 0.0

    def add(self, ref_logits, logits, targets):
        import torch
        lp, lq = log_softmax(ref_logits), log_softmax(logits)
        kl = (lp.exp() * (lp - lq)).sum(-1).clamp(min=0.0)
        self.kl.extend(kl.tolist())
        self.top1 += int((ref_logits.argmax(-1) == logits.argmax(-1)).sum())
        rows, t = torch.arange(len(targets)), torch.from_numpy(np.asarray(targets, dtype=np.int64))
        self.loss += float(-lq[rows, t].sum())
        self.ref_loss += float(-lp[rows, t].sum())

    def result(self):
        kl = np.asarray(self.kl)
        n = len(kl)
        return {"positions": n, "kl_mean": float(kl.mean()),
                "kl_stderr": float(kl.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0, "kl_max": float(kl.max()),
                "top1": self.top1 / n, "ppl": math.exp(self.loss / n), "ref_ppl": math.exp(self.ref_loss / n)}


class RefCache:
    """The reference's logits per window in a folder, valid for one reference, dataset and window length
    (their names, sizes and times in key.json: another of any of them empties the folder)."""

    def __init__(self, folder, ref, data, T):
        def stamp(path):
            files = sorted(os.path.join(path, f) for f in os.listdir(path)) if os.path.isdir(path) else [path]
            return [[os.path.basename(f), os.path.getsize(f), os.path.getmtime(f)] for f in files]
        self.folder = folder
        key = {"ref": stamp(ref), "data": stamp(data), "seq_len": T}
        os.makedirs(folder, exist_ok=True)
        kp = os.path.join(folder, "key.json")
        old = json.load(open(kp)) if os.path.exists(kp) else None
        if old != json.loads(json.dumps(key)):
            for f in os.listdir(folder):
                os.remove(os.path.join(folder, f))
            with open(kp, "w") as f:
                json.dump(key, f)

    def get(self, i):
        path = os.path.join(self.folder, f"{i}.npy")
        return np.load(path) if os.path.exists(path) else None

    def put(self, i, logits):
        tmp = os.path.join(self.folder, f"{i}.tmp.npy")
        np.save(tmp, logits)
        os.replace(tmp, os.path.join(self.folder, f"{i}.npy"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", required=True, help="the MNN package folder (config.json, llm.mnn, ...)")
    ap.add_argument("--ref", required=True, help="the float model as an HF folder (pocket export --format hf)")
    ap.add_argument("--data", required=True, help="a token dataset (pocket tokenize) of the model's tokenizer")
    ap.add_argument("--seq-len", type=int, default=512, help="tokens per window (default 512)")
    ap.add_argument("--max-windows", type=int, default=0, help="the first N windows only (default all)")
    ap.add_argument("--memory", choices=["normal", "low"], default="normal", help="the runtime's memory mode")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--ref-cache", help="keep the reference's logits of each window in this folder, for the next run")
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM
    import MNN.llm as llm
    torch.set_num_threads(a.threads)
    ref = AutoModelForCausalLM.from_pretrained(a.ref, dtype=torch.float32).eval()
    m = llm.create(os.path.join(a.package, "config.json"))
    m.set_config({"memory": a.memory, "precision": "high", "thread_num": a.threads, "use_template": False,
                  "all_logits": True})
    m.load()
    t0 = time.perf_counter()
    stats = Stats()
    ws = windows(a.data, a.seq_len, a.max_windows)
    cache = RefCache(a.ref_cache, a.ref, a.data, a.seq_len) if a.ref_cache else None
    for i, w in enumerate(ws):
        ids, targets = w[:-1], w[1:]
        p = cache.get(i) if cache else None
        if p is None:
            with torch.no_grad():
                p = ref(input_ids=torch.from_numpy(ids)[None]).logits[0].numpy()
            if cache:
                cache.put(i, p)
        m.generate_init()
        q = np.array(m.forward([int(t) for t in ids]).read(), dtype=np.float32).reshape(len(ids), -1)
        if q.shape != p.shape:
            raise SystemExit(f"mnn_quality: the package gives logits {q.shape}, the reference {p.shape}")
        stats.add(p, q, targets)
        print(f"\rmnn_quality: window {i + 1}/{len(ws)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    r = stats.result()
    r["seconds"] = time.perf_counter() - t0
    print(f"{a.package} on {a.data} against {a.ref}, {r['positions']} positions (MNN memory {a.memory}):\n"
          f"  mean KL divergence {r['kl_mean']:.6f} +- {r['kl_stderr']:.6f} nats (max {r['kl_max']:.4f})\n"
          f"  top-1 agreement    {100 * r['top1']:.3f}%\n"
          f"  perplexity         {r['ppl']:.4f}; reference {r['ref_ppl']:.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)
    # The runtime often crashes in its exit handlers after MNN.llm was used.
    os._exit(0)


if __name__ == "__main__":
    main()
