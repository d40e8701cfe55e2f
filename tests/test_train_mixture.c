// pocket train on a mixture of datasets and on several validation sets, end
// to end on a tiny model (train/run_data.h, data/mixture.h):
// - over a run of 10^6 tokens (2 x 10^4 under ASan), each set's tokens as
//   the run reports them are within two rows of its share (and within 1% of
//   its weight over 10^6), add up to the tokens the run counted, and agree
//   with each set's epochs times its windows (counted here from the file);
// - a mixture of weights 1 and 0 trains exactly the plain run on the first set;
// - a run stopped mid-mixture and resumed is bit-identical (h5diff of the
//   last checkpoint and best.h5, the logged losses, the curves of loss.svg);
// - several validation sets: each one's loss in metrics.jsonl, and best.h5 the
//   checkpoint of the step [train] best_by's figure was lowest at (found here
//   from the logged losses);
// - bad input (weights, tokenizer, kind, a missing file, a name used twice,
//   what a mixture cannot combine with): one line naming the key, no run
//   directory left.
// The same order on 1 and 2 ranks is tests/test_dist.c's (make test-mpi).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../data/dataset.h"
#include "test_cli_util.h"

static char g_dir[256];

// A corpus of n documents of varying length (3 to 40 words), so the second
// set's documents differ from the fixture corpus's.
static int write_words(const char *path, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const char *words[] = {"red", "model", "reads", "a", "short", "line", "and", "writes", "the", "answer", "blue"};
    for (int d = 0; d < n; d++) {
        fprintf(f, "{\"text\": \"");
        for (int w = 0; w < 3 + (d * 7) % 38; w++) fprintf(f, "%s%s", w ? " " : "", words[(d + w * 3) % 11]);
        fprintf(f, "\"}\n");
    }
    return fclose(f) ? -1 : 0;
}

// The tiny model, three CPT sets of different sizes (a: the fixture corpus,
// b: the small fixture folder, c: generated documents), an SFT set and a CPT
// set of another tokenizer.
static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_mixture_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char words[300];
    snprintf(words, sizeof words, "%s/words.jsonl", g_dir);
    const char *tok = "--tokenizer tests/fixtures/tok/tokenizer.json";
    if (make_tiny_checkpoint(g_dir) || write_words(words, 400) ||
        sh("%s tokenize %s tests/fixtures/tok/corpus.txt --out %s/a.h5 >/dev/null", pocket(), tok, g_dir) ||
        sh("%s tokenize %s tests/fixtures/data/corpus --out %s/b.h5 >/dev/null", pocket(), tok, g_dir) ||
        sh("%s tokenize %s %s --out %s/c.h5 >/dev/null", pocket(), tok, words, g_dir) ||
        sh("%s tokenize --chat %s tests/fixtures/data/chat.jsonl --out %s/sft.h5 >/dev/null", pocket(), tok, g_dir) ||
        sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer_gpt2ish.json tests/fixtures/tok/corpus.txt "
           "--out %s/other.h5 >/dev/null", pocket(), g_dir))
        return -1;
    char path[300];
    snprintf(path, sizeof path, "%s/mix.ini", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/a.h5:0.6, %s/b.h5:0.1, %s/c.h5:0.3\n"
               "val = dom:%s/a.h5, gen:%s/c.h5\n[train]\nmicro_batch = 4\nseq_len = 32\nsteps = 6\neval_interval = 1\n"
               "eval_batches = 2\nsave_interval = 1\nkeep_last = 100\nthreads = 1\nbest_by = sum\n[optim]\nlr = 0.01\n"
               "warmup = 2\n", g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
    return fclose(f) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

// pocket train mix.ini into g_dir/RUN with more --set arguments; its exit status.
static int train(const char *run, const char *extra) {
    return sh("%s train %s/mix.ini --set train.run_dir=%s/%s %s >%s/%s.log 2>&1", pocket(), g_dir, g_dir, run, extra,
              g_dir, run);
}

// Every line of RUN's metrics.jsonl that has `key`, in order (a JSON array, caller decrefs).
static json_t *metric_lines(const char *run, const char *key) {
    char path[400], *line = NULL;
    size_t cap = 0;
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", g_dir, run);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("no %s", path);
    json_t *out = json_array();
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        if (j && json_object_get(j, key)) json_array_append(out, j);
        json_decref(j);
    }
    free(line);
    fclose(f);
    return out;
}

static double number(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_number(v)) fail_msg("no number '%s'", key);
    return json_number_value(v);
}

// CPT windows of T + 1 tokens at multiples of T in the set (the items an epoch visits).
static double windows(const char *name, int T) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    Dataset d;
    PtError e;
    if (dataset_open(&d, path, &e)) fail_msg("%s", e.msg);
    double n = (double)((d.n_tokens - 1) / (uint64_t)T);
    dataset_close(&d);
    return n;
}

// Must-show 1: 10^6 tokens at 0.6 / 0.1 / 0.3 from sets of 6,245, 246 and
// 19,092 tokens (each repeats, the smallest hundreds of times).
// 10^6 tokens in the plain build; under AddressSanitizer, which trains a few times
// slower, 2 x 10^4 (the row bound below holds at any length).
#ifdef __SANITIZE_ADDRESS__
enum { RUN_TOKENS = 20000 };
#else
enum { RUN_TOKENS = 1000000 };
#endif

static void test_shares_over_a_million_tokens(void **s) {
    (void)s;
    const int T = 64;
    char flags[400];
    snprintf(flags, sizeof flags, "--set train.steps=0 --set train.tokens=%d --set train.micro_batch=16 "
             "--set train.seq_len=64 --set train.eval_interval=0 --set train.save_interval=0 "
             "--set train.keep_last=1 --set data.val= --set train.best_by=", RUN_TOKENS);
    assert_int_equal(train("million", flags), 0);
    json_t *lines = metric_lines("million", "train_sets");
    assert_int_equal(json_array_size(lines), 1);   // the last step's line
    json_t *last = json_array_get(lines, 0), *sets = json_object_get(last, "train_sets");
    const double run_tokens = number(last, "tokens"), weight[3] = {0.6, 0.1, 0.3};
    const char *name[3] = {"a.h5", "b.h5", "c.h5"};
    assert_true(run_tokens >= RUN_TOKENS);
    double sum = 0;
    for (int k = 0; k < 3; k++) {
        json_t *set = json_array_get(sets, k);
        const double tokens = number(set, "tokens"), epochs = number(set, "epochs"), w = windows(name[k], T);
        const double share = tokens / run_tokens;
        printf("  %s: %.0f tokens, %.4f%% of %.0f (weight %.0f%%), %.3f epochs of %.0f windows\n", name[k], tokens,
               100 * share, run_tokens, 100 * weight[k], epochs, w);
        // within two rows of its share at every length (mixture.h); over 10^6 tokens, within 1% of its weight
        assert_true(fabs(tokens - weight[k] * run_tokens) <= 2.0 * T);
        if (RUN_TOKENS >= 1000000) assert_true(fabs(share - weight[k]) <= 0.01 * weight[k]);
        // every CPT row is a window of T tokens: the tokens are the windows consumed
        assert_true(fabs(epochs * w * T - tokens) <= 1e-6 * tokens + T);
        sum += tokens;
    }
    assert_true(sum == run_tokens);   // every token the run trained on came from one of the sets
    json_decref(lines);
}

// A mixture whose other sets weigh 0 is the plain run on its first set: the same batches, so the same weights.
static void test_weight_one_is_the_plain_run(void **s) {
    (void)s;
    char mix[600], plain[400];
    snprintf(mix, sizeof mix, "--set 'data.train=%s/a.h5:1, %s/c.h5:0' --set data.val= --set train.best_by=", g_dir, g_dir);
    snprintf(plain, sizeof plain, "--set data.train=%s/a.h5 --set data.val= --set train.best_by=", g_dir);
    assert_int_equal(train("one-mix", mix), 0);
    assert_int_equal(train("one-plain", plain), 0);
    assert_int_equal(sh("h5diff %s/one-mix/ckpt-00000006.h5 %s/one-plain/ckpt-00000006.h5 /params /params", g_dir,
                        g_dir), 0);
    assert_int_equal(sh("h5diff %s/one-mix/ckpt-00000006.h5 %s/one-plain/ckpt-00000006.h5 /optim /optim", g_dir,
                        g_dir), 0);
    // the plain run's checkpoint has no mixture cursor, the mixture's has one
    assert_int_equal(sh("h5dump -A -g /state %s/one-plain/ckpt-00000006.h5 | grep -q mix_", g_dir), 1);
    assert_int_equal(sh("h5dump -A -g /state %s/one-mix/ckpt-00000006.h5 | grep -q mix_sets", g_dir), 0);
}

// The polylines of RUN's loss.svg (the curves; the title names the run).
static void curves(const char *run, char *out, size_t cap) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -E '^<(polyline|circle)' %s/%s/loss.svg", g_dir, run);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    pclose(p);
}

static void test_resume_mid_mixture_is_bit_identical(void **s) {
    (void)s;
    assert_int_equal(train("full", "--set train.save_interval=3"), 0);
    assert_int_equal(train("split", "--set train.save_interval=3 --set train.stop_after=3"), 0);
    // stopped where no set is at an epoch's end: the cursor is mid-mixture
    assert_int_equal(sh("grep -q 'stopped (train.stop_after) at step 3' %s/split.log", g_dir), 0);
    assert_int_equal(train("split", "--set train.save_interval=3"), 0);
    assert_int_equal(sh("grep -q 'resuming from .*ckpt-00000003.h5' %s/split.log", g_dir), 0);
    assert_int_equal(sh("h5diff %s/full/ckpt-00000006.h5 %s/split/ckpt-00000006.h5", g_dir, g_dir), 0);
    assert_int_equal(sh("h5diff %s/full/best.h5 %s/split/best.h5", g_dir, g_dir), 0);
    char full[400], split[400], a[8192], b[8192];
    snprintf(full, sizeof full, "%s/full", g_dir);
    snprintf(split, sizeof split, "%s/split", g_dir);
    assert_same_losses(full, split);
    // the curves of loss.svg, one per validation set, rebuilt from metrics.jsonl on resume
    curves("full", a, sizeof a);
    curves("split", b, sizeof b);
    assert_string_equal(a, b);
    assert_int_equal(sh("grep -q '>dom loss<' %s/full/loss.svg && grep -q '>gen loss<' %s/full/loss.svg", g_dir,
                        g_dir), 0);
}

// The step (0..6) whose eval line has the lowest wd x val_dom_loss + wg x val_gen_loss (the first if tied).
static long lowest_step(json_t *evals, double wd, double wg) {
    long best = -1;
    double low = INFINITY;
    for (size_t i = 0; i < json_array_size(evals); i++) {
        json_t *j = json_array_get(evals, i);
        const double v = wd * number(j, "val_dom_loss") + wg * number(j, "val_gen_loss");
        if (v < low) low = v, best = (long)number(j, "step");
    }
    return best;
}

// Trains on a only, so dom (a) goes on falling while gen (c) turns; best.h5
// must hold the weights of the step the chosen figure was lowest at (step 0:
// the start model's).
static void test_val_sets_and_best_by(void **s) {
    (void)s;
    const struct {
        const char *run, *best_by;
        double wd, wg;
    } cases[] = {{"by-dom", "dom", 1, 0}, {"by-gen", "gen", 0, 1}, {"by-sum3", "dom:1, gen:3", 1, 3},
                 {"by-sum10", "dom:1, gen:10", 1, 10}};
    long chosen[4];
    for (int c = 0; c < 4; c++) {
        char extra[600];
        snprintf(extra, sizeof extra, "--set data.train=%s/a.h5 --set 'train.best_by=%s' --set optim.lr=0.03",
                 g_dir, cases[c].best_by);
        assert_int_equal(train(cases[c].run, extra), 0);
        json_t *evals = metric_lines(cases[c].run, "val_dom_loss");
        assert_int_equal(json_array_size(evals), 7);   // steps 0 to 6
        for (size_t i = 0; i < 7; i++) {
            json_t *j = json_array_get(evals, i);
            assert_non_null(json_object_get(j, "val_gen_loss"));
            assert_non_null(json_object_get(j, "val_gen_ppl"));
            assert_null(json_object_get(j, "val_loss"));   // that key is a plain val's
        }
        chosen[c] = lowest_step(evals, cases[c].wd, cases[c].wg);
        json_decref(evals);
        printf("  best_by %s: lowest at step %ld\n", cases[c].best_by, chosen[c]);
        char at[400];
        if (chosen[c]) snprintf(at, sizeof at, "%s/%s/ckpt-%08ld.h5", g_dir, cases[c].run, chosen[c]);
        else snprintf(at, sizeof at, "%s/init.h5", g_dir);
        assert_int_equal(sh("h5diff %s/%s/best.h5 %s /params /params", g_dir, cases[c].run, at), 0);
        assert_int_equal(sh("grep -q 'validation loss dom [0-9.]* (perplexity [0-9.]*), gen [0-9.]* (perplexity' "
                            "%s/%s.log", g_dir, cases[c].run), 0);
    }
    // the setup tells the figures apart, and the weights of a sum matter
    assert_true(chosen[0] != chosen[1] && chosen[2] != chosen[3]);
}

// Must-show 4: one stderr line naming the key, a non-zero exit, no run directory.
static void test_bad_input_is_refused(void **s) {
    (void)s;
    const struct {
        const char *set, *says;
    } cases[] = {
        {"data.train=%s/a.h5:-0.5, %s/c.h5:1", "[data] train: the weight -0.5"},
        {"data.train=%s/a.h5:0, %s/c.h5:0", "[data] train: every weight is zero"},
        {"data.train=%s/a.h5:lots, %s/c.h5:1", "[data] train: the weight 'lots'"},
        {"data.train=%s/a.h5:1, %s/other.h5:1", "[data] train: "},   // ... other.h5: tokenized with tokenizer ...
        {"data.train=%s/a.h5:1, %s/sft.h5:1", "[data] train: "},     // ... sft.h5: a sft dataset, but ... cpt
        {"data.train=%s/a.h5:1, %s/missing.h5:1", "missing.h5"},
        {"data.val=gen:%s/a.h5, gen:%s/c.h5", "[data] val: the name 'gen' is used twice"},
        {"data.val=dom:%s/a.h5, %s/c.h5", "[data] val: entry 2"},
        {"data.val=dom:%s/a.h5, gen:%s/missing.h5", "[data] val: "},
    };
    const char *also[] = {NULL, NULL, NULL, "tokenizer", "mode is cpt", "[data] train", NULL, NULL, "missing.h5"};
    char run[400], cmd[2048], set[800];
    snprintf(run, sizeof run, "%s/refused/run", g_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(set, sizeof set, cases[i].set, g_dir, g_dir);
        snprintf(cmd, sizeof cmd, "%s train %s/mix.ini --set train.run_dir=%s --set '%s'", pocket(), g_dir, run, set);
        assert_refused_in(g_dir, cmd, NULL, cases[i].says);
        if (also[i]) assert_int_equal(sh("grep -qF '%s' %s/err.txt", also[i], g_dir), 0);
        assert_int_equal(sh("test -e %s/refused", g_dir), 1);   // not even the parent it would have made
    }
    // What a mixture cannot be combined with (DPO keeps per-document reference
    // log-probabilities of one set); a mixture's length in epochs.
    const char *combos[][2] = {
        {"--set train.mode=dpo", "[data] train: a mixture is not supported with train.mode = dpo"},
        {"--set train.steps=0", "[data] train: a mixture's length is set by [train] tokens or steps"},
        {"--set train.best_by=nope", "[train] best_by: 'nope' is not a [data] val set (the sets: dom, gen)"},
    };
    for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s train %s/mix.ini --set train.run_dir=%s %s", pocket(), g_dir, run, combos[i][0]);
        assert_refused_in(g_dir, cmd, NULL, combos[i][1]);
        assert_int_equal(sh("test -e %s/refused", g_dir), 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input_is_refused),
        cmocka_unit_test(test_weight_one_is_the_plain_run),
        cmocka_unit_test(test_resume_mid_mixture_is_bit_identical),
        cmocka_unit_test(test_val_sets_and_best_by),
        cmocka_unit_test(test_shares_over_a_million_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
