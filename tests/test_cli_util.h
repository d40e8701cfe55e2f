// test_cli_util.h: what the tests that drive the `pocket` binary share: the
// binary ($POCKET), a shell command with printf arguments, a check that a
// command left no output behind, and a tiny Qwen3
// checkpoint of the fixture tokenizer's vocabulary (1505 ids) to train, and a
// scratch folder with that tokenizer loaded.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "../data/tokenizer.h"
#include <unistd.h>

extern char **environ;

// 1 under AddressSanitizer, which trains a few times slower (even at -O2): tests leave
// their long runs (learning curves, repeats of a path already run) to the
// plain build and still run every code path sanitized.
#ifdef __SANITIZE_ADDRESS__
enum { SANITIZED = 1 };
#else
enum { SANITIZED = 0 };
#endif

static inline const char *pocket(void) { return getenv("POCKET") ? getenv("POCKET") : "./pocket"; }

// Runs the command through the shell; its exit status (128 when killed).
__attribute__((format(printf, 1, 2))) static inline int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// A scratch folder (/tmp/pocket-test-NAME-XXXXXX, removed with what is in it)
// and the fixture tokenizer, for the tests that run pocket on data and read
// back what it wrote. cmocka setup and teardown.
typedef struct {
    char dir[64];
    Tokenizer *tok;
} CliEnv;

static inline int cli_env_setup(void **state, const char *name) {
    CliEnv *v = (CliEnv *)xcalloc(1, sizeof *v, "env");
    snprintf(v->dir, sizeof v->dir, "/tmp/pocket-test-%s-XXXXXX", name);
    PtError e;
    if (!mkdtemp(v->dir)) return -1;
    if (tokenizer_load_file(&v->tok, "tests/fixtures/tok/tokenizer.json", &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    *state = v;
    return 0;
}

static inline int cli_env_teardown(void **state) {
    CliEnv *v = (CliEnv *)*state;
    int rc = sh("rm -rf '%s'", v->dir);
    tokenizer_free(v->tok);
    free(v);
    return rc ? -1 : 0;
}

// Runs argv (argv[0] the program, NULL-terminated) with stdout dropped and
// stderr written to errpath, then read into err (cap bytes, NUL-terminated).
// Returns the exit status, -1 when a signal ended it; -2 when it did not start.
static inline int run_capture(char *const *argv, const char *errpath, char *err, size_t cap) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int started = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0, ws = 0;
    posix_spawn_file_actions_destroy(&fa);
    if (started) waitpid(pid, &ws, 0);
    FILE *f = fopen(errpath, "rb");
    size_t n = f ? fread(err, 1, cap - 1, f) : 0;
    err[n] = 0;
    if (f) fclose(f);
    return !started ? -2 : WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

// 1 when no entry of dir starts with prefix (no output, no PATH.tmp.PID left behind).
static inline int no_entry_with_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 1;
    struct dirent *ent;
    int none = 1;
    while ((ent = readdir(d)) != NULL)
        if (strncmp(ent->d_name, prefix, strlen(prefix)) == 0) none = 0;
    closedir(d);
    return none;
}

// path: a tiny Qwen3 config.json (2 layers, heads 4/2, tied, the fixture
// tokenizer's special ids) of the given widths, `extra` (more JSON members,
// each with its leading comma) appended. 0 when written.
static inline int write_tiny_config(const char *path, int hidden, int head_dim, int ffn, int vocab, const char *extra) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"hidden_size\": %d, \"num_attention_heads\": 4,"
               " \"num_key_value_heads\": 2, \"head_dim\": %d, \"intermediate_size\": %d, \"vocab_size\": %d,"
               " \"max_position_embeddings\": 128, \"tie_word_embeddings\": true, \"eos_token_id\": 1502,"
               " \"pad_token_id\": 1500%s}\n", hidden, head_dim, ffn, vocab, extra);
    return fclose(f) == 0 ? 0 : -1;
}

// dir/config.json and dir/init.h5: hidden 48, heads of 12, FFN 100, the
// fixture tokenizer's 1505 ids, stored with it. 0 when both were made.
static inline int make_tiny_checkpoint(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_tiny_config(path, 48, 12, 100, 1505, ", \"rope_theta\": 10000.0")) return -1;
    return sh("%s init --model %s/config.json --tokenizer tests/fixtures/tok/tokenizer.json --out %s/init.h5 >/dev/null",
              pocket(), dir, dir);
}

// Losses per step from a run's metrics.jsonl, as text, so "identical" means identical.
static inline void read_losses(const char *run, char *out, size_t cap) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -o '\"loss\": *[-0-9.e+]*' %s/metrics.jsonl", run);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    pclose(p);
}

// DIR/NAME: the tests' CPT recipe on DIR's init.h5 and cpt.h5 (train and val),
// 6 steps of 4 x 32, evaluated every 3 and saved every 2, at learning rate lr,
// with `extra` (more sections) after it. 0 on success.
static inline int write_cpt_recipe(const char *dir, const char *name, const char *lr, const char *extra) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/cpt.h5\nval = %s/cpt.h5\n"
               "[train]\nmode = cpt\nmicro_batch = 4\nseq_len = 32\nsteps = 6\neval_interval = 3\neval_batches = 2\n"
               "save_interval = 2\nthreads = 1\n[optim]\nlr = %s\nwarmup = 2\n%s",
            dir, dir, dir, lr, extra);
    return fclose(f) == 0 ? 0 : -1;
}

// dir/name with the printf-formatted text. 0 when written.
__attribute__((format(printf, 3, 4))) static inline int write_textf(const char *dir, const char *name,
                                                                    const char *fmt, ...) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    return fclose(f) == 0 ? 0 : -1;
}

// dir/name: n chat examples "w w w: a+b=" -> "a+b" (the rollout tests' task); long_ones: every third prompt
// 40 words (no room for new tokens in a seq_len of 48). 0 when written.
static inline int write_sum_task(const char *dir, const char *name, int n, unsigned seed, int long_ones) {
    static const char *words[] = {"red", "blue", "cat", "dog", "sun", "moon", "tree", "river", "stone", "bird"};
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < n; i++) {
        const unsigned a = (seed + 3u * i) % 9 + 1, b = (seed + 7u * i) % 9 + 1;
        const int nw = long_ones && i % 3 == 0 ? 40 : 2 + (int)((seed + i) % 4);
        fprintf(f, "{\"prompt\": \"");
        for (int k = 0; k < nw; k++) fprintf(f, "%s ", words[(seed + 5u * i + k) % 10]);
        fprintf(f, ": %u+%u=\", \"completion\": \"%u\"}\n", a, b, a + b);
    }
    return fclose(f) == 0 ? 0 : -1;
}

#ifdef fail_msg   // with cmocka
#include <jansson.h>
#include <sys/stat.h>
// Runs a and b (run directories) logged the same losses, step for step, as text.
static inline void assert_same_losses(const char *a, const char *b) {
    char la[8192], lb[8192];
    read_losses(a, la, sizeof la);
    read_losses(b, lb, sizeof lb);
    if (!la[0]) fail_msg("%s logged no loss", a);
    if (strcmp(la, lb)) fail_msg("%s and %s logged other losses:\n%s\n%s", a, b, la, lb);
}
// Recipe dir/name trained into dir/name-full, and into dir/name-split stopped
// after stop_after updates and resumed: the same losses and the same final
// checkpoint (ckpt-<last>), bit for bit.
static inline void assert_stopped_run_identical(const char *dir, const char *name, int stop_after, int last) {
    assert_int_equal(sh("%s train %s/%s --set train.run_dir=%s/%s-full >/dev/null", pocket(), dir, name, dir, name), 0);
    assert_int_equal(sh("%s train %s/%s --set train.run_dir=%s/%s-split --set train.stop_after=%d >/dev/null",
                        pocket(), dir, name, dir, name, stop_after), 0);
    assert_int_equal(sh("%s train %s/%s --set train.run_dir=%s/%s-split >/dev/null", pocket(), dir, name, dir, name), 0);
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/%s-full", dir, name);
    snprintf(b, sizeof b, "%s/%s-split", dir, name);
    assert_same_losses(a, b);
    assert_int_equal(sh("h5diff %s/ckpt-%08d.h5 %s/ckpt-%08d.h5", a, last, b, last), 0);
}

// Metric `key` of every step line (one with a grad_norm) of dir/run/metrics.jsonl into out (at most cap); their
// number.
static inline int run_step_metric(const char *dir, const char *run, const char *key, double *out, int cap) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, run);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: no metrics.jsonl", run);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *v = j ? json_object_get(j, key) : NULL;
        if (v && json_object_get(j, "grad_norm")) out[n++] = json_number_value(v);
        json_decref(j);
    }
    fclose(f);
    return n;
}

// A line of rollouts.jsonl (n its place, in messages) holds what `pocket generate` gives ckpt for its prompt and
// seed at temperature 1 with max_new new tokens.
static inline void assert_rollout_is_generate(const char *dir, const char *ckpt, json_t *rollout, int max_new, int n) {
    // the prompt through a file, byte for byte (it ends in newlines, which $(...) would drop)
    char cmd[8192], out[4096] = "", pf[600];
    snprintf(pf, sizeof pf, "%s/prompt.txt", dir);
    FILE *w = fopen(pf, "w");
    fputs(json_string_value(json_object_get(rollout, "prompt")), w);
    fclose(w);
    snprintf(cmd, sizeof cmd, "p=\"$(cat %s; printf x)\"; %s generate --ckpt %s --prompt \"${p%%x}\" "
             "--temperature 1 --max-new %d --seed %lld 2>/dev/null", pf, pocket(), ckpt, max_new,
             (long long)json_integer_value(json_object_get(rollout, "seed")));
    FILE *p = popen(cmd, "r");
    size_t got = fread(out, 1, sizeof out - 1, p);
    assert_int_equal(pclose(p), 0);
    out[got] = 0;
    if (got && out[got - 1] == '\n') out[got - 1] = 0;
    const char *completion = json_string_value(json_object_get(rollout, "completion"));
    if (strcmp(out, completion)) fail_msg("rollout %d: [%s], pocket generate: [%s]", n, completion, out);
}

// After assert_stopped_run_identical(dir, name, ..., last): the resumed run's rollouts of step `last` are the ones
// the whole run made.
static inline void assert_resumed_rollouts_identical(const char *dir, const char *name, int last) {
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/%s-full", dir, name);
    snprintf(b, sizeof b, "%s/%s-split", dir, name);
    assert_int_equal(sh("grep '\"step\":%d,' %s/rollouts.jsonl > %s/r-last && grep '\"step\":%d,' %s/rollouts.jsonl | "
                        "cmp -s - %s/r-last && test -s %s/r-last", last, a, a, last, b, a, a), 0);
}

// The command fails with one stderr line containing `says` (its stderr kept in dir/err.txt), and `out` (if given)
// does not exist afterwards: nothing half-written is left.
static inline void assert_refused_in(const char *dir, const char *cmd, const char *out, const char *says) {
    char err[600], line[2048] = "";
    snprintf(err, sizeof err, "%s/err.txt", dir);
    int rc = sh("%s >/dev/null 2>%s", cmd, err);
    if (rc == 0) fail_msg("accepted: %s", cmd);
    FILE *f = fopen(err, "r");
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    char *nl = strchr(line, '\n');
    if (!nl || nl[1]) fail_msg("not one line: [%s] from %s", line, cmd);
    if (!strstr(line, says)) fail_msg("[%s] lacks \"%s\"", line, says);
    struct stat st;
    if (out && stat(out, &st) == 0) fail_msg("%s was written by %s", out, cmd);
}
#endif
