// libFuzzer target for the GGUF reader: parses the input as a GGUF file, and
// when it parses, converts every convertible tensor to fp32 and runs the full
// import (config, tensor checks, tokenizer rebuild and load). Any crash,
// sanitizer report, leak or oversized allocation is a bug; errors are fine.
// Build and run: see tests/fuzz/README.md.
#include <stdint.h>
#include <stdlib.h>
#include "../../model/gguf_import.h"

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
    ModelBundle b;
    if (gguf_import_file(&f, &b, &e) == 0) bundle_free(&b);
    gguf_close(&f);
    return 0;
}
