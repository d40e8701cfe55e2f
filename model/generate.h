// generate.h: text generation with a KV cache for an already loaded Model.
//
// The context only reads the model (params, config, RoPE table); it never
// calls model_plan, so eval (exact match of greedy completions) and the
// trainer (samples at eval time) can run it on the model they hold. It runs
// whatever weights the model's views point at (model_use_weights: QAT
// fake-quant or int4) and rounds activations as the model does (m->a16).
// One context per thread; several may share one Model.
//
// The prompt is fed in chunks of rows (matmuls over many rows at once) and
// then one token per step; every fed position leaves its K (after QK-norm
// and RoPE) and V in the cache, and only the last position's logits are
// computed. Sampling: greedy when temperature == 0, else temperature, then
// top-k, then top-p (nucleus), drawn with the project's Rng.
#pragma once
#include "../data/tokenizer.h"
#include "model.h"

enum { GEN_MAX_STOPS = 8 };

typedef struct {
    int max_new;                    // new tokens at most
    float temperature;              // 0: greedy (argmax, lowest id on ties)
    int top_k;                      // keep the k most likely tokens; 0 keeps all
    float top_p;                    // keep the smallest most-likely set with mass >= top_p; 1 keeps all
    uint64_t seed;                  // seeds the sampling Rng at the start of generate()
    int stop_ids[GEN_MAX_STOPS];    // generation ends on one of these; it is kept as the last new token
    int n_stop;
    // Optional: called with each new token as soon as it is chosen (streaming).
    void (*on_token)(void *ctx, int id);
    void *on_token_ctx;
} GenParams;

// Greedy, 128 new tokens, top_k 0, top_p 1, seed 0, no stop ids.
void gen_params_default(GenParams *p);
// Adds the usual stop ids, each once and only when inside the vocabulary:
// the config's eos_id, then <|im_end|> and <|endoftext|> when the tokenizer
// (may be NULL) has them.
void gen_add_default_stops(GenParams *p, const ModelConfig *c, const Tokenizer *tok);
int gen_is_stop(const GenParams *p, int id);

typedef struct {
    const Model *m;
    int max_len;            // cache capacity in positions (<= the config's max_seq)
    int n_past;             // positions held in the cache
    int chunk;              // rows per pass when feeding many tokens (may be lowered after gen_init)
    float *k_cache;         // [L][max_len][n_kv*hd], after QK-norm and RoPE
    float *v_cache;         // [L][max_len][n_kv*hd]
    // one chunk of activations, [chunk, width]
    float *x, *x_mid, *ln, *q_raw, *q, *k_raw, *att, *tmp, *gate, *up, *act, *rstd, *lse;
    int *pos;               // [chunk]
    float *logits;          // [V]: the logits of the last fed position
    float *probs;           // [V] sampling scratch
    int *order;             // [V] sampling scratch
    float *arena;           // one allocation behind the float buffers above
} GenContext;

// Allocates the cache for max_len positions; fails when max_len is outside [1, max_seq].
int gen_init(GenContext *g, const Model *m, int max_len, PtError *e);
void gen_free(GenContext *g);
// Empties the cache (the next token fed is position 0).
void gen_reset(GenContext *g);

// Appends n tokens at positions n_past .. n_past+n-1 and leaves the logits of
// the last one in g->logits. With all_logits != NULL also writes the logits
// of every fed row, [n, V] (tests compare them with model_forward). Fails on
// ids outside the vocabulary or when the cache would overflow.
int gen_feed(GenContext *g, const int *tokens, int n, float *all_logits, PtError *e);
// Resets, feeds the prompt, returns g->logits (NULL on error).
float *gen_prefill_logits(GenContext *g, const int *prompt, int n, PtError *e);

// Chooses the next token from logits [V] as p says (greedy ignores rng).
int gen_sample(GenContext *g, const float *logits, const GenParams *p, Rng *rng);

// Starts from an empty cache, feeds the prompt and generates up to p->max_new
// tokens into out (capacity max_out >= p->max_new), stopping after a stop id
// (kept in out). Returns the number of new tokens, or -1 with e filled:
// empty prompt, ids outside the vocabulary, or n_prompt + max_new beyond the
// cache or the model's max_seq (context length).
int generate(GenContext *g, const int *prompt, int n_prompt, const GenParams *p, int *out, int max_out,
             PtError *e);
