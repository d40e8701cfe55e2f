// pocket tokenize: corpus files or chat JSONL -> HDF5 token dataset.
//
// A corpus goes through tokenize_corpus.c. Chat and choice records are read
// in blocks on the main thread, tokenized in parallel (one record per task)
// and appended to the dataset in input order, so the output does not depend
// on the thread count.
#include <inttypes.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "../data/choice.h"
#include "../data/corpus.h"
#include "../data/dataset.h"
#include "../data/sft.h"
#include "args.h"
#include "commands.h"
#include "tokenize_corpus.h"
#include "tokenize_pairs.h"
#include "tokenize_report.h"

enum { BLOCK_RECORDS = 1024, BLOCK_BYTES = 8 << 20 };

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket tokenize --tokenizer tokenizer.json|CKPT.h5 [--chat|--choice|--pairs [--chat-template FILE]]\n"
            "                       [--max-len N] [--truncate] [--format F] [--prompt-column C]\n"
            "                       [--completion-column C] [--system-column C] [--skip-bad] [--dedup]\n"
            "                       [--threads N] INPUT... --out DATA.h5\n"
            "       pocket tokenize --tokenizer tokenizer.json|CKPT.h5 --print-ids FILE\n\n"
            "Tokenizes text into an HDF5 token dataset for `pocket train` and `pocket eval`.\n\n"
            "INPUT is a .txt file (one document), a .jsonl file (one document per line, its \"text\" field),\n"
            "either of them gzip-compressed (.txt.gz, .jsonl.gz), or a directory of such files (recursive,\n"
            "sorted by name). Documents are separated by the <|endoftext|> token.\n\n"
            "  --tokenizer  tokenizer.json, or a checkpoint holding one (/tokenizer/tokenizer.json)\n"
            "  --out        dataset to write (HDF5; written to a temporary name and renamed at the end)\n"
            "  --chat       inputs are SFT data, each file in one of these formats (found from each JSON line's\n"
            "               keys, or from the name: .csv, .tsv, also .gz):\n"
            "                 openai    {\"messages\": [{\"role\", \"content\"}, ...]} with roles system\n"
            "                           (first only), user, assistant; or {\"prompt\", \"completion\"}\n"
            "                           (+ \"system\")\n"
            "                 sharegpt  {\"conversations\": [{\"from\", \"value\"}, ...]} (+ \"system\"); from:\n"
            "                           human or user, gpt or assistant, system; tool turns are refused\n"
            "                 alpaca    {\"instruction\", \"input\", \"output\"} (+ \"system\", \"history\");\n"
            "                           the user turn is instruction + \"\\n\" + input (an empty one left out)\n"
            "                 csv, tsv  a header row, then rows with prompt and completion columns (RFC 4180\n"
            "                           quoting; a \"system\" column is used when present)\n"
            "               Each is rendered with the model's chat template: the checkpoint's tokenizer_config.json\n"
            "               chat_template (or the tokenizer_config.json beside a tokenizer.json), else the\n"
            "               bundled Qwen3-style one. The loss mask covers the assistant replies (and the\n"
            "               reasoning the template keeps) and the end-of-turn token after each.\n"
            "  --choice     inputs are choice JSONL for the decision head ([train] mode = choice):\n"
            "               {\"prompt\": \"...\" (or \"messages\": [...]), \"candidates\": [\"...\", ...], \"label\": INDEX|TEXT}\n"
            "               (optionally \"system\"). The prompt is rendered with the chat template as\n"
            "               `pocket generate --chat` renders it; each candidate follows it, ended by <|im_end|>.\n"
            "               One document per (prompt + candidate), the mask on the candidate's tokens.\n"
            "               Errors: a label outside the candidates, fewer than 2, empty or duplicated ones.\n"
            "  --pairs      inputs are preference pairs for [train] mode = dpo, one JSON object a line, as TRL's\n"
            "               DPOTrainer reads them: {\"prompt\", \"chosen\", \"rejected\"} as plain strings (each response\n"
            "               ended by the EOS token) or as lists of messages (the chat template applied), or\n"
            "               {\"chosen\", \"rejected\"} alone (the prompt: what both start with). One document per\n"
            "               (prompt + response), the mask on the response; pairs with chosen = rejected, prompts\n"
            "               that differ, or too long for --max-len are dropped and counted by reason\n"
            "  --chat-template FILE  (--chat, --choice, --pairs) render with this Jinja template instead\n"
            "  --format F   (--chat) read every input as F: openai, sharegpt, alpaca (JSON lines), csv or tsv\n"
            "               (a table whatever the file's name) instead of finding it\n"
            "  --prompt-column C, --completion-column C  (tables) the columns' names (default prompt, completion)\n"
            "  --system-column C  (tables) a column of system prompts (default: \"system\" when the header has it)\n"
            "  --max-len N  (--chat) examples longer than N tokens are dropped (default: no limit);\n"
            "               (--choice) groups whose candidates hold more than N tokens together;\n"
            "               (--pairs) pairs with a (prompt + response) longer than N\n"
            "  --truncate   (--chat) cut examples longer than --max-len instead of dropping them;\n"
            "               (--pairs) cut the responses (a pair whose prompt alone fills N is dropped)\n"
            "  --skip-bad   skip and count bad records (malformed JSON or CSV, bad roles, missing fields or\n"
            "               columns, another format than the file's, invalid UTF-8) instead of stopping at the\n"
            "               first one; the count is printed and stored in the dataset (skipped)\n"
            "  --dedup      (corpus) drop documents whose text repeats an earlier one exactly (by content\n"
            "               hash); the count is printed and stored in the dataset (duplicates)\n"
            "  --threads N  worker threads (default: OMP_NUM_THREADS or all cores)\n"
            "  --print-ids FILE  print the token ids of FILE's whole text on one line; writes no dataset\n"
            "  --per-line   (--print-ids) one line of ids per line of FILE (each tokenized alone)\n");
}

typedef struct {
    const char *tokenizer, *out, *print_ids, *chat_template;
    ChatTemplate *tmpl;
    SftFormat format;
    SftColumns cols;
    int chat, choice, pairs, truncate, skip_bad, dedup, threads, per_line;
    size_t max_len;
    char **inputs;
    int n_inputs;
} Args;

// 0: run; 1: done (help printed); -1: usage error (message printed).
static int parse_args(int argc, char **argv, Args *a) {
    memset(a, 0, sizeof *a);
    a->inputs = xcalloc((size_t)argc, sizeof(char *), "inputs");
    const char *v;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 1; }
        else if ((v = arg_value(argc, argv, &i, "--tokenizer"))) a->tokenizer = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) a->out = v;
        else if ((v = arg_value(argc, argv, &i, "--print-ids"))) a->print_ids = v;
        else if ((v = arg_value(argc, argv, &i, "--chat-template"))) a->chat_template = v;
        else if ((v = arg_value(argc, argv, &i, "--prompt-column"))) a->cols.prompt = v;
        else if ((v = arg_value(argc, argv, &i, "--completion-column"))) a->cols.completion = v;
        else if ((v = arg_value(argc, argv, &i, "--system-column"))) a->cols.system = v;
        else if ((v = arg_value(argc, argv, &i, "--format"))) {
            if (sft_format_parse(v, &a->format)) {
                fprintf(stderr, "pocket tokenize: --format '%s' (want openai, sharegpt, alpaca, csv or tsv)\n", v);
                return -1;
            }
        }
        else if (!strcmp(argv[i], "--chat")) a->chat = 1;
        else if (!strcmp(argv[i], "--choice")) a->choice = 1;
        else if (!strcmp(argv[i], "--pairs")) a->pairs = 1;
        else if (!strcmp(argv[i], "--truncate")) a->truncate = 1;
        else if (!strcmp(argv[i], "--skip-bad")) a->skip_bad = 1;
        else if (!strcmp(argv[i], "--dedup")) a->dedup = 1;
        else if (!strcmp(argv[i], "--per-line")) a->per_line = 1;
        else if ((v = arg_value(argc, argv, &i, "--max-len"))) {
            long n;
            if (arg_long("--max-len", v, 1, 1L << 30, &n)) return -1;
            a->max_len = (size_t)n;
        } else if ((v = arg_value(argc, argv, &i, "--threads"))) {
            if (arg_threads("--threads", v, &a->threads)) return -1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            arg_usage("unknown argument '%s' (see --help)", argv[i]);
            return -1;
        } else a->inputs[a->n_inputs++] = argv[i];
    }
    const char *problem = NULL;
    if (!a->tokenizer) problem = "--tokenizer is required";
    else if (a->print_ids && (a->out || a->n_inputs)) problem = "--print-ids takes one FILE and writes no dataset";
    else if (!a->print_ids && !a->out) problem = "--out is required";
    else if (!a->print_ids && !a->n_inputs) problem = "no INPUT given";
    else if (a->chat + a->choice + a->pairs > 1) problem = "--chat, --choice and --pairs exclude each other";
    else if (a->dedup && (a->chat || a->choice || a->pairs))
        problem = "--dedup applies to a corpus (not --chat, --choice or --pairs)";
    else if (a->choice && a->truncate) problem = "--truncate applies to --chat only (a choice group is kept whole)";
    else if (!a->chat && !a->choice && !a->pairs && (a->max_len || a->truncate))
        problem = "--max-len and --truncate apply to --chat and --pairs (and --max-len to --choice) only";
    else if (a->truncate && !a->max_len) problem = "--truncate needs --max-len";
    else if (a->chat_template && !a->chat && !a->choice && !a->pairs)
        problem = "--chat-template applies to --chat, --choice and --pairs only";
    else if ((a->format || a->cols.prompt || a->cols.completion || a->cols.system) && !a->chat)
        problem = "--format and the --*-column flags apply to --chat only";
    else if ((a->cols.prompt || a->cols.completion || a->cols.system) && a->format && a->format < SFT_FORMAT_CSV)
        problem = "the --*-column flags name a table's columns, and --format names JSON lines";
    if (problem) {
        fprintf(stderr, "pocket tokenize: %s (see --help)\n", problem);
        return -1;
    }
    return 0;
}

static int print_ids(const Tokenizer *tok, const char *path, int per_line) {
    uint8_t *data;
    size_t len, n = 0, cap = 0;
    int *ids = NULL;
    PtError e, te;
    if (read_whole_file(path, &data, &len, &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        return 1;
    }
    int rc = 0;
    // One text, or (--per-line) each "\n"-ended line on its own, a line of ids each.
    for (size_t at = 0, line = 1; at < len && !rc; line++) {
        const char *nl = per_line ? memchr(data + at, '\n', len - at) : NULL;
        size_t end = nl ? (size_t)((const uint8_t *)nl - data) : len;
        n = 0;
        rc = tokenizer_encode(tok, (const char *)data + at, end - at, &ids, &n, &cap, &te);
        if (rc) fprintf(stderr, "pocket tokenize: %s%s%zu: %s\n", path, per_line ? ":" : "", per_line ? line : 0, te.msg);
        for (size_t i = 0; i < n && !rc; i++) printf(i ? " %d" : "%d", ids[i]);
        if (!rc) putchar('\n');
        at = nl ? end + 1 : len;
    }
    free(ids);
    free(data);
    return rc ? 1 : 0;
}

// One record and what its worker made of it.
typedef enum { JOB_OK, JOB_DROPPED, JOB_BAD, JOB_FATAL } JobStatus;
typedef struct {
    CorpusRecord rec;
    SftExample ex;         // --chat
    ChoiceExample ch;      // --choice
    JobStatus status;
    SftFormat format;      // the record's SFT format, as found
    int truncated;
    PtError err;
} Job;

static void run_sft_job(const Tokenizer *tok, const Args *a, Job *j) {
    char where[1100];
    corpus_where(&j->rec, where, sizeof where);
    if (j->rec.format == CORPUS_TXT) {
        pt_fail(&j->err, "%s: --chat reads chat .jsonl files (or .csv, .tsv tables), not .txt", where);
        j->status = JOB_FATAL;
        return;
    }
    // A token across a reply's edge is a bad record too: --skip-bad skips and
    // reports it (when every line fails, nothing is written).
    if (sft_encode_record(tok, a->tmpl, &j->rec, a->format, &a->cols, where, &j->ex, &j->format, &j->err)) {
        j->status = JOB_BAD;
        return;
    }
    SftFit fit = sft_fit(&j->ex, a->max_len, a->truncate);
    j->status = fit == SFT_DROPPED ? JOB_DROPPED : JOB_OK;
    j->truncated = fit == SFT_TRUNCATED;
}

// A choice group: each candidate becomes (prompt + candidate), the mask on the
// candidate; --max-len bounds the group's tokens (a group trains in one row).
static void run_choice_job(const Tokenizer *tok, const Args *a, Job *j) {
    char where[1100];
    corpus_where(&j->rec, where, sizeof where);
    if (j->rec.format != CORPUS_JSONL) {
        pt_fail(&j->err, "%s: --choice reads choice .jsonl files, not .txt", where);
        j->status = JOB_FATAL;
        return;
    }
    if (choice_encode_line(tok, a->tmpl, j->rec.data, j->rec.len, where, &j->ch, &j->err)) {
        j->status = JOB_BAD;
        return;
    }
    size_t total = 0;
    for (int k = 0; k < j->ch.n_cand; k++) total += j->ch.n_prompt + j->ch.cand_len[k];
    j->status = a->max_len && total > a->max_len ? JOB_DROPPED : JOB_OK;
}

static int add_choice_group(DatasetWriter *w, const ChoiceExample *ch, PtError *e) {
    size_t longest = 0;
    for (int k = 0; k < ch->n_cand; k++) longest = ch->cand_len[k] > longest ? ch->cand_len[k] : longest;
    int *ids = xmalloc((ch->n_prompt + longest) * sizeof(int), "choice document");
    uint8_t *mask = xcalloc(ch->n_prompt + longest, 1, "choice mask");
    memcpy(ids, ch->prompt, ch->n_prompt * sizeof(int));
    int rc = 0;
    for (int k = 0; k < ch->n_cand && !rc; k++) {
        memcpy(ids + ch->n_prompt, ch->cand[k], ch->cand_len[k] * sizeof(int));
        memset(mask + ch->n_prompt, 1, ch->cand_len[k]);
        rc = dataset_writer_add(w, ids, mask, ch->n_prompt + ch->cand_len[k], e);
    }
    if (!rc) rc = dataset_writer_end_group(w, (uint32_t)ch->label, e);
    free(ids);
    free(mask);
    return rc;
}

// Chat (--chat) or choice (--choice) records.
static int tokenize_inputs(const Args *a, const Tokenizer *tok) {
    PtError e;
    Corpus *corpus;
    char table = a->format == SFT_FORMAT_CSV ? ',' : a->format == SFT_FORMAT_TSV ? '\t' : 0;
    if (a->chat ? corpus_open_chat(&corpus, a->inputs, a->n_inputs, table, &e)
                : corpus_open(&corpus, a->inputs, a->n_inputs, &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        return 1;
    }
    DatasetWriter *w;
    DatasetKind kind = a->chat ? DATASET_SFT : DATASET_CHOICE;
    if (dataset_writer_open(&w, a->out, kind, tokenizer_vocab_size(tok),
                            tokenizer_hash(tok), &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        corpus_close(corpus);
        return 1;
    }
    int threads = a->threads ? a->threads : omp_get_max_threads(), rc = 0, more = 1;
    int read_failed = 0;
    PtError read_err;
    TokenizeProgress progress;
    tokenize_progress_start(&progress);
    TokenizeCounts n = {0};
    SftFormatGuard guard = {0};
    Job *jobs = xcalloc(BLOCK_RECORDS, sizeof *jobs, "jobs");
    while (more && !rc) {
        int n_jobs = 0;
        size_t bytes = 0;
        while (n_jobs < BLOCK_RECORDS && bytes < BLOCK_BYTES) {
            int got = corpus_next(corpus, &jobs[n_jobs].rec, &read_err);
            if (got < 0) { read_failed = 1; more = 0; break; }
            if (got == 0) { more = 0; break; }
            bytes += jobs[n_jobs++].rec.len;
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int i = 0; i < n_jobs; i++) {
            if (a->chat) run_sft_job(tok, a, &jobs[i]);
            else run_choice_job(tok, a, &jobs[i]);
        }
        for (int i = 0; i < n_jobs; i++) {
            Job *j = &jobs[i];
            if (a->chat && j->status != JOB_FATAL && sft_format_guard(&guard, &j->rec, j->format, &j->err))
                j->status = JOB_BAD;   // one format per file
            if (!rc) {
                if (j->status == JOB_FATAL || (j->status == JOB_BAD && !a->skip_bad)) {
                    e = j->err;
                    rc = 1;
                } else if (j->status == JOB_BAD) {
                    tokenize_skip(&n, &j->err, &progress);
                } else if (j->status == JOB_DROPPED) n.dropped++;
                else {
                    if (a->choice ? add_choice_group(w, &j->ch, &e)
                                  : dataset_writer_add(w, j->ex.ids, j->ex.mask, j->ex.n, &e))
                        rc = 1;
                    n.truncated += (uint64_t)j->truncated;
                }
            }
            free(j->rec.data);
            j->rec.data = NULL;
            j->ex.n = 0;
            j->truncated = 0;
            j->format = SFT_FORMAT_AUTO;
        }
        if (!rc && read_failed) {   // after the records read before it, in input order
            e = read_err;
            rc = 1;
        }
        if (!rc)
            tokenize_progress(&progress, corpus, w, corpus_bytes_read(corpus), corpus_input_done(corpus), 0);
    }
    for (int i = 0; i < BLOCK_RECORDS; i++) {
        sft_example_free(&jobs[i].ex);
        choice_example_free(&jobs[i].ch);
    }
    free(jobs);
    uint64_t tokens = dataset_writer_tokens(w), docs = dataset_writer_docs(w);
    tokenize_progress(&progress, corpus, w, corpus_bytes_read(corpus), corpus_input_done(corpus), 1);
    if (!rc) rc = tokenize_finish(&n, docs, &e) ? 1 : 0;
    double mb = corpus_bytes_read(corpus) / 1e6;
    int n_files = corpus_n_files(corpus);
    corpus_close(corpus);
    if (rc) {
        dataset_writer_abort(w);
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        return 1;
    }
    dataset_writer_set_counts(w, n.dropped, n.truncated, n.skipped);
    if (dataset_writer_commit(w, &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        return 1;
    }
    tokenize_summary(a->out, a->chat ? "example" : "(prompt + candidate) sequences",
                     a->chat ? "examples" : "(prompt + candidate) sequences", docs, tokens, n_files, mb,
                     now_seconds() - progress.t0, threads, &n, 0);
    return 0;
}

static int load_template(Args *a, PtError *e) {
    if (!a->chat_template) return dataset_load_chat_template(a->tokenizer, &a->tmpl, e);
    uint8_t *text;
    size_t len;
    if (read_whole_file(a->chat_template, &text, &len, e)) return -1;
    ChatTemplate *from_tok;   // its bos/eos strings are the template's variables
    int rc = dataset_load_chat_template(a->tokenizer, &from_tok, e);
    if (rc == 0) {
        rc = chat_template_with_text(&a->tmpl, from_tok, (const char *)text, len, a->chat_template, e);
        chat_template_free(from_tok);
    }
    free(text);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    Args a;
    int parsed = parse_args(argc, argv, &a);
    if (!a.cols.prompt) a.cols.prompt = "prompt";
    if (!a.cols.completion) a.cols.completion = "completion";
    if (parsed) {
        free(a.inputs);
        return parsed > 0 ? 0 : ARGS_USAGE;
    }
    PtError e;
    Tokenizer *tok;
    if (dataset_load_tokenizer(a.tokenizer, &tok, &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        free(a.inputs);
        return 1;
    }
    if ((a.chat || a.choice || a.pairs) && load_template(&a, &e)) {
        fprintf(stderr, "pocket tokenize: %s\n", e.msg);
        tokenizer_free(tok);
        free(a.inputs);
        return 1;
    }
    PairsOptions pairs = {a.inputs, a.n_inputs, a.out, a.max_len, a.truncate, a.skip_bad, a.threads};
    CorpusArgs corpus = {a.tokenizer, a.out, a.inputs, a.n_inputs, a.threads, a.skip_bad, a.dedup};
    int rc = a.print_ids          ? print_ids(tok, a.print_ids, a.per_line)
             : a.pairs            ? tokenize_pairs(&pairs, tok, a.tmpl)
             : a.chat || a.choice ? tokenize_inputs(&a, tok)
                                  : tokenize_corpus(&corpus, tok);
    chat_template_free(a.tmpl);
    tokenizer_free(tok);
    free(a.inputs);
    return rc;
}
