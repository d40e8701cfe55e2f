// dataset.h: HDF5 token datasets, the output of `pocket tokenize` and the
// input of training and eval.
//
// Layout (h5py and h5dump read every field):
//   /tokens       uint16 when vocab_size <= 65536, else uint32; chunked, deflated
//   /doc_offsets  uint64, n_docs + 1 entries: document d is tokens[off[d], off[d+1])
//   /loss_mask    uint8, one per token, not in CPT: 1 on the tokens the loss trains;
//                 choice: 1 on the candidate's tokens (after the shared prompt);
//                 pairs: 1 on the response's tokens (after the shared prompt)
//   /choice_offsets  uint64, choice only, n_groups + 1 entries: group g's
//                 candidates are documents [off[g], off[g+1]) (data/choice.h)
//   /choice_label uint32, choice only, one per group: the right candidate's
//                 index inside its group
//   attributes on "/": kind ("cpt"|"sft"|"choice"|"pairs"), tokenizer_hash (SHA-256 hex of the
//   tokenizer.json bytes), vocab_size, n_tokens, n_docs, n_dropped,
//   n_truncated, n_skipped, n_duplicates (tokenize --dedup, draft-data --samples), format_version;
//   pairs also n_pairs and n_dropped_<reason> for each PairDropReason (their sum is n_dropped).
// A CPT document ends with the end-of-text token; an SFT document is one
// rendered chat example. Pairs (preference data, data/pairs.h): documents 2g
// and 2g+1 are pair g's prompt + chosen and prompt + rejected, the mask 1 on
// the response; the two hold the same tokens before their first masked one.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <hdf5.h>
#include "../util/util.h"
#include "chat.h"
#include "tokenizer.h"

typedef enum { DATASET_CPT = 0, DATASET_SFT = 1, DATASET_CHOICE = 2, DATASET_PAIRS = 3 } DatasetKind;

const char *dataset_kind_name(DatasetKind k);   // "cpt", "sft", "choice", "pairs"

// Why `pocket tokenize --pairs` left a pair out; attribute n_dropped_<name>.
typedef enum {
    PAIR_DROP_EQUAL,             // prompt + chosen and prompt + rejected are the same tokens
    PAIR_DROP_PROMPT_MISMATCH,   // (implicit prompt) the two differ before their last assistant turns
    PAIR_DROP_TOO_LONG,          // longer than --max-len, or (--truncate) the prompt alone fills it
    PAIR_DROP_EMPTY,             // a response adds no token after the prompt
    PAIR_DROP_REASONS
} PairDropReason;
const char *pair_drop_name(PairDropReason r);   // "equal", "prompt_mismatch", "too_long", "empty"

// An opened, validated dataset held in memory (2 or 4 bytes per token).
typedef struct {
    char *path;
    DatasetKind kind;
    char *tokenizer_hash;
    int vocab_size;
    int token_bytes;          // 2 (uint16 storage) or 4 (uint32)
    uint64_t n_tokens, n_docs;
    uint64_t n_dropped, n_truncated, n_skipped;   // what tokenize left out, for reports
    uint64_t n_duplicates;    // exact duplicates left out: tokenize --dedup, draft-data --samples (0 in older files)
    void *tokens;             // uint16_t[n_tokens] or uint32_t[n_tokens]
    uint64_t *doc_offsets;    // n_docs + 1
    uint8_t *loss_mask;       // n_tokens, NULL for CPT
    uint64_t n_groups;        // choice: groups of candidates (one prompt each)
    uint64_t *choice_offsets; // choice: n_groups + 1
    uint32_t *choice_label;   // choice: n_groups
    uint64_t n_pairs;         // pairs: n_docs / 2
    uint64_t n_dropped_pair[PAIR_DROP_REASONS];   // pairs: n_dropped by reason
} Dataset;

// Reads and validates: required datasets and attributes, dtypes and ranks,
// offsets starting at 0, non-decreasing, ending at n_tokens, token ids below
// vocab_size, mask values 0/1; pairs: an even n_docs, a masked token in every
// document, the same prompt (tokens before the first masked one) in both of
// a pair. Errors name the file and the dataset (or the pair).
int dataset_open(Dataset *d, const char *path, PtError *e);
void dataset_close(Dataset *d);

static inline uint32_t dataset_token(const Dataset *d, uint64_t i) {
    return d->token_bytes == 2 ? ((const uint16_t *)d->tokens)[i] : ((const uint32_t *)d->tokens)[i];
}
static inline uint64_t dataset_doc_len(const Dataset *d, uint64_t doc) {
    return d->doc_offsets[doc + 1] - d->doc_offsets[doc];
}

// Refuses a dataset tokenized with another tokenizer; the message names both hashes.
int dataset_check_tokenizer(const Dataset *d, const char *model_tokenizer_hash, PtError *e);

// Counts, hash and a decoded sample with the loss-mask span between [[ and ]]
// (ids instead of text when tok is NULL). `pocket inspect DATA.h5` calls it.
int dataset_inspect(const char *path, const Tokenizer *tok_or_NULL, FILE *out, PtError *e);

// 1 when path is an HDF5 file with a /tokens dataset (for inspect's dispatch).
int dataset_is_token_file(const char *path);

// Loads a tokenizer from a tokenizer.json or from a checkpoint's
// /tokenizer/tokenizer.json bytes (so a checkpoint alone is enough).
int dataset_load_tokenizer(const char *json_or_ckpt, Tokenizer **out, PtError *e);
// The chat template of that tokenizer (data/chat.h): a checkpoint's stored
// tokenizer_config.json, or the tokenizer_config.json beside a tokenizer.json;
// the bundled template when there is none.
int dataset_load_chat_template(const char *json_or_ckpt, ChatTemplate **out, PtError *e);

// Streaming writer: documents are appended as they come (buffers of one
// chunk) into PATH.tmp.PID, renamed over PATH by commit. Nothing is left
// behind by abort or by an error.
typedef struct DatasetWriter DatasetWriter;
int dataset_writer_open(DatasetWriter **out, const char *path, DatasetKind kind, int vocab_size,
                        const char *tokenizer_hash, PtError *e);
// One document of n tokens; mask (n values 0/1) is required for SFT, choice
// and pairs (prompt + chosen, then prompt + rejected), ignored for CPT. Ids
// outside [0, vocab_size) are an error.
int dataset_writer_add(DatasetWriter *w, const int *ids, const uint8_t *mask, size_t n, PtError *e);
// Choice: the documents added since the last group are the candidates of one
// group (at least 2), label the right one's index.
int dataset_writer_end_group(DatasetWriter *w, uint32_t label, PtError *e);
void dataset_writer_set_counts(DatasetWriter *w, uint64_t n_dropped, uint64_t n_truncated, uint64_t n_skipped);
// Pairs: the drops by reason (n_dropped is set to their sum).
void dataset_writer_set_pair_drops(DatasetWriter *w, const uint64_t dropped[PAIR_DROP_REASONS]);
void dataset_writer_set_duplicates(DatasetWriter *w, uint64_t n_duplicates);
uint64_t dataset_writer_tokens(const DatasetWriter *w);
uint64_t dataset_writer_docs(const DatasetWriter *w);
// The output file, for what a command stores beside the tokens (attributes
// on "/", a /topk group: topk.h) before the commit.
hid_t dataset_writer_file(const DatasetWriter *w);
// Writes the attributes, closes, fsyncs and renames. Frees w either way.
int dataset_writer_commit(DatasetWriter *w, PtError *e);
void dataset_writer_abort(DatasetWriter *w);   // frees w, removes the temp file
