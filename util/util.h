// util.h: errors, checked allocation and file I/O, atomic output files,
// half-precision conversions. No global state.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// Functions that can fail on bad input return -1 and fill a PtError with one
// line naming the file, the place and the problem. Out-of-memory is fatal.
typedef struct { char msg[1024]; } PtError;
int pt_fail(PtError *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// C++ (the CUDA backend's .cu files include these headers) spells it [[noreturn]].
#ifdef __cplusplus
#define PT_NORETURN [[noreturn]]
#else
#define PT_NORETURN _Noreturn
#endif
PT_NORETURN void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void *xmalloc(size_t bytes, const char *what);
void *xcalloc(size_t count, size_t size, const char *what);
void *xaligned(size_t bytes, const char *what);   // 64-byte aligned, zeroed; free() it
char *xstrdup(const char *s);

// Whole-file read; *data is NUL-terminated (one extra byte), free() it.
int read_whole_file(const char *path, uint8_t **data, size_t *len, PtError *e);
int path_is_dir(const char *path);
int path_exists(const char *path);
int64_t file_size(const char *path);   // bytes of a regular file; -1 when it is not one
char *path_join(const char *dir, const char *name);   // malloc'd

// Output files are written to PATH.tmp.PID and renamed over PATH on commit, so
// a crash or an error never leaves a half-written PATH behind.
typedef struct { FILE *f; char *path; char *tmp; } AtomicFile;
int atomic_open(AtomicFile *af, const char *path, PtError *e);
int atomic_commit(AtomicFile *af, PtError *e);   // fflush+fsync+rename
void atomic_abort(AtomicFile *af);                // close and unlink the temp file
char *temp_path_for(const char *path);            // "PATH.tmp.PID", malloc'd

// bf16 / fp16 <-> fp32 (round to nearest even, NaN preserved)
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

double now_seconds(void);
long peak_rss_kb(void);

// Deterministic RNG (splitmix64 seeding xoshiro256**): same stream on every machine.
typedef struct { uint64_t s[4]; } Rng;
void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_next(Rng *r);
double rng_uniform(Rng *r);          // [0,1)
double rng_normal(Rng *r);           // N(0,1), Box-Muller
