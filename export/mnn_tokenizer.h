// mnn_tokenizer.h: the tokenizer as MNN's binary "pipeline" tokenizer file
// (tokenizer.mtok, which MNN's PipelineTokenizer reads: transformers/llm/
// engine/src/tokenizer/tokenizer.cpp in the MNN repository), built from the
// checkpoint's tokenizer.json and tokenizer_config.json. The runtime's other formats
// either split non-ASCII text differently (tokenizer.txt BPE) or are not BPE,
// so .mtok is the one that encodes Chinese and emoji as HF does.
#pragma once
#include "../model/bundle.h"

// Byte-level BPE only (NFC or no normalizer; the Qwen2 split regex + ByteLevel,
// or ByteLevel with its own regex). Stop ids: eos and <|im_end|>; no prefix
// (no BOS). *out is malloc'd.
int mnn_tokenizer_build(const ModelBundle *b, uint8_t **out, size_t *len, PtError *e);
