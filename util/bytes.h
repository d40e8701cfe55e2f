// bytes.h: a growable byte buffer for writers that build a file in memory
// (GGUF metadata, MNN's flatbuffer graph and tokenizer file). Growth is
// checked: running out of memory ends the program with a message naming
// `what`, as xmalloc does.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *p;
    size_t len, cap;
    const char *what;   // for the out-of-memory message; may be NULL
} Bytes;

// Room for `more` bytes past len (the new bytes are not initialised).
void bytes_reserve(Bytes *b, size_t more);
void bytes_put(Bytes *b, const void *src, size_t n);
void bytes_put_zeros(Bytes *b, size_t n);
// Little-endian integers (the host is little-endian, as every format here).
static inline void bytes_put_u8(Bytes *b, unsigned v) { uint8_t x = (uint8_t)v; bytes_put(b, &x, 1); }
static inline void bytes_put_u16(Bytes *b, unsigned v) { uint16_t x = (uint16_t)v; bytes_put(b, &x, 2); }
static inline void bytes_put_u32(Bytes *b, uint32_t v) { bytes_put(b, &v, 4); }
static inline void bytes_put_u64(Bytes *b, uint64_t v) { bytes_put(b, &v, 8); }
