// dropout_mask.h: which values inverted dropout keeps, as a pure function of
// (seed, index), written once for the CPU kernel (ops/dropout.c), the CUDA
// kernel (cuda/elementwise.cu) and the seeds the decoder and the trainer
// derive: nothing is stored, the backward regenerates the mask, and the bits
// do not depend on the device or the thread count.
// Plain C and CUDA C++ alike (integer arithmetic only).
#pragma once
#include <stdint.h>

#ifdef __CUDACC__
#define DM_FN static inline __host__ __device__
#else
#define DM_FN static inline
#endif

// The i-th output of splitmix64 started at `seed`: a counter-based hash, so
// element i needs no state from elements before it.
DM_FN uint64_t dropout_hash(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The drop threshold of rate p in [0, 1): element i is dropped iff the top 32
// bits of its hash are below it (probability threshold / 2^32 ~ p).
DM_FN uint32_t dropout_threshold(float p) { return (uint32_t)((double)p * 4294967296.0); }

DM_FN int dropout_keep(uint64_t seed, uint64_t i, uint32_t threshold) {
    return (uint32_t)(dropout_hash(seed, i) >> 32) >= threshold;
}

// The factor kept values are multiplied by: 1 / (1 - p), rounded to float once.
DM_FN float dropout_scale(float p) { return 1.0f / (1.0f - p); }

// A seed from a parent seed and a child index (a micro-batch's seed and a
// (layer, target) pair): one more splitmix64 step, so children are independent.
DM_FN uint64_t dropout_child_seed(uint64_t seed, uint64_t child) { return dropout_hash(seed ^ 0xD1B54A32D192ED03ull, child); }
