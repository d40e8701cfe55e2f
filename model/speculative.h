// speculative.h: greedy generation with a DFlash draft (draft.h), the
// accept/reject loop MNN 3.6.1's "dflash" generation runs. Each step the
// draft proposes block-1 tokens after the last accepted one in one pass;
// the target checks the whole block in one pass; the longest prefix the
// target agrees with is kept, plus the target's own next token. The output
// is the target's greedy output, token for token.
#pragma once
#include "draft.h"
#include "generate.h"

typedef struct {
    GenContext *g;           // the target, planned for a KV cache (gen_init); the caller's
    DraftModel dm;           // the draft over the cache's positions (one sequence, one block)
    float *captures;         // [cache_len, n_target*H] device: the target's chosen layers at each fed position
    float *logits;           // [block, V] device: the draft's, then the target's
    float *host_logits;      // [block, V]
    int ctx_done;            // context rows the draft has made (rows of positions fed before its last block)
    const int *vocab;        // the draft's vocabulary (the caller's Draft: column k proposes vocab[k]), NULL: every token
} SpecContext;

typedef struct {
    long passes;             // target passes after the prompt (one per drafted block)
    long tokens;             // new tokens those passes gave (the first new token comes from the prompt's pass)
} SpecStats;

// A draft (its config, table and vocabulary; the caller's, they outlive s;
// its weights on the device at draft_weights) for the target g runs; the
// draft's block must fit in the cache with the output. The draft proposes
// only the tokens of its vocabulary.
int spec_init(SpecContext *s, GenContext *g, const Draft *draft, float *draft_weights, PtError *e);
void spec_free(SpecContext *s);
// generate() with the draft: greedy only (p->temperature must be 0). The
// cache must hold n_prompt + max_new + block positions. st (may be NULL)
// gets the passes and tokens: their ratio is the mean acceptance length.
int spec_generate(SpecContext *s, const int *prompt, int n_prompt, const GenParams *p, int *out, int max_out,
                  SpecStats *st, PtError *e);
