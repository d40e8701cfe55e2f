// topk.h: a teacher's top-k next-token logits stored in a token dataset, for
// distillation without the teacher in memory ([distill] source = topk;
// `pocket teacher-topk` writes them).
//
// Layout, beside the dataset's own (dataset.h):
//   /topk/ids      int32 [n_tokens, k]: row i = the teacher's k most likely
//                  next tokens after dataset token i, most likely first
//   /topk/logits   uint16 [n_tokens, k]: their logits as fp16 bits
//   /topk/lse      float32 [n_tokens]: log sum_v exp(logit_v / temperature)
//                  over the whole vocabulary, so the k are exact probabilities
//                  at that temperature and the rest's mass is known
//   attributes on /topk: k, temperature, seq_len and doc_mask (the rows the teacher ran
//   on: the training loader's at that sequence length, so each token had the
//   context it has in training), teacher (its file), teacher_sha256 (of its
//   weights), covered (rows written).
// Only rows a loss counts are written (the other rows are 0); training at
// another seq_len or doc_mask is refused.
#pragma once
#include <hdf5.h>
#include <stdint.h>
#include "../util/util.h"

typedef struct {
    int k, seq_len, doc_mask;
    float temperature;
    uint64_t n_tokens, covered;
    char *teacher, *teacher_sha256;
    int32_t *ids;          // [n_tokens * k]
    uint16_t *logits;      // [n_tokens * k], fp16 bits
    float *lse;            // [n_tokens]
} TopkData;

// Reads /topk of the dataset at path whole (6 bytes per token and k): 0, or 1
// when the file has none, -1 with e filled on an error.
int topk_open(TopkData *t, const char *path, PtError *e);
void topk_close(TopkData *t);
// A run at seq_len T (with doc_mask, for CPT data) and temperature over a
// vocabulary of `vocab` rows must have the rows the top-k were made for.
int topk_check_run(const TopkData *t, const char *path, int T, int doc_mask, int sft, float temperature, int vocab,
                   PtError *e);
// The top-k rows of n batch positions whose inputs are dataset tokens src[i]
// (-1: padding, zeros), as ints and floats, and their log-sum-exp.
void topk_gather(const TopkData *t, const int64_t *src, size_t n, int *ids, float *logits, float *lse);

// Building one: an all-zero table of n_tokens rows, rows set as the teacher
// gives them, then written into an open output file.
int topk_alloc(TopkData *t, uint64_t n_tokens, int k, float temperature, int seq_len, int doc_mask,
               const char *teacher, const char *teacher_sha256, PtError *e);
// Row i from k ids, float logits (rounded to fp16) and the log-sum-exp.
void topk_set_row(TopkData *t, uint64_t i, const int *ids, const float *logits, float lse);
int topk_write(const TopkData *t, hid_t file);
// The k largest of logits[V], most likely first (ties: the lower id), into
// ids and vals; returns log sum_v exp(logits[v] / temperature), in double.
double topk_select(const float *logits, int V, int k, float temperature, int *ids, float *vals);
