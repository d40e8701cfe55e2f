"""Runs one MNN package in the PyPI `mnn` runtime and prints the results as JSON.

    python mnn_run.py JOB.json OUT.json

JOB: {"package": DIR, "config": {...merged into config.json before load...},
      "logits": [ids] | null,          -> all logits of one prefill, [len, vocab]
      "generate": [[ids], ...] | null, -> greedy new ids per prompt
      "max_new": 32,
      "encode": [text, ...] | null,    -> the runtime tokenizer's ids
      "chat": [[{"role":..., "content":...}], ...] | null -> apply_chat_template text
      "choice": {"token_id": N, "seqs": [[ids], ...]} | null -> the decision head's score of
                each sequence: logits[token_id] at its last position, one forward each
     }
One package per process: the runtime keeps global state between loads. The
result goes to a file, not stdout: the runtime may end the process without
flushing Python's buffers.
"""
import json
import os
import sys

import numpy as np
import MNN.llm as llm


def main():
    job = json.load(open(sys.argv[1]))
    m = llm.create(job["package"] + "/config.json")
    m.set_config(job.get("config", {}))
    m.load()
    out = {}
    if job.get("logits"):
        m.generate_init()
        v = np.array(m.forward(job["logits"]).read(), dtype=np.float32)
        out["logits"] = v.reshape(len(job["logits"]), -1).tolist()
    if job.get("generate"):
        out["generate"] = []
        for ids in job["generate"]:
            m.generate_init()
            # The wrapper's m.generate passes no token count; the C object takes it.
            out["generate"].append([int(t) for t in m._c_obj.generate(ids, job.get("max_new", 32))])
    if job.get("encode"):
        out["encode"] = [[int(t) for t in m.tokenizer_encode(t)] for t in job["encode"]]
    if job.get("choice"):
        c = job["choice"]
        out["scores"] = []
        for ids in c["seqs"]:
            m.generate_init()
            v = np.array(m.forward(ids).read(), dtype=np.float32).reshape(-1)
            out["vocab"] = int(v.size)   # the last position's logits only
            out["scores"].append(float(v[c["token_id"]]))
    if job.get("chat"):
        out["chat"] = [m.apply_chat_template(msgs) for msgs in job["chat"]]
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
    # The runtime often crashes in its exit handlers after MNN.llm was used:
    # the results are written, so leave without running them.
    os._exit(0)


if __name__ == "__main__":
    main()
