// sampler.h: the batched sampler. Many sequences are decoded together over
// one KV-cache plan (model_plan_cache_rows), one token each per pass with
// the matmuls over all the rows; each has its own prompt, sampling
// parameters, seed and stop condition, and a row that finishes takes the
// next waiting prompt at once (continuous batching), so the passes stay
// full while there is work.
//
// A job gives exactly the tokens generate() gives for its prompt and
// parameters, whatever the number of rows and the order the jobs run in:
// its prompt is read by a one-sequence cache plan as generate() reads it,
// its cache copied into a free row, and its tokens are drawn by its own Rng
// seeded with its seed (tests/test_sampler.c checks this token for token).
// Consecutive jobs with the same prompt array (several samples of one
// prompt) read it once.
#pragma once
#include "generate.h"

typedef struct {
    const int *prompt;
    int n_prompt;             // >= 1
    const GenParams *p;       // max_new, temperature, top_k, top_p, seed, stop ids (on_token is not called)
    int *out;                 // [p->max_new]: the new tokens, a stop id kept as the last (as generate())
    int n_out;                // filled by sampler_run
} SampleJob;

typedef struct {
    GenContext one;           // reads each prompt (a one-sequence cache plan); its scratch samples
    Model rows;               // the rows that decode together (cache_rows of cache_len positions)
    float *dev_logits;        // [rows, V] on the device
    float *logits;            // ... on the host
    const int *read;          // the prompt `one` holds (n_read tokens), NULL when none
    int n_read;
} Sampler;

// n_rows sequences at once over the weights and numerics src runs (its
// device, its adapter), each of at most max_len positions (prompt + new
// tokens; <= the model's max_seq).
int sampler_init(Sampler *s, const Model *src, int n_rows, int max_len, PtError *e);
void sampler_free(Sampler *s);
// Runs the jobs, started in their order as rows free up; progress (may be
// NULL) is called with (ctx, jobs finished, n) as each one finishes. Fails,
// before anything runs, on an empty prompt, ids outside the vocabulary or a
// job longer than max_len.
int sampler_run(Sampler *s, SampleJob *jobs, int n, void (*progress)(void *ctx, int done, int n), void *ctx,
                PtError *e);
