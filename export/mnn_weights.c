#include "mnn_weights.h"
#include <errno.h>
#include <string.h>

// Compares n bytes with the next ones of wf->expect.
static int same(MnnWeightFile *wf, const uint8_t *p, size_t n, PtError *e) {
    uint8_t buf[4096];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof buf ? n - done : sizeof buf;
        size_t got = fread(buf, 1, k, wf->expect);
        size_t i = 0;
        while (i < got && buf[i] == p[done + i]) i++;
        if (i < k)
            return pt_fail(e, "%s: %s at byte %lld", wf->path, i < got ? "differs" : "ends",
                           (long long)(wf->offset + (int64_t)(done + i)));
        done += k;
    }
    return 0;
}

static int put(MnnWeightFile *wf, const void *p, size_t n, PtError *e) {
    if (n && wf->f && fwrite(p, 1, n, wf->f) != n) return pt_fail(e, "%s: write failed at byte %lld: %s", wf->path,
                                                                  (long long)wf->offset, strerror(errno));
    if (n && !wf->f && wf->expect && same(wf, p, n, e)) return -1;
    wf->offset += (int64_t)n;
    return 0;
}

int mnn_idst_header_size(int64_t rows, int64_t cols) { return rows > 65535 || cols > 65535 ? 26 : 22; }

// Dimension count, the two dimensions (16 or 32 bit), then the table of the
// 16 signed values -8..7 that tells the loader the codes are linear.
static size_t idst_header(int64_t rows, int64_t cols, uint8_t *h) {
    size_t n = 0;
    h[n++] = 2;
    int wide = mnn_idst_header_size(rows, cols) == 26;
    for (int d = 0; d < 2; d++) {
        uint32_t v = (uint32_t)(d == 0 ? rows : cols);
        for (int b = 0; b < (wide ? 4 : 2); b++) h[n++] = (uint8_t)(v >> (8 * b));
    }
    h[n++] = 16;
    for (int v = -8; v < 8; v++) h[n++] = (uint8_t)(int8_t)v;
    return n;
}

// The packed codes and fp16 alpha of one linear, written (or compared) after its header.
static int put_int4(MnnWeightFile *wf, const QuantSpec *spec, const float *w, int64_t rows, int64_t cols,
                    const float *scale, const float *zero, size_t alpha_n, PtError *e) {
    size_t n = (size_t)rows * (size_t)cols, n_groups = quant_n_groups(spec, rows, cols);
    uint8_t *codes = xmalloc(n, "int4 codes");
    uint8_t *packed = xmalloc((n + 1) / 2, "packed int4 codes");
    uint16_t *alpha = xmalloc(alpha_n * sizeof(uint16_t), "int4 alpha");
    quant_codes(spec, w, rows, cols, scale, zero, codes);
    size_t packed_n = quant_pack4(codes, n, packed);
    for (size_t g = 0; g < n_groups; g++) {
        if (spec->symmetric) {
            alpha[g] = f32_to_f16(scale[g]);
        } else {
            alpha[2 * g] = f32_to_f16(zero[g]);
            alpha[2 * g + 1] = f32_to_f16(scale[g]);
        }
    }
    int rc = put(wf, packed, packed_n, e) || put(wf, alpha, alpha_n * 2, e) ? -1 : 0;
    free(codes);
    free(packed);
    free(alpha);
    return rc;
}

int mnn_write_linear(MnnWeightFile *wf, const QuantSpec *spec, const float *w, int64_t rows, int64_t cols,
                     const float *scale, const float *zero, MnnExternal *ext, PtError *e) {
    if (quant_check(spec, rows, cols, wf->path, e)) return -1;
    int64_t start = wf->offset;
    uint8_t header[26];
    size_t hn = idst_header(rows, cols, header);
    size_t packed_n = ((size_t)rows * (size_t)cols + 1) / 2;
    size_t alpha_n = spec->symmetric ? quant_n_groups(spec, rows, cols) : 2 * quant_n_groups(spec, rows, cols);
    if (put(wf, header, hn, e)) return -1;
    if (!wf->f && !wf->expect) wf->offset += (int64_t)(packed_n + alpha_n * 2);   // offsets only
    else if (put_int4(wf, spec, w, rows, cols, scale, zero, alpha_n, e)) return -1;
    ext->n_ext = 5;
    ext->ext[0] = start;
    ext->ext[1] = (int64_t)(hn + packed_n);
    ext->ext[2] = (int64_t)(alpha_n * 2);
    ext->ext[3] = 0;   // no bias: the runtime zero-fills it
    ext->ext[4] = 0;   // no sparse index
    return 0;
}

int mnn_write_rmsnorm(MnnWeightFile *wf, const float *gamma, int n, MnnExternal *ext, PtError *e) {
    float *beta = xcalloc((size_t)n, sizeof(float), "layernorm beta");
    int64_t start = wf->offset;
    int rc = put(wf, gamma, (size_t)n * 4, e) || put(wf, beta, (size_t)n * 4, e) ? -1 : 0;
    free(beta);
    if (rc) return -1;
    ext->n_ext = 3;
    ext->ext[0] = start;
    ext->ext[1] = (int64_t)n * 4;
    ext->ext[2] = (int64_t)n * 4;
    return 0;
}
