// test_distill.c: [distill] in training, on tiny models.
// - The whole model's gradient under the distillation loss (a teacher of
//   other weights; KL with a cross-entropy mix at T 2) against central
//   differences of its loss, on parameters of every kind.
// - Through the binary ($POCKET): a QAT run distilled from its own float
//   start (teacher's forward each step, and the teacher's top-k stored by
//   `pocket teacher-topk`) stopped and resumed ends bit for bit where the
//   uninterrupted run ends; the distilled int4 model is closer to the float
//   one (`pocket eval --int4 --ref`) than round-to-nearest is.
// - SFT data and a LoRA adapter distil as well.
// - Refusals, one line naming both sides, no run directory left: a teacher
//   of another tokenizer or another hidden size, a top-k dataset of another
//   tokenizer, top-k made at another sequence length or temperature, choice
//   mode; `pocket teacher-topk` with a teacher of another tokenizer.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../formats/checkpoint.h"
#include "test_cli_util.h"
#include "../model/distill_head.h"
#include "test_model_util.h"

static char g_dir[] = "/tmp/pocket-test-distill-XXXXXX";

// dir/NAME.json: a tiny Qwen3 config, hidden 48 (heads 4/2 of 12), FFN 96
// (so int4 groups of 16 fit every matrix), of `vocab` rows.
static int write_config(const char *name, int hidden, int vocab) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.json", g_dir, name);
    return write_tiny_config(path, hidden, 12, 96, vocab, "");
}

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(g_dir) || write_config("kd", 48, 1505) ||
        sh("%s init --model %s/kd.json --tokenizer tests/fixtures/tok/tokenizer.json --out %s/init.h5 >/dev/null",
           pocket(), g_dir, g_dir))
        return -1;
    if (sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/tok/corpus.txt "
           "tests/fixtures/data/corpus --out %s/cpt.h5 >/dev/null", pocket(), g_dir))
        return -1;
    // The float model: init.h5's weights at the fixtures' scale (load_preset's:
    // matrices N(0, 0.15^2), norms 1 + N(0, 0.1^2)), so its logits are peaked
    // and an int4 grid moves them.
    char path[600];
    snprintf(path, sizeof path, "%s/init.h5", g_dir);
    ModelBundle b;
    PtError e;
    if (checkpoint_load(path, &b, &e)) return -1;
    Rng rng;
    rng_seed(&rng, 77);
    for (int i = 0; i < b.tt.n; i++) {
        const TensorInfo *t = &b.tt.t[i];
        for (size_t j = 0; j < t->numel; j++) {
            float *p = b.params + t->offset + j;
            *p = (t->flags & TF_NORM) ? 1.0f + 0.1f * (float)rng_normal(&rng) : *p * (0.15f / b.cfg.init_std);
        }
    }
    snprintf(path, sizeof path, "%s/float.h5", g_dir);
    const int rc = checkpoint_save(path, &b, &e);
    bundle_free(&b);
    if (rc) return -1;
    if (write_cpt_recipe(g_dir, "kd.ini", "0.0005", "[qat]\nenabled = 1\ngroup = 16\n[distill]\nenabled = 1\n")) return -1;
    return sh("sed -i 's|init = .*/init.h5|init = %s/float.h5|' %s/kd.ini", g_dir, g_dir);
}

static int teardown(void **state) {
    (void)state;
    if (getenv("KEEP_TEST_DIR")) return printf("kept %s\n", g_dir) < 0;
    return sh("rm -rf %s", g_dir);
}

// ---------------------------------------------------------------- gradients

typedef struct {
    TestModel *s;
    StepBatch *bt;
    DistillTarget *t;
} LossCtx;

static double distill_loss(const LossCtx *c) {
    DistillHead dh = {c->t, {0, 0}};
    LossHead head = distill_loss_head(&dh);
    return model_forward_head(&c->s->m, &c->bt->in, &head, NULL);
}

static void test_model_gradients_finite_differences(void **s) {
    (void)s;
    TestModel st, te;
    load_preset("tiny", 11, &st);
    load_preset("tiny", 12, &te);   // the teacher: other weights
    const int B = 2, T = 24;
    PtError e;
    assert_int_equal(model_plan(&st.m, B, T, 1, NULL, &e), 0);
    assert_int_equal(model_plan(&te.m, B, T, 0, NULL, &e), 0);
    StepBatch bt;
    step_batch_make(&bt, B, T, st.b.cfg.vocab_size, 5, 1);
    DistillTarget t = {0.3f, 0.7f, 2.0f, NULL, NULL, NULL, NULL, NULL, 0, 0};
    t.h = model_forward_hidden(&te.m, &bt.in);
    t.W = te.m.w.lm_head;
    DistillHead dh = {&t, {0, 0}};
    LossHead head = distill_loss_head(&dh);
    model_zero_grads(&st.m);
    model_forward_backward_head(&st.m, &bt.in, &head, 1.0f, NULL);
    float *g = xmalloc(st.b.tt.total * sizeof(float), "grads");
    memcpy(g, st.m.grads, st.b.tt.total * sizeof(float));
    // Central differences (4th order) along a random direction in each
    // tensor (a directional derivative sums the gradient over the whole
    // tensor, well above the fp32 forward's rounding of the loss).
    LossCtx c = {&st, &bt, &t};
    Rng r;
    rng_seed(&r, 3);
    double worst = 0;
    const char *worst_name = "";
    float *saved = xmalloc(st.b.tt.total * sizeof(float), "saved weights");
    memcpy(saved, st.b.params, st.b.tt.total * sizeof(float));
    for (int i = 0; i < st.b.tt.n; i++) {
        const TensorInfo *ti = &st.b.tt.t[i];
        float *v = xmalloc(ti->numel * sizeof(float), "direction");
        double ana = 0;
        for (size_t k = 0; k < ti->numel; k++) {
            // not along the embedding's pad row: its lookup gets no gradient by design (transformers' padding_idx)
            const int pad_row = (ti->flags & TF_EMBED) && k / (size_t)st.b.cfg.d_model == (size_t)st.b.cfg.pad_id;
            v[k] = pad_row ? 0.0f : (float)rng_normal(&r) * 1e-3f;
            ana += (double)v[k] * g[ti->offset + k];
        }
        double f[4];
        const float steps[4] = {-2, -1, 1, 2};
        for (int q = 0; q < 4; q++) {
            for (size_t k = 0; k < ti->numel; k++) st.b.params[ti->offset + k] = saved[ti->offset + k] + steps[q] * v[k];
            f[q] = distill_loss(&c);
        }
        memcpy(st.b.params + ti->offset, saved + ti->offset, ti->numel * sizeof(float));
        const double num = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / 12.0;
        // 1e-3 relative, above a floor of 5e-6: the fp32 forward rounds the
        // loss (a sum of ~1e2) to ~1e-5, which the stencil divides by 12
        const double err = fabs(num - ana) / (1e-3 * fabs(ana) + 5e-6);
        if (err > worst) worst = err, worst_name = ti->name;
        if (getenv("VERBOSE")) printf("    %-45s %.4e vs %.4e: %.1e\n", ti->name, num, ana, err);
        free(v);
    }
    free(saved);
    printf("  model gradient under the distillation loss (KL 0.7 + CE 0.3, T 2) vs central differences along a "
           "random direction per tensor: worst %.2f of the bound (%s)\n", worst, worst_name);
    assert_true(worst <= 1.0);
    free(g);
    step_batch_free(&bt);
    test_model_free(&st);
    test_model_free(&te);
}

// ---------------------------------------------------------------- runs

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

// kd.ini with `sets`, whole and stopped after 3 steps then resumed: the same
// losses and the same parameter bits at step 6.
static void assert_resume_identical(const char *name, const char *sets) {
    assert_int_equal(sh("%s train %s/kd.ini --set train.run_dir=%s/%s-full %s >/dev/null", pocket(), g_dir, g_dir,
                        name, sets), 0);
    assert_int_equal(sh("%s train %s/kd.ini --set train.run_dir=%s/%s-split --set train.stop_after=3 %s >/dev/null",
                        pocket(), g_dir, g_dir, name, sets), 0);
    assert_int_equal(sh("%s train %s/kd.ini --set train.run_dir=%s/%s-split %s >/dev/null", pocket(), g_dir, g_dir,
                        name, sets), 0);
    char a[400], b[400], ca[500], cb[500];
    snprintf(a, sizeof a, "%s/%s-full", g_dir, name);
    snprintf(b, sizeof b, "%s/%s-split", g_dir, name);
    assert_same_losses(a, b);
    assert_int_equal(newest_ckpt(a, ca, sizeof ca), 6);
    assert_int_equal(newest_ckpt(b, cb, sizeof cb), 6);
    ModelBundle x, y;
    PtError e;
    if (checkpoint_load(ca, &x, &e) || checkpoint_load(cb, &y, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(x.params, y.params, x.tt.total * sizeof(float));
    printf("  %s: stopped at 3 and resumed, the same losses and parameters at step 6\n", name);
    bundle_free(&x);
    bundle_free(&y);
}

static void test_resume_is_bitwise_identical(void **s) {
    (void)s;
    assert_resume_identical("forward", "--set distill.kd_weight=0.8 --set distill.temperature=1.5");
    assert_int_equal(sh("%s teacher-topk --teacher %s/float.h5 --data %s/cpt.h5 --out %s/cpt-topk.h5 --k 16 --seq-len 32 "
                        "--temperature 1.5 2>/dev/null >/dev/null", pocket(), g_dir, g_dir, g_dir), 0);
    char sets[700];
    snprintf(sets, sizeof sets, "--set distill.source=topk --set data.train=%s/cpt-topk.h5 --set distill.kd_weight=0.8 "
             "--set distill.temperature=1.5", g_dir);
    assert_resume_identical("topk", sets);
}

// The first number after `key` in a command's output (NAN if none).
static double number_after(const char *cmd, const char *key) {
    FILE *p = popen(cmd, "r");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    pclose(p);
    const char *at = strstr(buf, key);
    return at ? strtod(at + strlen(key), NULL) : NAN;
}

static void test_distilled_int4_is_closer_to_float(void **s) {
    (void)s;
    // 60 steps distilled from the float start; then both int4 models against it
    assert_int_equal(sh("%s train %s/kd.ini --set train.run_dir=%s/closer --set train.steps=60 --set train.save_interval=0 "
                        "--set optim.lr=0.0003 >/dev/null", pocket(), g_dir, g_dir), 0);
    assert_int_equal(sh("%s quantize --ckpt %s/float.h5 --group 16 --out %s/rtn16.h5 >/dev/null", pocket(), g_dir, g_dir), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/rtn16.h5 --int4 --data %s/cpt.h5 --seq-len 32 --ref %s/float.h5 "
             "--max-batches 20", pocket(), g_dir, g_dir, g_dir);
    const double rtn = number_after(cmd, "mean KL divergence ");
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/closer/ckpt-00000060.h5 --int4 --data %s/cpt.h5 --seq-len 32 --ref %s/float.h5 "
             "--max-batches 20", pocket(), g_dir, g_dir, g_dir);
    const double kd = number_after(cmd, "mean KL divergence ");
    printf("  KL to the float model, group-16 int4: RTN %.5f, distilled QAT %.5f\n", rtn, kd);
    assert_true(rtn > 0.01 && kd < 0.7 * rtn);
}

// SFT data and a LoRA adapter distil too: the runs end and
// log the KL of every step.
static void test_every_mode(void **s) {
    (void)s;
    assert_int_equal(sh("%s tokenize --chat --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/data/chat.jsonl "
                        "--out %s/sft.h5 >/dev/null", pocket(), g_dir), 0);
    const char *runs[][2] = {
        {"sft", "--set train.mode=sft --set data.train=%s/sft.h5 --set data.val=%s/sft.h5 --set qat.enabled=0"},
        {"lora", "--set qat.enabled=0 --set lora.enabled=1 --set lora.rank=4"},
    };
    for (int i = 0; i < 2; i++) {
        char sets[600];
        snprintf(sets, sizeof sets, runs[i][1], g_dir, g_dir);
        assert_int_equal(sh("%s train %s/kd.ini --set train.run_dir=%s/mode-%s --set train.steps=3 --set optim.warmup=1 "
                            "--set train.eval_interval=0 %s >/dev/null", pocket(), g_dir, g_dir, runs[i][0], sets), 0);
        assert_int_equal(sh("test $(grep -c '\"kl\"' %s/mode-%s/metrics.jsonl) -eq 3", g_dir, runs[i][0]), 0);
        printf("  %s with [distill]: 3 steps, the KL logged at each\n", runs[i][0]);
    }
}

// ---------------------------------------------------------------- refusals

static int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// `pocket train kd.ini sets` fails with one stderr line holding both needles, and leaves no run directory.
static void assert_refused(const char *sets, const char *needle1, const char *needle2) {
    assert_int_not_equal(sh("%s train %s/kd.ini --set train.run_dir=%s/refused %s >/dev/null 2>%s/err.txt", pocket(),
                            g_dir, g_dir, sets, g_dir), 0);
    assert_int_equal(sh("test $(wc -l < %s/err.txt) -eq 1", g_dir), 0);
    assert_int_equal(sh("grep -q -- '%s' %s/err.txt && grep -q -- '%s' %s/err.txt", needle1, g_dir, needle2, g_dir), 0);
    char run[400];
    snprintf(run, sizeof run, "%s/refused", g_dir);
    assert_false(dir_exists(run));
    sh("sed 's/^/  refused: /' %s/err.txt", g_dir);
}

static void test_refusals(void **s) {
    (void)s;
    // a teacher of another tokenizer (the demo's) and one of another hidden size
    assert_int_equal(write_config("other", 48, 6144), 0);
    assert_int_equal(write_config("narrow", 24, 1505), 0);
    assert_int_equal(sh("%s init --model %s/other.json --tokenizer recipes/demo/tokenizer.json --out %s/other-tok.h5 "
                        ">/dev/null && %s init --model %s/narrow.json --tokenizer tests/fixtures/tok/tokenizer.json --out "
                        "%s/narrow.h5 >/dev/null", pocket(), g_dir, g_dir, pocket(), g_dir, g_dir), 0);
    char sets[800], t1[400], t2[400];
    snprintf(t1, sizeof t1, "%s/other-tok.h5", g_dir);
    snprintf(sets, sizeof sets, "--set distill.teacher=%s", t1);
    assert_refused(sets, "other-tok.h5: the teacher", "float.h5");
    snprintf(t2, sizeof t2, "%s/narrow.h5", g_dir);
    snprintf(sets, sizeof sets, "--set distill.teacher=%s", t2);
    assert_refused(sets, "hidden size 24", "48");
    // top-k: of another tokenizer's data, at another length, at another temperature
    assert_int_equal(sh("%s tokenize --tokenizer %s/other-tok.h5 tests/fixtures/tok/corpus.txt --out %s/other.h5 >/dev/null "
                        "&& %s teacher-topk --teacher %s/other-tok.h5 --data %s/other.h5 --out %s/other-topk.h5 --k 4 "
                        "--seq-len 32 2>/dev/null >/dev/null", pocket(), g_dir, g_dir, pocket(), g_dir, g_dir, g_dir), 0);
    snprintf(sets, sizeof sets, "--set distill.source=topk --set data.train=%s/other-topk.h5", g_dir);
    assert_refused(sets, "other-topk.h5: tokenized with tokenizer", "but the model");
    assert_int_equal(sh("%s teacher-topk --teacher %s/float.h5 --data %s/cpt.h5 --out %s/t64.h5 --k 4 --seq-len 64 "
                        "2>/dev/null >/dev/null", pocket(), g_dir, g_dir, g_dir), 0);
    snprintf(sets, sizeof sets, "--set distill.source=topk --set data.train=%s/t64.h5", g_dir);
    assert_refused(sets, "rows of 64", "seq_len is 32");
    snprintf(sets, sizeof sets, "--set distill.source=topk --set data.train=%s/t64.h5 --set train.seq_len=64 "
             "--set distill.temperature=2", g_dir);
    assert_refused(sets, "temperature 1", "temperature is 2");
    assert_refused("--set train.mode=choice", "[distill]", "choice");
    // teacher-topk itself: a teacher whose tokenizer is not the data's; nothing written
    assert_int_not_equal(sh("%s teacher-topk --teacher %s/other-tok.h5 --data %s/cpt.h5 --out %s/x.h5 2>%s/err.txt",
                            pocket(), g_dir, g_dir, g_dir, g_dir), 0);
    assert_int_equal(sh("test $(wc -l < %s/err.txt) -eq 1 && grep -q cpt.h5 %s/err.txt", g_dir, g_dir), 0);
    char out[400];
    snprintf(out, sizeof out, "%s/x.h5", g_dir);
    assert_false(dir_exists(out));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gradients_finite_differences),
        cmocka_unit_test(test_resume_is_bitwise_identical),
        cmocka_unit_test(test_distilled_int4_is_closer_to_float),
        cmocka_unit_test(test_every_mode),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
