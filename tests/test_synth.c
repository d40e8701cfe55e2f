// test_synth.c: `pocket synth` (cli/cmd_synth.c), through the binary
// ($POCKET) on tiny checkpoints of the fixture tokenizer (the greedy check on
// transformers' chat fixture, whose logits are peaked):
// - the dataset: N documents of L tokens, the first token an ordinary one,
//   the settings stored as attributes; greedy all the way (--greedy-prefix
//   L - 1), each sequence is `pocket generate`'s greedy continuation of its
//   first token up to generate's end token (the one-sequence KV cache,
//   another path);
// - a run killed after its first batches resumes from SYN.h5.partial and
//   gives the uninterrupted run's tokens, also from a partial file whose last
//   batch was cut short; other settings against a partial file are refused;
// - bad arguments: one line, exit 2 (or 1), no SYN.h5 written.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "test_cli_util.h"

static char dir[] = "/tmp/pocket-test-synth-XXXXXX";

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    if (make_tiny_checkpoint(dir)) return -1;
    // a model with peaked logits (transformers' fixture), whose greedy tokens vary
    return sh("%s import tests/fixtures/gen/qwen3-chat --out %s/chat.h5 >/dev/null", pocket(), dir);
}

static int teardown(void **state) {
    (void)state;
    sh("rm -rf %s", dir);
    return 0;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// The tokens of a dataset, one document per sequence.
static uint32_t *read_tokens(const char *path, uint64_t *n_docs, uint64_t *n_tokens) {
    Dataset d;
    PtError e;
    if (dataset_open(&d, path, &e)) fail_msg("%s", e.msg);
    *n_docs = d.n_docs;
    *n_tokens = d.n_tokens;
    uint32_t *t = malloc(d.n_tokens * sizeof(uint32_t));
    for (uint64_t i = 0; i < d.n_tokens; i++) t[i] = dataset_token(&d, i);
    dataset_close(&d);
    return t;
}

static void test_greedy_sequences_are_generate(void **state) {
    (void)state;
    enum { N = 6, L = 20 };
    assert_int_equal(sh("%s synth --ckpt %s/chat.h5 --out %s/greedy.h5 --sequences %d --batch 3 --length %d "
                        "--greedy-prefix %d --threads 1 2>/dev/null >/dev/null", pocket(), dir, dir, N, L, L - 1), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/greedy.h5", dir);
    uint64_t docs, n;
    uint32_t *t = read_tokens(path, &docs, &n);
    assert_int_equal(docs, N);
    assert_int_equal(n, N * L);
    snprintf(path, sizeof path, "%s/greedy.h5.partial", dir);
    assert_false(exists(path));   // removed once the dataset is written
    assert_int_equal(sh("h5dump -a synth_length -a synth_greedy_prefix -a synth_model %s/greedy.h5 | grep -q '\"float\"'", dir), 0);
    int compared = 0;
    for (int s = 0; s < N; s++) {
        assert_true(t[s * L] < 1500);   // the fixture tokenizer's special tokens are 1500..1504
        char cmd[800];
        snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/chat.h5 --prompt-ids %u --max-new %d --ids 2>/dev/null",
                 pocket(), dir, t[s * L], L - 1);
        FILE *p = popen(cmd, "r");
        int got[L], k = 0;
        while (k < L - 1 && fscanf(p, "%d", &got[k]) == 1) k++;
        pclose(p);
        // generate stops at an end token (kept); synth goes on past it
        assert_true(k >= 1);
        compared += k;
        for (int i = 0; i < k; i++)
            if ((uint32_t)got[i] != t[s * L + 1 + i])
                fail_msg("sequence %d: token %d is %u, pocket generate %d", s, i + 1, t[s * L + 1 + i], got[i]);
    }
    printf("  %d greedy sequences of %d tokens equal pocket generate's from their first tokens (%d tokens up to its "
           "end tokens)\n", N, L, compared);
    assert_true(compared >= 2 * N);
    free(t);
}

static void test_resume_gives_the_same_tokens(void **state) {
    (void)state;
    enum { N = 64, L = 48, R = 4 };
    const char *args = "--sequences 64 --batch 4 --length 48 --greedy-prefix 2 --seed 7 --threads 1";
    assert_int_equal(sh("%s synth --ckpt %s/init.h5 --out %s/whole.h5 %s 2>/dev/null >/dev/null", pocket(), dir, dir, args), 0);
    // Killed once the partial file holds two batches or more (but before the end).
    char partial[600];
    snprintf(partial, sizeof partial, "%s/resumed.h5.partial", dir);
    pid_t pid = fork();
    if (pid == 0) {
        char cmd[800];
        snprintf(cmd, sizeof cmd, "exec %s synth --ckpt %s/init.h5 --out %s/resumed.h5 %s 2>/dev/null >/dev/null",
                 pocket(), dir, dir, args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 20000; i++) {
        if (stat(partial, &st) == 0 && st.st_size > 2 * R * L * (off_t)sizeof(int) + 200) break;
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_int_equal(stat(partial, &st), 0);
    char out[600];
    snprintf(out, sizeof out, "%s/resumed.h5", dir);
    if (exists(out)) {   // finished before the kill: nothing to resume (a fast machine)
        printf("  the run finished before it was killed; resume not exercised\n");
        return;
    }
    // A batch cut short by the crash is dropped: append half a batch of junk.
    FILE *f = fopen(partial, "ab");
    int junk[R * L / 2];
    memset(junk, 0x5a, sizeof junk);
    fwrite(junk, 1, sizeof junk, f);
    fclose(f);
    // Other settings against the partial file: refused, nothing written.
    assert_int_not_equal(sh("%s synth --ckpt %s/init.h5 --out %s/resumed.h5 --sequences 64 --batch 4 --length 48 "
                            "--greedy-prefix 2 --seed 8 --threads 1 2>/dev/null >/dev/null", pocket(), dir, dir), 0);
    assert_false(exists(out));
    assert_int_equal(sh("%s synth --ckpt %s/init.h5 --out %s/resumed.h5 %s 2>%s/resume.log >/dev/null", pocket(), dir,
                        dir, args, dir), 0);
    assert_int_equal(sh("grep -q 'resuming from' %s/resume.log", dir), 0);
    char whole[600];
    snprintf(whole, sizeof whole, "%s/whole.h5", dir);
    uint64_t d1, n1, d2, n2;
    uint32_t *a = read_tokens(whole, &d1, &n1), *b = read_tokens(out, &d2, &n2);
    assert_int_equal(d1, N);
    assert_int_equal(d2, N);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof(uint32_t));
    printf("  killed after %lld bytes of batches and resumed: the same %d x %d tokens\n", (long long)st.st_size, N, L);
    free(a);
    free(b);
}

static void test_bad_arguments(void **state) {
    (void)state;
    char out[600];
    snprintf(out, sizeof out, "%s/bad.h5", dir);
    // not a multiple of the batch; a length past the context; no tokenizer; no such checkpoint
    assert_int_equal(sh("%s synth --ckpt %s/init.h5 --out %s --sequences 5 --batch 2 2>/dev/null", pocket(), dir, out), 2);
    assert_int_equal(sh("%s synth --ckpt %s/init.h5 --out %s --sequences 2 --batch 2 --length 129 2>/dev/null",
                        pocket(), dir, out), 1);
    assert_int_equal(sh("%s init --model %s/config.json --out %s/notok.h5 >/dev/null 2>&1", pocket(), dir, dir), 0);
    assert_int_equal(sh("%s synth --ckpt %s/notok.h5 --out %s --sequences 2 --batch 2 2>%s/err.txt", pocket(), dir, out,
                        dir), 1);
    assert_int_equal(sh("test $(wc -l < %s/err.txt) -eq 1 && grep -q 'no tokenizer' %s/err.txt", dir, dir), 0);
    assert_int_equal(sh("%s synth --ckpt %s/missing.h5 --out %s 2>/dev/null", pocket(), dir, out), 1);
    assert_int_equal(sh("%s synth --ckpt %s/init.h5 --out %s --temperature 0 2>/dev/null", pocket(), dir, out), 2);
    assert_false(exists(out));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_sequences_are_generate),
        cmocka_unit_test(test_resume_gives_the_same_tokens),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
