// main.c: `pocket SUBCOMMAND ...` dispatch.
#include <stdio.h>
#include <string.h>
#include "commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
} Command;

static const Command COMMANDS[] = {
    {"init", cmd_init, "init      --model PRESET|config.json [--seed N] --out CKPT.h5   new model from scratch"},
    {"import", cmd_import, "import    HF_DIR --out CKPT.h5                                  HF checkpoint in"},
    {"tokenize", cmd_tokenize, "tokenize  --tokenizer T [--chat] INPUT... --out DATA.h5          corpus or chats to tokens"},
    {"train", cmd_train, "train     RECIPE.ini [--set section.key=value]...                CPT, SFT; resumes itself"},
    {"eval", cmd_eval, "eval      --ckpt CKPT.h5 --data DATA.h5                         loss, perplexity, exact match"},
    {"generate", cmd_generate, "generate  --ckpt CKPT.h5 [--chat] [--int4] --prompt TEXT        sampling with a KV cache"},
    {"forward", cmd_forward, "forward   --ckpt CKPT.h5 --tokens-file F [--grad] --dump OUT      logits/loss/grads probe"},
    {"export", cmd_export, "export    --ckpt CKPT.h5 --format hf --out DIR                  deployment files out"},
    {"inspect", cmd_inspect, "inspect   FILE                                                  what a file holds"},
};

static void usage(FILE *f) {
    fprintf(f, "pocket: training toolkit for MNN-Pocket (Qwen3) models\n\nusage: pocket COMMAND [options]\n\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) fprintf(f, "  %s\n", COMMANDS[i].usage);
    fprintf(f, "\n`pocket COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "pocket: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
