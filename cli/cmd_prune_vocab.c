// pocket prune-vocab: a checkpoint with a smaller vocabulary. The tokens are
// counted on a corpus with the checkpoint's own tokenizer, the kept set is
// chosen (data/vocab_prune.h), the tokenizer files are rewritten, and the
// vocabulary rows of the weights (model/bundle.h) and of the int4 state
// (qat/qat.h) follow the kept tokens. The algorithm and why it is correct:
// docs/prune-vocab.md.
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "../data/vocab_stats.h"
#include "../formats/checkpoint.h"
#include "args.h"
#include "commands.h"

enum { DEFAULT_ROUND = 64, DEFAULT_HOLDOUT = 20 };

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket prune-vocab --ckpt IN.h5 --corpus INPUT... --keep N --out OUT.h5\n"
            "                          [--keep-file FILE] [--round M] [--report [--heldout INPUT...]] [--threads N]\n\n"
            "Writes OUT.h5: IN.h5 with a vocabulary of N tokens, chosen by their use on the corpus. The\n"
            "kept set holds every added (special) token, the 256 byte tokens (every text still encodes),\n"
            "the tokens the config names (bos, eos, pad; the decision head's row when it is a token),\n"
            "the tokens the chat template renders around messages, the --keep-file tokens, and then\n"
            "the most used others; it is closed under the merges (a kept token keeps the inputs of the\n"
            "merges that make it). The new tokenizer.json holds the kept tokens renumbered densely in\n"
            "their old order and the merges among them; the embedding and lm_head rows, the config's\n"
            "special ids, tokenizer_config.json's added_tokens_decoder and the int4 state (/qat) follow.\n"
            "A text whose old tokens are all kept encodes to the same tokens under their new ids.\n"
            "OUT.h5 holds weights only (no optimizer state): train it as a new run's [model] init, on\n"
            "data tokenized with it.\n\n"
            "  --ckpt       the checkpoint to prune (it must hold its tokenizer.json)\n"
            "  --corpus     text to count tokens on: .txt, .jsonl (\"text\" per line), .gz of them, or\n"
            "               directories of them (as `pocket tokenize` reads them); all the following\n"
            "               arguments up to the next option\n"
            "  --keep N     tokens in the new tokenizer, added tokens included\n"
            "  --out        the checkpoint to write (to a temporary name, renamed at the end)\n"
            "  --keep-file  tokens that must stay, one per line as tokenizer.json spells them (\"Ġthe\"\n"
            "               for \" the\") or an added token's text\n"
            "  --round M    vocab_size rounded up to a multiple of M (default %d; rows past the tokens\n"
            "               are zero)\n"
            "  --report     on held-out text: tokens per character per script (Han, Latin, other)\n"
            "               before and after, and the share of texts whose token sequence is unchanged\n"
            "               (mapped to the new ids), as a Markdown table on stdout. Without --out only\n"
            "               the report is made\n"
            "  --heldout    (--report) held-out text, read as --corpus is; default: every %dth\n"
            "               document of the corpus, which then is not counted\n"
            "  --threads N  encoding threads (default: OMP_NUM_THREADS or all cores)\n",
            DEFAULT_ROUND, DEFAULT_HOLDOUT);
}

typedef struct {
    const char *ckpt, *out, *keep_file;
    char **corpus, **heldout;
    int n_corpus, n_heldout, keep, round, report, threads;
} Args;

// 0: run; 1: help printed; -1: usage error (printed).
static int parse_args(int argc, char **argv, Args *a) {
    memset(a, 0, sizeof *a);
    a->round = DEFAULT_ROUND;
    a->corpus = xcalloc((size_t)argc, sizeof(char *), "arguments");
    a->heldout = xcalloc((size_t)argc, sizeof(char *), "arguments");
    char **list = NULL;   // the file list the last --corpus or --heldout opened
    int *list_n = NULL;
    const char *v;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(stdout), 1;
        if (argv[i][0] != '-' || !argv[i][1]) {
            if (!list) {
                fprintf(stderr, "pocket prune-vocab: '%s' follows no --corpus or --heldout (see --help)\n", argv[i]);
                return -1;
            }
            list[(*list_n)++] = argv[i];
            continue;
        }
        list = NULL;
        if (!strcmp(argv[i], "--corpus")) list = a->corpus, list_n = &a->n_corpus;
        else if (!strcmp(argv[i], "--heldout")) list = a->heldout, list_n = &a->n_heldout;
        else if (!strcmp(argv[i], "--report")) a->report = 1;
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) a->ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) a->out = v;
        else if ((v = arg_value(argc, argv, &i, "--keep-file"))) a->keep_file = v;
        else if ((v = arg_value(argc, argv, &i, "--keep"))) { if (arg_int("--keep", v, 1, 1 << 24, &a->keep)) return -1; }
        else if ((v = arg_value(argc, argv, &i, "--round"))) { if (arg_int("--round", v, 1, 1 << 24, &a->round)) return -1; }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (arg_threads("--threads", v, &a->threads)) return -1; }
        else {
            arg_usage("unknown argument '%s' (see --help)", argv[i]);
            return -1;
        }
    }
    const char *problem = !a->ckpt ? "--ckpt is required"
                          : !a->n_corpus ? "--corpus needs at least one INPUT"
                          : !a->keep ? "--keep N is required"
                          : !a->out && !a->report ? "--out is required (or --report alone)"
                          : a->n_heldout && !a->report ? "--heldout goes with --report"
                          : NULL;
    if (problem) {
        fprintf(stderr, "pocket prune-vocab: %s (see --help)\n", problem);
        return -1;
    }
    return 0;
}

// ---- what stays whatever the counts ----------------------------------------------

// The config's ids that name tokens (bos, eos, pad, the decision head's row
// when it is a token's), the chat template's tokens and the --keep-file's.
static int forced_tokens(const Args *a, const ModelBundle *b, const Tokenizer *tok, int **ids, int *n, PtError *e) {
    const int named[4] = {b->cfg.bos_id, b->cfg.eos_id, b->cfg.pad_id, b->cfg.choice_id > 0 ? b->cfg.choice_id : -1};
    *ids = xmalloc(sizeof named, "forced tokens");
    *n = 0;
    for (int k = 0; k < 4; k++)
        if (tokenizer_is_token(tok, named[k])) (*ids)[(*n)++] = named[k];
    if (vocab_template_tokens(tok, b->tokenizer_config_json, b->tokenizer_config_json_len, ids, n, e)) return -1;
    return a->keep_file ? vocab_keep_file(tok, a->keep_file, ids, n, e) : 0;
}

// ---- the pruned checkpoint ----------------------------------------------------------

// An id of the config under the plan: a kept token's new id; -1 (with a note)
// for an id that names no token.
static int map_id(const VocabPlan *p, const Tokenizer *tok, int id, const char *what) {
    if (id < 0) return id;
    if (tokenizer_is_token(tok, id)) return p->new_of_old[id];
    fprintf(stderr, "pocket prune-vocab: note: the config's %s %d names no token of the tokenizer; it is dropped\n",
            what, id);
    return -1;
}

// The new bundle: the kept rows (and a decision head that is no token's row
// after them), zero rows up to the rounded vocab_size, the ids mapped.
static void pruned_bundle(const ModelBundle *b, const Tokenizer *tok, const VocabPlan *p, int round, int **rows_out,
                          ModelBundle *nb) {
    const int head = b->cfg.choice_id > 0 && !tokenizer_is_token(tok, b->cfg.choice_id);
    const int used = p->n_kept + head, V = (used + round - 1) / round * round;
    int *rows = xmalloc((size_t)V * sizeof *rows, "vocabulary rows");
    for (int r = 0; r < V; r++) rows[r] = r < p->n_kept ? p->old_of_new[r] : -1;
    if (head) rows[p->n_kept] = b->cfg.choice_id;
    bundle_take_vocab_rows(b, rows, V, nb);
    nb->cfg.bos_id = map_id(p, tok, b->cfg.bos_id, "bos_token_id");
    nb->cfg.eos_id = map_id(p, tok, b->cfg.eos_id, "eos_token_id");
    nb->cfg.pad_id = map_id(p, tok, b->cfg.pad_id, "pad_token_id");
    nb->cfg.choice_id = b->cfg.choice_id <= 0 ? 0 : head ? p->n_kept : p->new_of_old[b->cfg.choice_id];
    *rows_out = rows;
}

// OUT.h5: the new bundle, and the int4 state of IN.h5 (if any) with its rows following.
static int save_pruned(const Args *a, const ModelBundle *b, const ModelBundle *nb, const int *rows, int *had_qat,
                       PtError *e) {
    QuantSpec spec;
    int quant_embedding, rc = checkpoint_read_qat_spec(a->ckpt, &spec, &quant_embedding, e);
    if (rc < 0) return -1;
    *had_qat = rc == 0;
    if (!*had_qat) return checkpoint_save(a->out, nb, e);
    QatState q, nq;
    if (qat_init(&q, &b->tt, &spec, quant_embedding, 0, a->ckpt, e)) return -1;
    rc = checkpoint_load_qat(a->ckpt, &q, &b->tt, e);
    if (rc == 0) rc = qat_take_vocab_rows(&q, &b->tt, &nb->tt, rows, &nq, e);
    if (rc == 0) {
        rc = checkpoint_save_qat(a->out, nb, &nq, e);
        qat_free(&nq);
    }
    qat_free(&q);
    return rc ? -1 : 0;
}

// ---- the run ------------------------------------------------------------------------

typedef struct {
    ModelBundle b, nb;
    Tokenizer *tok, *new_tok;
    uint64_t *counts;
    int *forced, n_forced, *rows;
    TextList held;
    VocabPlan plan;
    char *json, *config;
    size_t json_len, config_len;
} Run;

static void run_free(Run *r) {
    bundle_free(&r->b);
    bundle_free(&r->nb);
    tokenizer_free(r->tok);
    tokenizer_free(r->new_tok);
    free(r->counts);
    free(r->forced);
    free(r->rows);
    text_list_free(&r->held);
    vocab_plan_free(&r->plan);
    free(r->json);
    free(r->config);
}

static int load(const Args *a, Run *r, PtError *e) {
    if (checkpoint_load(a->ckpt, &r->b, e)) return -1;
    if (!r->b.tokenizer_json)
        return pt_fail(e, "%s: holds no tokenizer (/tokenizer/tokenizer.json): the vocabulary to prune is the one its "
                          "tokenizer and its embedding rows share", a->ckpt);
    char src[1100];
    snprintf(src, sizeof src, "%s:/tokenizer/tokenizer.json", a->ckpt);
    if (tokenizer_load(&r->tok, r->b.tokenizer_json, r->b.tokenizer_json_len, src, e)) return -1;
    if (tokenizer_vocab_size(r->tok) > r->b.cfg.vocab_size)
        return pt_fail(e, "%s: the tokenizer has ids up to %d, beyond the model's vocab_size %d", a->ckpt,
                       tokenizer_vocab_size(r->tok) - 1, r->b.cfg.vocab_size);
    if (forced_tokens(a, &r->b, r->tok, &r->forced, &r->n_forced, e)) return -1;
    return vocab_plan_check(r->tok, r->forced, r->n_forced, a->keep, e);   // before the counting
}

static int count(const Args *a, Run *r, int threads, PtError *e) {
    r->counts = xcalloc((size_t)tokenizer_vocab_size(r->tok), sizeof *r->counts, "token counts");
    int holdout = a->report && !a->n_heldout ? DEFAULT_HOLDOUT : 0;
    CountStats st, hst;
    double t0 = now_seconds();
    if (vocab_count_corpus(r->tok, a->corpus, a->n_corpus, threads, holdout, r->counts, &r->held, &st, stderr, e))
        return -1;
    double dt = now_seconds() - t0;
    printf("counted %llu tokens of %llu documents (%.2f MB, %d file%s) in %.2f s (%.2f MB/s, %d threads)",
            (unsigned long long)st.tokens, (unsigned long long)st.docs, st.bytes / 1e6, st.files,
            st.files == 1 ? "" : "s", dt, dt > 0 ? st.bytes / 1e6 / dt : 0.0, threads);
    if (holdout) printf("; every %dth document held out for the report", holdout);
    printf("\n");
    fflush(stdout);
    if (a->n_heldout &&
        vocab_count_corpus(r->tok, a->heldout, a->n_heldout, threads, 1, r->counts, &r->held, &hst, NULL, e))
        return -1;
    return 0;
}

static int prune(const Args *a, Run *r, PtError *e) {
    if (vocab_plan(&r->plan, r->tok, r->counts, r->forced, r->n_forced, a->keep, e) ||
        vocab_prune_tokenizer_json(&r->plan, r->tok, r->b.tokenizer_json, r->b.tokenizer_json_len, &r->json,
                                   &r->json_len, e) ||
        (r->b.tokenizer_config_json &&
         vocab_prune_tokenizer_config(&r->plan, r->b.tokenizer_config_json, r->b.tokenizer_config_json_len,
                                      "tokenizer_config.json", &r->config, &r->config_len, e)))
        return -1;
    // The new tokenizer is loaded as every command will load it.
    if (tokenizer_load(&r->new_tok, r->json, r->json_len, "the pruned tokenizer.json", e)) return -1;
    if (tokenizer_vocab_size(r->new_tok) != r->plan.n_kept)
        return pt_fail(e, "the pruned tokenizer has %d ids, not the %d kept (a bug)", tokenizer_vocab_size(r->new_tok),
                       r->plan.n_kept);
    return 0;
}

int cmd_prune_vocab(int argc, char **argv) {
    Args a;
    int parsed = parse_args(argc, argv, &a), rc = 1;
    if (parsed) {
        free(a.corpus);
        free(a.heldout);
        return parsed > 0 ? 0 : ARGS_USAGE;
    }
    int threads = a.threads ? a.threads : omp_get_max_threads();
    double t0 = now_seconds();
    Run r;
    memset(&r, 0, sizeof r);
    PtError e;
    if (load(&a, &r, &e) || count(&a, &r, threads, &e) || prune(&a, &r, &e)) goto fail;
    if (a.report) {
        PruneReport rep;
        if (vocab_report(r.tok, r.new_tok, &r.plan, &r.held, threads, &rep, &e)) goto fail;
        if (a.n_heldout) printf("held-out text: %llu texts (--heldout)\n\n", (unsigned long long)rep.texts);
        else printf("held-out text: %llu texts (every %dth document of the corpus)\n\n", (unsigned long long)rep.texts,
                    DEFAULT_HOLDOUT);
        vocab_report_print(&rep, stdout);
    }
    if (a.out) {
        pruned_bundle(&r.b, r.tok, &r.plan, a.round, &r.rows, &r.nb);
        if (config_validate(&r.nb.cfg, a.out, &e)) goto fail;
        r.nb.tokenizer_json = r.json, r.nb.tokenizer_json_len = r.json_len;
        r.nb.tokenizer_config_json = r.config, r.nb.tokenizer_config_json_len = r.config_len;
        r.json = r.config = NULL;   // the bundle owns them now
        int had_qat;
        if (save_pruned(&a, &r.b, &r.nb, r.rows, &had_qat, &e)) goto fail;
        printf("%s: %d of %d tokens kept (%d required), %d of %d merges; vocab_size %d -> %d; %.2fM -> %.2fM "
               "parameters%s; %.1f s\n",
               a.out, r.plan.n_kept, r.plan.n_tokens, r.plan.n_required, r.plan.n_merges_kept,
               tokenizer_n_merges(r.tok), r.b.cfg.vocab_size, r.nb.cfg.vocab_size, config_param_count(&r.b.cfg) / 1e6,
               config_param_count(&r.nb.cfg) / 1e6, had_qat ? "; the int4 state's rows follow" : "", now_seconds() - t0);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pocket prune-vocab: %s\n", e.msg);
done:
    run_free(&r);
    free(a.corpus);
    free(a.heldout);
    return rc;
}
