// test_dpo_train.c: pocket train with train.mode = dpo and pocket eval on
// pairs, end to end on a tiny Qwen3 and pairs of made-up replies.
// - the run starts at the loss of a policy equal to its reference (log 2 for
//   sigmoid DPO: every reward 0), writes TRL's metrics each step and
//   evaluation, and its validation loss falls;
// - reference.h5 holds, per document, what pocket eval --dump-pairs measures
//   with the start checkpoint as the model (the same pass over one set);
// - a run stopped with train.stop_after and resumed ends with the bits of an
//   uninterrupted one (parameters, AdamW moments, losses, best.h5,
//   reference.h5), for the model with sigmoid DPO, a LoRA adapter with
//   dropout, QAT, IPO with the sft term and SimPO (no reference file);
// - bad input, one stderr line, a non-zero exit: a reference file made from
//   another start model or other data, a resumed run without its reference,
//   an SFT dataset, a pair longer than seq_len, ipo with label smoothing,
//   [distill]; a refused new run leaves no run directory.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <sys/stat.h>
#include <jansson.h>
#include "../util/h5.h"
#include "test_cli_util.h"

static char g_dir[256];

// DIR/NAME: a dpo recipe on DIR/init.h5 and DIR/pairs.h5 (train and val), 6 steps of 2 x 96 x 2, evaluated
// every 3, saved every 2, with `extra` after it.
static int write_dpo_recipe(const char *name, const char *extra) {
    return write_textf(g_dir, name,
                       "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/pairs.h5\nval = %s/val.h5\n"
                       "[train]\nmode = dpo\nmicro_batch = 2\nseq_len = 96\ngrad_accum = 2\nsteps = 6\n"
                       "eval_interval = 3\neval_batches = 4\nsave_interval = 2\nthreads = 1\n[optim]\nlr = 0.003\n"
                       "warmup = 1\n%s", g_dir, g_dir, g_dir, extra);
}

// pairs of made-up word strings: the chosen reply always starts with "yes", the rejected one with "no".
static int write_pairs(const char *name, int n, unsigned seed) {
    static const char *words[] = {"red", "blue", "cat", "dog", "sun", "moon", "tree", "river", "stone", "bird"};
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < n; i++) {
        fprintf(f, "{\"prompt\": \"");
        for (int k = 0; k < 3 + (int)((seed + 7u * i) % 5); k++) fprintf(f, "%s ", words[(seed + 3u * i + k) % 10]);
        fprintf(f, "->\", \"chosen\": \" yes");
        for (int k = 0; k < 1 + (int)((seed + i) % 4); k++) fprintf(f, " %s", words[(seed + i + 2u * k) % 10]);
        fprintf(f, "\", \"rejected\": \" no");
        for (int k = 0; k < 2 + (int)((seed + 5u * i) % 3); k++) fprintf(f, " %s", words[(seed + 4u * i + k) % 10]);
        fprintf(f, "\"}\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_dpo_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    if (write_tiny_config(path, 64, 16, 128, 1505, ", \"rope_theta\": 10000.0")) return -1;
    if (write_pairs("pairs.jsonl", 40, 1) || write_pairs("val.jsonl", 12, 5) || write_pairs("other.jsonl", 40, 9))
        return -1;
    const char *tok = "tests/fixtures/tok/tokenizer.json";
    if (sh("%s init --model %s/config.json --tokenizer %s --out %s/init.h5 >/dev/null && "
           "%s init --model %s/config.json --tokenizer %s --seed 77 --out %s/other-init.h5 >/dev/null",
           pocket(), g_dir, tok, g_dir, pocket(), g_dir, tok, g_dir))
        return -1;
    for (int k = 0; k < 3; k++) {
        const char *name = k == 0 ? "pairs" : k == 1 ? "val" : "other";
        if (sh("%s tokenize --pairs --tokenizer %s %s/%s.jsonl --out %s/%s.h5 2>/dev/null", pocket(), tok, g_dir, name,
               g_dir, name))
            return -1;
    }
    return write_dpo_recipe("dpo.ini", "");
}

static int teardown(void **state) {
    (void)state;
    if (getenv("KEEP_TEST_DIR")) return printf("kept %s\n", g_dir) < 0;
    return sh("rm -rf %s", g_dir);
}

// The first number after "key": in the line of metrics.jsonl at `line` (0-based) of run's.
static double metric(const char *run, int line, const char *key) {
    char cmd[800], out[64] = "";
    snprintf(cmd, sizeof cmd, "sed -n '%dp' %s/%s/metrics.jsonl | grep -o '\"%s\": *[-0-9.e+]*' | sed 's/.*: *//'",
             line + 1, g_dir, run, key);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    pclose(p);
    out[n] = 0;
    if (!n) fail_msg("%s: line %d has no %s", run, line + 1, key);
    return strtod(out, NULL);
}

static void test_starts_at_log2_and_learns(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/dpo.ini --set train.run_dir=%s/run >/dev/null", pocket(), g_dir, g_dir), 0);
    // line 1 is the evaluation at step 0: the policy is its reference, every reward 0
    const double v0 = metric("run", 0, "val_loss"), acc0 = metric("run", 0, "val_rewards/accuracies");
    const double v6 = metric("run", 8, "val_loss"), acc6 = metric("run", 8, "val_rewards/accuracies");
    printf("validation loss %.6f -> %.6f, reward accuracy %.2f -> %.2f\n", v0, v6, acc0, acc6);
    assert_true(fabs(v0 - log(2.0)) < 1e-6);
    assert_true(metric("run", 0, "val_rewards/margins") == 0 && acc0 == 0);
    assert_true(v6 < v0 - 0.05);
    assert_true(acc6 > 0.5);
    // each step's line has the six metrics
    assert_int_equal(sh("sed -n '2p' %s/run/metrics.jsonl | grep -q '\"logps/rejected\"'", g_dir), 0);
}

// reference.h5 is the start model's log-probability of every document, the same as eval --dump-pairs measures
// with the start checkpoint as the model and as --ref.
static void test_reference_is_start_model(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/dpo.ini --set train.run_dir=%s/ref --set train.stop_after=1 >/dev/null", pocket(),
                        g_dir, g_dir), 0);
    assert_int_equal(sh("%s eval --ckpt %s/init.h5 --ref %s/init.h5 --data %s/val.h5 --dump-pairs %s/val.jsonl "
                        "--seq-len 96 --batch 2 >/dev/null", pocket(), g_dir, g_dir, g_dir, g_dir), 0);
    // /val against the dump's chosen and rejected log-probabilities of every pair
    char path[600];
    snprintf(path, sizeof path, "%s/ref/reference.h5", g_dir);
    PtError e;
    hid_t f = h5_open_read(path, &e);
    assert_true(f >= 0);
    double vals[24];
    hsize_t n = 24;
    assert_int_equal(h5_read_dataset(f, "val", H5T_NATIVE_DOUBLE, 1, &n, vals, path, &e), 0);
    H5Fclose(f);
    snprintf(path, sizeof path, "%s/val.jsonl", g_dir);
    FILE *dump = fopen(path, "r");
    char line[1024];
    double worst = 0;
    int pairs = 0;
    while (fgets(line, sizeof line, dump)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        const int g = (int)json_integer_value(json_object_get(j, "pair"));
        const double c = json_real_value(json_object_get(j, "chosen_logp"));
        const double r = json_real_value(json_object_get(j, "rejected_logp"));
        worst = fmax(worst, fmax(fabs(vals[2 * g] - c), fabs(vals[2 * g + 1] - r)));
        worst = fmax(worst, fabs(json_real_value(json_object_get(j, "ref_chosen_logp")) - c));
        pairs++;
        json_decref(j);
    }
    fclose(dump);
    printf("reference.h5 against eval --dump-pairs: largest difference %.2e over %d pairs\n", worst, pairs);
    assert_int_equal(pairs, 12);
    assert_true(worst < 1e-4);
}

// The values of "key" in a run's metrics.jsonl, as text.
static void read_key(const char *run, const char *key, char *out, size_t cap) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "grep -o '\"%s\": *[-0-9.e+]*' %s/metrics.jsonl", key, run);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    pclose(p);
}

// Stopped after 3 steps (between saves and evaluations) and resumed = uninterrupted, bit for bit.
static void check_resume(const char *name, const char *extra, int has_reference) {
    assert_int_equal(write_dpo_recipe(name, extra), 0);
    assert_stopped_run_identical(g_dir, name, 3, 6);
    char a[400], b[400], la[4096], lb[4096];
    snprintf(a, sizeof a, "%s/%s-full", g_dir, name);
    snprintf(b, sizeof b, "%s/%s-split", g_dir, name);
    assert_int_equal(sh("h5diff %s/best.h5 %s/best.h5", a, b), 0);
    read_key(a, "rewards/margins", la, sizeof la);
    read_key(b, "rewards/margins", lb, sizeof lb);
    assert_true(strlen(la) > 0);
    assert_string_equal(la, lb);
    struct stat st;
    snprintf(a, sizeof a, "%s/%s-full/reference.h5", g_dir, name);
    assert_int_equal(stat(a, &st) == 0, has_reference);
    printf("%s: resumed run identical (%s)\n", name, has_reference ? "with reference.h5" : "no reference");
}

static void test_resume_is_bit_identical(void **s) {
    (void)s;
    check_resume("model.ini", "", 1);
    check_resume("lora.ini", "[lora]\nenabled = 1\nrank = 4\ndropout = 0.1\n", 1);
    check_resume("qat.ini", "[qat]\nenabled = 1\ngroup = 32\n", 1);
    check_resume("ipo.ini", "[preference]\nloss = ipo\nbeta = 0.5\nsft_weight = 1\n", 1);   // with the sft term
    check_resume("simpo.ini", "[preference]\nloss = simpo\nbeta = 2\nsimpo_gamma = 1\nlabel_smoothing = 0.1\n", 0);
}

static void assert_refused(const char *cmd, const char *out, const char *says) {
    assert_refused_in(g_dir, cmd, out, says);
}

static void test_bad_input(void **s) {
    (void)s;
    char cmd[1600], out[400];
    // a start whose reference.h5 came from another start model, or from other training data
    assert_int_equal(sh("%s train %s/dpo.ini --set train.run_dir=%s/base --set train.stop_after=1 >/dev/null",
                        pocket(), g_dir, g_dir), 0);
    assert_int_equal(sh("mkdir -p %s/moved %s/moved2 && cp %s/base/reference.h5 %s/moved/ && "
                        "cp %s/base/reference.h5 %s/moved2/", g_dir, g_dir, g_dir, g_dir, g_dir, g_dir), 0);
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s/moved --set model.init=%s/other-init.h5",
             pocket(), g_dir, g_dir, g_dir);
    snprintf(out, sizeof out, "%s/moved/ckpt-00000006.h5", g_dir);
    assert_refused(cmd, out, "another start model");
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s/moved2 --set data.train=%s/other.h5",
             pocket(), g_dir, g_dir, g_dir);
    snprintf(out, sizeof out, "%s/moved2/ckpt-00000006.h5", g_dir);
    assert_refused(cmd, out, "another training set");
    // a resumed run whose reference.h5 is gone
    assert_int_equal(sh("rm %s/base/reference.h5", g_dir), 0);
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s/base", pocket(), g_dir, g_dir);
    assert_refused(cmd, NULL, "reference.h5 is missing");
    // an SFT dataset, a pair longer than a row, ipo with smoothing, distillation: nothing run, no run directory
    assert_int_equal(sh("%s tokenize --chat --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/data/chat.jsonl "
                        "--out %s/sft.h5 2>/dev/null", pocket(), g_dir), 0);
    snprintf(out, sizeof out, "%s/never", g_dir);
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s --set data.train=%s/sft.h5", pocket(), g_dir,
             out, g_dir);
    assert_refused(cmd, out, "train.mode is dpo");
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s --set train.seq_len=16", pocket(), g_dir, out);
    assert_refused(cmd, out, "more than a row of 16");
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s --set preference.loss=ipo "
             "--set preference.label_smoothing=0.1", pocket(), g_dir, out);
    assert_refused(cmd, out, "no meaning for loss = ipo");
    snprintf(cmd, sizeof cmd, "%s train %s/dpo.ini --set train.run_dir=%s --set distill.enabled=1", pocket(), g_dir, out);
    assert_refused(cmd, out, "[distill] with train.mode = dpo");
    // eval: a reference loss without --ref
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/init.h5 --data %s/val.h5", pocket(), g_dir, g_dir);
    assert_refused(cmd, NULL, "give --ref");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_at_log2_and_learns),
        cmocka_unit_test(test_reference_is_start_model),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
