#!/usr/bin/env bash
# Fetch the demo's pre-training corpus from Debian packages and clean it.
#
#   recipes/demo/get_corpus.sh [OUT_DIR]        (default runs/demo/corpus)
#
# Downloads the packages listed below with `apt-get download` (no install),
# unpacks them with `dpkg -x` under runs/demo/debs/, and turns their text into
# OUT_DIR/{train,val}/<source>.jsonl ({"text": ...} per line) with
# clean_corpus.py (Python 3 standard library). Licences: recipes/demo/CORPUS.md.
# Finished output is marked with OUT_DIR/DONE; a second run does nothing.
set -euo pipefail

OUT=${1:-runs/demo/corpus}
DEBS=${DEMO_DEBS:-runs/demo/debs}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES=(fortunes-zh manpages-zh debian-reference-zh-cn debian-faq-zh-cn fortunes debian-reference-en debian-faq)

if [ -f "$OUT/DONE" ]; then
    echo "corpus: $OUT is complete"
    exit 0
fi
for tool in apt-get dpkg python3; do
    command -v "$tool" >/dev/null || { echo "get_corpus.sh: $tool is required (Debian)" >&2; exit 1; }
done

mkdir -p "$DEBS"
debs_abs=$(cd "$DEBS" && pwd)

# One download per package; the package lists are refreshed once if a
# package is not found (a fresh container has none).
fetch() {
    local pkg=$1
    ls "$debs_abs/${pkg}"_*.deb >/dev/null 2>&1 && return 0
    # As root, apt drops to the _apt user, which cannot write here.
    (cd "$debs_abs" && apt-get -q -o APT::Sandbox::User=root download "$pkg")
}
updated=0
for pkg in "${PACKAGES[@]}"; do
    if ! fetch "$pkg" 2>"$debs_abs/apt.err"; then
        if [ $updated = 0 ] && [ "$(id -u)" = 0 ]; then
            echo "corpus: refreshing the package lists (apt-get update)"
            apt-get update -qq
            updated=1
        fi
        fetch "$pkg" 2>"$debs_abs/apt.err" || {
            echo "get_corpus.sh: cannot download the Debian package $pkg:" >&2
            cat "$debs_abs/apt.err" >&2
            exit 1
        }
    fi
done
rm -f "$debs_abs/apt.err"

# Unpack afresh, so that a second version of a package left from an earlier
# run cannot mix in: the newest file of each name wins.
rm -rf "$debs_abs/x"
mkdir -p "$debs_abs/x"
: > "$debs_abs/packages.txt"
for pkg in "${PACKAGES[@]}"; do
    deb=$(ls "$debs_abs/${pkg}"_*.deb | sort -V | tail -n 1)
    dpkg -x "$deb" "$debs_abs/x/$pkg"
    printf '%s %s %s\n' "$pkg" "$(dpkg-deb -f "$deb" Version)" "$(sha256sum "$deb" | cut -c1-64)" \
        >> "$debs_abs/packages.txt"
done

rm -rf "$OUT.tmp"
python3 "$HERE/clean_corpus.py" "$debs_abs/x" "$OUT.tmp"
cp "$debs_abs/packages.txt" "$OUT.tmp/packages.txt"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
touch "$OUT/DONE"
echo "corpus: wrote $OUT (package versions in $OUT/packages.txt)"
