#include "util.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int pt_fail(PtError *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("pocket: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *xcalloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die("out of memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}

void *xaligned(size_t bytes, const char *what) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) die("out of memory allocating %zu bytes for %s", bytes, what);
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n, "string");
    memcpy(d, s, n);
    return d;
}

int read_whole_file(const char *path, uint8_t **data, size_t *len, PtError *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return pt_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return pt_fail(e, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = xmalloc(n + 1, path);
    if (n && fread(buf, 1, n, f) != n) {
        fclose(f);
        free(buf);
        return pt_fail(e, "%s: read error", path);
    }
    fclose(f);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

int path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
}

char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = xmalloc(a + b + 2, "path");
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

char *temp_path_for(const char *path) {
    size_t n = strlen(path) + 32;
    char *t = xmalloc(n, "temp path");
    snprintf(t, n, "%s.tmp.%ld", path, (long)getpid());
    return t;
}

int atomic_open(AtomicFile *af, const char *path, PtError *e) {
    af->path = xstrdup(path);
    af->tmp = temp_path_for(path);
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        int err = errno;
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return pt_fail(e, "%s: cannot create: %s", path, strerror(err));
    }
    return 0;
}

int atomic_commit(AtomicFile *af, PtError *e) {
    int bad = ferror(af->f);
    if (fflush(af->f) != 0) bad = 1;
    if (!bad && fsync(fileno(af->f)) != 0) bad = 1;
    if (fclose(af->f) != 0) bad = 1;
    af->f = NULL;
    if (bad || rename(af->tmp, af->path) != 0) {
        int err = errno;
        unlink(af->tmp);
        pt_fail(e, "%s: write failed: %s", af->path, strerror(err));
        free(af->path);
        free(af->tmp);
        return -1;
    }
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    return 0;
}

void atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    af->f = NULL;
    af->path = af->tmp = NULL;
}

float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: renormalise
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);       // NaN
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);      // overflow -> inf
    if (absu < 0x38800000u) {                                        // subnormal or zero
        if (absu < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absu >> 23, m = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;          // 14..24 bits fall below the fp16 subnormal unit
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absu - 0x38000000u;   // rebias exponent 127 -> 15
    uint32_t out = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (out & 1u))) out++;
    return (uint16_t)(sign | out);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

long peak_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(Rng *r) { return (rng_next(r) >> 11) * 0x1.0p-53; }

double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

