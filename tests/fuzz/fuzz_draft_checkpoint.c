// libFuzzer target: an HDF5 speculative-draft checkpoint (the bytes written to
// a file) through what the commands read from one: the dispatch of `pocket
// inspect` (draft_checkpoint_is) and its report, the config alone
// (draft_checkpoint_read_config), draft_checkpoint_load for a target of the
// PEFT fixtures' config (tests/fixtures/hf/qwen3-tied), checked against a
// target hash and without, and a resumed run's /state and /optim over the
// draft's table. Errors are fine; a crash, a sanitizer report, a leak, a
// timeout or an allocation over the limit is a bug.
#include "../../formats/draft_checkpoint.h"
#include "../../util/h5.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("draft.h5", data, size);
    PtError e;
    // Every loader below opens the file through h5_open_read, which refuses what h5_probe refuses: one
    // probe here keeps a file libhdf5 loops on to one CPU bound, not one per loader.
    if (h5_probe(path, &e)) return 0;
    draft_checkpoint_is(path);
    draft_checkpoint_inspect(path, fuzz_devnull(), &e);
    DraftConfig dc;
    char hash[65];
    draft_checkpoint_read_config(path, &dc, hash, &e);
    Draft d;
    if (draft_checkpoint_load(path, fuzz_lora_base(), "0000000000000000000000000000000000000000000000000000000000000000",
                              "the fuzz target", &d, &e) == 0)
        draft_free(&d);
    if (draft_checkpoint_load(path, fuzz_lora_base(), NULL, NULL, &d, &e) == 0) {
        fuzz_train_state(path, &d.tt);
        draft_free(&d);
    }
    return 0;
}
