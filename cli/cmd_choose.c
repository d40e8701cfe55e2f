// pocket choose: the decision head's scores for candidates behind one prompt
// (model/choice_head.h): the prompt is fed once into a KV cache and each
// candidate continues from it.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../data/choice.h"
#include "../model/choice_head.h"
#include "args.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket choose --ckpt CKPT.h5 --prompt TEXT [--system TEXT]\n"
            "                     (--candidates A B C ... | --candidates-file FILE) [options]\n\n"
            "Scores each candidate with the checkpoint's decision head ([train] mode = choice) and prints\n"
            "the scores, their softmax probabilities and the pick. The prompt is rendered with the\n"
            "checkpoint's chat template as `pocket tokenize --choice` renders it, fed once into a KV cache,\n"
            "and each candidate (its text, then <|im_end|>) continues from the prompt's cache position.\n\n"
            "  --ckpt CKPT.h5         a checkpoint with a decision head (a [train] mode = choice run)\n"
            "  --prompt TEXT          the question, rendered as one user turn\n"
            "  --system TEXT          a system message before it\n"
            "  --candidates A B ...   the candidates (every argument up to the next one that starts with --)\n"
            "  --candidates-file F    one candidate per line (empty lines skipped)\n"
            "  --alone                score each (prompt + candidate) in one pass of its own instead\n"
            "  --json                 one JSON object: ids, scores, probabilities, pick\n"
            "  --int4                 run the int4 model (the checkpoint's QAT scales, or RTN)\n"
            "  --threads N            OpenMP threads (default: all cores)\n" RUN_FLAGS_HELP);
}

typedef struct {
    char **text;
    int n;
    char *file_data;   // --candidates-file: the lines point into it
} Candidates;

static int read_candidates_file(const char *path, Candidates *c, int cap) {
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file(path, &data, &len, &e)) {
        fprintf(stderr, "pocket choose: %s\n", e.msg);
        return -1;
    }
    c->file_data = (char *)data;
    for (char *line = c->file_data, *end = c->file_data + len; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *stop = nl ? nl : end;
        if (stop > line && stop[-1] == '\r') stop[-1] = 0;
        *stop = 0;   // read_whole_file leaves room for a NUL
        if (*line) {
            if (c->n == cap) {
                fprintf(stderr, "pocket choose: %s: more than %d candidates\n", path, cap);
                return -1;
            }
            c->text[c->n++] = line;
        }
        line = stop + 1;
    }
    return 0;
}

int cmd_choose(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *system = NULL, *file = NULL, *v;
    int alone = 0, json = 0, int4 = 0, flag;
    int threads = 0;
    OpenOptions oo = {.log = NULL};
    Candidates c = {xcalloc(CHOICE_MAX_CANDIDATES, sizeof(char *), "candidates"), 0, NULL};
    int rc = ARGS_USAGE;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); rc = 0; goto done; }
        else if ((flag = run_flag(argc, argv, &i, &oo))) { if (flag < 0) goto done; }
        else if (!strcmp(argv[i], "--alone")) alone = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--int4")) int4 = 1;
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--prompt"))) prompt = v;
        else if ((v = arg_value(argc, argv, &i, "--system"))) system = v;
        else if ((v = arg_value(argc, argv, &i, "--candidates-file"))) file = v;
        else if ((v = arg_value(argc, argv, &i, "--threads"))) {
            if (arg_threads("--threads", v, &threads)) goto done;
        }
        else if (!strcmp(argv[i], "--candidates")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                if (c.n == CHOICE_MAX_CANDIDATES) {
                    fprintf(stderr, "pocket choose: more than %d candidates\n", CHOICE_MAX_CANDIDATES);
                    goto done;
                }
                c.text[c.n++] = argv[++i];
            }
        } else {
            arg_usage("unknown argument '%s' (see --help)", argv[i]);
            goto done;
        }
    }
    if (file && read_candidates_file(file, &c, CHOICE_MAX_CANDIDATES)) goto done;
    if (!ckpt || !prompt || c.n < 1) {
        fprintf(stderr, "pocket choose: --ckpt, --prompt and at least one candidate are required (see --help)\n");
        goto done;
    }
    for (int k = 0; k < c.n; k++)
        for (int j = 0; j < k; j++)
            if (!strcmp(c.text[j], c.text[k]) || !*c.text[k]) {
                fprintf(stderr, "pocket choose: candidate %d (\"%s\") is empty or repeats candidate %d\n", k, c.text[k], j);
                goto done;
            }
    rc = 1;
    PtError e;
    oo.int4 = int4;
    oo.threads = threads;
    OpenModel om;
    if (open_model(&om, ckpt, &oo, &e)) { fprintf(stderr, "pocket choose: %s\n", e.msg); goto done; }
    Tokenizer *tok = NULL;
    ChatTemplate *tmpl = NULL;
    int *prompt_ids = NULL, **ids = xcalloc((size_t)c.n, sizeof(int *), "candidate ids");
    int *lens = xcalloc((size_t)c.n, sizeof(int), "candidate lengths");
    float *scores = xcalloc((size_t)c.n, sizeof(float), "scores");
    double *p = xcalloc((size_t)c.n, sizeof(double), "probabilities");
    size_t n_prompt = 0;
    char src[1100];
    snprintf(src, sizeof src, "%s:/tokenizer/tokenizer_config.json", ckpt);
    const ModelBundle *b = &om.b;
    int failed = 0;
    if (b->cfg.choice_id <= 0) failed = pt_fail(&e, "%s: the model has no decision head (train it with [train] mode = choice)", ckpt);
    else if (!b->tokenizer_json) failed = pt_fail(&e, "%s: the checkpoint stores no tokenizer.json", ckpt);
    else if (tokenizer_load(&tok, b->tokenizer_json, b->tokenizer_json_len, ckpt, &e) ||
             chat_template_load(&tmpl, b->tokenizer_config_json, b->tokenizer_config_json_len, src, &e) ||
             choice_encode_prompt(tok, tmpl, system, prompt, &prompt_ids, &n_prompt, &e))
        failed = -1;
    int longest = 0;
    for (int k = 0; k < c.n && !failed; k++) {
        size_t n;
        if (choice_encode_candidate(tok, c.text[k], &ids[k], &n, &e)) failed = -1;
        lens[k] = (int)n;
        longest = lens[k] > longest ? lens[k] : longest;
    }
    if (!failed) failed = model_plan_cache(&om.m, (int)n_prompt + longest, &e);
    if (failed) {
        fprintf(stderr, "pocket choose: %s\n", e.msg);
    } else {
        double t0 = now_seconds();
        (alone ? choice_score_alone : choice_score_shared)(&om.m, prompt_ids, (int)n_prompt, (const int *const *)ids,
                                                           lens, c.n, scores);
        double dt = now_seconds() - t0;
        choice_softmax(scores, c.n, p);
        int pick = 0;
        for (int k = 1; k < c.n; k++)
            if (scores[k] > scores[pick]) pick = k;
        if (json) {
            printf("{\"choice_id\": %d, \"prompt_ids\": [", b->cfg.choice_id);
            for (size_t i = 0; i < n_prompt; i++) printf("%s%d", i ? ", " : "", prompt_ids[i]);
            printf("], \"candidate_ids\": [");
            for (int k = 0; k < c.n; k++) {
                printf("%s[", k ? ", " : "");
                for (int i = 0; i < lens[k]; i++) printf("%s%d", i ? ", " : "", ids[k][i]);
                printf("]");
            }
            printf("], \"scores\": [");
            for (int k = 0; k < c.n; k++) printf("%s%.9g", k ? ", " : "", scores[k]);
            printf("], \"probabilities\": [");
            for (int k = 0; k < c.n; k++) printf("%s%.9g", k ? ", " : "", p[k]);
            printf("], \"pick\": %d, \"seconds\": %.6f}\n", pick, dt);
        } else {
            for (int k = 0; k < c.n; k++)
                printf("%s %10.4f  p=%.4f  %s\n", k == pick ? "*" : " ", scores[k], p[k], c.text[k]);
            printf("pick: %s (%d of %d candidates, %.1f ms%s)\n", c.text[pick], pick, c.n, 1e3 * dt,
                   alone ? ", each alone" : ", prompt shared through the KV cache");
        }
        rc = 0;
    }
    for (int k = 0; k < c.n; k++) free(ids[k]);
    free(ids);
    free(lens);
    free(scores);
    free(p);
    free(prompt_ids);
    if (tmpl) chat_template_free(tmpl);
    if (tok) tokenizer_free(tok);
    open_model_close(&om);
done:
    free(c.text);
    free(c.file_data);
    return rc;
}
