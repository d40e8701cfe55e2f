// pocket eval: held-out loss and perplexity of a checkpoint on a token
// dataset, and for SFT data the exact-match rate of greedy completions.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "args.h"
#include "commands.h"
#include "../train/choice_train.h"
#include "../train/eval_compare.h"
#include "../train/evaluate.h"
#include "eval_pairs.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket eval --ckpt CKPT.h5 --data DATA.h5 [options]\n\n"
            "Prints loss and perplexity over the dataset (one pass, or --max-batches), and for SFT\n"
            "data the exact-match rate: greedy completion of each example's last assistant turn\n"
            "must equal the reference reply token for token. For choice data (tokenize --choice): the\n"
            "decision head's loss, accuracy and expected calibration error (ECE: confidence = the top\n"
            "candidate's softmax probability, 10 equal-width bins (b/10, (b+1)/10], the groups' weighted\n"
            "mean of |accuracy - mean confidence| per bin). For pairs data (tokenize --pairs): a preference\n"
            "loss against the reference model --ref, the share of pairs whose chosen response is rewarded\n"
            "above the rejected one (preference accuracy), the mean reward margin, and TRL's metrics\n"
            "(rewards/chosen ... logps/rejected; docs/preference.md).\n\n"
            "  --batch B          rows per batch (default 4)\n"
            "  --seq-len T        tokens per row (default: 512, at most the model's context)\n"
            "  --max-batches K    stop the loss pass after K batches (default: all)\n"
            "  --exact-match N    score the first N SFT examples (default 200; 0 = skip)\n"
            "  --threads N        OpenMP threads (default: all cores)\n"
            "  --dump-scores F    choice data: each group's scores and label as JSON lines into F\n"
            "  --doc-mask         CPT data: attention stays inside each document (as train.doc_mask)\n"
            "  --int4             evaluate the int4 model: the checkpoint's QAT scales, or RTN\n"
            "                     (group 64, asymmetric) from its float weights\n"
            "  --int4-group G     RTN of a float checkpoint with groups of G inputs (implies --int4;\n"
            "                     a QAT checkpoint must match its own grid)\n"
            "  --int4-symmetric   RTN of a float checkpoint, symmetric (no zero point; implies --int4)\n"
            "  --ref FLOAT.h5     also compare with a reference model (its float weights) over the same\n"
            "                     positions: mean KL divergence KL(ref || model) with its standard error,\n"
            "                     the share of positions whose top-1 token is the reference's, and both\n"
            "                     perplexities (the quantization quality report, as llama.cpp's\n"
            "                     llama-perplexity --kl-divergence; with --int4: the int4 model against\n"
            "                     the float one). Default --batch 1 with it (two logit buffers per batch).\n"
            "                     Pairs data: the reference model of the preference loss (the start of\n"
            "                     the training run), run with the same numerics, without --lora\n"
            "  --loss L           pairs data: sigmoid (default), robust, ipo or simpo (no --ref needed)\n"
            "  --beta B           pairs data: the loss's beta (default 0.1)\n"
            "  --label-smoothing E  pairs data: sigmoid, robust, simpo (default 0)\n"
            "  --simpo-gamma G    pairs data, simpo: the target margin (default 0.5)\n"
            "  --sft-weight W     pairs data: adds W x the chosen responses' mean next-token loss (default 0)\n"
            "  --dump-pairs F     pairs data: each pair's log-probabilities (and its reference's) as JSON\n"
            "                     lines into F\n"
            RUN_FLAGS_HELP);
}

// Choice data: the decision head's metrics (and the scores into dump).
static int eval_choice(Model *m, const Dataset *d, const char *ckpt, const char *dump, PtError *e) {
    if (m->cfg.choice_id <= 0) return pt_fail(e, "%s: a choice dataset, but the model has no decision head", ckpt);
    double t0 = now_seconds();
    AtomicFile af;
    if (dump && atomic_open(&af, dump, e)) return -1;
    ChoiceMetrics mt;
    int rc = choice_evaluate(m, d, &mt, dump ? af.f : NULL, e);
    if (dump && rc) atomic_abort(&af);
    if (dump && !rc) rc = atomic_commit(&af, e);
    if (rc) return -1;
    printf("%s on %s: choice loss %.4f, accuracy %.1f%% (%ld of %ld groups), ECE %.4f (%d bins) (%.1f s)\n", ckpt,
           d->path, mt.groups ? mt.loss / mt.groups : NAN, 100 * mt.accuracy, mt.correct, mt.groups, mt.ece,
           CHOICE_ECE_BINS, now_seconds() - t0);
    return 0;
}

// --ref: the reference model (its float weights, the same numerics and device)
// over the same batches, and the quality report.
static int eval_against(Model *m, const Tokenizer *tok, const char *ckpt, const char *ref, const Dataset *d,
                        const OpenOptions *oo, int doc_mask, long max_batches) {
    PtError e;
    OpenOptions ro = *oo;
    ro.int4 = 0;
    ro.grid = NULL;
    ro.grid_chosen = 0;
    ro.lora = NULL;
    ro.log = NULL;
    OpenModel rm;
    if (open_model(&rm, ref, &ro, &e)) { fprintf(stderr, "pocket eval: --ref %s\n", e.msg); return -1; }
    int rc = -1;
    Tokenizer *rt = NULL;
    if (!rm.b.tokenizer_json || tokenizer_load(&rt, rm.b.tokenizer_json, rm.b.tokenizer_json_len, ref, &e)) {
        fprintf(stderr, "pocket eval: --ref %s: %s\n", ref, rm.b.tokenizer_json ? e.msg : "the checkpoint stores no tokenizer.json");
        goto out;
    }
    if (strcmp(tokenizer_hash(rt), tokenizer_hash(tok)) || rm.b.cfg.vocab_size != m->cfg.vocab_size) {
        fprintf(stderr, "pocket eval: --ref %s has another vocabulary than %s (tokenizer %.12s, %d rows against "
                        "%.12s, %d rows)\n", ref, ckpt, tokenizer_hash(rt), rm.b.cfg.vocab_size, tokenizer_hash(tok),
                m->cfg.vocab_size);
        goto out;
    }
    CompareStats s;
    double t0 = now_seconds();
    if (model_plan(&rm.m, m->B, m->T, 0, NULL, &e) ||
        eval_compare(m, &rm.m, d, doc_mask, max_batches, &s, &e)) {
        fprintf(stderr, "pocket eval: %s\n", e.msg);
        goto out;
    }
    printf("%s on %s against %s, %ld positions (%.1f s):\n", ckpt, d->path, ref, s.positions, now_seconds() - t0);
    printf("  mean KL divergence %.6f +- %.6f nats (max %.4f)\n", s.kl_mean, s.kl_stderr, s.kl_max);
    printf("  top-1 agreement    %.3f%%\n", 100 * s.top1);
    printf("  perplexity         %.4f (loss %.6f); reference %.4f (loss %.6f)\n", exp(s.loss), s.loss,
           exp(s.ref_loss), s.ref_loss);
    rc = 0;
out:
    if (rt) tokenizer_free(rt);
    open_model_close(&rm);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL, *dump = NULL, *ref = NULL, *dump_pairs = NULL, *v;
    PrefLoss pl = {PREF_SIGMOID, 0.1, 0.0, 0.5, 0.0};
    long batch = 0, seq = 512, max_batches = 0, n_exact = 200;
    int int4_group = 0, threads = 0;   // int4_group 0: the default grid
    int int4 = 0, int4_symmetric = 0, doc_mask = 0, flag;
    OpenOptions oo = {.log = stdout};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((flag = run_flag(argc, argv, &i, &oo))) { if (flag < 0) return ARGS_USAGE; }
        else if (!strcmp(argv[i], "--int4")) int4 = 1;
        else if (!strcmp(argv[i], "--int4-symmetric")) int4 = int4_symmetric = 1;
        else if (!strcmp(argv[i], "--doc-mask")) doc_mask = 1;
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--data"))) data = v;
        else if ((v = arg_value(argc, argv, &i, "--dump-scores"))) dump = v;
        else if ((v = arg_value(argc, argv, &i, "--ref"))) ref = v;
        else if ((v = arg_value(argc, argv, &i, "--dump-pairs"))) dump_pairs = v;
        else if ((v = arg_value(argc, argv, &i, "--loss"))) {
            for (pl.kind = 0; pl.kind < PREF_LOSS_COUNT && strcmp(v, pref_loss_name(pl.kind)); pl.kind++) {}
            if (pl.kind == PREF_LOSS_COUNT) return arg_usage("--loss '%s' must be sigmoid, robust, ipo or simpo", v);
        }
        else if ((v = arg_value(argc, argv, &i, "--beta"))) {
            if (arg_real("--beta", v, 0, 1000, ARG_LO_OPEN, &pl.beta)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--label-smoothing"))) {
            if (arg_real("--label-smoothing", v, 0, 0.5, ARG_HI_OPEN, &pl.label_smoothing)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--simpo-gamma"))) {
            if (arg_real("--simpo-gamma", v, 0, 1000, ARG_CLOSED, &pl.simpo_gamma)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--sft-weight"))) {
            if (arg_real("--sft-weight", v, 0, 1000, ARG_CLOSED, &pl.sft_weight)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--batch"))) { if (arg_long("--batch", v, 1, 65536, &batch)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--seq-len"))) { if (arg_long("--seq-len", v, 2, 1 << 20, &seq)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--max-batches"))) {
            if (arg_long("--max-batches", v, 0, 1L << 40, &max_batches)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--exact-match"))) {
            if (arg_long("--exact-match", v, 0, 1L << 30, &n_exact)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--int4-group"))) {
            if (arg_even("--int4-group", v, 2, 65536, &int4_group)) return ARGS_USAGE;
            int4 = 1;
        }
        else if ((v = arg_value(argc, argv, &i, "--threads"))) { if (arg_threads("--threads", v, &threads)) return ARGS_USAGE; }
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!ckpt || !data) return arg_usage("--ckpt and --data are required (see --help)");
    if (batch == 0) batch = ref ? 1 : 4;
    PtError e;
    Dataset d = {0};
    Tokenizer *tok = NULL;
    // An explicit grid only when one was asked for: otherwise the checkpoint's own (or the default).
    QuantSpec grid = {int4_group ? int4_group : QUANT_GROUP_DEFAULT, int4_symmetric};
    const int grid_chosen = int4_group || int4_symmetric;
    oo.int4 = int4;
    oo.grid = grid_chosen ? &grid : NULL;
    oo.grid_chosen = grid_chosen;
    oo.threads = threads;
    OpenModel om;
    if (open_model(&om, ckpt, &oo, &e)) { fprintf(stderr, "pocket eval: %s\n", e.msg); return 1; }
    int rc = 1;
    Model *m = &om.m;
    if (!om.b.tokenizer_json) {
        fprintf(stderr, "pocket eval: %s: the checkpoint stores no tokenizer.json\n", ckpt);
        goto out;
    }
    if (tokenizer_load(&tok, om.b.tokenizer_json, om.b.tokenizer_json_len, ckpt, &e) || dataset_open(&d, data, &e)) {
        fprintf(stderr, "pocket eval: %s\n", e.msg);
        goto out;
    }
    if (seq > om.b.cfg.max_seq) seq = om.b.cfg.max_seq;
    if (dataset_check_tokenizer(&d, tokenizer_hash(tok), &e) || model_plan(m, (int)batch, (int)seq, 0, NULL, &e)) {
        fprintf(stderr, "pocket eval: %s\n", e.msg);
        goto out;
    }
    double t0 = now_seconds();
    if (d.kind == DATASET_PAIRS) {
        rc = eval_pairs(m, &d, ckpt, ref, &oo, &pl, dump_pairs, &e);
        if (rc) fprintf(stderr, "pocket eval: %s\n", e.msg);
        goto out;
    }
    if (d.kind == DATASET_CHOICE && ref) {
        fprintf(stderr, "pocket eval: --ref compares next-token distributions; %s is choice data\n", data);
        goto out;
    }
    if (d.kind == DATASET_CHOICE) {
        rc = eval_choice(m, &d, ckpt, dump, &e);
        if (rc) fprintf(stderr, "pocket eval: %s\n", e.msg);
        goto out;
    }
    if (ref) {
        if (eval_against(m, tok, ckpt, ref, &d, &oo, doc_mask, max_batches)) goto out;
    } else {
        long count;
        double loss = eval_loss(m, &d, doc_mask, max_batches, NULL, &count, &e);
        if (isnan(loss)) { fprintf(stderr, "pocket eval: %s\n", e.msg); goto out; }
        printf("%s on %s: loss %.4f, perplexity %.2f over %ld tokens (%.1f s)\n", ckpt, data, loss, exp(loss), count,
               now_seconds() - t0);
    }
    if (d.kind == DATASET_SFT && n_exact > 0) {
        int scored;
        t0 = now_seconds();
        double em = eval_exact_match(m, tok, &d, (int)n_exact, &scored, stdout, &e);
        if (scored == 0 && isnan(em)) { fprintf(stderr, "pocket eval: %s\n", e.msg); goto out; }
        printf("exact match: %.1f%% of %d examples (%.1f s)\n", 100 * em, scored, now_seconds() - t0);
    }
    rc = 0;
out:
    if (d.path) dataset_close(&d);
    if (tok) tokenizer_free(tok);
    open_model_close(&om);
    return rc;
}
