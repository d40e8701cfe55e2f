// generate.h: text generation with a KV cache, and sampling.
//
// A context holds a second Model over the same weights, planned for a KV
// cache (model_plan_cache), so eval (exact match of greedy completions) and
// the trainer (samples at eval time) can generate from the model they hold.
// It runs the decoder of model.c with the source model's weights (QAT
// fake-quant or int4) and numerics (bf16 matmuls, A16 rounding) as they are
// when gen_init is called.
//
// The prompt is fed in chunks of rows (matmuls over many rows at once) and
// then one token per step; every fed position leaves its K (after QK-norm
// and RoPE) and V in the cache, and only the last position's logits are
// computed. Sampling: greedy when temperature == 0, else temperature, then
// top-k, then top-p (nucleus), drawn with the project's Rng.
#pragma once
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
// Adds a stop id, once, and only when inside the vocabulary.
void gen_add_stop(GenParams *p, int id, int vocab);
int gen_is_stop(const GenParams *p, int id);

typedef struct {
    Model m;                // planned for the cache, with the source model's weights and numerics;
                            // m.T is the rows per pass over a prompt (may be lowered after gen_init)
    float *logits;          // [V], host: the logits of the last fed position
    float *probs;           // [V] sampling scratch
    int *order;             // [V] sampling scratch
} GenContext;

// Plans a cache of max_len positions for the model `src` runs (its device,
// weights and options); fails when max_len is outside [1, max_seq].
int gen_init(GenContext *g, const Model *src, int max_len, PtError *e);
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
// The same with the caller's scratch: probs [V], order [V].
int sample_token(const float *logits, int V, const GenParams *p, Rng *rng, float *probs, int *order);

// Lockstep sampling of m->cache_rows sequences (m planned with
// model_plan_cache_rows, cache_len >= len): sequence r starts with first[r]
// and runs to `len` tokens (out[r * len ...], first[r] included); its next
// `greedy` tokens are the most likely ones, the rest are drawn as p says
// with its own Rng rngs[r]. No stop ids: every sequence gets len tokens.
// progress (may be NULL) is called after each position with (ctx, done, len).
void generate_rows(Model *m, const int *first, int len, int greedy, const GenParams *p, Rng *rngs, int *out,
                   void (*progress)(void *ctx, int done, int len), void *ctx);

// Starts from an empty cache, feeds the prompt and generates up to p->max_new
// tokens into out (capacity max_out >= p->max_new), stopping after a stop id
// (kept in out). Returns the number of new tokens, or -1 with e filled:
// empty prompt, ids outside the vocabulary, or n_prompt + max_new beyond the
// cache or the model's max_seq (context length).
int generate(GenContext *g, const int *prompt, int n_prompt, const GenParams *p, int *out, int max_out,
             PtError *e);
