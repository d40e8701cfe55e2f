// generate_batch.h: `pocket generate --batch-file PROMPTS.jsonl --out
// OUT.jsonl`. Each line of PROMPTS is a JSON object with "prompt" (text; a
// user turn of the chat template with --chat) or "messages" (a list of
// {"role", "content"}, rendered by the checkpoint's chat template with the
// assistant's header appended, thinking off), and optionally "id" (echoed),
// "max_new", "temperature", "top_k", "top_p" and "seed" (else the flags').
// Line i (from 1) samples with seed --seed + (i-1) x samples unless it gives
// one; its k-th sample (from 0) with that seed + k: a completion is the one
// `pocket generate` prints for the same prompt, parameters and seed, whatever
// the batch it ran in. OUT gets one line per completion, in the file's order:
// {"id", "sample", "completion", "tokens", "finish": "stop"|"length"} (and
// "ids" with --ids). A bad line is one error naming PROMPTS:LINE, before any
// generation; OUT is written whole or not at all.
#pragma once
#include "../data/tokenizer.h"
#include "../model/generate.h"
#include "open_model.h"

typedef struct {
    const char *ckpt, *path, *out;
    int rows;            // sequences decoded together
    int samples;         // completions per prompt
    int chat, ids;
    const char *system;  // --chat: a system turn before each prompt
    GenParams base;      // the flags' max_new, temperature, top_k, top_p, seed
} BatchOptions;

int generate_batch(OpenModel *om, const Tokenizer *tok, const BatchOptions *b, PtError *e);
