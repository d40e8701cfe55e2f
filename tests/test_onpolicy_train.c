// test_onpolicy_train.c: pocket train with train.mode = onpolicy_distill, end
// to end on a tiny Qwen3 and the rollout tests' made-up task (word lists
// with a sum to give). The teacher is the same model after a short SFT on
// the task (teacher.h5).
// - the first step's rollouts (rollouts.jsonl) are what `pocket generate`
//   gives the start checkpoint for the same prompt and seed;
// - the teacher is the start model itself (model.init, the default): the
//   KL is zero while the weights stay put; with [qat] the samples and the
//   student are int4 and the teacher the float model, so it is not;
// - with the SFT'd teacher the student learns: its KL on its own samples
//   falls below half where it started, and its next-token loss on the
//   task's replies (pocket eval) closes most of the gap to the teacher's;
// - a run stopped with train.stop_after and resumed ends with the bits of
//   an uninterrupted one (the model, LoRA with dropout, QAT);
// - bad input, one stderr line and a non-zero exit: [distill] source =
//   topk, kd_weight below 1, a teacher with another vocabulary; GRPO with a
//   group of 1.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include "test_cli_util.h"

static char g_dir[256];

// SANITIZED (test_cli_util.h): the learning run and the QAT resume are left
// to the plain build.

// DIR/NAME: an onpolicy_distill recipe on DIR/init.h5 and DIR/task.h5, `steps` steps of 8 x 48 x 2 (4 prompts x 2
// completions of up to 6 tokens a micro-batch), saved every 2, the teacher DIR/teacher.h5, with `extra` (more
// [rl] keys, then sections).
static int write_onpolicy_recipe(const char *name, int steps, const char *extra) {
    return write_textf(g_dir, name,
                       "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/task.h5\nval = %s/task.h5\n[train]\n"
                       "mode = onpolicy_distill\nmicro_batch = 8\nseq_len = 48\ngrad_accum = 2\nsteps = %d\n"
                       "eval_interval = 0\nsave_interval = 2\nthreads = 1\n[optim]\nlr = 0.01\nwarmup = 1\n"
                       "[distill]\nteacher = %s/teacher.h5\n[rl]\ngroup = 2\nmax_new = 6\n%s",
                       g_dir, g_dir, g_dir, steps, g_dir, extra);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_onpolicy_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (make_tiny_checkpoint(g_dir) || write_sum_task(g_dir, "task.jsonl", 24, 1, 0)) return -1;
    // the teacher: the model after 40 SFT steps on the task
    if (write_textf(g_dir, "sft.ini",
                    "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/task.h5\n[train]\nmode = sft\nmicro_batch = 8\n"
                    "seq_len = 48\nsteps = 40\neval_interval = 0\nsave_interval = 40\nthreads = 1\n[optim]\n"
                    "lr = 0.01\nwarmup = 2\n", g_dir, g_dir))
        return -1;
    const char *tok = "tests/fixtures/tok/tokenizer.json";
    char other[600];
    snprintf(other, sizeof other, "%s/other", g_dir);
    if (sh("%s tokenize --chat --tokenizer %s %s/task.jsonl --out %s/task.h5 2>/dev/null && "
           "%s train %s/sft.ini --set train.run_dir=%s/sft >/dev/null && cp %s/sft/ckpt-00000040.h5 %s/teacher.h5 && "
           "mkdir -p %s", pocket(), tok, g_dir, g_dir, pocket(), g_dir, g_dir, g_dir, g_dir, other))
        return -1;
    // a teacher of another vocabulary: the legacy tokenizer fixture's
    snprintf(other, sizeof other, "%s/other/config.json", g_dir);
    if (write_tiny_config(other, 48, 12, 100, 1505, ""))
        return -1;
    return sh("%s init --model %s --tokenizer tests/fixtures/tok/tokenizer_legacy.json --out %s/other.h5 >/dev/null",
              pocket(), other, g_dir);
}

static int teardown(void **state) {
    (void)state;
    if (getenv("KEEP_TEST_DIR")) return printf("kept %s\n", g_dir) < 0;
    return sh("rm -rf %s", g_dir);
}

static void test_first_rollouts_are_generate_s(void **s) {
    (void)s;
    assert_int_equal(write_onpolicy_recipe("one.ini", 1, ""), 0);
    assert_int_equal(sh("%s train %s/one.ini --set train.run_dir=%s/one >/dev/null", pocket(), g_dir, g_dir), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/one/rollouts.jsonl", g_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "step")), 1);
        if (n % 5 == 0) {   // pocket generate: the start model, the prompt, the seed
            char ckpt[400];
            snprintf(ckpt, sizeof ckpt, "%s/init.h5", g_dir);
            assert_rollout_is_generate(g_dir, ckpt, j, 6, n);
        }
        json_decref(j);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 16);   // 2 micro-batches of 4 prompts x 2
    printf("step 1: 16 rollouts; 4 equal pocket generate's\n");
}

static void test_teacher_is_start_model(void **s) {
    (void)s;
    // [distill] teacher left out: model.init; a learning rate of 1e-12 keeps the weights
    assert_int_equal(write_onpolicy_recipe("self.ini", 3, ""), 0);
    assert_int_equal(sh("%s train %s/self.ini --set train.run_dir=%s/self --set distill.teacher= --set optim.lr=1e-12 "
                        ">/dev/null", pocket(), g_dir, g_dir), 0);
    double kl[3], kq[3];
    assert_int_equal(run_step_metric(g_dir, "self", "kl", kl, 3), 3);
    for (int k = 0; k < 3; k++) assert_true(fabs(kl[k]) < 1e-9);
    // int4 samples and student, the float model as the teacher
    assert_int_equal(sh("%s train %s/self.ini --set train.run_dir=%s/selfq --set distill.teacher= --set optim.lr=1e-12 "
                        "--set qat.enabled=1 --set qat.group=4 >/dev/null", pocket(), g_dir, g_dir), 0);
    assert_int_equal(run_step_metric(g_dir, "selfq", "kl", kq, 3), 3);
    assert_true(kq[0] > 1e-6);
    printf("KL to model.init: %.1e while unchanged; %.2e from its int4 self (QAT)\n", fabs(kl[0]), kq[0]);
}

// The next-token loss of ckpt on the task's replies (pocket eval).
static double reply_loss(const char *ckpt) {
    char cmd[1200], out[256] = "";
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s --data %s/task.h5 --seq-len 48 --exact-match 0 2>/dev/null | "
             "grep -o 'loss [0-9.]*' | cut -d' ' -f2", pocket(), ckpt, g_dir);
    FILE *p = popen(cmd, "r");
    size_t got = fread(out, 1, sizeof out - 1, p);
    assert_int_equal(pclose(p), 0);
    out[got] = 0;
    assert_true(got > 0);
    return atof(out);
}

static void test_learns_the_teacher(void **s) {
    (void)s;
    if (SANITIZED) {
        printf("the learning run is the plain build's (AddressSanitizer: a few times slower)\n");
        return;
    }
    assert_int_equal(write_onpolicy_recipe("learn.ini", 40, ""), 0);
    assert_int_equal(sh("%s train %s/learn.ini --set train.run_dir=%s/learn >/dev/null", pocket(), g_dir, g_dir), 0);
    double kl[40];
    assert_int_equal(run_step_metric(g_dir, "learn", "kl", kl, 40), 40);
    char path[600];
    snprintf(path, sizeof path, "%s/init.h5", g_dir);
    const double start = reply_loss(path);
    snprintf(path, sizeof path, "%s/learn/ckpt-00000040.h5", g_dir);
    const double end = reply_loss(path);
    snprintf(path, sizeof path, "%s/teacher.h5", g_dir);
    const double teacher = reply_loss(path);
    double first = 0, last = 0;
    for (int k = 0; k < 5; k++) first += kl[k] / 5, last += kl[35 + k] / 5;
    printf("KL on its own samples, first 5 steps %.3f, last 5 %.3f; reply loss %.3f -> %.3f (the teacher's %.3f)\n",
           first, last, start, end, teacher);
    assert_true(last < 0.5 * first);
    assert_true(end < start && end - teacher < 0.5 * (start - teacher));
}

static void check_resume(const char *name, const char *extra) {
    assert_int_equal(write_onpolicy_recipe(name, 4, extra), 0);
    assert_stopped_run_identical(g_dir, name, 3, 4);
    assert_resumed_rollouts_identical(g_dir, name, 4);
    printf("%s: resumed run identical\n", name);
}

static void test_resume_is_bit_identical(void **s) {
    (void)s;
    check_resume("model.ini", "");
    check_resume("lora.ini", "[lora]\nenabled = 1\nrank = 4\ndropout = 0.1\n");
    if (SANITIZED) return;
    check_resume("qat.ini", "temperature = 0.7\n[qat]\nenabled = 1\ngroup = 4\n");
}

static void test_bad_input(void **s) {
    (void)s;
    char cmd[1400], bad[600];
    assert_int_equal(write_onpolicy_recipe("base.ini", 2, ""), 0);
    snprintf(bad, sizeof bad, "%s/bad", g_dir);
    snprintf(cmd, sizeof cmd, "%s train %s/base.ini --set train.run_dir=%s --set distill.source=topk", pocket(), g_dir,
             bad);
    assert_refused_in(g_dir, cmd, NULL, "source = forward");
    snprintf(cmd, sizeof cmd, "%s train %s/base.ini --set train.run_dir=%s --set distill.kd_weight=0.5", pocket(),
             g_dir, bad);
    assert_refused_in(g_dir, cmd, NULL, "the KL alone");
    snprintf(cmd, sizeof cmd, "%s train %s/base.ini --set train.run_dir=%s --set distill.teacher=%s/other.h5",
             pocket(), g_dir, bad, g_dir);
    assert_refused_in(g_dir, cmd, NULL, "other.h5: the teacher's tokenizer");
    snprintf(cmd, sizeof cmd, "%s train %s/base.ini --set train.run_dir=%s --set train.mode=grpo --set rl.group=1",
             pocket(), g_dir, bad);
    assert_refused_in(g_dir, cmd, NULL, "at least 2");
    snprintf(cmd, sizeof cmd, "%s train %s/base.ini --set train.run_dir=%s --set rl.updates_per_rollout=2", pocket(),
             g_dir, bad);
    assert_refused_in(g_dir, cmd, NULL, "updates_per_rollout = 2");
    struct stat st;
    assert_true(stat(bad, &st) != 0);
    printf("topk, a kd_weight below 1, a teacher of another vocabulary, GRPO groups of 1, updates_per_rollout 2: refused in one line\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_rollouts_are_generate_s),
        cmocka_unit_test(test_teacher_is_start_model),
        cmocka_unit_test(test_learns_the_teacher),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
