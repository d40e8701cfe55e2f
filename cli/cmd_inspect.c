// pocket inspect: says what a file holds (checkpoint, LoRA adapter,
// speculative draft, token dataset, safetensors file, GGUF file, HF model
// directory or MNN package).
#include <hdf5.h>
#include <string.h>
#include "../data/dataset.h"
#include "../data/tokenizer.h"
#include "../export/mnn_inspect.h"
#include "../formats/gguf_reader.h"
#include "../formats/safetensors.h"
#include "../formats/checkpoint.h"
#include "../formats/draft_checkpoint.h"
#include "../formats/lora_checkpoint.h"
#include "../util/h5.h"
#include "args.h"
#include "commands.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket inspect FILE [--tokenizer tokenizer.json|CKPT.h5]\n\n"
            "  CKPT.h5            config, tensors, shapes, sizes\n"
            "  ADAPTER.h5         a LoRA adapter: rank, alpha, targets, the base's hash, tensors\n"
            "  DRAFT.h5           a speculative draft: layers, block, target layers, mask token, the target's\n"
            "                     hash, tensors\n"
            "  DATA.h5            token counts, tokenizer hash, a decoded sample (needs --tokenizer)\n"
            "  X.safetensors      tensors, dtypes, shapes, sizes\n"
            "  X.gguf             metadata keys and values, tensors, types, shapes, offsets\n"
            "  HF_DIR             config.json and the safetensors files in it\n"
            "  MNN_DIR            an MNN package (llm.mnn): ops per layer, weight offsets, int4 parameters,\n"
            "                     and a check that llm.mnn.weight agrees with every reference of the graph\n");
}

static int h5_has(const char *path, const char *name) {
    hid_t f = h5_open_read(path, NULL);   // a damaged file: the loader tried next says what is wrong
    if (f < 0) return 0;
    int has = H5Lexists(f, name, H5P_DEFAULT) > 0;
    H5Fclose(f);
    return has;
}

// A tokenizer from tokenizer.json or from a checkpoint's stored copy.
static int load_tokenizer(const char *path, Tokenizer **tok, PtError *e) {
    if (!checkpoint_is_hdf5(path)) return tokenizer_load_file(tok, path, e);
    ModelBundle b;
    if (checkpoint_load(path, &b, e)) return -1;
    int rc = b.tokenizer_json ? tokenizer_load(tok, b.tokenizer_json, b.tokenizer_json_len, path, e)
                              : pt_fail(e, "%s: the checkpoint stores no tokenizer.json", path);
    bundle_free(&b);
    return rc;
}

static int inspect_hf_dir(const char *dir, PtError *e) {
    ModelConfig cfg;
    if (config_load(&cfg, dir, e)) return -1;
    config_print(&cfg, stdout);
    char *single = path_join(dir, "model.safetensors");
    int rc = 0;
    if (path_exists(single)) rc = st_inspect(single, stdout, e);
    else printf("(sharded or no model.safetensors; inspect each shard file)\n");
    free(single);
    return rc;
}

int cmd_inspect(int argc, char **argv) {
    const char *file = NULL, *tok_path = NULL, *v;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((v = arg_value(argc, argv, &i, "--tokenizer"))) tok_path = v;
        else if (argv[i][0] == '-') return arg_usage("unknown option '%s' (see --help)", argv[i]);
        else if (!file) file = argv[i];
        else return arg_usage("one FILE at a time ('%s')", argv[i]);
    }
    if (!file) {
        help(stderr);
        return ARGS_USAGE;
    }
    PtError e;
    int rc;
    if (!path_exists(file)) rc = pt_fail(&e, "%s: no such file or directory", file);
    else if (path_is_dir(file) && mnn_is_package(file)) rc = mnn_inspect(file, stdout, &e);
    else if (path_is_dir(file)) rc = inspect_hf_dir(file, &e);
    else if (gguf_is_file(file) || (strlen(file) > 5 && !strcmp(file + strlen(file) - 5, ".gguf")))
        rc = gguf_inspect(file, stdout, &e);
    else if (checkpoint_is_hdf5(file) && h5_has(file, "tokens")) {
        Tokenizer *tok = NULL;
        rc = tok_path ? load_tokenizer(tok_path, &tok, &e) : 0;
        if (rc == 0) rc = dataset_inspect(file, tok, stdout, &e);
        if (tok) tokenizer_free(tok);
    } else if (lora_checkpoint_is(file)) rc = lora_checkpoint_inspect(file, stdout, &e);
    else if (draft_checkpoint_is(file)) rc = draft_checkpoint_inspect(file, stdout, &e);
    else if (checkpoint_is_hdf5(file)) rc = checkpoint_inspect(file, stdout, &e);
    else rc = st_inspect(file, stdout, &e);
    if (rc) fprintf(stderr, "pocket inspect: %s\n", e.msg);
    return rc ? 1 : 0;
}
