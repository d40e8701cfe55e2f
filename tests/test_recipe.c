// Recipes: the intended defaults (written out here, not read from recipe.c),
// file + --set overrides, every error kind (the message names file:line or
// the --set argument, and the key), write -> load round trips to an identical
// struct, --help lists every key, and the shipped recipes load.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <dirent.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>
#include "../train/recipe.h"

// Writes text to a fresh temp file "/tmp/pocket_recipe_XXXXXX.ini"; path must hold 64 chars.
static void write_temp(char *path, const char *text) {
    strcpy(path, "/tmp/pocket_recipe_XXXXXX.ini");
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
}

static const char *MINIMAL = "[model]\ninit = pocket-0.3b.h5\n[data]\ntrain = data/corpus.h5\n";

static void test_defaults(void **state) {
    (void)state;
    char path[64], want_dir[96];
    write_temp(path, MINIMAL);
    Recipe r;
    PtError e;
    if (recipe_load(&r, path, 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_string_equal(r.model.init, "pocket-0.3b.h5");
    assert_string_equal(r.model.tokenizer, "");
    assert_string_equal(r.data.train, "data/corpus.h5");
    assert_string_equal(r.data.val, "");
    // the training defaults
    assert_int_equal(r.train.mode, TRAIN_MODE_CPT);
    assert_int_equal(r.train.micro_batch, 4);
    assert_int_equal(r.train.seq_len, 256);
    assert_int_equal(r.train.grad_accum, 1);
    assert_int_equal(r.train.steps, 0);
    assert_int_equal(r.train.tokens, 0);
    assert_true(r.train.epochs == 1.0f);
    assert_int_equal(r.train.stop_after, 0);
    assert_int_equal(r.train.eval_interval, 100);
    assert_int_equal(r.train.eval_batches, 20);
    assert_int_equal(r.train.save_interval, 100);
    assert_int_equal(r.train.keep_last, 2);
    assert_int_equal(r.train.seed, 1234);
    assert_int_equal(r.train.threads, 0);
    assert_int_equal(r.train.max_bad_steps, 5);
    assert_string_equal(r.train.sample_prompt, "");
    assert_int_equal(r.train.sample_tokens, 48);
    assert_int_equal(r.train.doc_mask, 0);
    assert_true(r.optim.lr == 3e-4f);
    assert_true(r.optim.beta1 == 0.9f);
    assert_true(r.optim.beta2 == 0.95f);
    assert_true(r.optim.eps == 1e-8f);
    assert_true(r.optim.weight_decay == 0.1f);
    assert_true(r.optim.grad_clip == 1.0f);
    assert_int_equal(r.optim.schedule, SCHED_COSINE);
    assert_int_equal(r.optim.warmup, 100);
    assert_true(r.optim.min_lr_ratio == 0.1f);
    assert_true(r.optim.decay_fraction == 0.2f);
    assert_int_equal(r.qat.freeze_codes_step, -1);
    // run_dir: runs/<file name without .ini>
    snprintf(want_dir, sizeof want_dir, "runs/%.*s", (int)(strlen(path) - 9), path + 5);
    assert_string_equal(r.train.run_dir, want_dir);
    unlink(path);
}

static void test_file_and_set(void **state) {
    (void)state;
    char path[64];
    write_temp(path,
               "# a comment\n"
               "; another comment\n"
               "[model]\n"
               "  init = \"ckpt/start.h5\"   \n"   // indented, quoted, trailing spaces
               "[data]\n"
               "train=d/train.h5\n"
               "val = d/val.h5 ; inline comment\n"
               "[train]\n"
               "mode = sft\n"
               "micro_batch = 8\n"
               "tokens = 2e9\n"
               "doc_mask = true\n"
               "sample_prompt = Q: why? A=b;c\n"
               "run_dir = \"\"\n"
               "[optim]\n"
               "lr = 1e-4\n"
               "schedule = wsd\n"
               "[train]\n"   // a section may be reopened
               "seq_len = 512\n");
    char *sets[] = {"train.micro_batch=16", " optim.warmup = 7 ", "train.sample_prompt=Once upon a time",
                    "optim.grad_clip=0"};
    Recipe r;
    PtError e;
    if (recipe_load(&r, path, 4, sets, &e)) fail_msg("%s", e.msg);
    assert_string_equal(r.model.init, "ckpt/start.h5");
    assert_string_equal(r.data.train, "d/train.h5");
    assert_string_equal(r.data.val, "d/val.h5");
    assert_int_equal(r.train.mode, TRAIN_MODE_SFT);
    assert_int_equal(r.train.micro_batch, 16);   // --set beats the file
    assert_int_equal(r.train.seq_len, 512);
    assert_int_equal(r.train.tokens, 2000000000L);
    assert_int_equal(r.train.doc_mask, 1);
    assert_string_equal(r.train.sample_prompt, "Once upon a time");
    assert_true(r.optim.lr == 1e-4f);
    assert_int_equal(r.optim.schedule, SCHED_WSD);
    assert_int_equal(r.optim.warmup, 7);
    assert_true(r.optim.grad_clip == 0.0f);
    assert_true(strncmp(r.train.run_dir, "runs/pocket_recipe_", 19) == 0);   // "" = the default

    AdamWConfig ac;
    Schedule sc;
    recipe_adamw(&r, &ac);
    recipe_schedule(&r, 1000, &sc);
    assert_true(ac.lr == 1e-4f && ac.beta2 == 0.95f && ac.grad_clip == 0.0f);
    assert_true(sc.kind == SCHED_WSD && sc.warmup == 7 && sc.total == 1000 && sc.decay_fraction == 0.2f);

    // Without a file: defaults and --set only.
    char *only[] = {"model.init=tiny", "data.train=x.h5", "optim.schedule=linear"};
    if (recipe_load(&r, NULL, 3, only, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.optim.schedule, SCHED_LINEAR);
    assert_string_equal(r.train.run_dir, "runs/run");
    unlink(path);
}

// The schedule choice names are optim.h's kind names, in SCHED_* order.
static void test_schedule_names(void **state) {
    (void)state;
    for (int k = 0; k < SCHED_KIND_COUNT; k++) {
        char set[64];
        snprintf(set, sizeof set, "optim.schedule=%s", schedule_kind_name(k));
        char *sets[] = {"model.init=tiny", "data.train=x.h5", set};
        Recipe r;
        PtError e;
        if (recipe_load(&r, NULL, 3, sets, &e)) fail_msg("%s", e.msg);
        assert_int_equal(r.optim.schedule, k);
    }
    assert_string_equal(train_mode_name(TRAIN_MODE_SFT), "sft");
}

typedef struct {
    const char *body;     // appended to MINIMAL unless it starts with '!'
    int line;             // expected line in "path:line:", 0 = no line
    const char *want1, *want2;   // substrings of the message
} FileError;

static void test_file_errors(void **state) {
    (void)state;
    // MINIMAL has 4 lines, so a body's first line is line 5.
    const FileError cases[] = {
        {"[export]\nbits = 4\n", 5, "unknown section [export]", "model, data, train, optim, qat"},
        {"[train]\nmicro_batchs = 4\n", 6, "unknown key 'micro_batchs'", "[train]"},
        {"[optim]\nlr = fast\n", 6, "[optim] lr:", "'fast' is not a number"},
        {"[optim]\nlr = 1e-4 # note\n", 6, "[optim] lr:", "not a number"},
        {"[optim]\nlr = 1\n", 6, "[optim] lr:", "out of range (0, 1)"},
        {"[optim]\nbeta2 = 1.0\n", 6, "[optim] beta2:", "out of range [0, 1)"},
        {"[optim]\nbeta1 = 0.99999999\n", 6, "[optim] beta1:", "out of range"},   // rounds to 1.0f
        {"[optim]\nlr = nan\n", 6, "[optim] lr:", "not a number"},
        {"[train]\nmicro_batch = 2.5\n", 6, "[train] micro_batch:", "'2.5' is not an integer"},
        {"[train]\nmicro_batch = 0\n", 6, "[train] micro_batch:", "0 is out of range [1, 65536]"},
        {"[train]\nseq_len = 99999999999\n", 6, "[train] seq_len:", "out of range"},
        {"[train]\nsteps = -3\n", 6, "[train] steps:", "out of range"},
        {"[optim]\nschedule = cosin\n", 6, "[optim] schedule:", "'cosin' is not one of constant|cosine|linear|wsd"},
        {"[train]\nmode = qat\n", 6, "[train] mode:", "not one of cpt|sft"},
        {"[train]\ndoc_mask = maybe\n", 6, "[train] doc_mask:", "not 0 or 1"},
        {"[train]\nseq_len = 512\n\n# again\nseq_len = 1024\n", 9, "[train] seq_len is set twice", "first on line 6"},
        {"!lr = 1\n[model]\ninit = x\n", 1, "key 'lr'", "before any [section]"},
        {"[train]\nthis line has no equals sign\n", 6, "not a [section] or key = value line", NULL},
        {"[train\nseq_len = 5\n", 5, "not a [section] or key = value line", NULL},
        {"!# only the model\n[model]\ninit = x\n", 0, "[data] train is missing", "required"},
        {"![data]\ntrain = x\n", 0, "[model] init is missing", "required"},
        {"[model]\ninit =\n", 6, "[model] init is set twice", "first on line 2"},
        {"![model]\ninit = \"\"\n[data]\ntrain = x\n", 0, "[model] init is missing", NULL},
        {"[train]\nsteps = 50\n[optim]\nwarmup = 60\n", 0, "[optim] warmup (60)", "[train] steps (50)"},
        {"[qat]\nfreeze_codes_step = 10\n", 0, "[qat] freeze_codes_step (10) needs [qat] enabled = 1", NULL},
        {"[qat]\nenabled = 1\nstart_step = 20\nfreeze_codes_step = 10\n", 0,
         "[qat] freeze_codes_step (10) is before [qat] start_step (20)", NULL},
        {"[qat]\nenabled = 1\nfreeze_codes_step = -2\n", 7, "[qat] freeze_codes_step:", "out of range [-1, 1e12]"},
        {"[qat]\nenabled = 1\nfreeze_codes_step = soon\n", 7, "[qat] freeze_codes_step:", "not an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const FileError *c = &cases[i];
        char text[1024], path[64], where[96];
        if (c->body[0] == '!') snprintf(text, sizeof text, "%s", c->body + 1);
        else snprintf(text, sizeof text, "%s%s", MINIMAL, c->body);
        write_temp(path, text);
        Recipe r;
        PtError e;
        int rc = recipe_load(&r, path, 0, NULL, &e);
        if (c->line) snprintf(where, sizeof where, "%s:%d: ", path, c->line);
        else snprintf(where, sizeof where, "%s: ", path);
        if (rc != -1 || strncmp(e.msg, where, strlen(where)) != 0 || !strstr(e.msg, c->want1) ||
            (c->want2 && !strstr(e.msg, c->want2)) || strchr(e.msg, '\n'))
            fail_msg("case %zu: rc %d, message \"%s\"; want prefix \"%s\" and \"%s\"", i, rc, rc ? e.msg : "",
                     where, c->want1);
        unlink(path);
    }
    // a line too long for inih's buffer; comments of any length are fine
    char text[2048], path[64], where[160];
    char long_comment[400];
    memset(long_comment, 'c', sizeof long_comment - 1);
    long_comment[sizeof long_comment - 1] = 0;
    snprintf(text, sizeof text, "# %s\n%s[data]\nval = %0300d\n", long_comment, MINIMAL, 7);
    write_temp(path, text);
    Recipe r;
    PtError e;
    assert_int_equal(recipe_load(&r, path, 0, NULL, &e), -1);
    snprintf(where, sizeof where, "%s:7: line is 306 characters long, at most 197", path);
    if (strncmp(e.msg, where, strlen(where))) fail_msg("got \"%s\"", e.msg);
    unlink(path);
    assert_int_equal(recipe_load(&r, "/nonexistent/r.ini", 0, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/r.ini: cannot open recipe"));
}

static void test_set_errors(void **state) {
    (void)state;
    char path[64];
    write_temp(path, MINIMAL);
    const struct { const char *set, *want; } cases[] = {
        {"train.micro_batch", "expected section.key=value"},
        {"micro_batch=4", "expected section.key=value"},
        {"train.nope=1", "unknown key 'nope' in [train]"},
        {"export.bits=4", "unknown section [export]"},
        {"optim.lr=abc", "[optim] lr: 'abc' is not a number"},
        {"optim.warmup=-1", "[optim] warmup: -1 is out of range"},
        {"train.mode=pretrain", "[train] mode: 'pretrain' is not one of cpt|sft"},
        {"train.sample_prompt=a ; b", "[train] sample_prompt: value contains"},
        {"data.val=\"\"\"", NULL},   // a quoted '"' is a fine value
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *sets[] = {"train.seq_len=64", (char *)cases[i].set};
        Recipe r;
        PtError e;
        int rc = recipe_load(&r, path, 2, sets, &e);
        if (!cases[i].want) {
            if (rc) fail_msg("%s: %s", cases[i].set, e.msg);
            assert_string_equal(r.data.val, "\"");
            continue;
        }
        char where[128];
        snprintf(where, sizeof where, "--set '%s': ", cases[i].set);
        if (rc != -1 || strncmp(e.msg, where, strlen(where)) || !strstr(e.msg, cases[i].want))
            fail_msg("%s: rc %d \"%s\"", cases[i].set, rc, rc ? e.msg : "");
    }
    // a string longer than a field holds
    char big[300] = "train.sample_prompt=";
    memset(big + strlen(big), 'x', 250);
    big[270] = 0;
    char *sets[] = {big};
    Recipe r;
    PtError e;
    assert_int_equal(recipe_load(&r, path, 1, sets, &e), -1);
    assert_non_null(strstr(e.msg, "value is 250 characters long, at most 179"));
    unlink(path);
}

// Load -> write -> load gives the identical struct, and writing again gives the same text.
static void roundtrip(const Recipe *a) {
    char path[64];
    write_temp(path, "");
    FILE *f = fopen(path, "w");
    recipe_write(a, f);
    fclose(f);
    Recipe b;
    PtError e;
    if (recipe_load(&b, path, 0, NULL, &e)) fail_msg("reloading the written recipe: %s", e.msg);
    assert_memory_equal(a, &b, sizeof b);
    char *t1, *t2;
    size_t n1, n2;
    FILE *m1 = open_memstream(&t1, &n1), *m2 = open_memstream(&t2, &n2);
    recipe_write(a, m1);
    recipe_write(&b, m2);
    fclose(m1), fclose(m2);
    assert_string_equal(t1, t2);
    free(t1), free(t2);
    unlink(path);
}

static void test_write_load_roundtrip(void **state) {
    (void)state;
    char *sets[] = {
        "model.init=pocket-0.3b.h5", "model.tokenizer=tok/tokenizer.json", "data.train=data/a b.h5",
        "data.val=\";starts with a semicolon\"", "train.mode=sft", "train.micro_batch=3", "train.steps=12345",
        "train.tokens=98765432109", "train.epochs=2.5", "train.stop_after=77", "train.doc_mask=on", "train.seed=0",
        "train.sample_prompt=\"  padded: a=b # not a comment \"", "train.run_dir=runs/x y",
        "optim.lr=0.000123", "optim.beta1=0", "optim.eps=1e-7", "optim.weight_decay=0.01",
        "optim.schedule=constant", "optim.min_lr_ratio=0.333333333", "optim.decay_fraction=1",
    };
    Recipe r;
    PtError e;
    if (recipe_load(&r, NULL, (int)(sizeof sets / sizeof sets[0]), sets, &e)) fail_msg("%s", e.msg);
    assert_string_equal(r.train.sample_prompt, "  padded: a=b # not a comment ");
    assert_string_equal(r.data.val, ";starts with a semicolon");
    roundtrip(&r);
    // leading '"' and the defaults
    char *sets2[] = {"model.init=tiny", "data.train=x.h5", "train.sample_prompt=\"\"quoted\""};
    if (recipe_load(&r, NULL, 3, sets2, &e)) fail_msg("%s", e.msg);
    assert_string_equal(r.train.sample_prompt, "\"quoted");
    roundtrip(&r);
    // floats print in the shortest form that reads back exactly
    Rng rng;
    rng_seed(&rng, 3);
    for (int i = 0; i < 200; i++) {
        char lr[64], wd[64];
        snprintf(lr, sizeof lr, "optim.lr=%.9g", (double)(float)(rng_uniform(&rng) * 0.999 + 1e-6));
        snprintf(wd, sizeof wd, "optim.weight_decay=%.9g", (double)(float)pow(10, -8 * rng_uniform(&rng)));
        char *s3[] = {"model.init=tiny", "data.train=x.h5", lr, wd};
        if (recipe_load(&r, NULL, 4, s3, &e)) fail_msg("%s", e.msg);
        roundtrip(&r);
    }
}

static void test_help_and_write_list_every_key(void **state) {
    (void)state;
    // every recipe key, listed here independently of recipe.c
    const char *keys[] = {"init", "tokenizer", "train", "val", "mode", "micro_batch", "seq_len", "grad_accum",
                          "steps", "tokens", "epochs", "stop_after", "eval_interval", "eval_batches", "save_interval",
                          "keep_last", "seed", "threads", "run_dir", "max_bad_steps", "sample_prompt",
                          "sample_tokens", "doc_mask", "lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip",
                          "schedule", "warmup", "min_lr_ratio", "decay_fraction", "freeze_codes_step"};
    char *help, *written;
    size_t n;
    FILE *f = open_memstream(&help, &n);
    recipe_help(f);
    fclose(f);
    Recipe r;
    PtError e;
    char *sets[] = {"model.init=tiny", "data.train=x.h5"};
    assert_int_equal(recipe_load(&r, NULL, 2, sets, &e), 0);
    f = open_memstream(&written, &n);
    recipe_write(&r, f);
    fclose(f);
    const char *sections[] = {"[model]", "[data]", "[train]", "[optim]"};
    for (size_t i = 0; i < 4; i++) {
        assert_non_null(strstr(help, sections[i]));
        assert_non_null(strstr(written, sections[i]));
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "    %s ", keys[i]);
        if (!strstr(help, pat)) fail_msg("help lacks %s", keys[i]);
        snprintf(pat, sizeof pat, "\n%s = ", keys[i]);
        if (!strstr(written, pat)) fail_msg("written recipe lacks %s", keys[i]);
    }
    assert_non_null(strstr(help, "constant|cosine|linear|wsd"));
    assert_non_null(strstr(help, "(required)"));
    free(help), free(written);
}

static void test_shipped_recipes(void **state) {
    (void)state;
    Recipe r;
    PtError e;
    if (recipe_load(&r, "recipes/pocket-0.3b-cpt.ini", 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.train.mode, TRAIN_MODE_CPT);
    assert_int_equal(r.train.seq_len, 1024);
    assert_string_equal(r.train.run_dir, "runs/pocket-0.3b-cpt");
    if (recipe_load(&r, "recipes/pocket-0.3b-sft.ini", 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.train.mode, TRAIN_MODE_SFT);
    assert_true(r.optim.lr < 1e-4f);
    // The QAT recipes: the deployed grid (g64 asymmetric, embedding included).
    if (recipe_load(&r, "recipes/pocket-0.3b-qat.ini", 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_true(r.qat.enabled);
    assert_int_equal(r.qat.group, 64);
    assert_false(r.qat.symmetric);
    assert_true(r.qat.quant_embedding);
    // and the setting that won on SmolLM2 (docs/qat.md): distilled from its own start, bf16 matmuls
    assert_true(r.distill.enabled);
    assert_string_equal(r.distill.teacher, "");
    assert_int_equal(r.train.matmul, TRAIN_MATMUL_BF16);
    static const char *experiment[] = {"pretrain", "fp32", "qat-g64", "qat-g128", "qat-g64-sym"};
    for (int i = 0; i < 5; i++) {
        char path[128];
        snprintf(path, sizeof path, "recipes/qat-experiment/%s.ini", experiment[i]);
        if (recipe_load(&r, path, 0, NULL, &e)) fail_msg("%s", e.msg);
        assert_int_equal(r.qat.enabled, i >= 2);
    }
}

// Every .ini under dir (and one level of folders below it) through recipe_load; returns how many.
static int load_every_recipe(const char *dir, int depth) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct stat st;
    for (struct dirent *ent; (ent = readdir(d));) {
        if (ent->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        const size_t len = strlen(ent->d_name);
        if (len > 4 && !strcmp(ent->d_name + len - 4, ".ini")) {
            Recipe r;
            PtError e;
            if (recipe_load(&r, path, 0, NULL, &e)) fail_msg("%s", e.msg);
            n++;
        } else if (depth > 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            n += load_every_recipe(path, depth - 1);
        }
    }
    closedir(d);
    return n;
}

// Every recipe the repository ships parses and passes recipe_load's checks (its
// [data] values and their combinations with the rest included), and the DPO and
// mixture ones say what their docs say.
static void test_every_shipped_recipe_loads(void **state) {
    (void)state;
    const int n = load_every_recipe("recipes", 1);
    printf("  %d shipped recipes load\n", n);
    assert_true(n >= 20);
    Recipe r;
    PtError e;
    if (recipe_load(&r, "recipes/pocket-0.3b-dpo.ini", 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.train.mode, TRAIN_MODE_DPO);
    if (recipe_load(&r, "recipes/tour/dpo.ini", 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.train.mode, TRAIN_MODE_DPO);
    assert_int_equal(r.preference.loss, PREF_SIGMOID);
    if (recipe_load(&r, "recipes/cpt-bench/cpt.ini", 0, NULL, &e)) fail_msg("%s", e.msg);
    assert_non_null(strstr(r.data.train, ":0.1"));
    assert_non_null(strstr(r.data.val, "en:"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_file_and_set),
        cmocka_unit_test(test_schedule_names),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_set_errors),
        cmocka_unit_test(test_write_load_roundtrip),
        cmocka_unit_test(test_help_and_write_list_every_key),
        cmocka_unit_test(test_shipped_recipes),
        cmocka_unit_test(test_every_shipped_recipe_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
