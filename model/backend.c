// backend.c: what every backend shares: the workspace the ops borrow scratch
// from, and the RoPE table (angles computed on the host, then uploaded).
#include "backend.h"
#include <math.h>

void dev_reserve(Device *d, size_t bytes) {
    if (bytes <= d->ws_bytes) return;
    if (d->ws_used) die("dev_reserve: the workspace is in use by an op");
    if (d->ws) d->be->release(d, d->ws);
    d->ws = d->be->alloc(d, bytes, "device workspace");
    d->ws_bytes = bytes;
}

void *dev_scratch(Device *d, size_t bytes, const char *what) {
    size_t start = (d->ws_used + 63) / 64 * 64;
    if (start + bytes > d->ws_bytes)
        die("%s: %zu bytes of scratch past the %zu reserved (%zu in use): the workspace was planned too small",
            what, bytes, d->ws_bytes, start);
    d->ws_used = start + bytes;
    return d->ws + start;
}

void *dev_mirror(Device *d, void *host, size_t bytes, const char *what) {
    if (d->be->host_memory) return host;
    void *p = d->be->alloc(d, bytes, what);
    OP(d, upload, p, host, bytes);
    return p;
}

void dev_unmirror(Device *d, void *mirror, const void *host) {
    if (mirror && mirror != host) d->be->release(d, mirror);
}

double dev_grad_norm(Device *d, const float *grads, size_t n) {
    const size_t chunks = (n + GRAD_NORM_CHUNK - 1) / GRAD_NORM_CHUNK, mark = dev_scratch_mark(d);
    double *partials = dev_scratch(d, chunks * sizeof(double), "gradient norm partials");
    double *host = xmalloc((chunks ? chunks : 1) * sizeof(double), "gradient norm partials"), sum = 0.0;
    OP(d, grad_sumsq, grads, n, partials);
    OP(d, download, host, partials, chunks * sizeof(double));
    for (size_t k = 0; k < chunks; k++) sum += host[k];
    free(host);
    dev_scratch_release(d, mark);
    return sqrt(sum);
}

void dev_free(Device *d) {
    if (d->ws) d->be->release(d, d->ws);
    if (d->be && d->be->destroy) d->be->destroy(d);
    free(d->impl);
    *d = (Device){0};
}

// The float arithmetic of transformers: exponent (float)(2i) / (float)hd,
// inv_freq = 1 / theta^exponent, angle = (float)pos * inv_freq, all in float,
// then float cos and sin.
void rope_table_init(RopeTable *rt, Device *d, int max_pos, int head_dim, float theta) {
    if (head_dim <= 0 || head_dim % 2 != 0 || max_pos <= 0)
        die("rope_table_init: head_dim %d must be even and positive, max_pos %d positive", head_dim, max_pos);
    int half = head_dim / 2;
    size_t bytes = (size_t)max_pos * half * sizeof(float);
    float *cos_host = xmalloc(bytes, "rope cos table"), *sin_host = xmalloc(bytes, "rope sin table");
    float *inv_freq = xmalloc((size_t)half * sizeof(float), "rope inv_freq");
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];
            cos_host[(size_t)p * half + i] = cosf(angle);
            sin_host[(size_t)p * half + i] = sinf(angle);
        }
    rt->max_pos = max_pos;
    rt->half = half;
    rt->cos = d->be->alloc(d, bytes, "rope cos table");
    rt->sin = d->be->alloc(d, bytes, "rope sin table");
    OP(d, upload, rt->cos, cos_host, bytes);
    OP(d, upload, rt->sin, sin_host, bytes);
    free(inv_freq);
    free(cos_host);
    free(sin_host);
}

void rope_table_free(RopeTable *rt, Device *d) {
    if (rt->cos) d->be->release(d, rt->cos);
    if (rt->sin) d->be->release(d, rt->sin);
    *rt = (RopeTable){0};
}
