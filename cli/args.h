// args.h: the arguments of every pocket command, read one way. A usage error
// (an unknown flag, a flag without its value, a number that does not parse or
// lies outside its range, a missing or conflicting option) is one line on
// stderr, "pocket COMMAND: ...", and exit status ARGS_USAGE (2), before
// anything is read or written; a failure after that exits 1. A number's
// message names the flag, the value given and the range:
//
//     pocket eval: --batch '0' is not an integer in [1, 65536]
//     pocket generate: --top-p 'x' is not a number in (0, 1]
//
// The number parsers return 0, or -1 after printing that line; the caller
// returns ARGS_USAGE.
#pragma once
#include <stdint.h>
#include "../util/util.h"

#define ARGS_USAGE 2
// Every --threads: 0 (the default: OMP_NUM_THREADS, else all cores) to this.
#define ARGS_THREADS_MAX 4096

// The command the messages name (main.c sets it before the command runs).
void args_command(const char *name);

// The value of `flag` when argv[*i] is it: "--flag VALUE" (*i moves past the
// value) or "--flag=VALUE"; NULL when argv[*i] is something else. A flag at
// the end with no value is a usage error: its line, then exit(ARGS_USAGE).
const char *arg_value(int argc, char **argv, int *i, const char *flag);

// A decimal integer in [lo, hi] (no sign for a lo >= 0, no spaces, nothing after it).
int arg_long(const char *flag, const char *v, long lo, long hi, long *out);
int arg_int(const char *flag, const char *v, int lo, int hi, int *out);
// The same for an even integer ("is not an even integer in [lo, hi]").
int arg_even(const char *flag, const char *v, int lo, int hi, int *out);
// Any 64-bit unsigned integer (a seed): [0, 18446744073709551615].
int arg_u64(const char *flag, const char *v, uint64_t *out);
// --threads N: [0, ARGS_THREADS_MAX].
int arg_threads(const char *flag, const char *v, int *out);
// A finite decimal number in [lo, hi], or without an end that `open` names:
// "(lo, hi]" with ARG_LO_OPEN, "[lo, hi)" with ARG_HI_OPEN, or both.
enum { ARG_CLOSED = 0, ARG_LO_OPEN = 1, ARG_HI_OPEN = 2 };
int arg_real(const char *flag, const char *v, double lo, double hi, int open, double *out);

// Token ids in [0, vocab), separated by any of `seps` (the text s: a flag's
// value or a file's), at least `least` of them, into a malloc'd array. A bad
// one is named by its position: "WHAT: ENTRY 3 is not an integer", "WHAT:
// ENTRY 3 = 70000 is outside the vocabulary [0, 65536)" (into e: the ids are
// checked against the model, once it is open).
int arg_ids(const char *s, const char *seps, int vocab, int least, const char *what, const char *entry, int **out,
            int *n_out, PtError *e);

// Any other usage error: "pocket COMMAND: " and the message on one line.
// Returns ARGS_USAGE, the exit status.
__attribute__((format(printf, 1, 2))) int arg_usage(const char *fmt, ...);
