// gguf_tokenizer.h: the tokenizer as GGUF metadata and back (the
// tokenizer.ggml.* keys of ggml's docs/gguf.md). Export turns the stored
// tokenizer.json (+ tokenizer_config.json) into those keys; import rebuilds a
// tokenizer.json from them that data/tokenizer.h loads and that encodes
// exactly as the original did.
#pragma once
#include "../model/bundle.h"
#include "gguf_writer.h"

// llama.cpp token types (tokenizer.ggml.token_type).
enum { GGUF_TOKEN_NORMAL = 1, GGUF_TOKEN_UNKNOWN = 2, GGUF_TOKEN_CONTROL = 3, GGUF_TOKEN_USER_DEFINED = 4,
       GGUF_TOKEN_UNUSED = 5, GGUF_TOKEN_BYTE = 6 };

// Adds the tokenizer keys for b. Byte-level BPE only: model "gpt2", pre the
// llama.cpp name of its pre-tokenizer ("gpt-2", "smollm", "qwen2",
// "llama-bpe", "deepseek-v3"; import also takes their aliases); tokens
// padded to cfg.vocab_size with "[PAD<id>]" (UNUSED); vocab entries NORMAL,
// added tokens CONTROL when special, else USER_DEFINED; merges as "a b";
// eos/pad/bos ids from tokenizer_config.json, else from the config;
// add_bos_token; chat_template when tokenizer_config.json has one. A bundle
// without tokenizer.json gets tokenizer.ggml.model "none" (llama.cpp then
// runs on token ids alone).
int gguf_tokenizer_put(GgufWriter *w, const ModelBundle *b, PtError *e);

// Rebuilds tokenizer.json and tokenizer_config.json (malloc'd, NUL-terminated)
// from f's tokenizer keys; special and user-defined tokens are added tokens
// and stay in the vocabulary, as the models' own files have them. *json is NULL when the file has no tokenizer
// (model "none" or absent). vocab_size bounds the token list.
int gguf_tokenizer_rebuild(const GgufFile *f, int vocab_size, char **json, size_t *json_len, char **config,
                           size_t *config_len, PtError *e);
