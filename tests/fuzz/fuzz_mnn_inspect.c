// libFuzzer target: an MNN package as `pocket inspect DIR` reads it
// (mnn_inspect: the llm.mnn flatbuffer graph through the bounds-checked
// reader, every op's weight references checked against llm.mnn.weight with
// its IDST headers and alpha tables, config.json, and llm_config.json's tied
// embedding offsets). Input: llm.mnn, llm.mnn.weight, config.json and
// llm_config.json, cut at FUZZ_PART_MARK (a part left out or empty: the file
// is absent). Errors are fine; a crash, a sanitizer report, a leak, a timeout
// or an allocation over the limit is a bug.
#include "../../export/mnn_inspect.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const FILES[] = {"llm.mnn", "llm.mnn.weight", "config.json", "llm_config.json"};
    fuzz_write_parts(data, size, FILES, 4);
    PtError e;
    if (mnn_is_package(fuzz_dir())) mnn_inspect(fuzz_dir(), fuzz_devnull(), &e);
    return 0;
}
