// pocket generate: continue a prompt with the KV-cache generator
// (model/generate.h), streaming the completion to stdout as text or ids.
#include <math.h>
#include <string.h>
#include "../formats/draft_checkpoint.h"
#include "../model/generate.h"
#include "../model/speculative.h"
#include "../train/evaluate.h"
#include "args.h"
#include "commands.h"
#include "generate_batch.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket generate --ckpt CKPT.h5 (--prompt TEXT | --prompt-ids \"ID ID ...\") [--chat [--system TEXT]]\n"
            "                       [--int4] [--max-new N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ids]\n"
            "                       [--matmul fp32|bf16] [--a16 off|bf16|fp16] [--lora ADAPTER] [--draft DRAFT.h5]\n"
            "       pocket generate --ckpt CKPT.h5 --batch-file PROMPTS.jsonl --out OUT.jsonl [--rows R] [--samples K]\n"
            "                       [--chat [--system TEXT]] [--int4] [--max-new N] [--temperature T] ...\n\n"
            "Continues the prompt with the checkpoint's model (KV cache: the prompt is read in one\n"
            "pass, then one token per step) and prints the new text to stdout as it is generated.\n"
            "Generation stops after --max-new tokens or at an end token: the config's eos id,\n"
            "<|im_end|> and <|endoftext|> (when the tokenizer has them); the end token is not\n"
            "printed as text (--ids prints it). A statistics line goes to stderr.\n\n"
            "  --ckpt CKPT.h5       checkpoint; its stored tokenizer.json encodes the prompt and\n"
            "                       decodes the output (required unless --prompt-ids with --ids)\n"
            "  --prompt TEXT        the prompt text\n"
            "  --prompt-ids IDS     the prompt as token ids (space- or comma-separated)\n"
            "  --int4               run the int4 weights: the checkpoint's QAT scales, or RTN\n"
            "                       (group 64, asymmetric) from the float weights when it has none\n"
            "  --chat               wrap --prompt as one user turn of the checkpoint's chat template\n"
            "                       (its tokenizer_config.json chat_template; the bundled Qwen3-style\n"
            "                       template when it has none) with the assistant header appended and\n"
            "                       thinking off (enable_thinking = false), as a chat model expects;\n"
            "                       the template's end-of-turn token also stops generation\n"
            "  --system TEXT        (--chat) a system message before the user turn\n"
            "  --max-new N          new tokens at most (default 128); prompt + N must fit the\n"
            "                       model's max_position_embeddings\n"
            "  --temperature T      0 = greedy, the most likely token each step (default 0)\n"
            "  --top-k K            sample among the K most likely tokens only; 0 = all (default 0)\n"
            "  --top-p P            then among the smallest set with probability >= P (default 1)\n"
            "  --seed S             sampling seed (default 0); same seed, same output\n"
            "  --ids                print the new token ids (space-separated) instead of text\n"
            "  --batch-file F       many prompts, one JSON object a line: {\"prompt\": TEXT} or {\"messages\":\n"
            "                       [{\"role\", \"content\"}, ...]} (rendered by the chat template), optionally\n"
            "                       \"id\", \"max_new\", \"temperature\", \"top_k\", \"top_p\", \"seed\"; decoded together\n"
            "                       by the batched sampler, each completion exactly the one a single run\n"
            "                       with the same prompt, parameters and seed prints (line i: --seed +\n"
            "                       (i-1) x samples unless it gives a seed; its k-th sample: + k)\n"
            "  --out OUT.jsonl      (--batch-file) the completions, a JSON line each in the file's order:\n"
            "                       {\"id\", \"sample\", \"completion\", \"tokens\", \"finish\": \"stop\"|\"length\"}\n"
            "                       (and \"ids\" with --ids)\n"
            "  --rows R             (--batch-file) sequences decoded together (default 16); a finished one\n"
            "                       takes the next prompt at once\n"
            "  --samples K          (--batch-file) completions per prompt (default 1)\n"
            "  --draft DRAFT.h5     speculative decoding with a DFlash draft trained for this checkpoint's int4\n"
            "                       weights ([draft] recipes; implies --int4, greedy only): the output is the\n"
            "                       same; the statistics line gives the mean acceptance length\n"
            RUN_FLAGS_HELP);
}

// Streams the completion as it is generated. Text is re-decoded from all new
// ids each step (a token may end in the middle of a UTF-8 character) and
// printed up to any trailing U+FFFD, which a later byte may still complete.
typedef struct {
    const Tokenizer *tok;
    const GenParams *params;
    int print_ids;
    int *ids, n;
    size_t printed;       // bytes of decoded text already on stdout
    double t_first;       // when the first new token was chosen (end of the prefill)
} Stream;

static void stream_text(Stream *s, int final) {
    int n = s->n;
    if (n > 0 && gen_is_stop(s->params, s->ids[n - 1])) n--;   // the end token is not part of the text
    char *text = tokenizer_decode(s->tok, s->ids, (size_t)n, 0);
    size_t len = strlen(text);
    if (!final)
        while (len >= 3 && !memcmp(text + len - 3, "\xEF\xBF\xBD", 3)) len -= 3;
    if (len > s->printed) {
        fwrite(text + s->printed, 1, len - s->printed, stdout);
        fflush(stdout);
        s->printed = len;
    }
    free(text);
}

static void on_token(void *ctx, int id) {
    Stream *s = ctx;
    if (s->n == 0) s->t_first = now_seconds();
    s->ids[s->n++] = id;
    if (s->print_ids) {
        printf("%s%d", s->n > 1 ? " " : "", id);
        fflush(stdout);
    } else {
        stream_text(s, 0);
    }
}

// --batch-file: the prompts of a file through the batched sampler (generate_batch.h).
static int generate_file(const char *ckpt, const char *batch_file, const char *out_path, int single, OpenOptions *oo,
                         int int4, const BatchOptions *bo) {
    if (!ckpt || !out_path) return arg_usage("--batch-file needs --ckpt and --out (see --help)");
    if (single) return arg_usage("--batch-file takes its prompts from the file: drop --prompt, --prompt-ids and --draft");
    if (bo->system && !bo->chat) return arg_usage("--system needs --chat");
    PtError e;
    OpenModel om;
    oo->int4 = int4;
    oo->pack_int4 = bo->rows <= PACKED_MAX_ROWS;   // few rows: the sampler's passes read the int4 weights packed
    if (open_model(&om, ckpt, oo, &e)) { fprintf(stderr, "pocket generate: %s\n", e.msg); return 1; }
    Tokenizer *tok = NULL;
    int rc = 1;
    if (!om.b.tokenizer_json) {
        fprintf(stderr, "pocket generate: %s has no /tokenizer/tokenizer.json to read %s with\n", ckpt, batch_file);
    } else if (tokenizer_load(&tok, om.b.tokenizer_json, om.b.tokenizer_json_len, ckpt, &e) ||
               generate_batch(&om, tok, bo, &e)) {
        fprintf(stderr, "pocket generate: %s\n", e.msg);
    } else {
        rc = 0;
    }
    if (tok) tokenizer_free(tok);
    open_model_close(&om);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt_text = NULL, *prompt_ids = NULL, *system = NULL, *draft_path = NULL, *v;
    const char *batch_file = NULL, *out_path = NULL;
    int chat = 0, print_ids = 0, int4 = 0, rows = 16, samples = 1;
    GenParams params;
    gen_params_default(&params);
    OpenOptions oo = {.log = stderr};
    for (int i = 1; i < argc; i++) {
        double x;
        int flag;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((flag = run_flag(argc, argv, &i, &oo))) { if (flag < 0) return ARGS_USAGE; }
        else if (!strcmp(argv[i], "--chat")) chat = 1;
        else if (!strcmp(argv[i], "--ids")) print_ids = 1;
        else if (!strcmp(argv[i], "--int4")) int4 = 1;
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--draft"))) draft_path = v;
        else if ((v = arg_value(argc, argv, &i, "--prompt"))) prompt_text = v;
        else if ((v = arg_value(argc, argv, &i, "--prompt-ids"))) prompt_ids = v;
        else if ((v = arg_value(argc, argv, &i, "--system"))) system = v;
        else if ((v = arg_value(argc, argv, &i, "--batch-file"))) batch_file = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out_path = v;
        else if ((v = arg_value(argc, argv, &i, "--rows"))) { if (arg_int("--rows", v, 1, 4096, &rows)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--samples"))) {
            if (arg_int("--samples", v, 1, 1 << 16, &samples)) return ARGS_USAGE;
        }
        else if ((v = arg_value(argc, argv, &i, "--max-new"))) {
            if (arg_int("--max-new", v, 1, 1 << 24, &params.max_new)) return ARGS_USAGE;
        } else if ((v = arg_value(argc, argv, &i, "--top-k"))) {
            if (arg_int("--top-k", v, 0, 1 << 30, &params.top_k)) return ARGS_USAGE;
        } else if ((v = arg_value(argc, argv, &i, "--seed"))) {
            if (arg_u64("--seed", v, &params.seed)) return ARGS_USAGE;
        } else if ((v = arg_value(argc, argv, &i, "--temperature"))) {
            if (arg_real("--temperature", v, 0.0, 1e4, ARG_CLOSED, &x)) return ARGS_USAGE;
            params.temperature = (float)x;
        } else if ((v = arg_value(argc, argv, &i, "--top-p"))) {
            if (arg_real("--top-p", v, 0.0, 1.0, ARG_LO_OPEN, &x)) return ARGS_USAGE;
            params.top_p = (float)x;
        } else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (batch_file) return generate_file(ckpt, batch_file, out_path, prompt_text || prompt_ids || draft_path, &oo, int4,
                                         &(BatchOptions){ckpt, batch_file, out_path, rows, samples, chat, print_ids, system,
                                                         params});
    if (out_path || rows != 16 || samples != 1)
        return arg_usage("--out, --rows and --samples go with --batch-file (see --help)");
    if (!ckpt || (!prompt_text == !prompt_ids)) {
        fprintf(stderr, "pocket generate: --ckpt and one of --prompt or --prompt-ids are required (see --help)\n");
        return 2;
    }
    if (system && !chat) {
        fprintf(stderr, "pocket generate: --system needs --chat\n");
        return 2;
    }
    if (chat && !prompt_text) {
        fprintf(stderr, "pocket generate: --chat wraps a text --prompt, not --prompt-ids\n");
        return 2;
    }

    PtError e;
    OpenModel om;
    if (draft_path && params.temperature > 0) {
        fprintf(stderr, "pocket generate: --draft decodes greedily: drop --temperature\n");
        return 2;
    }
    oo.int4 = int4 || draft_path;   // a draft drafts for the int4 weights it was trained against
    oo.pack_int4 = 1;               // one sequence: its decode steps read the int4 weights packed
    // With a draft, a refusal (other weights, a block the target cannot take) is the only line: what open_model
    // says is held back until the draft is accepted.
    char *held = NULL;
    size_t held_len = 0;
    if (draft_path && !(oo.log = open_memstream(&held, &held_len))) die("cannot hold back open_model's lines");
    if (open_model(&om, ckpt, &oo, &e)) {
        if (draft_path) fclose(oo.log), free(held);
        fprintf(stderr, "pocket generate: %s\n", e.msg);
        return 1;
    }
    if (draft_path) fclose(oo.log);
    const ModelBundle *b = &om.b;
    const ModelConfig *c = &b->cfg;
    int rc = 1, *prompt = NULL, n_prompt = 0, *out = NULL;
    Tokenizer *tok = NULL;
    char *rendered = NULL;
    GenContext g;
    memset(&g, 0, sizeof g);
    Draft draft;
    memset(&draft, 0, sizeof draft);
    SpecContext spec;
    memset(&spec, 0, sizeof spec);
    float *draft_weights = NULL;
    if (draft_path) {
        char hash[65];
        open_model_base_hash(&om, hash);
        if (draft_checkpoint_load(draft_path, c, hash, ckpt, &draft, &e)) goto fail;
        draft_weights = dev_mirror(&om.dev, draft.params, draft.tt.total * sizeof(float), "draft weights");
        fputs(held, stderr);
    }

    if (!b->tokenizer_json && (prompt_text || !print_ids)) {
        fprintf(stderr, "pocket generate: %s has no /tokenizer/tokenizer.json; use --prompt-ids with --ids\n", ckpt);
        goto done;
    }
    if (b->tokenizer_json) {
        char src[1100];
        snprintf(src, sizeof src, "%s:/tokenizer/tokenizer.json", ckpt);
        if (tokenizer_load(&tok, b->tokenizer_json, b->tokenizer_json_len, src, &e)) goto fail;
    }
    if (prompt_ids) {
        // "1 2 3" or "1,2,3"; errors name the position of the bad entry.
        if (arg_ids(prompt_ids, " ,\t\n", c->vocab_size, 1, "--prompt-ids", "entry", &prompt, &n_prompt, &e)) goto fail;
    } else {
        const char *text = prompt_text;
        if (chat) {
            if (chat_generation_prompt(b, ckpt, tok, system, prompt_text, &rendered, &params, &e)) goto fail;
            text = rendered;
        }
        size_t n = 0, cap = 0;
        if (tokenizer_encode(tok, text, strlen(text), &prompt, &n, &cap, &e)) goto fail;
        if (n == 0) {
            fprintf(stderr, "pocket generate: --prompt gives no tokens (empty text)\n");
            goto done;
        }
        n_prompt = (int)n;
        for (int i = 0; i < n_prompt; i++)
            if (prompt[i] >= c->vocab_size) {
                fprintf(stderr, "pocket generate: %s: the tokenizer gives id %d (prompt token %d), outside the "
                                "model's vocabulary of %d\n", ckpt, prompt[i], i + 1, c->vocab_size);
                goto done;
            }
    }
    add_default_stops(&params, c, tok);

    // The cache holds what this call can use; generate() reports a prompt
    // that does not fit the model's context.
    long need = (long)n_prompt + params.max_new + (draft_path ? draft.cfg.block : 0);
    if (gen_init(&g, &om.m, need < c->max_seq ? (int)need : c->max_seq, &e)) goto fail;
    if (draft_path && spec_init(&spec, &g, &draft, draft_weights, &e)) goto fail;
    out = xmalloc((size_t)params.max_new * sizeof(int), "generated ids");
    // The stream records each id as it is chosen, into the array generate() fills anyway.
    Stream s = {tok, &params, print_ids, out, 0, 0, 0};
    params.on_token = on_token;
    params.on_token_ctx = &s;
    double t0 = now_seconds();
    SpecStats ss;
    int n_new = draft_path ? spec_generate(&spec, prompt, n_prompt, &params, out, params.max_new, &ss, &e)
                           : generate(&g, prompt, n_prompt, &params, out, params.max_new, &e);
    if (n_new < 0) goto fail;
    double t1 = now_seconds();
    if (!print_ids) stream_text(&s, 1);
    printf("\n");
    fflush(stdout);
    int stopped = n_new > 0 && gen_is_stop(&params, out[n_new - 1]);
    double prefill = s.t_first - t0, decode = t1 - s.t_first;
    fprintf(stderr, "pocket generate: %d prompt + %d new tokens (%s); prefill %.1f tok/s, decode %.1f tok/s\n",
            n_prompt, n_new, stopped ? "end token" : "max-new reached", n_prompt / fmax(prefill, 1e-9),
            n_new > 1 ? (n_new - 1) / fmax(decode, 1e-9) : 0.0);
    if (draft_path)
        fprintf(stderr, "pocket generate: draft %s: mean acceptance %.2f tokens per target pass (%ld passes, block "
                        "%d)\n", draft_path, ss.passes ? (double)ss.tokens / ss.passes : 0.0, ss.passes,
                draft.cfg.block);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pocket generate: %s\n", e.msg);
done:
    free(held);
    spec_free(&spec);
    if (draft_weights) dev_unmirror(&om.dev, draft_weights, draft.params);
    draft_free(&draft);
    gen_free(&g);
    free(out);
    free(prompt);
    free(rendered);
    if (tok) tokenizer_free(tok);
    open_model_close(&om);
    return rc;
}
