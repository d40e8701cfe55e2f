// pocket train end to end on a tiny model: resume equivalence (bitwise, one
// thread; plain, QAT, QAT with frozen codes), gradient accumulation, SFT
// masking at model level, SIGKILL during checkpoint writes, and recipes that
// must fail before any training.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test_model_util.h"
#include "../formats/checkpoint.h"
#include "../cli/open_model.h"
#include <jansson.h>
#include "../data/chat.h"
#include "../data/dataset.h"
#include "test_qat_util.h"
#include "test_cli_util.h"

static char g_dir[256];


// A tiny Qwen3 whose vocabulary fits the fixture tokenizer, a CPT dataset from
// the fixture corpus and an SFT dataset from the fixture chats.
static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_train_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (make_tiny_checkpoint(g_dir)) return -1;
    if (sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/tok/corpus.txt "
           "tests/fixtures/data/corpus --out %s/cpt.h5 >/dev/null", pocket(), g_dir))
        return -1;
    if (sh("%s tokenize --chat --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/data/chat.jsonl "
           "--out %s/sft.h5 >/dev/null", pocket(), g_dir))
        return -1;
    return write_cpt_recipe(g_dir, "cpt.ini", "0.003", "schedule = cosine\n");
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

static void load_params(const char *path, ModelBundle *b) {
    PtError e;
    if (checkpoint_load(path, b, &e)) fail_msg("%s", e.msg);
}

static long newest_ckpt(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    long best = -1;
    struct dirent *ent;
    while (d && (ent = readdir(d))) {
        long s;
        int used = 0;
        if (sscanf(ent->d_name, "ckpt-%ld.h5%n", &s, &used) == 1 && !ent->d_name[used] && s > best) {
            best = s;
            snprintf(out, cap, "%s/%s", dir, ent->d_name);
        }
    }
    if (d) closedir(d);
    return best;
}


static void assert_same_params(const char *a, const char *b, double rel_tol) {
    ModelBundle x, y;
    load_params(a, &x);
    load_params(b, &y);
    assert_int_equal(x.tt.total, y.tt.total);
    if (rel_tol == 0) {
        assert_memory_equal(x.params, y.params, x.tt.total * sizeof(float));
    } else {
        double d2 = 0, r2 = 0;
        for (size_t i = 0; i < x.tt.total; i++) {
            double d = (double)x.params[i] - y.params[i];
            d2 += d * d;
            r2 += (double)x.params[i] * x.params[i];
        }
        printf("  relative difference of the parameters: %.2e\n", sqrt(d2 / r2));
        assert_true(sqrt(d2 / r2) <= rel_tol);
    }
    bundle_free(&x);
    bundle_free(&y);
}

// Runs g_dir/FULL and g_dir/SPLIT logged the same losses and ended at step 6
// with bit-identical parameters; *ckpt gets FULL's last checkpoint.
static void assert_runs_identical(const char *full, const char *split, char *ckpt, size_t n) {
    char a[400], b[400], cb[400];
    snprintf(a, sizeof a, "%s/%s", g_dir, full);
    snprintf(b, sizeof b, "%s/%s", g_dir, split);
    assert_same_losses(a, b);
    assert_int_equal(newest_ckpt(a, ckpt, n), 6);
    assert_int_equal(newest_ckpt(b, cb, sizeof cb), 6);
    assert_same_params(ckpt, cb, 0);
}

static void test_resume_is_bitwise_identical(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/full >/dev/null", pocket(), g_dir, g_dir), 0);
    // the same run stopped after 3 steps, then resumed by running the same command again
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/split --set train.stop_after=3 >/dev/null",
                        pocket(), g_dir, g_dir), 0);
    char ck[400];
    assert_int_equal(newest_ckpt(strcat(strcpy(ck, g_dir), "/split"), ck, sizeof ck), 3);
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/split >/dev/null", pocket(), g_dir, g_dir), 0);
    char ca[400];
    assert_runs_identical("full", "split", ca, sizeof ca);
}

// The same with QAT mid-run: learned scales, bf16 activations, fake-quant
// from step 2; the resumed run restores /qat and its Adam moments.
static void test_qat_resume_is_bitwise_identical(void **s) {
    (void)s;
    const char *qat = "--set qat.enabled=1 --set qat.group=4 --set qat.learn_scales=1 --set qat.scale_lr=1e-3 "
                      "--set qat.a16=bf16 --set qat.start_step=2";
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/qfull %s >/dev/null", pocket(), g_dir, g_dir, qat), 0);
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/qsplit --set train.stop_after=4 %s >/dev/null",
                        pocket(), g_dir, g_dir, qat), 0);
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/qsplit %s >/dev/null", pocket(), g_dir, g_dir, qat), 0);
    char ca[400];
    assert_runs_identical("qfull", "qsplit", ca, sizeof ca);
    QuantSpec spec;
    int quant_embedding;
    PtError e;
    assert_int_equal(checkpoint_read_qat_spec(ca, &spec, &quant_embedding, &e), 0);
    assert_int_equal(spec.group, 4);
}

// The first number after `key` in a command's output or a file (NAN if none).
static double number_after(const char *cmd, const char *key) {
    FILE *p = popen(cmd, "r");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    pclose(p);
    const char *at = strstr(buf, key);
    return at ? strtod(at + strlen(key), NULL) : NAN;
}

// QAT with learned scales from step 1 and the codes frozen from step 4:
// resumed before and after the freeze it matches the uninterrupted run bit
// for bit; the codes stay fixed after the freeze while scales and norms
// train; and every int4 consumer sees the training's model: the masters are
// the dequantized frozen codes, quant_codes (the exporters' rule) gives those
// codes back with the tuned scales, and `pocket eval --int4` (and plain eval)
// reproduce the int4 validation loss the training measured at its last step.
static void test_frozen_codes_resume_and_consumers(void **s) {
    (void)s;
    const char *qat = "--set qat.enabled=1 --set qat.group=4 --set qat.learn_scales=1 --set qat.scale_lr=1e-3 "
                      "--set qat.start_step=1 --set qat.freeze_codes_step=4";
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/ffull %s >/dev/null", pocket(), g_dir, g_dir, qat), 0);
    const int stops[] = {3, 5, 0};   // before the freeze, after it, then to the end
    for (int i = 0; i < 3; i++) {
        char until[64] = "";
        if (stops[i]) snprintf(until, sizeof until, "--set train.stop_after=%d", stops[i]);
        assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/fsplit %s %s >/dev/null", pocket(), g_dir, g_dir,
                            until, qat), 0);
    }
    char a[400], b[400], ca[400];
    assert_runs_identical("ffull", "fsplit", ca, sizeof ca);
    snprintf(a, sizeof a, "%s/ffull", g_dir);
    snprintf(b, sizeof b, "%s/fsplit", g_dir);

    // Step 5 (one update after the freeze; the split run stopped there) against step 6.
    char c4[440];
    snprintf(c4, sizeof c4, "%s/ckpt-00000005.h5", b);
    ModelBundle b4, b6;
    load_params(c4, &b4);
    load_params(ca, &b6);
    QatState q4, q6;
    int from_qat;
    PtError e;
    if (int4_load_state(&b4, c4, NULL, &q4, &from_qat, &e) || int4_load_state(&b6, ca, NULL, &q6, &from_qat, &e))
        fail_msg("%s", e.msg);
    assert_true(from_qat);
    assert_non_null(q4.codes);
    assert_non_null(q6.codes);
    size_t n_codes = q6.total * (size_t)q6.spec.group, scales_moved = 0;
    assert_memory_equal(q4.codes, q6.codes, n_codes);
    for (size_t k = 0; k < q6.total; k++) scales_moved += q4.scale[k] != q6.scale[k];
    assert_true(scales_moved > q6.total / 2);
    const TensorInfo *norm = tensor_table_find(&b6.tt, "model.norm.weight");
    assert_memory_not_equal(b4.params + norm->offset, b6.params + norm->offset, norm->numel * sizeof(float));
    assert_frozen_codes_rederive(&q6, &b6.tt, b6.params);
    qat_free(&q4);
    qat_free(&q6);
    bundle_free(&b4);
    bundle_free(&b6);

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "grep -o '\"step\":6,\"val_loss\":[-0-9.e+]*' %s/metrics.jsonl", a);
    double trained = number_after(cmd, "\"val_loss\":");
    assert_false(isnan(trained));
    for (int int4 = 0; int4 < 2; int4++) {
        snprintf(cmd, sizeof cmd, "%s eval --ckpt %s --data %s/cpt.h5 --batch 4 --seq-len 32 --max-batches 2 --threads 1 %s",
                 pocket(), ca, g_dir, int4 ? "--int4" : "");
        double got = number_after(cmd, ": loss ");
        printf("  training's int4 val loss %.6f, pocket eval%s %.4f\n", trained, int4 ? " --int4" : "", got);
        assert_true(fabs(got - trained) <= 0.00005 + 1e-9);
    }
}

static void test_grad_accumulation_matches_bigger_batch(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/mb4 --set train.steps=2 >/dev/null", pocket(), g_dir,
                        g_dir), 0);
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/mb2x2 --set train.steps=2 --set train.micro_batch=2 "
                        "--set train.grad_accum=2 >/dev/null", pocket(), g_dir, g_dir), 0);
    char a[400], b[400], ca[400], cb[400];
    snprintf(a, sizeof a, "%s/mb4", g_dir);
    snprintf(b, sizeof b, "%s/mb2x2", g_dir);
    assert_int_equal(newest_ckpt(a, ca, sizeof ca), 2);
    assert_int_equal(newest_ckpt(b, cb, sizeof cb), 2);
    assert_same_params(ca, cb, 1e-6);
    char la[4096], lb[4096];
    read_losses(a, la, sizeof la);
    read_losses(b, lb, sizeof lb);
    double x, y;
    const char *pa = strstr(la, ":"), *pb = strstr(lb, ":");
    x = atof(pa + 1);
    y = atof(pb + 1);
    assert_true(fabs(x - y) <= 1e-6 * fabs(x));
}

// A masked-out position's target must not move the loss or any gradient.
static void test_masked_targets_do_not_count(void **s) {
    (void)s;
    char path[300];
    snprintf(path, sizeof path, "%s/init.h5", g_dir);
    ModelBundle b;
    load_params(path, &b);
    TestModel tm;
    test_model_from_bundle(&tm, &b, NULL);
    Model *m = &tm.m;
    const size_t P = tm.b.tt.total;
    PtError e;
    int T = 24;
    assert_int_equal(model_plan(m, 1, T, 1, NULL, &e), 0);
    int tokens[24], targets[24];
    uint8_t mask[24];
    for (int i = 0; i < T; i++) {
        tokens[i] = (i * 37 + 5) % 1500;
        targets[i] = (i * 53 + 11) % 1500;
        mask[i] = i >= 10 && i < 20;
    }
    ModelInput in = {.B = 1, .T = T, .tokens = tokens, .targets = targets, .mask = mask};
    model_zero_grads(m);
    int c1, c2;
    double l1 = model_forward_backward(m, &in, 0.1f, NULL, &c1);
    float *g1 = malloc(P * sizeof(float));
    memcpy(g1, m->grads, P * sizeof(float));
    targets[3] = 999;   // masked out
    targets[22] = 7;    // masked out
    model_zero_grads(m);
    double l2 = model_forward_backward(m, &in, 0.1f, NULL, &c2);
    assert_int_equal(c1, 10);
    assert_int_equal(c2, 10);
    assert_true(l1 == l2);
    assert_memory_equal(g1, m->grads, P * sizeof(float));
    targets[12] = 999;  // masked in: must move the loss
    model_zero_grads(m);
    double l3 = model_forward_backward(m, &in, 0.1f, NULL, &c2);
    assert_true(l3 != l1);
    free(g1);
    test_model_free(&tm);
}

// SIGKILL while a checkpoint is being written (a temp file exists) never
// breaks the run: the next start resumes from the newest complete checkpoint
// and finishes with the same weights as an uninterrupted run.
static void test_sigkill_during_checkpoint_write(void **s) {
    (void)s;
    char run[400];
    snprintf(run, sizeof run, "%s/killed", g_dir);
    int killed_in_write = 0;
    for (int attempt = 0; attempt < 6; attempt++) {
        pid_t pid = fork();
        if (pid == 0) {
            char recipe[400], rd[420];
            snprintf(recipe, sizeof recipe, "%s/cpt.ini", g_dir);
            snprintf(rd, sizeof rd, "train.run_dir=%s", run);
            freopen("/dev/null", "w", stdout);
            execl(pocket(), pocket(), "train", recipe, "--set", rd, "--set", "train.save_interval=1", (char *)NULL);
            _exit(127);
        }
        // poll for a checkpoint temp file and kill the trainer the moment one appears
        int done = 0;
        for (int i = 0; i < 200000 && !done; i++) {
            DIR *d = opendir(run);
            struct dirent *ent;
            while (d && (ent = readdir(d)))
                if (strstr(ent->d_name, ".h5.tmp.")) {
                    kill(pid, SIGKILL);
                    killed_in_write++;
                    done = 1;
                    break;
                }
            if (d) closedir(d);
            int st;
            if (!done && waitpid(pid, &st, WNOHANG) == pid) { pid = 0; break; }
            usleep(200);
        }
        if (pid) waitpid(pid, NULL, 0);
        char ck[400];
        if (newest_ckpt(run, ck, sizeof ck) == 6) break;
    }
    printf("  killed %d times during a checkpoint write\n", killed_in_write);
    assert_true(killed_in_write > 0);
    // whatever state the kills left, the same command finishes the run
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s --set train.save_interval=1 >/dev/null 2>&1",
                        pocket(), g_dir, run), 0);
    char ca[400], cb[400], full[400];
    snprintf(full, sizeof full, "%s/full", g_dir);
    assert_int_equal(newest_ckpt(run, ca, sizeof ca), 6);
    if (newest_ckpt(full, cb, sizeof cb) != 6)
        assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s >/dev/null", pocket(), g_dir, full), 0);
    newest_ckpt(full, cb, sizeof cb);
    assert_same_params(ca, cb, 0);
}

// Each bad recipe fails before training with one line naming the problem.
static void expect_recipe_error(const char *sets, const char *needle) {
    char err[400], cmd_out[2048];
    snprintf(err, sizeof err, "%s/err.txt", g_dir);
    int rc = sh("%s train %s/cpt.ini --set train.run_dir=%s/bad %s >/dev/null 2>%s", pocket(), g_dir, g_dir, sets, err);
    FILE *f = fopen(err, "r");
    size_t n = fread(cmd_out, 1, sizeof cmd_out - 1, f);
    fclose(f);
    cmd_out[n] = 0;
    printf("  %s -> %s", sets, cmd_out);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(cmd_out, needle));
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += cmd_out[i] == '\n';
    assert_int_equal(lines, 1);
    char ck[400], bad[400];
    snprintf(bad, sizeof bad, "%s/bad", g_dir);
    assert_true(newest_ckpt(bad, ck, sizeof ck) < 0);
}

// A refused run leaves no directory: not the run directory, nor the parents
// it would have created (they used to stay, empty).
static void test_refused_run_leaves_no_directory(void **s) {
    (void)s;
    char top[400];
    snprintf(top, sizeof top, "%s/new-parent", g_dir);
    assert_int_not_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/deeper/run --set data.train=/nonexistent.h5 "
                            ">/dev/null 2>&1", pocket(), g_dir, top), 0);
    assert_false(path_exists(top));
    // An existing directory stays.
    assert_int_equal(sh("mkdir -p %s/kept", g_dir), 0);
    assert_int_not_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/kept --set data.train=/nonexistent.h5 "
                            ">/dev/null 2>&1", pocket(), g_dir, g_dir), 0);
    char kept[400];
    snprintf(kept, sizeof kept, "%s/kept", g_dir);
    assert_true(path_is_dir(kept));
}

// pocket inspect shows a checkpoint's int4 state (after the QAT runs above).
static void test_inspect_shows_int4_state(void **s) {
    (void)s;
    assert_int_equal(sh("%s inspect $(ls %s/qfull/ckpt-*.h5 | tail -1) | grep -q '^int4 state: group [0-9]*, '", pocket(), g_dir), 0);
    assert_int_equal(sh("%s inspect %s/init.h5 | grep -q '^int4 state: none'", pocket(), g_dir), 0);
}

// An MNN package states its sampling (greedy on request, as pocket generate)
// and carries the chat template pocket used: for a checkpoint without one,
// the bundled template (it used to ship none, or the model's own while
// training used Qwen3's).
static void test_mnn_export_sampler_and_template(void **s) {
    (void)s;
    // a QAT checkpoint of the runs above (group 4: the tiny model's rows are 48 wide)
    assert_int_equal(sh("%s export --ckpt $(ls %s/qfull/ckpt-*.h5 | tail -1) --format mnn --out %s/mnn --sampler greedy "
                        ">/dev/null", pocket(), g_dir, g_dir), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/mnn/config.json", g_dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    assert_non_null(cfg);
    assert_string_equal(json_string_value(json_object_get(cfg, "sampler_type")), "greedy");
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/mnn/llm_config.json", g_dir);
    cfg = json_load_file(path, 0, &je);
    assert_non_null(cfg);
    const char *tmpl = json_string_value(json_object_get(json_object_get(cfg, "jinja"), "chat_template"));
    assert_non_null(tmpl);
    assert_string_equal(tmpl, chat_bundled_template());
    json_decref(cfg);
    assert_int_not_equal(sh("%s export --ckpt %s/init.h5 --format mnn --out %s/mnn2 --sampler hot 2>/dev/null", pocket(),
                            g_dir, g_dir), 0);
}

// pocket eval on a one-example SFT set counts that example's trained tokens
// once, with a batch of 4 rows of 128 (it used to fill them with copies).
static void test_eval_counts_each_example_once(void **s) {
    (void)s;
    assert_int_equal(sh("head -2 tests/fixtures/data/chat.jsonl | tail -1 > %s/one.jsonl && %s tokenize --chat "
                        "--tokenizer tests/fixtures/tok/tokenizer.json %s/one.jsonl --out %s/one.h5 >/dev/null",
                        g_dir, pocket(), g_dir, g_dir), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/one.h5", g_dir);
    Dataset d;
    PtError e;
    if (dataset_open(&d, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(d.n_docs, 1);
    long trained = 0;   // targets 1..n-1 whose token the mask trains
    for (uint64_t i = 1; i < d.n_tokens; i++) trained += d.loss_mask[i];
    dataset_close(&d);
    char out[400];
    snprintf(out, sizeof out, "%s/eval.txt", g_dir);
    assert_int_equal(sh("%s eval --ckpt %s/init.h5 --data %s/one.h5 --batch 4 --seq-len 128 --exact-match 0 > %s",
                        pocket(), g_dir, g_dir, out), 0);
    FILE *f = fopen(out, "r");
    char line[1000];
    long counted = -1;
    while (fgets(line, sizeof line, f)) {
        char *over = strstr(line, " over ");
        if (over) counted = strtol(over + 6, NULL, 10);
    }
    fclose(f);
    assert_true(trained > 0);
    assert_int_equal(counted, trained);
}

// eval_interval = 0 means never: no evaluation at step 0 either, so no best.h5.
static void test_eval_interval_zero_never_evaluates(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/cpt.ini --set train.run_dir=%s/noeval --set train.steps=2 "
                        "--set train.eval_interval=0 >/dev/null", pocket(), g_dir, g_dir), 0);
    char best[400];
    snprintf(best, sizeof best, "%s/noeval/best.h5", g_dir);
    assert_false(path_exists(best));
    assert_int_equal(sh("grep -q val_loss %s/noeval/metrics.jsonl", g_dir), 1);
}

static void test_bad_recipes_fail_before_training(void **s) {
    (void)s;
    expect_recipe_error("--set train.no_such_key=1", "no_such_key");
    expect_recipe_error("--set data.train=/nonexistent/data.h5", "/nonexistent/data.h5");
    expect_recipe_error("--set train.seq_len=4096", "seq_len");
    expect_recipe_error("--set train.mode=sft", "mode");
    expect_recipe_error("--set train.device=tpu", "'tpu'");
    expect_recipe_error("--set train.device=cuda:x", "cuda:x");
    expect_recipe_error("--set train.nccl=always", "train.nccl");
    expect_recipe_error("--set train.grad_reduce=bf16", "train.grad_reduce");
    // a dataset made with another tokenizer
    assert_int_equal(sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer_gpt2ish.json tests/fixtures/tok/corpus.txt "
                        "--out %s/other.h5 >/dev/null", pocket(), g_dir), 0);
    char set[400];
    snprintf(set, sizeof set, "--set data.train=%s/other.h5", g_dir);
    expect_recipe_error(set, "tokenizer");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masked_targets_do_not_count),
        cmocka_unit_test(test_resume_is_bitwise_identical),
        cmocka_unit_test(test_qat_resume_is_bitwise_identical),
        cmocka_unit_test(test_frozen_codes_resume_and_consumers),
        cmocka_unit_test(test_grad_accumulation_matches_bigger_batch),
        cmocka_unit_test(test_sigkill_during_checkpoint_write),
        cmocka_unit_test(test_bad_recipes_fail_before_training),
        cmocka_unit_test(test_refused_run_leaves_no_directory),
        cmocka_unit_test(test_eval_interval_zero_never_evaluates),
        cmocka_unit_test(test_eval_counts_each_example_once),
        cmocka_unit_test(test_inspect_shows_int4_state),
        cmocka_unit_test(test_mnn_export_sampler_and_template),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
