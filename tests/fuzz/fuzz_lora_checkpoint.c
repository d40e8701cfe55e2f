// libFuzzer target: an HDF5 LoRA adapter checkpoint (the bytes written to a
// file) through what the commands read from one: the dispatch of `pocket
// inspect` (lora_checkpoint_is) and its report, the base kind
// (lora_checkpoint_base_int4), lora_checkpoint_load for a base of the PEFT
// fixtures' config (tests/fixtures/hf/qwen3-tied), checked against a base
// hash and without, and a resumed run's /state and /optim over the adapter's
// table. Errors are fine; a crash, a sanitizer report, a leak, a timeout or
// an allocation over the limit is a bug.
#include "../../formats/lora_checkpoint.h"
#include "../../util/h5.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("adapter.h5", data, size);
    PtError e;
    // Every loader below opens the file through h5_open_read, which refuses what h5_probe refuses: one
    // probe here keeps a file libhdf5 loops on to one CPU bound, not one per loader.
    if (h5_probe(path, &e)) return 0;
    lora_checkpoint_is(path);
    lora_checkpoint_base_int4(path, &e);
    lora_checkpoint_inspect(path, fuzz_devnull(), &e);
    LoraAdapter a;
    if (lora_checkpoint_load(path, fuzz_lora_base(), "0000000000000000000000000000000000000000000000000000000000000000",
                             "the fuzz base", &a, &e) == 0)
        lora_adapter_free(&a);
    if (lora_checkpoint_load(path, fuzz_lora_base(), NULL, NULL, &a, &e) == 0) {
        fuzz_train_state(path, &a.tt);
        lora_adapter_free(&a);
    }
    return 0;
}
