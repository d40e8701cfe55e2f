// libFuzzer target: an HF model directory as `pocket import HF_DIR` reads it
// (hf_import: config.json, then model.safetensors, or the shards
// model.safetensors.index.json names; every tensor of the table with its
// shape and dtype, the tied head, extras refused; tokenizer.json and
// tokenizer_config.json checked), and `pocket inspect HF_DIR`'s config.
// Input: config.json, model.safetensors, model.safetensors.index.json,
// tokenizer_config.json, cut at FUZZ_PART_MARK (a part left out or empty:
// the file is absent; an index may name model.safetensors or any of these
// as a shard). Errors are fine; a crash, a sanitizer report, a leak, a
// timeout or an allocation over the limit is a bug.
#include "../../formats/hf_import.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const FILES[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "tokenizer_config.json"};
    fuzz_write_parts(data, size, FILES, 4);
    ModelBundle b;
    PtError e;
    ModelConfig c;
    if (hf_is_model_dir(fuzz_dir())) config_load(&c, fuzz_dir(), &e);
    if (hf_import(fuzz_dir(), &b, &e) == 0) bundle_free(&b);
    return 0;
}
