// args.c: the pocket commands' argument parsing (args.h).
#include "args.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *command = "";

void args_command(const char *name) { command = name; }

int arg_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pocket %s: ", command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return ARGS_USAGE;
}

const char *arg_value(int argc, char **argv, int *i, const char *flag) {
    size_t n = strlen(flag);
    const char *a = argv[*i];
    if (strncmp(a, flag, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != 0) return NULL;
    if (*i + 1 >= argc) exit(arg_usage("%s needs a value (see --help)", flag));
    return argv[++*i];
}

// Whether v is a whole decimal number as strto* read it: no leading space,
// a sign only where the range has negative numbers, something after it.
static int plain(const char *v, int sign_ok) {
    if (!*v || isspace((unsigned char)*v)) return 0;
    return sign_ok || (*v != '-' && *v != '+');
}

// v as a whole decimal number in [lo, hi] into *x; 0 on success (nothing printed).
static int parse_long(const char *v, long lo, long hi, long *x) {
    if (!plain(v, lo < 0)) return -1;
    char *end;
    errno = 0;
    *x = strtol(v, &end, 10);
    return *end || errno || *x < lo || *x > hi ? -1 : 0;
}

int arg_long(const char *flag, const char *v, long lo, long hi, long *out) {
    long x;
    if (parse_long(v, lo, hi, &x)) {
        arg_usage("%s '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int arg_int(const char *flag, const char *v, int lo, int hi, int *out) {
    long x;
    if (arg_long(flag, v, lo, hi, &x)) return -1;
    *out = (int)x;
    return 0;
}

int arg_even(const char *flag, const char *v, int lo, int hi, int *out) {
    long x;
    if (parse_long(v, lo, hi, &x) || x % 2) {
        arg_usage("%s '%s' is not an even integer in [%d, %d]", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int arg_u64(const char *flag, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = plain(v, 0) ? strtoull(v, &end, 10) : 0;
    if (!plain(v, 0) || *end || errno) {
        arg_usage("%s '%s' is not an integer in [0, %" PRIu64 "]", flag, v, UINT64_MAX);
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

int arg_ids(const char *s, const char *seps, int vocab, int least, const char *what, const char *entry, int **out,
            int *n_out, PtError *e) {
    int n = 0, cap = 64;
    int *ids = xmalloc((size_t)cap * sizeof(int), "token ids");
    const char *p = s;
    for (;;) {
        p += strspn(p, seps);
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && !strchr(seps, *end))) {
            free(ids);
            return pt_fail(e, "%s: %s %d is not an integer", what, entry, n + 1);
        }
        if (v < 0 || v >= vocab) {
            free(ids);
            return pt_fail(e, "%s: %s %d = %ld is outside the vocabulary [0, %d)", what, entry, n + 1, v, vocab);
        }
        if (n == cap && !(ids = realloc(ids, (size_t)(cap *= 2) * sizeof(int)))) die("out of memory reading %s", what);
        ids[n++] = (int)v;
        p = end;
    }
    if (n < least) {
        free(ids);
        return least == 1 ? pt_fail(e, "%s: no token ids given", what)
                          : pt_fail(e, "%s: needs at least %d token ids, found %d", what, least, n);
    }
    *out = ids;
    *n_out = n;
    return 0;
}

int arg_threads(const char *flag, const char *v, int *out) { return arg_int(flag, v, 0, ARGS_THREADS_MAX, out); }

int arg_real(const char *flag, const char *v, double lo, double hi, int open, double *out) {
    char *end;
    errno = 0;
    const int lo_open = open & ARG_LO_OPEN, hi_open = open & ARG_HI_OPEN;
    double x = plain(v, 1) ? strtod(v, &end) : NAN;
    if (!plain(v, 1) || *end || errno || !isfinite(x) || (lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi)) {
        arg_usage("%s '%s' is not a number in %c%g, %g%c", flag, v, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
        return -1;
    }
    *out = x;
    return 0;
}
