// loader.h: batches of B rows x T positions from a token dataset.
//
// CPT: the token stream is cut into windows of T+1 tokens starting at
// multiples of T (inputs = the first T, targets = the last T); each epoch
// visits the windows in a seeded shuffled order.
// Choice: as SFT with a group of candidates as the item: a group's
// (prompt + candidate) sequences are packed whole into one row, each its own
// segment, with no token targets; the batch lists each group's last rows
// and label for the decision head (model/choice_head.h), and n_loss counts
// groups. A group longer than T is an error at open.
// Pairs (preference data): as choice with a pair as the group (chosen first,
// then rejected, label 0), each document with SFT targets and mask; n_loss
// counts pairs. A pair longer than T is an error at open.
// SFT: each epoch visits the examples (documents) in a seeded shuffled order
// and packs whole examples into rows: every example gets its own segment id
// (attention_forward's seg), positions restarting at 0, targets = the next
// token of the same example and -1 at its last token and on padding, and
// mask[t] = loss_mask of the target token. An example longer than T is cut
// to T tokens (counted in n_truncated). Padding: token 0, target -1, mask 0,
// a segment id of its own.
//
// Ranks: there is one stream of micro-batches, the one a single rank reads;
// with world ranks, rank r takes micro-batches r, r + world, r + 2 world, ...
// and passes over the others (it packs their rows from the example lengths
// alone). So world ranks with one micro-batch each see exactly what one rank
// sees over world micro-batches, every rank's cursor is the same after each
// call, and a cursor saved on any number of ranks resumes on any other. The
// loader never ends: loader_next rolls over into the next epoch, mid-batch if
// need be.
//
// Same dataset, B, T, seed, rank and world -> the same batches, and a cursor
// saved after any batch restores the exact continuation.
#pragma once
#include <stdint.h>
#include "dataset.h"

typedef struct {
    int B, T;
    int rows;          // rows a pass runs over (the first ones, <= B): B unless the maker packed fewer (GRPO)
    int *tokens;       // [B*T] input ids
    int *targets;      // [B*T] next-token ids, -1 where nothing is predicted
    int *pos;          // [B*T] position ids (RoPE)
    int *seg;          // [B*T] segment ids: position u is visible to t iff same row, u <= t, seg equal
    uint8_t *mask;     // [B*T] 1 where the loss counts (never where targets == -1)
    int64_t *src;      // [B*T] the dataset token each position's input is (its index in /tokens), -1 on padding
    int n_loss;        // number of mask == 1 positions (choice: groups; pairs: pairs), what the loss averages over
    int n_groups;      // choice, pairs: groups in the batch; group g's candidates are k in
    int *group_first;  //   [group_first[g], group_first[g+1]) ([B*T+1]; a pair's: chosen, rejected),
    int *group_last;   //   [B*T] candidate k's last row (flat b*T+t)
    int *group_label;  //   [B*T] per group: the right candidate's index in it (pairs: 0, the chosen)
    int64_t *cand_doc; //   [B*T] candidate k's document in the dataset
    int *cand_row0;    //   [B*T] candidate k's first row (flat b*T+t)
} Batch;

void batch_alloc(Batch *b, int B, int T);
void batch_free(Batch *b);
void batch_copy(Batch *dst, const Batch *src);   // every array and count; both of the same B, T

// Where the loader stands: a plain struct of integers for checkpoints.
typedef struct {
    uint64_t epoch;      // epochs completed
    uint64_t index;      // next item of the epoch's order
    uint64_t rng[4];     // shuffle RNG state before this epoch's order was drawn
} LoaderCursor;

typedef struct {
    const Dataset *d;
    int B, T, rank, world;
    int sft;
    int choice;              // a choice dataset: items are groups (sft is set too: rows are packed)
    int pairs;               // a pairs dataset: items are pairs (sft is set too)
    int doc_mask;            // CPT only: keep attention inside documents (off by default)
    uint64_t n_items;        // CPT windows, SFT examples, choice groups or pairs in the dataset
    uint64_t *order;         // this epoch's permutation of [0, n_items)
    LoaderCursor cur;
    uint64_t next_rng[4];    // shuffle RNG state after drawing this epoch's order
    uint64_t n_truncated;    // SFT examples cut to T so far
    int one_pass;            // the first epoch only: past its end rows are padding
} Loader;

// d must stay open while the loader is used. The caller checks the
// tokenizer first (dataset_check_tokenizer). Errors: B or T < 1, bad
// rank/world, an SFT dataset without /loss_mask or with an empty example, a
// dataset without a single item.
int loader_open(Loader *l, const Dataset *d, int B, int T, uint64_t seed, int rank, int world, PtError *e);
// CPT: segment ids and positions restart at each document start inside a
// window, and the target of a document's last token is -1.
void loader_set_doc_mask(Loader *l, int on);
// Evaluation: the stream ends with the first epoch; rows past its last item
// are padding (mask 0), so no item counts twice in a loss (a one-example set
// would otherwise fill a batch with copies of itself).
void loader_set_one_pass(Loader *l);
// Whether a one-pass loader has handed out every item.
int loader_done(const Loader *l);
void loader_next(Loader *l, Batch *b);   // this rank's next micro-batch; b from batch_alloc(b, l->B, l->T)

// The same, a row at a time (loader_next is these three; data/mixture.h fills
// one batch's rows from several loaders): begin empties b's choice groups;
// next_row takes the stream's next row, filled into b at flat offset o (a
// multiple of T) or, fill = 0, passed over as another rank's, and returns its
// tokens (padding not counted; the same whether filled or passed over);
// end counts b->n_loss.
void loader_batch_begin(Batch *b);
int loader_next_row(Loader *l, Batch *b, size_t o, int fill);
void loader_batch_end(const Loader *l, Batch *b);
void loader_get_cursor(const Loader *l, LoaderCursor *c);
// Errors: an index beyond the epoch.
int loader_set_cursor(Loader *l, const LoaderCursor *c, PtError *e);
void loader_close(Loader *l);
