"""Runs MNN's official exporter, llmexport (PyPI, installed from
tests/requirements-bench.txt), with its own command-line arguments:

    python tests/llmexport_run.py --path HF_DIR --export mnn --dst_path OUT [--quant_block 64] [--sym] [--hqq] ...

Four things stand between the PyPI package and a run here, and are set
right before its main() runs, in this process:
- its modules import each other as the top-level package `utils`: its folder
  goes on sys.path;
- MNN's converter script, which it calls in-process, imports a telemetry
  module that pip-installs an SDK and contacts a server: a stand-in module
  with no logger is registered first;
- with --awq, its calibration text comes from the HF `datasets` library
  (wikitext, or a dataset name), which is not installed: --calib_data FILE (one
  {"text": ...} JSON object, or one plain text, per line) is given to its
  get_calib_dataset as the list of texts, the form that function also takes.
  (AWQ skips a text of more than 512 tokens: give it chunks.)
- with --awq, its search runs each decoder block many times, but 0.0.5's
  attention keeps the keys and values of the last call (its export state) and
  appends the next call's to them, so the second call fails on a mask of the
  wrong length: the blocks' attention state is cleared before each of those
  calls, as a fresh call expects.
Nothing of the package is changed on disk.
"""
import importlib.util
import json
import os
import sys
import types


def texts_of(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                v = json.loads(line)
                out.append(v["text"] if isinstance(v, dict) else str(v))
            except (json.JSONDecodeError, KeyError):
                out.append(line)
    return out


def main():
    stub = types.ModuleType("MNN.tools.utils.log")
    stub.mnn_logger = None
    sys.modules["MNN.tools.utils.log"] = stub
    spec = importlib.util.find_spec("llmexport")
    if spec is None:
        raise SystemExit("llmexport_run: llmexport is not installed (pip install --no-deps -r tests/requirements-bench.txt)")
    root = os.path.dirname(spec.origin)
    sys.path.insert(0, root)
    if "--awq" in sys.argv:
        from utils.awq_quantizer import AwqQuantizer
        forward = AwqQuantizer._module_forward

        def fresh_forward(self, x, module, module_kwargs):
            for m in module.modules():
                if getattr(m, "past_key_value", None) is not None:
                    m.past_key_value = None
            return forward(self, x, module, module_kwargs)

        AwqQuantizer._module_forward = fresh_forward
    if "--awq" in sys.argv and "--calib_data" in sys.argv:
        calib = sys.argv[sys.argv.index("--calib_data") + 1]
        texts = texts_of(calib)
        from utils.awq_quantizer import AwqQuantizer
        original = AwqQuantizer.get_calib_dataset

        def from_file(data="pileval", *args, **kwargs):
            return original(texts if data == calib else data, *args, **kwargs)

        AwqQuantizer.get_calib_dataset = staticmethod(from_file)
    path = os.path.join(root, "llmexport.py")
    sys.argv = [path] + sys.argv[1:]
    exec(compile(open(path).read(), path, "exec"), {"__name__": "__main__", "__file__": path})


if __name__ == "__main__":
    main()
