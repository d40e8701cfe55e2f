#include "bytes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bytes_reserve(Bytes *b, size_t more) {
    if (b->len + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        fprintf(stderr, "out of memory growing %s to %zu bytes\n", b->what ? b->what : "a buffer", cap);
        exit(1);
    }
    b->p = p;
    b->cap = cap;
}

void bytes_put(Bytes *b, const void *src, size_t n) {
    bytes_reserve(b, n);
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

void bytes_put_zeros(Bytes *b, size_t n) {
    bytes_reserve(b, n);
    memset(b->p + b->len, 0, n);
    b->len += n;
}
