// sha256.h: SHA-256 (FIPS 180-4), used to fingerprint tokenizer files.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t state[8];
    uint64_t total_bytes;
    uint8_t block[64];
    size_t block_len;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t len);
void sha256_final(Sha256 *s, uint8_t digest[32]);
// One-shot digest written as 64 lowercase hex digits plus a NUL.
void sha256_hex(const void *data, size_t len, char hex[65]);
