"""Runs one MNN package with LoRA adapters in the PyPI `mnn` runtime, all in
one process, and writes the results as JSON.

    python mnn_lora_run.py JOB.json OUT.json

JOB: {"package": DIR, "config": {...merged into config.json before load...},
      "loras": [path, ...],          -> loaded after the base, in this order
      "runs": [[module, "logits"|"generate", ids], ...],
      "max_new": 32}
module 0 is the base, i >= 1 the i-th adapter. OUT: {"runs": [...], "rss_kb":
[before the base, after it, after each adapter], "weight_bytes": size of llm.mnn.weight}.

The issue and MNN's Python wrapper name the API apply_lora(path) -> index,
select_module(index), release_module(index); in the 3.6.1 wheel those wrapper
methods call C methods the extension does not have (AttributeError), and the
runtime's multi-LoRA entry is Llm::create_lora(path): a second Llm sharing the
base module (transformers/llm/engine/src/llm.cpp). `Modules` below gives the
issue's three calls on top of it: an index per adapter, a selected one, and a
release that drops the adapter's Llm.
"""
import json
import os
import sys

import numpy as np
import MNN.llm as llm


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Modules:
    def __init__(self, base):
        self.mods = [base]
        self.selected = 0

    def apply_lora(self, path):
        c = self.mods[0]._c_obj.create_lora(path)
        if c is None:
            raise RuntimeError(f"create_lora({path}) failed")
        self.mods.append(llm.Llm(c))
        self.selected = len(self.mods) - 1
        return self.selected

    def select_module(self, index):
        if index >= len(self.mods) or self.mods[index] is None:
            return False
        self.selected = index
        return True

    def release_module(self, index):
        if index == 0 or index >= len(self.mods):
            return False
        self.mods[index] = None
        if self.selected == index:
            self.selected = 0
        return True

    def current(self):
        return self.mods[self.selected]


def main():
    job = json.load(open(sys.argv[1]))
    before = rss_kb()
    base = llm.create(job["package"] + "/config.json")
    base.set_config(job.get("config", {}))
    base.load()
    out = {"rss_kb": [before, rss_kb()], "runs": [],
           "weight_bytes": os.path.getsize(os.path.join(job["package"], "llm.mnn.weight"))}
    m = Modules(base)
    for path in job.get("loras", []):
        m.apply_lora(path)
        out["rss_kb"].append(rss_kb())
    for module, what, ids in job.get("runs", []):
        assert m.select_module(module)
        cur = m.current()
        # all_logits: every position of a prefill; generation needs it off
        # (with it on, the runtime samples from the first row).
        cur.set_config({"all_logits": what == "logits"})
        cur.generate_init()
        if what == "logits":
            v = np.array(cur.forward(ids).read(), dtype=np.float32)
            out["runs"].append(v.reshape(len(ids), -1).tolist())
        else:
            out["runs"].append([int(t) for t in cur._c_obj.generate(ids, job.get("max_new", 32))])
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
    os._exit(0)   # the runtime may crash in its exit handlers (see mnn_run.py)


if __name__ == "__main__":
    main()
