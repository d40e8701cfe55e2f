// test_cli_args: every pocket command reads its arguments the one way of
// cli/args.h. Over every command `pocket` lists:
//  - an unknown flag, and a flag without its value, are a usage error: one
//    line "pocket COMMAND: ..." on stderr, exit 2;
//  - every numeric flag refuses a malformed value (letters, trailing junk, a
//    fraction for an integer, an empty string, a leading space, inf and nan
//    for a number) and a value out of its range (one step past each end), in
//    both "--flag V" and "--flag=V" forms, with the same line:
//        pocket COMMAND: FLAG 'V' is not an integer in [LO, HI]
//        pocket COMMAND: FLAG 'V' is not a number in [LO, HI]   ("(LO, HI]", "[LO, HI)" for an open end)
//    and exit 2, before anything is read (the runs give no other argument);
//  - the table below names every command `pocket` lists, so a new command
//    comes with its rows.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_cli_util.h"

typedef enum { INT, EVEN, U64, REAL, REAL_ABOVE, REAL_BELOW } Kind;   // REAL_ABOVE: (lo, hi]; REAL_BELOW: [lo, hi)

typedef struct {
    const char *command, *flag;
    Kind kind;
    const char *lo, *hi;   // the range as the message prints it
} NumberFlag;

// Every numeric flag of every command, with its range.
static const NumberFlag FLAGS[] = {
    {"init", "--seed", U64, "0", "18446744073709551615"},
    {"tokenize", "--max-len", INT, "1", "1073741824"},
    {"tokenize", "--threads", INT, "0", "4096"},
    {"eval", "--batch", INT, "1", "65536"},
    {"eval", "--seq-len", INT, "2", "1048576"},
    {"eval", "--max-batches", INT, "0", "1099511627776"},
    {"eval", "--exact-match", INT, "0", "1073741824"},
    {"eval", "--int4-group", EVEN, "2", "65536"},
    {"eval", "--threads", INT, "0", "4096"},
    {"eval", "--beta", REAL_ABOVE, "0", "1000"},
    {"eval", "--label-smoothing", REAL_BELOW, "0", "0.5"},
    {"eval", "--simpo-gamma", REAL, "0", "1000"},
    {"generate", "--max-new", INT, "1", "16777216"},
    {"generate", "--top-k", INT, "0", "1073741824"},
    {"generate", "--seed", U64, "0", "18446744073709551615"},
    {"generate", "--temperature", REAL, "0", "10000"},
    {"generate", "--top-p", REAL_ABOVE, "0", "1"},
    {"generate", "--rows", INT, "1", "4096"},
    {"generate", "--samples", INT, "1", "65536"},
    {"choose", "--threads", INT, "0", "4096"},
    {"synth", "--sequences", INT, "1", "100000000"},
    {"synth", "--length", INT, "2", "1048576"},
    {"synth", "--batch", INT, "1", "4096"},
    {"synth", "--seed", INT, "0", "9000000000000000000"},
    {"synth", "--greedy-prefix", INT, "0", "1048576"},
    {"synth", "--threads", INT, "0", "4096"},
    {"synth", "--temperature", REAL, "0.001", "100"},
    {"synth", "--top-p", REAL, "1e-06", "1"},
    {"draft-data", "--max-new", INT, "1", "16777216"},
    {"draft-data", "--limit", INT, "1", "1099511627776"},
    {"draft-data", "--batch", INT, "1", "4096"},
    {"draft-data", "--threads", INT, "0", "4096"},
    {"draft-data", "--samples", INT, "0", "1024"},
    {"draft-data", "--temperature", REAL_ABOVE, "0", "10000"},
    {"draft-data", "--top-p", REAL_ABOVE, "0", "1"},
    {"draft-data", "--top-k", INT, "0", "1073741824"},
    {"draft-data", "--seed", U64, "0", "18446744073709551615"},
    {"teacher-topk", "--k", INT, "1", "256"},
    {"teacher-topk", "--temperature", REAL_ABOVE, "0", "100"},
    {"teacher-topk", "--seq-len", INT, "2", "1048576"},
    {"teacher-topk", "--batch", INT, "1", "65536"},
    {"teacher-topk", "--threads", INT, "0", "4096"},
    {"prune-vocab", "--keep", INT, "1", "16777216"},
    {"prune-vocab", "--round", INT, "1", "16777216"},
    {"prune-vocab", "--threads", INT, "0", "4096"},
    {"quantize", "--group", EVEN, "2", "65536"},
};
#define N_FLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

// The commands without a numeric flag, and a flag of each that takes a value.
static const char *const NO_NUMBERS[][2] = {
    {"import", "--out"}, {"train", "--set"}, {"forward", "--ckpt"}, {"export", "--ckpt"}, {"inspect", "--tokenizer"},
};
#define N_NO_NUMBERS ((int)(sizeof NO_NUMBERS / sizeof NO_NUMBERS[0]))

typedef struct {
    int status;
    char err[4096];
} Run;

// pocket args[0..] (NULL-terminated), stdout dropped, stderr kept.
static void run(Run *r, const char *const *args) {
    char errpath[] = "/tmp/pocket-test-cli-args-XXXXXX";
    int fd = mkstemp(errpath);
    assert_true(fd >= 0);
    close(fd);
    const char *argv[16] = {pocket()};
    int n = 1;
    while (args[n - 1] && n < 15) argv[n] = args[n - 1], n++;
    argv[n] = NULL;
    r->status = run_capture((char *const *)argv, errpath, r->err, sizeof r->err);
    if (r->status == -2) fail_msg("cannot run %s", argv[0]);
    unlink(errpath);
}

// Exit 2 and stderr exactly `want` (one line).
static void expect_usage(const Run *r, const char *what, const char *want) {
    if (r->status != 2 || strcmp(r->err, want) != 0)
        fail_msg("%s: exit %d, stderr [%s]; expected exit 2 and [%s]", what, r->status, r->err, want);
}

// Exit 2 and one line "pocket COMMAND: ..." saying `says`.
static void expect_usage_line(const Run *r, const char *command, const char *what, const char *says) {
    char prefix[1100];
    snprintf(prefix, sizeof prefix, "pocket %s: ", command);
    const char *nl = strchr(r->err, '\n');
    if (r->status != 2 || strncmp(r->err, prefix, strlen(prefix)) != 0 || !nl || nl[1] || !strstr(r->err, says))
        fail_msg("%s: exit %d, stderr [%s]; expected exit 2 and one line \"%s...%s...\"", what, r->status, r->err,
                 prefix, says);
}

// The value one past a decimal bound: hi + 1 or lo - 1, as text (bounds here are whole numbers or small decimals).
static void step(const char *bound, int up, char *out, size_t cap) {
    if (!strcmp(bound, "18446744073709551615")) {
        snprintf(out, cap, "18446744073709551616");
        return;
    }
    if (strchr(bound, '.') || strchr(bound, 'e')) {
        snprintf(out, cap, "%.17g", up ? strtod(bound, NULL) * 1.5 : strtod(bound, NULL) / 2);
        return;
    }
    snprintf(out, cap, "%lld", strtoll(bound, NULL, 10) + (up ? 1 : -1));
}

static void refuses(const NumberFlag *f, const char *value) {
    char want[512], eq[256], what[256];
    const int real = f->kind >= REAL;
    snprintf(want, sizeof want, "pocket %s: %s '%s' is not %s in %c%s, %s%c\n", f->command, f->flag, value,
             real ? "a number" : f->kind == EVEN ? "an even integer" : "an integer", f->kind == REAL_ABOVE ? '(' : '[',
             f->lo, f->hi, f->kind == REAL_BELOW ? ')' : ']');
    snprintf(what, sizeof what, "pocket %s %s '%s'", f->command, f->flag, value);
    Run r;
    const char *args[] = {f->command, f->flag, value, NULL};
    run(&r, args);
    expect_usage(&r, what, want);
    snprintf(eq, sizeof eq, "%s=%s", f->flag, value);   // the same through --flag=V
    const char *args_eq[] = {f->command, eq, NULL};
    run(&r, args_eq);
    expect_usage(&r, eq, want);
}

static void test_numbers_are_refused_alike(void **state) {
    (void)state;
    for (int i = 0; i < N_FLAGS; i++) {
        const NumberFlag *f = &FLAGS[i];
        const int real = f->kind >= REAL;
        const char *malformed_int[] = {"x", "12x", "", "1.5", " 3", "0x10"};
        const char *malformed_real[] = {"x", "0.5x", "", " 0.5", "inf", "nan"};
        for (int k = 0; k < 6; k++) refuses(f, real ? malformed_real[k] : malformed_int[k]);
        char beyond[64];
        step(f->hi, 1, beyond, sizeof beyond);
        refuses(f, beyond);
        if (f->kind == REAL_BELOW) refuses(f, f->hi);   // the excluded end
        if (f->kind == REAL_ABOVE) refuses(f, f->lo);   // the excluded end
        else if (strcmp(f->lo, "0") != 0 || real) {
            step(f->lo, 0, beyond, sizeof beyond);
            refuses(f, beyond);
        } else {
            refuses(f, "-1");
        }
        if (f->kind == EVEN) refuses(f, "33");
    }
    printf("  %d numeric flags: malformed and out-of-range values refused with one line, exit 2\n", N_FLAGS);
}

// The commands `pocket` lists (its usage on stderr without arguments: the
// block of "  NAME  what" lines after the usage line).
static int listed_commands(char names[32][32]) {
    Run r;
    const char *args[] = {NULL};
    run(&r, args);
    assert_int_equal(r.status, 2);
    char *p = strstr(r.err, "usage: pocket COMMAND");
    assert_non_null(p);
    p = strstr(p, "\n\n");
    assert_non_null(p);
    int n = 0;
    for (p += 2; *p == ' ' && n < 32; p = strchr(p, '\n') + 1) sscanf(p, " %31s", names[n++]);
    return n;
}

static int in_table(const char *command) {
    for (int i = 0; i < N_FLAGS; i++)
        if (!strcmp(FLAGS[i].command, command)) return 1;
    for (int i = 0; i < N_NO_NUMBERS; i++)
        if (!strcmp(NO_NUMBERS[i][0], command)) return 1;
    return 0;
}

// A value-taking flag of the command (the first of the table).
static const char *value_flag(const char *command) {
    for (int i = 0; i < N_FLAGS; i++)
        if (!strcmp(FLAGS[i].command, command)) return FLAGS[i].flag;
    for (int i = 0; i < N_NO_NUMBERS; i++)
        if (!strcmp(NO_NUMBERS[i][0], command)) return NO_NUMBERS[i][1];
    return NULL;
}

static void test_every_command_has_one_usage_error(void **state) {
    (void)state;
    char names[32][32];
    int n = listed_commands(names);
    assert_true(n >= 15);
    for (int i = 0; i < n; i++) {
        if (!in_table(names[i])) fail_msg("pocket %s is not in tests/test_cli_args.c's tables", names[i]);
        char what[2200];
        Run r;
        const char *unknown[] = {names[i], "--no-such-flag", NULL};
        run(&r, unknown);
        snprintf(what, sizeof what, "pocket %s --no-such-flag", names[i]);
        expect_usage_line(&r, names[i], what, "--no-such-flag");
        const char *flag = value_flag(names[i]);
        const char *missing[] = {names[i], flag, NULL};
        run(&r, missing);
        char want[2200];
        snprintf(what, sizeof what, "pocket %s %s (no value)", names[i], flag);
        snprintf(want, sizeof want, "pocket %s: %s needs a value (see --help)\n", names[i], flag);
        expect_usage(&r, what, want);
    }
    printf("  %d commands: an unknown flag and a flag without its value are one line, exit 2\n", n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_command_has_one_usage_error),
        cmocka_unit_test(test_numbers_are_refused_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
