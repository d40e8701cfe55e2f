// vocab_prune.h: pruning a byte-level BPE vocabulary (`pocket prune-vocab`):
// which tokens stay, and the tokenizer files of the kept ones.
//
// The kept set holds every added token, the 256 one-byte base tokens (so every
// text still encodes, with no unknown token), the tokens the caller forces,
// and then the most used others until it holds `keep` tokens. It is closed
// under the merges: a kept token keeps the inputs of every merge that makes
// it. The new tokenizer lists the kept tokens renumbered densely in their old
// order, and the merges whose inputs and result are all kept, in their old
// order. Why this tokenizes as the old one does: docs/prune-vocab.md.
#pragma once
#include <stdint.h>
#include "tokenizer.h"

typedef struct {
    int n_old;          // ids of the old tokenizer (highest id + 1)
    int n_tokens;       // tokens of the old tokenizer (ids that name one)
    int n_kept;         // kept tokens: the new tokenizer's ids are 0 .. n_kept-1
    int *new_of_old;    // [n_old]: the new id, -1 when dropped (or no token)
    int *old_of_new;    // [n_kept]
    int n_required;     // kept whatever the counts: added, bytes, forced, and their merge inputs
    int n_merges_kept;
} VocabPlan;

// The ids that stay whatever the counts (before closure): every added
// token, the one-byte tokens, the unk token, and forced[0..n_forced).
// counts[n_old]: uses of each id on a corpus; ties and unused tokens go by
// id, lowest first (the earlier merge). keep: the tokens to keep in all.
// Errors: keep below the required tokens, or not below the tokenizer's.
int vocab_plan(VocabPlan *p, const Tokenizer *tok, const uint64_t *counts, const int *forced, int n_forced, int keep,
               PtError *e);
void vocab_plan_free(VocabPlan *p);
// vocab_plan's errors before the counting: keep against the required tokens.
int vocab_plan_check(const Tokenizer *tok, const int *forced, int n_forced, int keep, PtError *e);

// The tokens a chat turn needs: the ids of what the chat template (from
// tokenizer_config.json's bytes, NULL: the bundled one) renders around empty
// messages (system, user and assistant turns; the generation prompt with
// thinking on and off; a conversation the template refuses is left out), and
// of the bos/eos/pad/unk token strings the config names. Appended to *ids.
int vocab_template_tokens(const Tokenizer *tok, const char *config_json, size_t len, int **ids, int *n, PtError *e);
// The tokens a --keep-file names, one per line as tokenizer.json spells them
// ("Ġthe" for " the") or an added token's content; blank lines are skipped.
// A line that names no token is an error naming the file and line.
int vocab_keep_file(const Tokenizer *tok, const char *path, int **ids, int *n, PtError *e);

// tokenizer.json (json[0..len), the text tok was loaded from) for the kept
// tokens: model.vocab and model.merges rewritten, added_tokens renumbered,
// the rest as it was. *out is malloc'd and NUL-terminated.
int vocab_prune_tokenizer_json(const VocabPlan *p, const Tokenizer *tok, const char *json, size_t len, char **out,
                               size_t *out_len, PtError *e);
// tokenizer_config.json with its added_tokens_decoder renumbered (src names
// it in errors); an id there that the plan drops is an error.
int vocab_prune_tokenizer_config(const VocabPlan *p, const char *json, size_t len, const char *src, char **out,
                                 size_t *out_len, PtError *e);
