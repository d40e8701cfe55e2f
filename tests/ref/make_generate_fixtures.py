#!/usr/bin/env python3
"""Write the generation fixtures under tests/fixtures/gen/.

The expected continuations are transformers' own `model.generate` (greedy,
do_sample=False, KV cache on, fp32, eager attention) on models reloaded from
disk, so the C KV-cache generator is compared with the real thing.

    <hf model>.json    for each model of tests/fixtures/hf (written by
                       make_model_fixtures.py): prompts of several lengths
                       (random token ids) and their 32 greedy new tokens,
                       generated with no eos stopping.
    qwen3-chat/        a tiny Qwen3 HF folder (config.json with eos
                       <|im_end|>, bf16 model.safetensors with the
                       <|im_end|> embedding row doubled, tokenizer.json =
                       tests/fixtures/tok/tokenizer.json) that `pocket import`
                       turns into a checkpoint holding a tokenizer.
    qwen3-chat.json    user messages, the prompt ids transformers'
                       apply_chat_template gives for them (one user turn,
                       add_generation_prompt, enable_thinking=False, with the
                       real Qwen3 template), the greedy new tokens with
                       generation stopping at <|im_end|> or <|endoftext|>
                       (the stop token is kept, as generate returns it), and
                       the HF tokenizers decode of the new tokens without
                       that stop token. One case stops early (after 8 to 31 tokens).

    sampling.json      a logits vector over 256 tokens and, for several
                       (temperature, top_k, top_p) settings, the sampling
                       distribution transformers' generate draws from: its
                       TemperatureLogitsWarper, TopKLogitsWarper and
                       TopPLogitsWarper in generate's order, then softmax.

Every case records min_gap: the smallest difference between the best and the
second-best logit over its steps. Prompts are drawn until that gap is at
least MIN_GAP, so float rounding cannot flip a greedy choice.

Run from the repo root with the developers' venv (after make_model_fixtures.py):
    tests/.venv/bin/python tests/ref/make_generate_fixtures.py [--out tests/fixtures/gen]
"""
import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import randomize  # noqa: E402  (same weight draws as the hf fixtures)

HF_ROOT = "tests/fixtures/hf"
TOK_DIR = "tests/fixtures/tok"
HF_MODELS = ["qwen3-tied", "qwen3-untied", "llama-noqk"]
PROMPT_LENGTHS = [1, 5, 17, 40]
MAX_NEW = 32
MIN_GAP = 1e-3
CHAT_SEED = 2001

# Tokenizer fixture ids (tests/fixtures/tok/tokenizer.json).
ENDOFTEXT, IM_END = 1500, 1502


def greedy(model, prompt, eos):
    """transformers' greedy generate; returns the new ids and the smallest top-2 logit gap."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW,
                         eos_token_id=eos, pad_token_id=0, output_logits=True, return_dict_in_generate=True,
                         temperature=None, top_k=None, top_p=None)
    new = [int(t) for t in out.sequences[0, len(prompt):]]
    gaps = []
    for step in out.logits:
        top2 = torch.topk(step[0].to(torch.float32), 2).values
        gaps.append(float(top2[0] - top2[1]))
    assert len(gaps) == len(new)
    return new, min(gaps)


def load(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    model.generation_config.eos_token_id = None   # no stopping unless a case asks for it
    return model


def make_hf_cases(name, out_root):
    model = load(os.path.join(HF_ROOT, name))
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(3000 + HF_MODELS.index(name))
    cases = []
    for n in PROMPT_LENGTHS:
        for attempt in range(100):
            prompt = [int(t) for t in torch.randint(0, vocab, (n,), generator=gen)]
            new, gap = greedy(model, prompt, None)
            if gap >= MIN_GAP:
                break
        else:
            sys.exit(f"{name}: no prompt of length {n} with a top-2 gap >= {MIN_GAP}")
        assert len(new) == MAX_NEW
        cases.append({"prompt": prompt, "expected": new, "min_gap": round(gap, 6)})
    doc = {"generator": f"tests/ref/make_generate_fixtures.py: torch {torch.__version__}, "
                        f"transformers {transformers.__version__}",
           "model": os.path.join(HF_ROOT, name), "max_new": MAX_NEW, "stop": [], "cases": cases}
    with open(os.path.join(out_root, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{name}: {len(cases)} prompts (lengths {PROMPT_LENGTHS}), min gap "
          f"{min(c['min_gap'] for c in cases):.4f}")


def make_chat_model(out_dir):
    """A tiny tied Qwen3 over the tokenizer fixture's vocabulary (padded past it, as real models are)."""
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    config = Qwen3Config(vocab_size=1536, hidden_size=32, intermediate_size=72, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
                         rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=256,
                         bos_token_id=None, eos_token_id=IM_END, pad_token_id=None)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    randomize(model, torch.Generator().manual_seed(CHAT_SEED))
    # A random model almost never picks one token out of 1536; a longer
    # <|im_end|> row (x2, exact in bf16) makes some replies end on it, as a
    # trained chat model's do.
    with torch.no_grad():
        model.model.embed_tokens.weight[IM_END] *= 2.0
    model.to(torch.bfloat16).save_pretrained(out_dir)
    shutil.copyfile(os.path.join(TOK_DIR, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json"))


def make_chat_cases(out_root):
    model_dir = os.path.join(out_root, "qwen3-chat")
    make_chat_model(model_dir)
    model = load(model_dir)
    template = open(os.path.join(TOK_DIR, "qwen3_chat_template.jinja")).read()
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model_dir, "tokenizer.json"),
                                  eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = template
    stops = [IM_END, ENDOFTEXT]
    assert tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]) == stops

    def case(user):
        messages = [{"role": "user", "content": user}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        new, gap = greedy(model, prompt, stops)
        stopped = len(new) < MAX_NEW or new[-1] in stops
        body = new[:-1] if stopped else new
        return {"user": user, "prompt_text": text, "prompt": prompt, "expected": new, "stopped": stopped,
                "text": tok.decode(body, skip_special_tokens=False), "min_gap": round(gap, 6)}

    # Three fixed messages (the first whose greedy steps keep a safe gap; one
    # with non-ASCII text), then a search for one that ends on a stop token.
    candidates = ["Hello!", "What is the capital of France?", "Grüße aus Köln, 你好", "Hi", "How are you today?",
                  "Write a haiku about the sea.", "Ça va? Très bien, merci.", "1 + 1 = ?", "Say something."]
    cases = []
    for user in candidates:
        c = case(user)
        if c["min_gap"] >= MIN_GAP:
            cases.append(c)
        if len(cases) == 3:
            break
    else:
        sys.exit(f"qwen3-chat: fewer than 3 messages with a top-2 gap >= {MIN_GAP}; change the seed")
    if not any(any(ord(ch) > 127 for ch in c["user"]) for c in cases):
        sys.exit("qwen3-chat: no non-ASCII message passed the gap check; change the seed")
    for i in range(2000):
        c = case(f"Tell me about item number {i}.")
        if c["stopped"] and 8 <= len(c["expected"]) < MAX_NEW and c["min_gap"] >= MIN_GAP:
            cases.append(c)
            break
    else:
        sys.exit("qwen3-chat: no message found whose greedy reply ends on a stop token; change the seed")
    doc = {"generator": f"tests/ref/make_generate_fixtures.py: torch {torch.__version__}, "
                        f"transformers {transformers.__version__}",
           "model": model_dir, "max_new": MAX_NEW, "stop": stops, "enable_thinking": False, "cases": cases}
    with open(os.path.join(out_root, "qwen3-chat.json"), "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"qwen3-chat: {len(cases)} messages, replies of {[len(c['expected']) for c in cases]} tokens, "
          f"min gap {min(c['min_gap'] for c in cases):.4f}")


SAMPLING_SETTINGS = [  # temperature, top_k, top_p
    (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.6), (0.9, 12, 0.8), (1.0, 1, 1.0), (2.0, 40, 0.95)]


def make_sampling(out_root):
    vocab = 256
    logits = (2.5 * torch.randn(vocab, generator=torch.Generator().manual_seed(4001))).to(torch.float32)
    settings = []
    for temperature, top_k, top_p in SAMPLING_SETTINGS:
        scores = logits.clone().unsqueeze(0)
        scores = TemperatureLogitsWarper(temperature)(None, scores)
        if top_k:
            scores = TopKLogitsWarper(top_k=top_k)(None, scores)
        if top_p < 1.0:
            # A token whose cumulative mass sits on the cut could fall either side in C.
            sorted_probs = scores.sort(descending=False).values.softmax(-1).cumsum(-1)
            assert (sorted_probs - (1 - top_p)).abs().min() > 1e-5, "top-p cut too close to a token; change the seed"
            scores = TopPLogitsWarper(top_p=top_p)(None, scores)
        probs = scores.softmax(-1)[0]
        settings.append({"temperature": temperature, "top_k": top_k, "top_p": top_p,
                         "support": int((probs > 0).sum()), "probs": [float(f"{float(x):.8g}") for x in probs]})
    doc = {"generator": f"tests/ref/make_generate_fixtures.py: torch {torch.__version__}, "
                        f"transformers {transformers.__version__}",
           "logits": [float(x) for x in logits], "settings": settings}
    with open(os.path.join(out_root, "sampling.json"), "w") as f:
        json.dump(doc, f)
        f.write("\n")
    print(f"sampling: {len(settings)} settings, support sizes {[st['support'] for st in settings]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/gen", help="output folder (default tests/fixtures/gen)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        for name in HF_MODELS:
            make_hf_cases(name, args.out)
        make_chat_cases(args.out)
        make_sampling(args.out)
    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"total {total / 1024:.1f} KiB in {args.out}")


if __name__ == "__main__":
    main()
