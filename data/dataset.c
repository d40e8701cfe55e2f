// dataset.c: HDF5 token datasets (layout in dataset.h): streaming writer,
// validating reader, inspect.
#include "dataset.h"
#include <inttypes.h>
#include <string.h>
#include "../util/h5.h"

// The writer appends whole chunks: one of uint16 tokens (two of uint32) and
// one of offsets at a time.
enum { FORMAT_VERSION = 1, TOKEN_BUFFER = H5_CHUNK_BYTES / 2, OFFSET_BUFFER = H5_CHUNK_BYTES / 8 };

static const char *const KIND_NAMES[] = {"cpt", "sft", "choice", "pairs"};
static const char *const PAIR_DROP_NAMES[PAIR_DROP_REASONS] = {"equal", "prompt_mismatch", "too_long", "empty"};

const char *dataset_kind_name(DatasetKind k) { return KIND_NAMES[k]; }
const char *pair_drop_name(PairDropReason r) { return PAIR_DROP_NAMES[r]; }

// ---------------------------------------------------------------- writer

struct DatasetWriter {
    H5Output out;
    char *hash;
    DatasetKind kind;
    int vocab_size, token_bytes;
    hid_t tokens, offsets, mask;
    void *tok_buf;             // TOKEN_BUFFER tokens in the stored width
    uint8_t *mask_buf;         // TOKEN_BUFFER
    uint64_t *off_buf;         // OFFSET_BUFFER
    size_t tok_fill, off_fill;
    uint64_t n_tokens, n_docs;
    uint64_t n_dropped, n_truncated, n_skipped, n_duplicates;
    uint64_t pair_drops[PAIR_DROP_REASONS];   // pairs: n_dropped by reason
    uint64_t *groups, n_groups, groups_cap;   // choice: group offsets into the documents, kept until commit
    uint32_t *labels;
};

static hid_t token_type(int token_bytes) { return token_bytes == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32; }

static int flush_tokens(DatasetWriter *w, PtError *e) {
    if (h5_append(w->tokens, token_type(w->token_bytes), w->tok_buf, w->tok_fill))
        return pt_fail(e, "%s: writing /tokens failed (disk full or not writable?)", w->out.path);
    if (w->kind != DATASET_CPT && h5_append(w->mask, H5T_NATIVE_UINT8, w->mask_buf, w->tok_fill))
        return pt_fail(e, "%s: writing /loss_mask failed (disk full or not writable?)", w->out.path);
    w->tok_fill = 0;
    return 0;
}

static int flush_offsets(DatasetWriter *w, PtError *e) {
    if (h5_append(w->offsets, H5T_NATIVE_UINT64, w->off_buf, w->off_fill))
        return pt_fail(e, "%s: writing /doc_offsets failed (disk full or not writable?)", w->out.path);
    w->off_fill = 0;
    return 0;
}

// The file must be closed (commit or abort) after the datasets.
static void writer_free(DatasetWriter *w) {
    if (w->tokens >= 0) H5Dclose(w->tokens);
    if (w->offsets >= 0) H5Dclose(w->offsets);
    if (w->mask >= 0) H5Dclose(w->mask);
    free(w->hash);
    free(w->tok_buf);
    free(w->mask_buf);
    free(w->off_buf);
    free(w->groups);
    free(w->labels);
    free(w);
}

int dataset_writer_open(DatasetWriter **out, const char *path, DatasetKind kind, int vocab_size,
                        const char *tokenizer_hash, PtError *e) {
    if (vocab_size <= 0) return pt_fail(e, "%s: vocab_size %d must be positive", path, vocab_size);
    DatasetWriter *w = xcalloc(1, sizeof *w, "dataset writer");
    w->tokens = w->offsets = w->mask = -1;
    if (h5_output_create(&w->out, path, e)) {
        writer_free(w);
        return -1;
    }
    w->hash = xstrdup(tokenizer_hash ? tokenizer_hash : "");
    w->kind = kind;
    w->vocab_size = vocab_size;
    w->token_bytes = vocab_size <= 65536 ? 2 : 4;
    w->tokens = h5_create_growing(w->out.file, "tokens", token_type(w->token_bytes));
    w->offsets = h5_create_growing(w->out.file, "doc_offsets", H5T_NATIVE_UINT64);
    if (kind != DATASET_CPT) w->mask = h5_create_growing(w->out.file, "loss_mask", H5T_NATIVE_UINT8);
    if (w->tokens < 0 || w->offsets < 0 || (kind != DATASET_CPT && w->mask < 0)) {
        pt_fail(e, "%s: cannot create the datasets in %s", path, w->out.tmp);
        dataset_writer_abort(w);
        return -1;
    }
    w->tok_buf = xmalloc((size_t)TOKEN_BUFFER * w->token_bytes, "token buffer");
    w->mask_buf = xmalloc(TOKEN_BUFFER, "mask buffer");
    w->off_buf = xmalloc(OFFSET_BUFFER * sizeof(uint64_t), "offset buffer");
    w->off_buf[w->off_fill++] = 0;
    *out = w;
    return 0;
}

int dataset_writer_add(DatasetWriter *w, const int *ids, const uint8_t *mask, size_t n, PtError *e) {
    if (w->kind != DATASET_CPT && !mask) return pt_fail(e, "%s: an SFT or choice document needs a mask", w->out.path);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->vocab_size)
            return pt_fail(e, "%s: document %" PRIu64 ": token id %d outside the vocabulary [0, %d)", w->out.path,
                           w->n_docs, ids[i], w->vocab_size);
    for (size_t i = 0; i < n; i++) {
        if (w->token_bytes == 2) ((uint16_t *)w->tok_buf)[w->tok_fill] = (uint16_t)ids[i];
        else ((uint32_t *)w->tok_buf)[w->tok_fill] = (uint32_t)ids[i];
        if (w->kind != DATASET_CPT) w->mask_buf[w->tok_fill] = mask[i] ? 1 : 0;
        if (++w->tok_fill == TOKEN_BUFFER && flush_tokens(w, e)) return -1;
    }
    w->n_tokens += n;
    w->n_docs++;
    w->off_buf[w->off_fill++] = w->n_tokens;
    return w->off_fill == OFFSET_BUFFER ? flush_offsets(w, e) : 0;
}

int dataset_writer_end_group(DatasetWriter *w, uint32_t label, PtError *e) {
    uint64_t first = w->n_groups ? w->groups[w->n_groups] : 0, k = w->n_docs - first;
    if (w->kind != DATASET_CHOICE || k < 2 || label >= k)
        return pt_fail(e, "%s: group %" PRIu64 ": %" PRIu64 " candidates with label %u (want a choice dataset, at "
                          "least 2 candidates, the label among them)", w->out.path, w->n_groups, k, label);
    if (w->n_groups + 2 > w->groups_cap) {
        w->groups_cap = w->groups_cap ? 2 * w->groups_cap : 1024;
        uint64_t *groups = realloc(w->groups, w->groups_cap * sizeof(uint64_t));
        uint32_t *labels = groups ? realloc(w->labels, w->groups_cap * sizeof(uint32_t)) : NULL;
        if (!labels) die("out of memory growing the choice groups");
        w->groups = groups;
        w->labels = labels;
    }
    w->groups[0] = 0;
    w->labels[w->n_groups++] = label;
    w->groups[w->n_groups] = w->n_docs;
    return 0;
}

void dataset_writer_set_counts(DatasetWriter *w, uint64_t n_dropped, uint64_t n_truncated, uint64_t n_skipped) {
    w->n_dropped = n_dropped;
    w->n_truncated = n_truncated;
    w->n_skipped = n_skipped;
}

void dataset_writer_set_pair_drops(DatasetWriter *w, const uint64_t dropped[PAIR_DROP_REASONS]) {
    w->n_dropped = 0;
    for (int r = 0; r < PAIR_DROP_REASONS; r++) w->n_dropped += w->pair_drops[r] = dropped[r];
}
void dataset_writer_set_duplicates(DatasetWriter *w, uint64_t n_duplicates) { w->n_duplicates = n_duplicates; }

uint64_t dataset_writer_tokens(const DatasetWriter *w) { return w->n_tokens; }
uint64_t dataset_writer_docs(const DatasetWriter *w) { return w->n_docs; }

static int write_attributes(const DatasetWriter *w) {
    const struct { const char *name; uint64_t value; } counts[] = {
        {"vocab_size", (uint64_t)w->vocab_size}, {"n_tokens", w->n_tokens}, {"n_docs", w->n_docs},
        {"n_dropped", w->n_dropped}, {"n_truncated", w->n_truncated}, {"n_skipped", w->n_skipped},
        {"format_version", FORMAT_VERSION}, {"n_duplicates", w->n_duplicates},
    };
    hid_t f = w->out.file;
    int rc = h5_write_utf8_attr(f, "kind", dataset_kind_name(w->kind)) || h5_write_utf8_attr(f, "tokenizer_hash", w->hash);
    if (!rc && w->kind == DATASET_CHOICE) {
        uint64_t none = 0;
        hsize_t n_off = w->n_groups + 1, n_lab = w->n_groups;
        rc = h5_write_dataset(f, "choice_offsets", H5T_NATIVE_UINT64, 1, &n_off, w->n_groups ? w->groups : &none) ||
             h5_write_dataset(f, "choice_label", H5T_NATIVE_UINT32, 1, &n_lab, w->labels);
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0] && rc == 0; i++)
        rc = h5_write_attr(f, counts[i].name, H5T_NATIVE_UINT64, &counts[i].value, 1);
    if (w->kind == DATASET_PAIRS) {
        uint64_t n_pairs = w->n_docs / 2;
        if (!rc) rc = h5_write_attr(f, "n_pairs", H5T_NATIVE_UINT64, &n_pairs, 1);
        for (int r = 0; r < PAIR_DROP_REASONS && !rc; r++) {
            char name[64];
            snprintf(name, sizeof name, "n_dropped_%s", PAIR_DROP_NAMES[r]);
            rc = h5_write_attr(f, name, H5T_NATIVE_UINT64, &w->pair_drops[r], 1);
        }
    }
    return rc;
}

hid_t dataset_writer_file(const DatasetWriter *w) { return w->out.file; }

int dataset_writer_commit(DatasetWriter *w, PtError *e) {
    int rc = flush_tokens(w, e) || flush_offsets(w, e) ? -1 : 0;
    if (!rc && w->kind == DATASET_CHOICE && (w->n_groups ? w->groups[w->n_groups] : 0) != w->n_docs)
        rc = pt_fail(e, "%s: the last candidates belong to no group (dataset_writer_end_group)", w->out.path);
    if (!rc && w->kind == DATASET_PAIRS && w->n_docs % 2)
        rc = pt_fail(e, "%s: %" PRIu64 " documents: a pairs dataset holds two per pair", w->out.path, w->n_docs);
    if (!rc && write_attributes(w))
        rc = pt_fail(e, "%s: writing the attributes failed (disk full or not writable?)", w->out.path);
    H5Output out = w->out;
    writer_free(w);   // closes the datasets before the file
    if (rc) h5_output_abort(&out);
    return rc ? -1 : h5_output_commit(&out, e);
}

void dataset_writer_abort(DatasetWriter *w) {
    if (!w) return;
    H5Output out = w->out;
    writer_free(w);
    h5_output_abort(&out);
}

// ---------------------------------------------------------------- reader

static int read_header(hid_t f, Dataset *d, PtError *e) {
    const char *p = d->path;
    char *kind = NULL;
    uint64_t vocab;
    if (h5_read_str_attr(f, "kind", &kind, p, e)) return -1;
    int k = DATASET_PAIRS;
    while (k >= 0 && strcmp(kind, KIND_NAMES[k])) k--;
    if (k < 0) pt_fail(e, "%s: attribute 'kind' is '%s' (want cpt, sft, choice or pairs)", p, kind);
    free(kind);
    if (k < 0) return -1;
    d->kind = (DatasetKind)k;
    if (h5_read_str_attr(f, "tokenizer_hash", &d->tokenizer_hash, p, e) ||
        h5_read_attr(f, "vocab_size", H5T_NATIVE_UINT64, &vocab, 1, p, e) ||
        h5_read_attr(f, "n_tokens", H5T_NATIVE_UINT64, &d->n_tokens, 1, p, e) ||
        h5_read_attr(f, "n_docs", H5T_NATIVE_UINT64, &d->n_docs, 1, p, e))
        return -1;
    if (vocab == 0 || vocab > INT32_MAX) return pt_fail(e, "%s: attribute vocab_size %" PRIu64 " is out of range", p, vocab);
    d->vocab_size = (int)vocab;
    // Counts of what tokenize left out are informational; older writers may lack them.
    const char *names[4] = {"n_dropped", "n_truncated", "n_skipped", "n_duplicates"};
    uint64_t *counts[4] = {&d->n_dropped, &d->n_truncated, &d->n_skipped, &d->n_duplicates};
    for (int i = 0; i < 4; i++)
        if (h5_has_attr(f, names[i]) && h5_read_attr(f, names[i], H5T_NATIVE_UINT64, counts[i], 1, p, e)) return -1;
    if (d->kind != DATASET_PAIRS) return 0;
    if (h5_read_attr(f, "n_pairs", H5T_NATIVE_UINT64, &d->n_pairs, 1, p, e)) return -1;
    for (int r = 0; r < PAIR_DROP_REASONS; r++) {
        char name[64];
        snprintf(name, sizeof name, "n_dropped_%s", PAIR_DROP_NAMES[r]);
        if (h5_has_attr(f, name) && h5_read_attr(f, name, H5T_NATIVE_UINT64, &d->n_dropped_pair[r], 1, p, e))
            return -1;
    }
    return 0;
}

// The first masked token of document doc, as an offset in it (its length when none is).
static uint64_t first_masked(const Dataset *d, uint64_t doc) {
    uint64_t a = d->doc_offsets[doc], n = dataset_doc_len(d, doc), i = 0;
    while (i < n && !d->loss_mask[a + i]) i++;
    return i;
}

// Pairs: two documents a pair, each with a response, both after one prompt.
static int validate_pairs(const Dataset *d, PtError *e) {
    const char *p = d->path;
    if (d->n_docs % 2 || d->n_pairs != d->n_docs / 2)
        return pt_fail(e, "%s: %" PRIu64 " documents and n_pairs = %" PRIu64 " (want two documents a pair)", p,
                       d->n_docs, d->n_pairs);
    for (uint64_t g = 0; g < d->n_pairs; g++) {
        uint64_t c = 2 * g, r = c + 1, pc = first_masked(d, c), pr = first_masked(d, r);
        if (pc == dataset_doc_len(d, c) || pr == dataset_doc_len(d, r))
            return pt_fail(e, "%s: pair %" PRIu64 ": the %s (document %" PRIu64 ") has no masked token", p, g,
                           pc == dataset_doc_len(d, c) ? "chosen" : "rejected", pc == dataset_doc_len(d, c) ? c : r);
        uint64_t same = 0;
        while (same < pc && same < pr &&
               dataset_token(d, d->doc_offsets[c] + same) == dataset_token(d, d->doc_offsets[r] + same))
            same++;
        if (pc != pr || same < pc)
            return pt_fail(e, "%s: pair %" PRIu64 ": the prompts differ (%" PRIu64 " and %" PRIu64 " tokens before the "
                              "responses, the same up to token %" PRIu64 ")", p, g, pc, pr, same);
    }
    return 0;
}

static int validate(const Dataset *d, PtError *e) {
    const char *p = d->path;
    const uint64_t *off = d->doc_offsets;
    if (off[0] != 0) return pt_fail(e, "%s: /doc_offsets[0] is %" PRIu64 ", want 0", p, off[0]);
    for (uint64_t i = 0; i < d->n_docs; i++)
        if (off[i + 1] < off[i])
            return pt_fail(e, "%s: /doc_offsets is not monotonic at entry %" PRIu64 " (%" PRIu64 " after %" PRIu64 ")",
                           p, i + 1, off[i + 1], off[i]);
    if (off[d->n_docs] != d->n_tokens)
        return pt_fail(e, "%s: /doc_offsets ends at %" PRIu64 ", want n_tokens = %" PRIu64, p, off[d->n_docs],
                       d->n_tokens);
    for (uint64_t i = 0; i < d->n_tokens; i++)
        if (dataset_token(d, i) >= (uint32_t)d->vocab_size)
            return pt_fail(e, "%s: /tokens[%" PRIu64 "] = %u is not below vocab_size %d", p, i, dataset_token(d, i),
                           d->vocab_size);
    if (d->loss_mask)
        for (uint64_t i = 0; i < d->n_tokens; i++)
            if (d->loss_mask[i] > 1)
                return pt_fail(e, "%s: /loss_mask[%" PRIu64 "] = %u (want 0 or 1)", p, i, d->loss_mask[i]);
    const uint64_t *go = d->choice_offsets;
    if (go && (go[0] != 0 || go[d->n_groups] != d->n_docs))
        return pt_fail(e, "%s: /choice_offsets runs from %" PRIu64 " to %" PRIu64 ", want 0 to n_docs = %" PRIu64, p,
                       go[0], go[d->n_groups], d->n_docs);
    for (uint64_t g = 0; go && g < d->n_groups; g++)
        if (go[g + 1] < go[g] + 2 || d->choice_label[g] >= go[g + 1] - go[g])
            return pt_fail(e, "%s: choice group %" PRIu64 " has %" PRIu64 " candidates and label %u (want at least 2, "
                              "the label among them)", p, g, go[g + 1] < go[g] ? 0 : go[g + 1] - go[g], d->choice_label[g]);
    return d->kind == DATASET_PAIRS ? validate_pairs(d, e) : 0;
}

// Reads /tokens as stored: uint16 or uint32.
static int read_tokens(hid_t f, Dataset *d, PtError *e) {
    H5DatasetInfo info;
    if (h5_dataset_info(f, "tokens", &info, d->path, e)) return -1;
    if (strcmp(info.dtype, "uint16") && strcmp(info.dtype, "uint32"))
        return pt_fail(e, "%s: /tokens has the wrong dtype (%s, want uint16 or uint32)", d->path, info.dtype);
    d->token_bytes = strcmp(info.dtype, "uint16") ? 4 : 2;
    hsize_t n = d->n_tokens;
    return h5_read_dataset_alloc(f, "tokens", token_type(d->token_bytes), 1, &n, &d->tokens, d->path, e);
}

// Choice: the group offsets (their length gives n_groups) and labels.
static int read_choice_groups(hid_t f, Dataset *d, PtError *e) {
    H5DatasetInfo info;
    if (h5_dataset_info(f, "choice_offsets", &info, d->path, e)) return -1;
    if (info.rank != 1 || info.dims[0] < 1)
        return pt_fail(e, "%s: /choice_offsets must be 1-D with at least one entry", d->path);
    d->n_groups = info.dims[0] - 1;
    hsize_t n_off = d->n_groups + 1, n_lab = d->n_groups;
    void *off = NULL, *lab = NULL;
    int rc = h5_read_dataset_alloc(f, "choice_offsets", H5T_NATIVE_UINT64, 1, &n_off, &off, d->path, e);
    d->choice_offsets = off;
    if (!rc) rc = h5_read_dataset_alloc(f, "choice_label", H5T_NATIVE_UINT32, 1, &n_lab, &lab, d->path, e);
    d->choice_label = lab;
    return rc;
}

int dataset_open(Dataset *d, const char *path, PtError *e) {
    memset(d, 0, sizeof *d);
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    d->path = xstrdup(path);
    int rc = read_header(f, d, e) || read_tokens(f, d, e) ? -1 : 0;
    hsize_t n_offsets = d->n_docs + 1, n_mask = d->n_tokens;
    void *offsets = NULL, *mask = NULL;
    if (!rc) rc = h5_read_dataset_alloc(f, "doc_offsets", H5T_NATIVE_UINT64, 1, &n_offsets, &offsets, path, e);
    if (!rc && d->kind != DATASET_CPT)
        rc = h5_read_dataset_alloc(f, "loss_mask", H5T_NATIVE_UINT8, 1, &n_mask, &mask, path, e);
    d->doc_offsets = offsets;
    d->loss_mask = mask;
    if (!rc && d->kind == DATASET_CHOICE) rc = read_choice_groups(f, d, e);
    H5Fclose(f);
    if (!rc) rc = validate(d, e);
    if (rc) dataset_close(d);
    return rc;
}

void dataset_close(Dataset *d) {
    free(d->path);
    free(d->tokenizer_hash);
    free(d->tokens);
    free(d->doc_offsets);
    free(d->loss_mask);
    free(d->choice_offsets);
    free(d->choice_label);
    memset(d, 0, sizeof *d);
}

int dataset_check_tokenizer(const Dataset *d, const char *model_tokenizer_hash, PtError *e) {
    if (model_tokenizer_hash && !strcmp(d->tokenizer_hash, model_tokenizer_hash)) return 0;
    return pt_fail(e, "%s: tokenized with tokenizer %s but the model's tokenizer is %s (re-run pocket tokenize with "
                      "the model's tokenizer)", d->path, d->tokenizer_hash,
                   model_tokenizer_hash ? model_tokenizer_hash : "(none)");
}

int dataset_is_token_file(const char *path) {
    hid_t f = h5_open_read(path, NULL);
    if (f < 0) return 0;
    int yes = h5_exists(f, "tokens");
    H5Fclose(f);
    return yes;
}

// ---------------------------------------------------------------- tokenizer from a checkpoint

int dataset_load_tokenizer(const char *json_or_ckpt, Tokenizer **out, PtError *e) {
    const char *path = json_or_ckpt, *name = "/tokenizer/tokenizer.json";
    if (!path_exists(path)) return pt_fail(e, "%s: no such file", path);
    if (!h5_is_file(path)) return tokenizer_load_file(out, path, e);
    hid_t f = h5_open_read(path, e);
    if (f < 0) return -1;
    // The checkpoint stores tokenizer.json as bytes; h5_read_bytes takes a string too.
    char *json = NULL;
    size_t len = 0;
    int rc = h5_exists(f, name)
                 ? h5_read_bytes(f, name, &json, &len, path, e)
                 : pt_fail(e, "%s: no %s in this checkpoint (pass --tokenizer tokenizer.json)", path, name);
    H5Fclose(f);
    if (rc) return -1;
    size_t n = strlen(path) + 32;
    char *src = xmalloc(n, "name");
    snprintf(src, n, "%s:%s", path, name);
    rc = tokenizer_load(out, json, len, src, e);
    free(src);
    free(json);
    return rc;
}

// The chat template that goes with a --tokenizer argument: a checkpoint's
// /tokenizer/tokenizer_config.json, or the tokenizer_config.json beside a
// tokenizer.json file; the bundled template when there is none.
int dataset_load_chat_template(const char *json_or_ckpt, ChatTemplate **out, PtError *e) {
    const char *path = json_or_ckpt, *name = "/tokenizer/tokenizer_config.json";
    char *cfg = NULL, *src;
    size_t len = 0;
    if (h5_is_file(path)) {
        hid_t f = h5_open_read(path, e);
        if (f < 0) return -1;
        int rc = h5_exists(f, name) ? h5_read_bytes(f, name, &cfg, &len, path, e) : 0;
        H5Fclose(f);
        if (rc) return -1;
        size_t n = strlen(path) + 40;
        src = xmalloc(n, "name");
        snprintf(src, n, "%s:%s", path, name);
    } else {
        const char *slash = strrchr(path, '/');
        size_t dir = slash ? (size_t)(slash - path + 1) : 0;
        src = xmalloc(dir + 32, "name");
        memcpy(src, path, dir);
        strcpy(src + dir, "tokenizer_config.json");
        uint8_t *data;
        if (path_exists(src)) {
            if (read_whole_file(src, &data, &len, e)) {
                free(src);
                return -1;
            }
            cfg = (char *)data;
        }
    }
    int rc = chat_template_load(out, cfg, len, src, e);
    free(cfg);
    free(src);
    return rc;
}

// ---------------------------------------------------------------- inspect

enum { SAMPLE_TOKENS = 256 };

// Prints tokens [a, b) of the sample: text when a tokenizer is given, ids otherwise.
static void print_span(FILE *out, const Dataset *d, const Tokenizer *tok, uint64_t a, uint64_t b) {
    if (a >= b) return;
    if (tok) {
        int *ids = xmalloc((b - a) * sizeof(int), "sample");
        for (uint64_t i = a; i < b; i++) ids[i - a] = (int)dataset_token(d, i);
        char *text = tokenizer_decode(tok, ids, b - a, 0);
        fputs(text, out);
        free(text);
        free(ids);
    } else {
        for (uint64_t i = a; i < b; i++) fprintf(out, "%s%u", i > a ? " " : "", dataset_token(d, i));
    }
}

// One part of the sample pair: tokens [a, b) of the dataset, at most SAMPLE_TOKENS of them.
static void print_part(FILE *out, const Dataset *d, const Tokenizer *tok, const char *name, uint64_t a, uint64_t b) {
    int cut = b - a > SAMPLE_TOKENS;
    fprintf(out, "    %-9s (%" PRIu64 " tokens", name, b - a);
    if (cut) fprintf(out, ", the first %d", SAMPLE_TOKENS);
    fputs("): ", out);
    print_span(out, d, tok, a, cut ? a + SAMPLE_TOKENS : b);
    fputc('\n', out);
}

// Pairs: the counts by reason and pair 0 as prompt, chosen and rejected.
static void inspect_pairs(FILE *out, const Dataset *d, const Tokenizer *tok) {
    fprintf(out, "  pairs           %" PRIu64 " kept (documents 2g = prompt + chosen, 2g+1 = prompt + rejected), "
                 "%" PRIu64 " truncated\n", d->n_pairs, d->n_truncated);
    fprintf(out, "  left out        %" PRIu64 " dropped (", d->n_dropped);
    for (int r = 0; r < PAIR_DROP_REASONS; r++)
        fprintf(out, "%s%s %" PRIu64, r ? ", " : "", PAIR_DROP_NAMES[r], d->n_dropped_pair[r]);
    fprintf(out, "), %" PRIu64 " skipped (bad)\n", d->n_skipped);
    if (!d->n_pairs) return;
    uint64_t c = d->doc_offsets[0], r = d->doc_offsets[1], n_prompt = first_masked(d, 0);
    fprintf(out, "  sample (pair 0):\n");
    print_part(out, d, tok, "prompt", c, c + n_prompt);
    print_part(out, d, tok, "chosen", c + n_prompt, d->doc_offsets[1]);
    print_part(out, d, tok, "rejected", r + n_prompt, d->doc_offsets[2]);
}

int dataset_inspect(const char *path, const Tokenizer *tok, FILE *out, PtError *e) {
    Dataset d;
    if (dataset_open(&d, path, e)) return -1;
    uint64_t min_len = UINT64_MAX, max_len = 0, masked = 0;
    for (uint64_t i = 0; i < d.n_docs; i++) {
        uint64_t n = dataset_doc_len(&d, i);
        if (n < min_len) min_len = n;
        if (n > max_len) max_len = n;
    }
    if (d.loss_mask)
        for (uint64_t i = 0; i < d.n_tokens; i++) masked += d.loss_mask[i];
    fprintf(out, "%s: token dataset (%s)\n", path, dataset_kind_name(d.kind));
    fprintf(out, "  tokenizer_hash  %s\n", d.tokenizer_hash);
    if (tok && strcmp(tokenizer_hash(tok), d.tokenizer_hash))
        fprintf(out, "  WARNING         the given tokenizer's hash is %s: the sample below is decoded wrongly\n",
                tokenizer_hash(tok));
    fprintf(out, "  vocab_size      %d (tokens stored as uint%d)\n", d.vocab_size, d.token_bytes * 8);
    fprintf(out, "  documents       %" PRIu64 "\n", d.n_docs);
    fprintf(out, "  tokens          %" PRIu64, d.n_tokens);
    if (d.n_docs)
        fprintf(out, " (per document: mean %.1f, min %" PRIu64 ", max %" PRIu64 ")", (double)d.n_tokens / d.n_docs,
                min_len, max_len);
    fputc('\n', out);
    if (d.loss_mask)
        fprintf(out, "  loss mask       %" PRIu64 " tokens trained (%.1f%%)\n", masked,
                d.n_tokens ? 100.0 * masked / d.n_tokens : 0.0);
    if (d.kind == DATASET_CHOICE)
        fprintf(out, "  choice groups   %" PRIu64 " (a document per candidate, the prompt repeated)\n", d.n_groups);
    if (d.kind == DATASET_PAIRS) {
        inspect_pairs(out, &d, tok);
        dataset_close(&d);
        return 0;
    }
    fprintf(out, "  left out        %" PRIu64 " dropped (too long), %" PRIu64 " truncated, %" PRIu64 " skipped (bad), %"
                 PRIu64 " duplicates\n", d.n_dropped, d.n_truncated, d.n_skipped, d.n_duplicates);
    if (d.n_docs) {
        uint64_t a = d.doc_offsets[0], b = d.doc_offsets[1];
        int cut = b - a > SAMPLE_TOKENS;
        if (cut) b = a + SAMPLE_TOKENS;
        fprintf(out, "  sample (document 0, %" PRIu64 " tokens", dataset_doc_len(&d, 0));
        if (cut) fprintf(out, ", the first %d", SAMPLE_TOKENS);
        fprintf(out, "%s):\n", d.loss_mask ? "; [[ ]] marks the loss mask" : "");
        // Contiguous runs of equal mask value, the trained runs in [[ ]].
        uint64_t i = a;
        while (i < b) {
            int m = d.loss_mask ? d.loss_mask[i] : 0;
            uint64_t j = i;
            while (j < b && (d.loss_mask ? d.loss_mask[j] : 0) == m) j++;
            if (m) fputs("[[", out);
            else if (!tok && i > a) fputc(' ', out);
            print_span(out, &d, tok, i, j);
            if (m) fputs("]]", out);
            else if (!tok && j < b) fputc(' ', out);
            i = j;
        }
        fputc('\n', out);
    }
    dataset_close(&d);
    return 0;
}
