// libFuzzer target: a .safetensors file as `pocket inspect` and the HF and
// PEFT importers open it (st_open: the header length, the JSON header, the
// dtypes, shapes and offsets of the tensor table, __metadata__), then every
// tensor found by name and converted to fp32 where its dtype allows, every
// metadata key looked up, and the inspect report (to /dev/null). Errors are
// fine; a crash, a sanitizer report, a leak, a timeout or an allocation over
// the limit is a bug.
#include "../../formats/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("fuzz.safetensors", data, size);
    StFile f;
    PtError e;
    if (st_open(&f, path, &e) == 0) {
        for (int i = 0; i < f.n; i++) {
            const StTensor *t = &f.t[i];
            if (st_find(&f, t->name) != t) abort();   // names are unique
            if (t->end - t->begin != t->numel * (uint64_t)t->dtype_size) abort();   // st_open checked the size
            st_data(&f, t);
            float *x = malloc(t->numel * sizeof(float) + 1);   // numel <= the file's size: the tensors tile it
            st_read_f32(&f, t, x, &e);
            free(x);
        }
        for (int i = 0; i < f.n_meta; i++)
            if (!st_metadata(&f, f.meta_key[i])) abort();
        st_close(&f);
    }
    st_inspect(path, fuzz_devnull(), &e);
    return 0;
}
