// pocket init: a new model from a preset or an HF config.json.
#include <stdlib.h>
#include <string.h>
#include "../formats/checkpoint.h"
#include "../data/tokenizer.h"
#include "args.h"
#include "commands.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket init --model PRESET|config.json --out CKPT.h5 [--seed N] [--tokenizer tokenizer.json]\n\n"
            "Creates a checkpoint with freshly initialised weights: matrices ~ N(0, initializer_range),\n"
            "norm weights 1, the padding row of the embedding 0. Same seed, same weights on every machine.\n\n"
            "  --model      preset (%s) or an HF config.json / model directory\n"
            "  --out        checkpoint to write (HDF5)\n"
            "  --seed       RNG seed (default 1234)\n"
            "  --tokenizer  tokenizer.json to store in the checkpoint (optional)\n",
            config_preset_names());
}

int cmd_init(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *tok = NULL, *v;
    uint64_t seed = 1234;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((v = arg_value(argc, argv, &i, "--model"))) model = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else if ((v = arg_value(argc, argv, &i, "--tokenizer"))) tok = v;
        else if ((v = arg_value(argc, argv, &i, "--seed"))) { if (arg_u64("--seed", v, &seed)) return ARGS_USAGE; }
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!model || !out) return arg_usage("--model and --out are required (see --help)");
    PtError e;
    ModelConfig cfg;
    if (config_load(&cfg, model, &e)) { fprintf(stderr, "pocket init: %s\n", e.msg); return 1; }
    ModelBundle b;
    bundle_alloc(&b, &cfg);
    if (tok) {
        uint8_t *data;
        if (read_whole_file(tok, &data, &b.tokenizer_json_len, &e)) {
            fprintf(stderr, "pocket init: %s\n", e.msg);
            bundle_free(&b);
            return 1;
        }
        b.tokenizer_json = (char *)data;
        Tokenizer *t;   // refused at the door: a checkpoint stores it verbatim
        if (tokenizer_load(&t, b.tokenizer_json, b.tokenizer_json_len, tok, &e)) {
            fprintf(stderr, "pocket init: %s\n", e.msg);
            bundle_free(&b);
            return 1;
        }
        int n_ids = tokenizer_vocab_size(t);
        tokenizer_free(t);
        if (n_ids > cfg.vocab_size) {
            fprintf(stderr, "pocket init: %s: the tokenizer has ids up to %d, beyond the model's vocab_size %d\n", tok,
                    n_ids - 1, cfg.vocab_size);
            bundle_free(&b);
            return 1;
        }
    }
    bundle_init_random(&b, seed);
    int rc = checkpoint_save(out, &b, &e);
    if (rc) fprintf(stderr, "pocket init: %s\n", e.msg);
    else {
        config_print(&cfg, stdout);
        printf("wrote %s (seed %llu)\n", out, (unsigned long long)seed);
    }
    bundle_free(&b);
    return rc ? 1 : 0;
}
