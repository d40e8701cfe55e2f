#!/usr/bin/env python3
"""Turn the unpacked Debian packages of the demo corpus into JSONL documents.

    python3 recipes/demo/clean_corpus.py SRC_DIR OUT_DIR

SRC_DIR holds one folder per package, each the result of `dpkg -x` (see
get_corpus.sh). OUT_DIR receives train/<source>.jsonl and val/<source>.jsonl,
one {"text": ...} document per line, and stats.json with the byte and
character counts (how much of it is Chinese). Python 3 standard library only.

Everything is deterministic: files are read in sorted order and every 40th
document of each source (by index) goes to validation.
"""
import gzip
import json
import os
import re
import sys
import unicodedata

VAL_EVERY = 40          # document i goes to val when i % VAL_EVERY == VAL_EVERY // 2
MAX_DOC_CHARS = 6000    # long manuals are cut into documents of about this size
# English fortune files left out: pictures made of characters, and two
# collections of jokes about groups of people.
FORTUNE_SKIP = {"ascii-art", "ethnic", "men-women"}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
BOX = re.compile(r"[\u2500-\u257f]")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def is_cjk(ch):
    return bool(CJK.match(ch)) or "\u3000" <= ch <= "\u303f" or "\uff00" <= ch <= "\uffef"


def join_lines(lines):
    """Re-flow wrapped lines of one paragraph: no space where both sides are CJK."""
    out = ""
    for ln in lines:
        ln = ln.strip()
        if not ln:
            continue
        if out and not (is_cjk(out[-1]) and is_cjk(ln[0])):
            out += " "
        out += ln
    return re.sub(r" {2,}", " ", out)


def tidy(text):
    """Common clean-up: NFC, no control characters but newline and tab, no
    trailing blanks, at most one empty line in a row."""
    text = unicodedata.normalize("NFC", ANSI.sub("", text))
    text = text.replace("\r\n", "\n").replace("\u00a0", " ")
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc")
    # Box-drawn tables survive poorly as plain text; their rows are dropped.
    lines = [ln.rstrip() for ln in text.split("\n") if len(BOX.findall(ln)) < 3]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    return text.strip("\n")


def read_text(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            data = f.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    return data.decode("utf-8")


# ---------------------------------------------------------------- fortunes

def fortune_docs(path):
    """A fortune file: entries separated by lines holding only "%"."""
    docs = []
    for entry in re.split(r"^%\s*$", read_text(path), flags=re.M):
        entry = tidy(entry.expandtabs(8))
        if len(entry) >= 8:
            docs.append(entry)
    return docs


# ----------------------------------------------------- plain-text manuals

def is_table_line(ln):
    s = ln.strip()
    return s.startswith("|") or s.startswith("+-") or (s and set(s) <= set("-+|= "))


def manual_docs(path):
    """A DocBook-made .txt manual: drop table rows, re-flow paragraphs, then
    cut into documents of about MAX_DOC_CHARS at paragraph boundaries.
    Indented blocks that look like code or tables of contents stay as lines."""
    paras, cur = [], []
    for ln in read_text(path).replace("\u00a0", " ").split("\n"):
        if is_table_line(ln):
            continue
        if ln.strip():
            cur.append(ln)
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    blocks = []
    for p in paras:
        prose = all(len(ln) - len(ln.lstrip()) <= 8 for ln in p) and not any(
            re.match(r"\s*(\$|#|\d+(\.\d+)*\. )", ln) for ln in p)
        blocks.append(join_lines(p) if prose else "\n".join(ln.strip() for ln in p))
    return pack(blocks)


def pack(blocks):
    docs, cur, size = [], [], 0
    for b in blocks:
        if not b:
            continue
        if cur and size + len(b) > MAX_DOC_CHARS:
            docs.append(tidy("\n\n".join(cur)))
            cur, size = [], 0
        cur.append(b)
        size += len(b) + 2
    if cur:
        docs.append(tidy("\n\n".join(cur)))
    return [d for d in docs if len(d) >= 40]


# --------------------------------------------------------------- man pages

ROFF_CHARS = {"em": "\u2014", "en": "\u2013", "bu": "\u2022", "co": "\u00a9", "rg": "\u00ae", "lq": "\u201c",
              "rq": "\u201d", "oq": "\u2018", "cq": "\u2019", "aq": "'", "dq": '"', "hy": "-", "mi": "-",
              "pl": "+", "eq": "=", "ga": "`", "aa": "\u00b4", "ti": "~", "ha": "^", "rs": "\\",
              "sl": "/", "ba": "|", "br": "|", "<=": "\u2264", ">=": "\u2265", "mu": "\u00d7",
              "de": "\u00b0", "ua": "\u2191", "da": "\u2193", "->": "\u2192", "<-": "\u2190", "tm": "\u2122"}
FONT_MACROS = {"B", "I", "SM", "SB", "BR", "BI", "IB", "IR", "RB", "RI", "UR", "MT"}


def roff_escapes(s):
    """Replace roff escapes in one line of text by what a reader sees."""
    s = re.sub(r'\\".*$', "", s)                                   # comment to end of line
    s = s.replace("\\\\", "\x00")
    s = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", s)                   # font changes
    s = re.sub(r"\\s[+-]?(\d|\(\d\d|\[\d+\])", "", s)             # size changes
    s = re.sub(r"\\\*(\[[^\]]*\]|\(..|.)", "", s)                  # strings
    s = re.sub(r"\\n(\[[^\]]*\]|\(..|.)", "", s)                   # registers
    s = re.sub(r"\\\[([^\]]*)\]", lambda m: ROFF_CHARS.get(m.group(1), ""), s)
    s = re.sub(r"\\\((..)", lambda m: ROFF_CHARS.get(m.group(1), ""), s)
    s = re.sub(r"\\[hvwlLXxoDbkz]'[^']*'", "", s)                  # motions and drawing
    s = s.replace("\\-", "-").replace("\\e", "\\").replace("\\ ", " ").replace("\\~", " ").replace("\\0", " ")
    s = re.sub(r"\\[&,/|^%:!c)dupt{}]", "", s)
    s = re.sub(r"\\(.)", r"\1", s)
    return s.replace("\x00", "\\")


def macro_args(rest):
    """Split macro arguments, honouring double quotes."""
    return [a[1:-1] if a.startswith('"') and a.endswith('"') and len(a) > 1 else a
            for a in re.findall(r'"[^"]*"?|\S+', rest)]


def man_docs(path):
    """One man page: macros dropped or turned into text, escapes resolved,
    filled paragraphs re-flowed; .nf/.fi blocks kept line by line."""
    blocks, cur, fill, skip_until = [], [], True, None

    def flush():
        nonlocal cur
        if cur:
            blocks.append(join_lines(cur) if fill else "\n".join(ln.rstrip() for ln in cur))
        cur = []

    for raw in read_text(path).split("\n"):
        if skip_until is not None:
            if raw.strip() == skip_until:
                skip_until = None
            continue
        if raw.startswith((".\\\"", "'\\\"", ".\\#")) or raw.strip() == ".":
            continue
        if raw[:1] in ".'":
            m = re.match(r"[.']\s*(\S+)\s*(.*)$", raw)
            if not m:
                continue
            name, rest = m.group(1), m.group(2)
            if name in ("de", "de1", "am", "ig"):
                skip_until = ".."
                continue
            if name in ("SH", "SS"):
                flush()
                title = roff_escapes(" ".join(macro_args(rest))).strip()
                if title:
                    blocks.append(title)
            elif name in ("PP", "P", "LP", "TP", "sp", "br", "RS", "RE", "HP", "PD"):
                flush()
            elif name == "IP":
                flush()
                args = macro_args(rest)
                if args and args[0].strip():
                    cur.append(roff_escapes(args[0]))
            elif name == "nf" or name == "EX":
                flush()
                fill = False
            elif name == "fi" or name == "EE":
                flush()
                fill = True
            elif name in FONT_MACROS:
                sep = " " if name in ("B", "I", "SM", "SB") else ""
                text = roff_escapes(sep.join(macro_args(rest)))
                if text.strip():
                    cur.append(text)
            # Every other request (.TH, .if, .ne, .in, .ft, .so, ...) carries no prose.
            continue
        text = roff_escapes(raw)
        if fill and not text.strip():
            flush()
        else:
            cur.append(text)
    flush()
    return pack(blocks)


# -------------------------------------------------------------- the sources

def files_under(root, pattern):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            if not os.path.islink(p) and re.search(pattern, p):
                out.append(p)
    return sorted(out)


def sources(src):
    """(source name, document list) for every text the demo uses."""
    games = "usr/share/games/fortunes"
    zh_fortunes = os.path.join(src, "fortunes-zh", games)
    for name in ("chinese", "tang300", "song100"):
        yield "fortunes-zh-" + name, fortune_docs(os.path.join(zh_fortunes, name))
    docs = []
    for p in files_under(os.path.join(src, "manpages-zh", "usr/share/man/zh_CN"), r"\.gz$"):
        docs += man_docs(p)
    yield "manpages-zh", docs
    yield "debian-reference-zh-cn", manual_docs(os.path.join(
        src, "debian-reference-zh-cn", "usr/share/debian-reference/debian-reference.zh-cn.txt.gz"))
    yield "debian-faq-zh-cn", manual_docs(os.path.join(
        src, "debian-faq-zh-cn", "usr/share/doc/debian/FAQ/debian-faq.zh-cn.txt.gz"))
    en_fortunes = os.path.join(src, "fortunes", games)
    docs = []
    for p in files_under(en_fortunes, r"/[a-z-]+$"):
        if os.path.basename(p) not in FORTUNE_SKIP:
            docs += fortune_docs(p)
    yield "fortunes-en", docs
    yield "debian-reference-en", manual_docs(os.path.join(
        src, "debian-reference-en", "usr/share/debian-reference/debian-reference.en.txt.gz"))
    yield "debian-faq-en", manual_docs(os.path.join(
        src, "debian-faq", "usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"))


def write_jsonl(path, docs):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: clean_corpus.py SRC_DIR OUT_DIR")
    src, out = sys.argv[1], sys.argv[2]
    for split in ("train", "val"):
        os.makedirs(os.path.join(out, split), exist_ok=True)
    stats = {"sources": {}}
    total = {"docs": 0, "bytes": 0, "chars": 0, "han_chars": 0}
    for name, docs in sources(src):
        if not docs:
            sys.exit("clean_corpus.py: %s: no documents found under %s" % (name, src))
        val = [d for i, d in enumerate(docs) if i % VAL_EVERY == VAL_EVERY // 2]
        train = [d for i, d in enumerate(docs) if i % VAL_EVERY != VAL_EVERY // 2]
        write_jsonl(os.path.join(out, "train", name + ".jsonl"), train)
        write_jsonl(os.path.join(out, "val", name + ".jsonl"), val)
        s = {"docs": len(docs), "val_docs": len(val), "bytes": sum(len(d.encode("utf-8")) for d in docs),
             "chars": sum(len(d) for d in docs), "han_chars": sum(len(CJK.findall(d)) for d in docs)}
        stats["sources"][name] = s
        for k in total:
            total[k] += s[k]
        print("  %-24s %6d docs %9.2f MB %5.1f%% Han characters" %
              (name, s["docs"], s["bytes"] / 1e6, 100.0 * s["han_chars"] / max(1, s["chars"])))
    zh_bytes = sum(s["bytes"] for n, s in stats["sources"].items() if "zh" in n)
    total["chinese_sources_byte_fraction"] = round(zh_bytes / total["bytes"], 4)
    total["han_char_fraction"] = round(total["han_chars"] / total["chars"], 4)
    stats["total"] = total
    with open(os.path.join(out, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
        f.write("\n")
    print("  total %d documents, %.2f MB; Chinese sources %.0f%% of the bytes, Han characters %.0f%% of all" %
          (total["docs"], total["bytes"] / 1e6, 100 * total["chinese_sources_byte_fraction"],
           100 * total["han_char_fraction"]))


if __name__ == "__main__":
    main()
