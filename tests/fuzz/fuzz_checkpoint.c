// libFuzzer target: an HDF5 checkpoint (the bytes written to a file, as the
// commands take a path) through what the commands read from one:
// checkpoint_load (/config, the tensor table, /params, /tokenizer), the int4
// state `--int4`, `quantize` and the exporters take (/qat: the spec, scales,
// zeros, moments, frozen codes, else RTN from the weights), the training
// state a resumed run reads (/state, /optim/m, /optim/v) and `pocket
// inspect` (to /dev/null). Errors are fine; a crash, a sanitizer report, a
// leak, a timeout or an allocation over the limit is a bug.
#include "../../formats/checkpoint.h"
#include "../../formats/int4_weights.h"
#include "../../util/h5.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("ckpt.h5", data, size);
    ModelBundle b;
    PtError e;
    // Every loader below opens the file through h5_open_read, which refuses what h5_probe refuses: one
    // probe here keeps a file libhdf5 loops on to one CPU bound, not one per loader.
    if (h5_probe(path, &e)) return 0;
    if (checkpoint_load(path, &b, &e) == 0) {
        QatState q;
        int from_qat;
        if (int4_load_state(&b, path, NULL, &q, &from_qat, &e) == 0) qat_free(&q);
        size_t n = b.tt.total;
        float *m = malloc(n * sizeof(float) + 1), *v = malloc(n * sizeof(float) + 1);
        TrainState st;
        checkpoint_load_train(path, &b.tt, 0, n, m, v, &st, &e);
        checkpoint_load_train(path, &b.tt, n / 3, n - n / 3, m, v, &st, &e);   // a rank's shard
        free(m);
        free(v);
        bundle_free(&b);
    }
    checkpoint_inspect(path, fuzz_devnull(), &e);
    return 0;
}
