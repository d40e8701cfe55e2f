// libFuzzer target: a PEFT adapter folder as `pocket import PEFT_DIR --base
// BASE.h5` reads it (lora_peft_import: adapter_config.json's keys and every
// refusal of what this adapter cannot be, then adapter_model.safetensors'
// tensors against the table the base's config implies), for a base of the
// PEFT fixtures' config (tests/fixtures/hf/qwen3-tied). Input:
// adapter_config.json and adapter_model.safetensors cut at FUZZ_PART_MARK (a
// part left out or empty: the file is absent). Errors are fine; a crash, a
// sanitizer report, a leak, a timeout or an allocation over the limit is a bug.
#include "../../formats/lora_peft.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const FILES[] = {"adapter_config.json", "adapter_model.safetensors"};
    fuzz_write_parts(data, size, FILES, 2);
    PtError e;
    LoraAdapter a;
    if (lora_peft_is_dir(fuzz_dir()) && lora_peft_import(fuzz_dir(), fuzz_lora_base(), &a, &e) == 0) lora_adapter_free(&a);
    return 0;
}
