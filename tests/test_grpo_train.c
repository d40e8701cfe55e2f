// test_grpo_train.c: pocket train with train.mode = grpo, end to end on a
// tiny Qwen3 and a made-up task (word lists with a sum to give).
// - the first step's rollouts (rollouts.jsonl) are what `pocket generate`
//   gives the start checkpoint for the same prompt and seed; each reward is
//   its regex on the completion (POSIX regex here, PCRE2 there) and each
//   advantage its group's reward less the group mean over (std + 1e-4);
// - rewarded for completions starting with a lowercase letter, the model
//   learns it: the mean reward of the last steps is far above the first's;
// - with rl.beta > 0 and the weights unchanged (a learning rate of 1e-12),
//   the KL to model.init is zero: the reference is the start model (with
//   [qat], model.init's int4 model);
// - a run stopped with train.stop_after and resumed ends with the bits of
//   an uninterrupted one (the model, LoRA, QAT, bnpo with the KL term);
// - rl.updates_per_rollout = 2: steps 1 and 3 sample, 2 and 4 train on
//   their rollouts again; at an unchanged model the second step's loss is
//   the first's (its old log-probabilities are the first pass's), once the
//   model moves the clip holds tokens only in the second steps; stopped
//   inside a cycle and resumed, the run ends with the bits of an
//   uninterrupted one;
// - rl.prompts packs the completions several to a row: the same rollouts
//   (prompts and seeds) as one a row, the same first-step gradient
//   norm, fewer rows a pass; resumed, the bits of an uninterrupted run;
// - bad input, one stderr line and a non-zero exit: a reward program that
//   dies mid-run (named with the completion; the run's last checkpoint is
//   left as it was), micro_batch not a multiple of group, max_new without
//   room, a pairs dataset; prompts too long for max_new are counted and
//   dropped.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <sys/stat.h>
#include "test_cli_util.h"

static char g_dir[256];

// SANITIZED (test_cli_util.h): the learning run and two of the four resumed
// kinds are left to the plain build.

// DIR/NAME: a grpo recipe on DIR/init.h5 and DIR/task.h5, `steps` steps of 8 x 48 x 2 (2 prompts x 4
// completions of up to 6 tokens a micro-batch), saved every 2, the reward "regex=^[a-z]" unless `extra` (more
// [rl] keys, then sections) sets rl.rewards.
static int write_grpo_recipe(const char *name, int steps, const char *extra) {
    return write_textf(g_dir, name,
                       "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/task.h5\nval = %s/task.h5\n[train]\n"
                       "mode = grpo\nmicro_batch = 8\nseq_len = 48\ngrad_accum = 2\nsteps = %d\neval_interval = 0\n"
                       "save_interval = 2\nthreads = 1\n[optim]\nlr = 0.03\nwarmup = 1\n[rl]\ngroup = 4\n"
                       "max_new = 6\n%s%s", g_dir, g_dir, g_dir, steps,
                       strstr(extra, "rewards =") ? "" : "rewards = regex=^[a-z]\n", extra);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_grpo_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (make_tiny_checkpoint(g_dir) || write_sum_task(g_dir, "task.jsonl", 24, 1, 0) ||
        write_sum_task(g_dir, "long.jsonl", 24, 2, 1))
        return -1;
    const char *tok = "tests/fixtures/tok/tokenizer.json";
    if (sh("%s tokenize --chat --tokenizer %s %s/task.jsonl --out %s/task.h5 2>/dev/null && "
           "%s tokenize --chat --tokenizer %s %s/long.jsonl --out %s/long.h5 2>/dev/null && "
           "printf '{\"prompt\": \"a b\", \"chosen\": \" yes\", \"rejected\": \" no\"}\\n' > %s/pairs.jsonl && "
           "%s tokenize --pairs --tokenizer %s %s/pairs.jsonl --out %s/pairs.h5 2>/dev/null",
           pocket(), tok, g_dir, g_dir, pocket(), tok, g_dir, g_dir, g_dir, pocket(), tok, g_dir, g_dir))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (getenv("KEEP_TEST_DIR")) return printf("kept %s\n", g_dir) < 0;
    return sh("rm -rf %s", g_dir);
}

static void test_first_rollouts_are_generate_s(void **s) {
    (void)s;
    assert_int_equal(write_grpo_recipe("one.ini", 1, ""), 0);
    assert_int_equal(sh("%s train %s/one.ini --set train.run_dir=%s/one >/dev/null", pocket(), g_dir, g_dir), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/one/rollouts.jsonl", g_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    regex_t re;
    assert_int_equal(regcomp(&re, "^[a-z]", REG_EXTENDED | REG_NOSUB), 0);
    char line[8192];
    int n = 0;
    double rewards[16];
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "step")), 1);
        const char *completion = json_string_value(json_object_get(j, "completion"));
        const double reward = json_number_value(json_object_get(j, "reward"));
        // the completion without a stop token is what the regex saw
        char seen[4096];
        snprintf(seen, sizeof seen, "%s", completion);
        char *stop = strstr(seen, "<|im_end|>");
        if (stop) *stop = 0;
        assert_true(reward == (regexec(&re, seen, 0, NULL, 0) == 0 ? 1.0 : 0.0));
        rewards[n % 4] = reward;
        // the advantage: the group's reward less its mean over (sample std + 1e-4)
        if (n % 4 == 3) {
            double mean = 0, ss = 0;
            for (int k = 0; k < 4; k++) mean += rewards[k] / 4;
            for (int k = 0; k < 4; k++) ss += (rewards[k] - mean) * (rewards[k] - mean);
            const double adv = (reward - mean) / (sqrt(ss / 3) + 1e-4);
            assert_true(fabs(json_number_value(json_object_get(j, "advantage")) - adv) < 1e-12);
        }
        if (n < 4) {   // pocket generate: the start model, the prompt, the seed
            char ckpt[400];
            snprintf(ckpt, sizeof ckpt, "%s/init.h5", g_dir);
            assert_rollout_is_generate(g_dir, ckpt, j, 6, n);
        }
        json_decref(j);
        n++;
    }
    fclose(f);
    regfree(&re);
    assert_int_equal(n, 16);   // 2 micro-batches of 2 prompts x 4
    printf("step 1: 16 rollouts, each reward its regex, each advantage its group's; 4 equal pocket generate's\n");
}

static void test_learns_the_reward(void **s) {
    (void)s;
    if (SANITIZED) {
        printf("the learning run is the plain build's (AddressSanitizer: a few times slower)\n");
        return;
    }
    assert_int_equal(write_grpo_recipe("learn.ini", 60, ""), 0);
    assert_int_equal(sh("%s train %s/learn.ini --set train.run_dir=%s/learn >/dev/null", pocket(), g_dir, g_dir), 0);
    double r[60];
    assert_int_equal(run_step_metric(g_dir, "learn", "reward", r, 60), 60);
    double first = 0, last = 0;
    for (int k = 0; k < 10; k++) first += r[k] / 10, last += r[50 + k] / 10;
    printf("mean reward of the first 10 steps %.3f, of the last 10 %.3f\n", first, last);
    assert_true(last > first + 0.3);
    assert_true(last > 0.8);
}

static void test_kl_to_start_is_zero_while_unchanged(void **s) {
    (void)s;
    assert_int_equal(write_grpo_recipe("kl.ini", 3, "beta = 0.1\n"), 0);
    assert_int_equal(sh("%s train %s/kl.ini --set train.run_dir=%s/kl --set optim.lr=1e-12 >/dev/null", pocket(),
                        g_dir, g_dir), 0);
    double kl[3];
    assert_int_equal(run_step_metric(g_dir, "kl", "kl", kl, 3), 3);
    for (int k = 0; k < 3; k++) assert_true(fabs(kl[k]) < 1e-9);
    // with [qat] the run starts from the int4 model, and so does the reference (the float weights gave 2.5e-5)
    assert_int_equal(write_grpo_recipe("kl-qat.ini", 3, "beta = 0.1\n[qat]\nenabled = 1\ngroup = 4\n"), 0);
    assert_int_equal(sh("%s train %s/kl-qat.ini --set train.run_dir=%s/kl-qat --set optim.lr=1e-12 >/dev/null",
                        pocket(), g_dir, g_dir), 0);
    assert_int_equal(run_step_metric(g_dir, "kl-qat", "kl", kl, 3), 3);
    printf("KL to model.init's int4 model under [qat]: %.1e at an unchanged model\n", fabs(kl[0]));
    for (int k = 0; k < 3; k++) assert_true(fabs(kl[k]) < 1e-9);
    // and it grows once the model moves
    assert_int_equal(sh("%s train %s/kl.ini --set train.run_dir=%s/kl2 >/dev/null", pocket(), g_dir, g_dir), 0);
    assert_int_equal(run_step_metric(g_dir, "kl2", "kl", kl, 3), 3);
    assert_true(kl[2] > 1e-4);
    printf("KL to model.init: %.1e at an unchanged model, %.2e after 2 updates\n", fabs(kl[0]), kl[2]);
}

static void check_resume(const char *name, const char *extra) {
    assert_int_equal(write_grpo_recipe(name, 4, extra), 0);
    assert_stopped_run_identical(g_dir, name, 3, 4);
    assert_resumed_rollouts_identical(g_dir, name, 4);
    printf("%s: resumed run identical\n", name);
}

static void test_resume_is_bit_identical(void **s) {
    (void)s;
    check_resume("model.ini", "");
    check_resume("lora.ini", "[lora]\nenabled = 1\nrank = 4\ndropout = 0.1\n");
    if (SANITIZED) return;
    check_resume("qat.ini", "[qat]\nenabled = 1\ngroup = 4\n");
    check_resume("bnpo.ini", "loss_type = bnpo\nbeta = 0.05\nscale = batch\nepsilon_high = 0.28\n");
}

// Metric `key` of step `step` (from 1) of run `run`.
static double metric_at(const char *run, const char *key, int step) {
    double v[8];
    if (run_step_metric(g_dir, run, key, v, 8) < step) fail_msg("%s: no step %d of %s", run, step, key);
    return v[step - 1];
}

static void test_updates_per_rollout(void **s) {
    (void)s;
    assert_int_equal(write_grpo_recipe("cycle.ini", 4, "updates_per_rollout = 2\nepsilon = 0.02\nepsilon_high = 0.02\n"), 0);
    // at an unchanged model, the second step of a cycle is its first again: same rollout, ratio 1
    assert_int_equal(sh("%s train %s/cycle.ini --set train.run_dir=%s/still --set optim.lr=1e-12 >/dev/null", pocket(),
                        g_dir, g_dir), 0);
    for (int k = 1; k <= 3; k += 2) {
        const double a = metric_at("still", "loss", k), b = metric_at("still", "loss", k + 1);
        assert_true(fabs(a - b) <= 1e-6);   // advantages of about 1: the loss of ratio 1 is about 0
        assert_true(metric_at("still", "reward", k) == metric_at("still", "reward", k + 1));
        assert_true(metric_at("still", "clip_ratio/low_mean", k + 1) == 0);
    }
    assert_int_equal(sh("cd %s/still && test $(grep -c '\"step\":1,' rollouts.jsonl) = 16 && "
                        "test $(grep -c '\"step\":3,' rollouts.jsonl) = 16 && test $(wc -l < rollouts.jsonl) = 32",
                        g_dir), 0);
    // once the model moves, the clip holds tokens in the cycle's second step only
    assert_int_equal(sh("%s train %s/cycle.ini --set train.run_dir=%s/moves >/dev/null", pocket(), g_dir, g_dir), 0);
    double held = 0;
    for (int k = 1; k <= 4; k++) {
        const double clip = metric_at("moves", "clip_ratio/low_mean", k) + metric_at("moves", "clip_ratio/high_mean", k);
        if (k % 2) assert_true(clip == 0);
        else held += clip;
    }
    assert_true(held > 0);
    printf("updates_per_rollout = 2: loss of a cycle's two steps at an unchanged model %.9f, %.9f; clipped share "
           "of the second steps once it moves %.3f\n", metric_at("still", "loss", 1), metric_at("still", "loss", 2),
           held / 2);
    // stopped inside a cycle (after step 3), resumed: the same bits; the buffer is gone at the end
    assert_stopped_run_identical(g_dir, "cycle.ini", 3, 4);
    assert_resumed_rollouts_identical(g_dir, "cycle.ini", 3);
    assert_int_equal(sh("test ! -e %s/cycle.ini-split/rollout_buffer-rank0.h5", g_dir), 0);
    // without that buffer the run cannot go on inside its cycle: one line naming it
    assert_int_equal(sh("%s train %s/cycle.ini --set train.run_dir=%s/lost --set train.stop_after=3 >/dev/null && "
                        "rm %s/lost/rollout_buffer-rank0.h5", pocket(), g_dir, g_dir, g_dir), 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s train %s/cycle.ini --set train.run_dir=%s/lost", pocket(), g_dir, g_dir);
    assert_refused_in(g_dir, cmd, NULL, "lost/rollout_buffer-rank0.h5: no such file");
}

// The packed run's 8 completions a micro-batch in at most 4 of 8 rows of 96 (a pass over fewer rows than
// planned), against 8 rows of 48.
static const char *const packed_sets = "--set train.seq_len=96 --set rl.prompts=2";

static void test_packed_rollouts(void **s) {
    (void)s;
    assert_int_equal(write_grpo_recipe("flat.ini", 2, ""), 0);
    assert_int_equal(sh("%s train %s/flat.ini --set train.run_dir=%s/flat >/dev/null", pocket(), g_dir, g_dir), 0);
    assert_int_equal(sh("%s train %s/flat.ini --set train.run_dir=%s/packed %s > %s/out.txt", pocket(), g_dir, g_dir,
                        packed_sets, g_dir), 0);
    assert_int_equal(sh("grep -q 'GRPO packing: 8 completions a micro-batch, at least 2 a row of 96.*at most 4 of "
                        "its 8 rows' %s/out.txt", g_dir), 0);
    // step 1 samples with the start weights: the same completions, rewards and advantages
    assert_int_equal(sh("cd %s && grep '\"step\":1,' flat/rollouts.jsonl > a.txt && "
                        "grep '\"step\":1,' packed/rollouts.jsonl > b.txt && test -s a.txt && cmp -s a.txt b.txt",
                        g_dir), 0);
    // The first update's gradient: every completion token's gradient through the packed rows (its loss is the
    // mean of each group's advantages, 0 by construction, so it is not compared)
    const double a = metric_at("flat", "grad_norm", 1), b = metric_at("packed", "grad_norm", 1);
    printf("step 1 grad_norm: %.9g one completion a row, %.9g packed\n", a, b);
    assert_true(a > 0.1 && fabs(a - b) <= 1e-6 * a);
    // the packed recipe refused where its completions might not fit
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s train %s/flat.ini --set train.run_dir=%s/bad %s --set rl.prompts=5", pocket(), g_dir,
             g_dir, packed_sets);
    assert_refused_in(g_dir, cmd, NULL, "may need");
    // resumed, the packed run ends with the bits of an uninterrupted one
    assert_int_equal(write_grpo_recipe("packed.ini", 4, "prompts = 2\n"), 0);
    assert_int_equal(sh("sed -i 's/^seq_len = 48/seq_len = 96/' %s/packed.ini", g_dir), 0);
    assert_stopped_run_identical(g_dir, "packed.ini", 3, 4);
    assert_resumed_rollouts_identical(g_dir, "packed.ini", 4);
    printf("packed: the same first rollouts and gradient norm; resumed run identical\n");
}

static void test_bad_input(void **s) {
    (void)s;
    char cmd[1400], ckpt[600];
    // a reward program that dies at its 45th completion (step 3's second micro-batch): the run stops there, its step-2
    // checkpoint as it was
    assert_int_equal(sh("printf 'i=0\\nwhile read l; do i=$((i+1)); [ $i -gt 44 ] && exit 3; echo 0.5; done\\n' "
                        "> %s/dies.sh", g_dir), 0);
    char rewards[700];
    snprintf(rewards, sizeof rewards, "rewards = program=sh %s/dies.sh\n", g_dir);
    assert_int_equal(write_grpo_recipe("prog.ini", 6, rewards), 0);
    snprintf(cmd, sizeof cmd, "%s train %s/prog.ini --set train.run_dir=%s/prog", pocket(), g_dir, g_dir);
    assert_refused_in(g_dir, cmd, NULL, "task.h5:");
    assert_int_equal(sh("grep -q 'exit' %s/err.txt", g_dir), 0);
    snprintf(ckpt, sizeof ckpt, "%s/prog/ckpt-00000002.h5", g_dir);
    assert_int_equal(sh("test -f %s && test ! -e %s/prog/ckpt-00000003.h5", ckpt, g_dir), 0);
    // the same run with a reward that answers resumes from that checkpoint and ends
    assert_int_equal(sh("%s train %s/prog.ini --set train.run_dir=%s/prog --set rl.rewards=json > %s/out.txt && "
                        "grep -q 'resuming from .*ckpt-00000002.h5 (step 2)' %s/out.txt", pocket(), g_dir, g_dir, g_dir,
                        g_dir), 0);
    assert_int_equal(sh("test -f %s/prog/ckpt-00000006.h5", g_dir), 0);
    // the rollouts of the failed step were dropped on resume: step 3 has its 16 lines once
    assert_int_equal(sh("test $(grep -c '\"step\":3,' %s/prog/rollouts.jsonl) = 16", g_dir), 0);
    // recipe mistakes
    snprintf(cmd, sizeof cmd, "%s train %s/model.ini --set train.run_dir=%s/bad --set train.micro_batch=6", pocket(),
             g_dir, g_dir);
    assert_refused_in(g_dir, cmd, NULL, "not a multiple of [rl] group");
    snprintf(cmd, sizeof cmd, "%s train %s/model.ini --set train.run_dir=%s/bad --set rl.max_new=48", pocket(), g_dir,
             g_dir);
    assert_refused_in(g_dir, cmd, NULL, "leaves no room for a prompt");
    snprintf(cmd, sizeof cmd, "%s train %s/model.ini --set train.run_dir=%s/bad --set data.train=%s/pairs.h5",
             pocket(), g_dir, g_dir, g_dir);
    assert_refused_in(g_dir, cmd, NULL, "pairs.h5");
    snprintf(cmd, sizeof cmd, "%s train %s/model.ini --set train.run_dir=%s/bad --set rl.rewards=speed", pocket(),
             g_dir, g_dir);
    assert_refused_in(g_dir, cmd, NULL, "[rl] rewards");
    struct stat st;
    snprintf(ckpt, sizeof ckpt, "%s/bad", g_dir);
    assert_true(stat(ckpt, &st) != 0);
    // prompts without room for max_new new tokens are counted and dropped
    assert_int_equal(sh("%s train %s/model.ini --set train.run_dir=%s/long --set data.train=%s/long.h5 "
                        "--set train.steps=1 > %s/out.txt && grep -q 'GRPO prompts: 16 of 24 examples.*dropped 0 "
                        "without a reply, 8 with fewer than rl.max_new = 6 positions left' %s/out.txt", pocket(), g_dir,
                        g_dir, g_dir, g_dir, g_dir), 0);
    printf("a dying reward program, bad recipes and a pairs set refused in one line; 8 long prompts dropped\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_rollouts_are_generate_s),
        cmocka_unit_test(test_learns_the_reward),
        cmocka_unit_test(test_kl_to_start_is_zero_while_unchanged),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_updates_per_rollout),
        cmocka_unit_test(test_packed_rollouts),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
