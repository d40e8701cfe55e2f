// libFuzzer target: an HF config.json to a model config, as `pocket init
// --model config.json`, `pocket import HF_DIR` and `pocket inspect HF_DIR`
// read it (config_from_hf_json, config_validate), then what those commands
// do with an accepted config: print it, size its parameters and FLOPs, and
// write it back as config.json, which must parse to the same config (the
// round trip the HF export relies on). Errors are fine; a crash, a sanitizer
// report, a leak, a timeout, an allocation over the limit or a round trip
// that changes the config is a bug.
#include <string.h>
#include "../../model/config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = malloc(size + 1);
    memcpy(json, data, size);
    json[size] = 0;
    ModelConfig c;
    PtError e;
    if (config_from_hf_json(&c, json, "fuzz/config.json", &e) == 0) {
        config_print(&c, fuzz_devnull());
        config_param_count(&c);
        config_train_flops_per_token(&c, 128);
        char *back = config_to_hf_json(&c);
        ModelConfig again;
        if (config_from_hf_json(&again, back, "round trip", &e)) {
            fprintf(stderr, "fuzz: the written config.json does not load: %s\n%s\n", e.msg, back);
            abort();
        }
        if (memcmp(&c, &again, sizeof c)) {
            fprintf(stderr, "fuzz: config.json round trip changed the config:\n%s\n", back);
            abort();
        }
        free(back);
    }
    free(json);
    return 0;
}
