// libFuzzer target for the GGUF reader: parses the input as a GGUF file, and
// when it parses, converts every convertible tensor to fp32 and runs the full
// import (config, tensor checks, int4 state from Q4 blocks, tokenizer rebuild
// and load). Any crash,
// sanitizer report, leak or oversized allocation is a bug; errors are fine.
// Build and run: see tests/fuzz/README.md.
#include <stdint.h>
#include <stdlib.h>
#include "../../formats/gguf_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    GgufFile f;
    PtError e;
    if (gguf_parse(&f, data, size, "fuzz.gguf", &e)) return 0;
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const GgufTensor *t = &f.t[i];
        if (t->numel > (1u << 22)) continue;
        float *x = malloc(t->numel * sizeof(float) + 1);
        if (x) gguf_read_f32(&f, t, x, &e);
        free(x);
    }
    // The import with the int4 state: block grouping, zero-point recovery.
    ModelBundle b;
    GgufInt4Import int4;
    if (gguf_import_file_int4(&f, &b, &int4, &e) == 0) {
        if (int4.restored) qat_free(&int4.q);
        bundle_free(&b);
    }
    gguf_close(&f);
    return 0;
}
