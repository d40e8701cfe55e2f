// evaluate.h: held-out loss over a token dataset and the exact-match rate of
// greedy completions on SFT data; used by `pocket eval` and the trainer.
#pragma once
#include "../data/chat.h"
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../model/bundle.h"
#include "../model/generate.h"

// The model input of a loader batch: every array of it.
ModelInput batch_input(const Batch *b);

// Where a loss pass takes its head from for each batch (model.h's LossHead;
// NULL from `of`, or no HeadSource: next-token cross-entropy).
typedef struct {
    const LossHead *(*of)(void *ctx, const Batch *b, const ModelInput *in);
    void *ctx;
} HeadSource;

// Mean loss over the dataset's batches (a fixed-seed loader, so every call
// sees the same batches); max_batches <= 0 = one pass over the items, each
// counted once (the last batch is padded, not filled with repeats). The model must be
// planned; its B x T is used. NAN with e filled on error.
double eval_loss(Model *m, const Dataset *d, int doc_mask, long max_batches, const HeadSource *heads, long *count,
                 PtError *e);
// The same pass as the `rank` of `world` ranks sees it: the sum of the
// per-token losses of its batches and their count (global batch j goes to
// rank j % world; the ranks' sums together are the one-rank pass's).
int eval_loss_sums(Model *m, const Dataset *d, int doc_mask, long max_batches, int rank, int world,
                   const HeadSource *heads, double *sum, long *count, PtError *e);

// SFT example k's last trained span (its final reply), [*start, *end] as
// offsets in the example: 1 when it has one with a prompt before it.
int sft_reply_span(const Dataset *d, uint64_t k, int64_t *start, int64_t *end);
// Whether token id is one of the tokenizer's special tokens (tok may be NULL: no).
int token_is_special(const Tokenizer *tok, int id);

// For each of the first max_examples SFT examples: the prompt is everything
// before the last trained span (the final assistant reply), the reference is
// that span (reply + <|im_end|>); greedy generation must reproduce it token
// for token. The replies are decoded EXACT_MATCH_ROWS at a time by the
// batched sampler (model/sampler.h: the tokens generate() gives each alone).
// Returns the rate in [0,1] (NAN on error); *n_scored examples. tok may be
// NULL: no stop at the reference's end token, no examples logged.
enum { EXACT_MATCH_ROWS = 16 };
double eval_exact_match(const Model *m, const Tokenizer *tok, const Dataset *d, int max_examples, int *n_scored,
                        FILE *log, PtError *e);

// Adds the usual stop ids, each once and only when inside the vocabulary:
// the config's eos_id, then <|im_end|> and <|endoftext|> when the tokenizer
// (may be NULL) has them.
void add_default_stops(GenParams *p, const ModelConfig *c, const Tokenizer *tok);

// The chat template's end-of-turn token (the special token it puts right after
// a reply to the n prompt messages, at most CHAT_PROMPT_MAX) added to p's
// stops; nothing when the template puts none there.
enum { CHAT_PROMPT_MAX = 64 };
void chat_add_end_of_turn_stop(const ChatTemplate *t, const ChatMessage *prompt, int n, const Tokenizer *tok,
                               int vocab, GenParams *p);

// `pocket generate --chat`: the checkpoint's chat template (bundle's
// tokenizer_config.json; the bundled one when it has none) renders an
// optional system message and the user's prompt with the assistant header
// appended and thinking off; *text is malloc'd. The template's end-of-turn
// token (the special token it puts after a reply) is added to p's stops.
int chat_generation_prompt(const ModelBundle *b, const char *ckpt, const Tokenizer *tok, const char *system,
                           const char *user, char **text, GenParams *p, PtError *e);
