#!/usr/bin/env bash
# English text for the QAT benchmark (make bench-qat): the reStructuredText
# sources of the Python 3.11 documentation, as Debian's python3.11-doc package
# ships them (html/_sources/**/*.rst.txt; PSF licence, in the package's
# copyright file). Downloaded with `apt-get download` (nothing is installed),
# unpacked with `dpkg -x`, and split by file into three parts that never share
# a document:
#
#   OUT/train.jsonl   QAT training data and llmexport's AWQ calibration data
#   OUT/val.jsonl     the split every setting was tuned on
#   OUT/test.jsonl    held out: the benchmark's figures, seen by nothing else
#   OUT/calib.jsonl   llmexport's AWQ calibration texts: 128 chunks of the
#                     training split, each whole paragraphs of at most 1500
#                     characters (AWQ skips a text of more than 512 tokens)
#
# A file goes to test when the first byte of the SHA-256 of its path (relative
# to _sources) is below 12, to val when below 24, else to train: about 5% each.
# One {"text": ...} line per file. A second run with OUT/DONE present does nothing.
#
#   recipes/qat-bench/get_corpus.sh [OUT]      (default runs/qat-bench/corpus)
set -euo pipefail
OUT=${1:-runs/qat-bench/corpus}
PKG=python3.11-doc
if [ -f "$OUT/DONE" ]; then echo "corpus: $OUT is complete"; exit 0; fi
for tool in apt-get dpkg python3; do
    command -v "$tool" >/dev/null || { echo "get_corpus.sh: $tool is required (Debian)" >&2; exit 1; }
done
mkdir -p "$OUT.debs"
debs=$(cd "$OUT.debs" && pwd)
if ! ls "$debs/${PKG}"_*.deb >/dev/null 2>&1; then
    # As root, apt drops to the _apt user, which cannot write here.
    if ! (cd "$debs" && apt-get -q -o APT::Sandbox::User=root download "$PKG" 2>"$debs/apt.err"); then
        [ "$(id -u)" = 0 ] && apt-get update -qq
        (cd "$debs" && apt-get -q -o APT::Sandbox::User=root download "$PKG") || {
            echo "get_corpus.sh: cannot download the Debian package $PKG" >&2; exit 1; }
    fi
fi
deb=$(ls "$debs/${PKG}"_*.deb | sort -V | tail -n 1)
rm -rf "$debs/x" "$OUT.tmp"
dpkg -x "$deb" "$debs/x"
src="$debs/x/usr/share/doc/python3.11/html/_sources"
[ -d "$src" ] || { echo "get_corpus.sh: $deb has no html/_sources folder" >&2; exit 1; }
mkdir -p "$OUT.tmp"
python3 - "$src" "$OUT.tmp" <<'PY'
import hashlib, json, os, sys
src, out = sys.argv[1], sys.argv[2]
paths = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rst.txt"))
parts = {"train": [], "val": [], "test": []}
for rel in paths:
    text = open(os.path.join(src, rel), encoding="utf-8").read().strip()
    if len(text) < 200:
        continue
    b = hashlib.sha256(rel.encode()).digest()[0]
    parts["test" if b < 12 else "val" if b < 24 else "train"].append(text)
for name, docs in parts.items():
    with open(os.path.join(out, name + ".jsonl"), "w", encoding="utf-8") as f:
        for t in docs:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    print(f"corpus: {name}: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.2f} M characters")
chunks = []
for text in parts["train"]:
    cur = ""
    for para in text.split("\n\n"):
        if cur and len(cur) + len(para) + 2 > 1500:
            chunks.append(cur)
            cur = ""
        cur = cur + "\n\n" + para if cur else para
    if 200 <= len(cur) <= 1500:
        chunks.append(cur)
chunks = [c for c in chunks if 200 <= len(c) <= 1500]
step = max(1, len(chunks) // 128)
with open(os.path.join(out, "calib.jsonl"), "w", encoding="utf-8") as f:
    for c in chunks[::step][:128]:
        f.write(json.dumps({"text": c}, ensure_ascii=False) + "\n")
print(f"corpus: calib: {min(128, len(chunks[::step]))} chunks of the training split for AWQ")
PY
printf '%s %s %s\n' "$PKG" "$(dpkg-deb -f "$deb" Version)" "$(sha256sum "$deb" | cut -c1-64)" > "$OUT.tmp/package.txt"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
touch "$OUT/DONE"
echo "corpus: wrote $OUT"
