// libFuzzer target for the GGUF reader alone (formats/gguf_reader.c): parses
// the input and, when it parses, looks up every metadata key through every
// typed lookup, reads every array element, finds every tensor by name,
// converts every tensor to fp32 and prints the whole file (gguf_describe,
// the int4 summary included) to /dev/null. Errors are fine; a crash, a
// sanitizer report, a leak or an oversized allocation is a bug.
// Build and run: see tests/fuzz/README.md.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "../../formats/gguf_reader.h"

static volatile uint64_t sink;   // keeps the lookups from being optimised away

static void look_up_every_key(const GgufFile *f) {
    PtError e;
    for (int64_t i = 0; i < f->n_kv; i++) {
        const GgufKV *kv = f->kv + i;
        if (gguf_find_kv(f, kv->key) != kv) abort();   // keys are unique, so the lookup finds this one
        int64_t n;
        double x;
        int b;
        const char *s;
        size_t len;
        // Each lookup either matches the type or reports it; both paths run.
        if (gguf_get_int(f, kv->key, &n, &e) == 1) sink += (uint64_t)n;
        if (gguf_get_float(f, kv->key, &x, &e) == 1) sink += x == x;
        if (gguf_get_bool(f, kv->key, &b, &e) == 1) sink += (uint64_t)b;
        if (gguf_get_str(f, kv->key, &s, &len, &e) == 1 && len) sink += (uint8_t)s[len - 1];
        if (kv->type != GGUF_TYPE_ARRAY) continue;
        for (uint64_t j = 0; j < kv->arr_n; j++) {
            // gguf_arr_int is for integer and bool elements (its contract).
            if (kv->arr_type == GGUF_TYPE_STRING) {
                gguf_arr_str(kv, j, &s, &len);
                if (len) sink += (uint8_t)s[len - 1];
            } else if (kv->arr_type != GGUF_TYPE_FLOAT32 && kv->arr_type != GGUF_TYPE_FLOAT64) {
                sink += (uint64_t)gguf_arr_int(kv, j);
            }
        }
    }
}

static void read_every_tensor(const GgufFile *f) {
    PtError e;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const GgufTensor *t = f->t + i;
        if (gguf_find_tensor(f, t->name) != t) abort();   // names are unique
        if (t->numel > (1u << 22)) continue;              // the parse bounded nbytes by the input; this bounds time
        float *x = malloc(t->numel * sizeof(float) + 1);
        if (x && gguf_read_f32(f, t, x, &e) == 0 && t->numel) sink += x[t->numel - 1] == x[0];
        free(x);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    GgufFile f;
    PtError e;
    if (gguf_parse(&f, data, size, "fuzz.gguf", &e)) return 0;
    look_up_every_key(&f);
    read_every_tensor(&f);
    gguf_describe(&f, devnull, &e);
    gguf_close(&f);
    return 0;
}
