// libFuzzer target: an HDF5 token dataset (CPT, SFT or choice; the bytes
// written to a file) as training, eval and `pocket inspect` read it:
// dataset_is_token_file (inspect's dispatch), dataset_open (attributes,
// /tokens in uint16 or uint32, /doc_offsets, /loss_mask, /choice_offsets,
// /choice_label, and their validation), the tokenizer check, the loader over
// what opened (a few batches of the packing training does, and the one-pass
// eval stream), and dataset_inspect with the fixture tokenizer (decoding
// whatever ids the file holds) to /dev/null. Errors are fine; a crash, a
// sanitizer report, a leak, a timeout or an allocation over the limit is a bug.
#include "../../data/loader.h"
#include "../../util/h5.h"
#include "fuzz_util.h"

// A few batches, as training (B 2, T 16, two ranks' views) and eval (one pass) take them.
static void load_batches(const Dataset *d) {
    Batch b;
    batch_alloc(&b, 2, 16);
    for (int pass = 0; pass < 2; pass++) {
        Loader l;
        PtError e;
        if (loader_open(&l, d, 2, 16, 7, pass, 2, &e)) continue;
        if (pass) loader_set_one_pass(&l);
        else loader_set_doc_mask(&l, 1);
        for (int k = 0; k < 4 && !loader_done(&l); k++) loader_next(&l, &b);
        LoaderCursor c;
        loader_get_cursor(&l, &c);
        loader_set_cursor(&l, &c, &e);
        loader_close(&l);
    }
    batch_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("data.h5", data, size);
    PtError e;
    // Every loader below opens the file through h5_open_read, which refuses what h5_probe refuses: one
    // probe here keeps a file libhdf5 loops on to one CPU bound, not one per loader.
    if (h5_probe(path, &e)) return 0;
    if (!dataset_is_token_file(path)) return 0;
    Dataset d;
    if (dataset_open(&d, path, &e) == 0) {
        dataset_check_tokenizer(&d, tokenizer_hash(fuzz_tokenizer()), &e);
        load_batches(&d);
        dataset_close(&d);
    }
    dataset_inspect(path, fuzz_tokenizer(), fuzz_devnull(), &e);
    dataset_inspect(path, NULL, fuzz_devnull(), &e);
    return 0;
}
