// libFuzzer target for the GGUF import (formats/gguf_import.c) over the parse:
// the config from the <arch>.* keys, the tensor checks and conversion, the
// int4 quantizer state recovered from Q4_0/Q4_1 blocks, and the tokenizer
// rebuilt from the tokenizer.ggml.* keys and loaded. Errors are fine; a crash,
// a sanitizer report, a leak or an oversized allocation is a bug.
// Build and run: see tests/fuzz/README.md.
#include <stdint.h>
#include "../../formats/gguf_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    GgufFile f;
    PtError e;
    if (gguf_parse(&f, data, size, "fuzz.gguf", &e)) return 0;
    ModelBundle b;
    GgufInt4Import int4;
    if (gguf_import_file_int4(&f, &b, &int4, &e) == 0) {
        if (int4.restored) qat_free(&int4.q);
        bundle_free(&b);
    }
    gguf_close(&f);
    return 0;
}
