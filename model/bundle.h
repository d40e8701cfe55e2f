// bundle.h: a model's persistent content, as every file format carries it:
// the config, the parameters laid out by the tensor table (one flat fp32
// buffer), and the tokenizer files kept verbatim so a checkpoint is
// self-contained. Importers fill one; exporters and checkpoints read one.
#pragma once
#include "tensors.h"

typedef struct {
    ModelConfig cfg;
    TensorTable tt;
    float *params;                  // tt.total floats, 64-byte aligned
    char *tokenizer_json;           // NULL when absent; NUL-terminated
    size_t tokenizer_json_len;
    char *tokenizer_config_json;    // NULL when absent; NUL-terminated
    size_t tokenizer_config_json_len;
} ModelBundle;

// Builds the table for cfg and allocates zeroed params.
void bundle_alloc(ModelBundle *b, const ModelConfig *cfg);
// N(0, init_std) for matrices, 1 for norms; the embedding's pad row is zeroed
// as transformers does. Same seed, same weights on every machine.
void bundle_init_random(ModelBundle *b, uint64_t seed);
void bundle_free(ModelBundle *b);
// out: in's config with vocab_size rows, every tensor copied but the
// embedding (and an untied lm_head), whose row i is in's row rows[i] (zero
// where rows[i] < 0). The tokenizer files are not copied; the caller sets
// out's special ids for the new rows.
void bundle_take_vocab_rows(const ModelBundle *in, const int *rows, int vocab_size, ModelBundle *out);
