// test_draft_train.c: pocket train with [draft] and pocket draft-data, end to
// end on a tiny target (hidden 64, so its matrices take int4 group 64) made
// by a few SFT steps on a counting task.
// - the draft's loss falls on a dataset of one example (every batch the same
//   rows, blocks drawn anew); the KL term alone, on the target's own reply,
//   teaches it the target's tokens (validation acceptance at position 1);
// - a run stopped with train.stop_after and resumed ends with the bits of an
//   uninterrupted one (every parameter and AdamW moment, the losses), with
//   grad_accum 2 and an evaluation between; also with kl_weight 0.5, whose
//   metrics add up (loss = ce + 0.5 kl) and whose acceptance shares fall with
//   the position and sum to accept_length - 1;
// - bad input, one stderr line, a non-zero exit and nothing written: resuming
//   on other target weights (both hashes named), a target layer outside the
//   target, block 1 or 65, [draft] with [lora] or in cpt mode, draft-data on
//   CPT data;
// - draft-data writes the prompts and, with loss, exactly what pocket
//   generate --int4 generates from each, also where prompts of one length
//   are continued together (--batch); with --samples, after each greedy
//   reply the samples pocket generate --int4 draws with the documented seeds,
//   the same for any --batch and --threads, a sample equal to a reply kept
//   before dropped and counted (n_duplicates); bad sampling flags refused;
// - pocket inspect describes a draft checkpoint;
// - [draft] vocab: the checkpoint's vocabulary is the responses' most frequent
//   tokens; a resume asking for another is refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/stat.h>
#include "../data/dataset.h"
#include <jansson.h>
#include <math.h>
#include "../formats/draft_checkpoint.h"
#include "test_cli_util.h"

static char g_dir[256];

// DIR/NAME: a [draft] recipe on DIR/target.h5 and DATA (train and val), 6 steps of 2 x 64 x 2, evaluated every 3,
// saved every 3, with `extra` after it.
static int write_draft_recipe(const char *name, const char *data, const char *extra) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "[model]\ninit = %s/target.h5\n[data]\ntrain = %s/%s\nval = %s/%s\n"
               "[train]\nmode = sft\nmicro_batch = 2\nseq_len = 64\ngrad_accum = 2\nsteps = 6\neval_interval = 3\n"
               "eval_batches = 2\nsave_interval = 3\nthreads = 1\n[optim]\nlr = 0.01\nwarmup = 1\n"
               "[draft]\nenabled = 1\nblock = 4\nanchors = 4\n%s",
            g_dir, g_dir, data, g_dir, data, extra);
    return fclose(f) == 0 ? 0 : -1;
}

// The target: a tiny Qwen3 trained 100 SFT steps on "count from N" -> "N+1 ... N+11" (so its greedy replies
// are not one token repeated), sft.h5 of 12 such chats and one.h5 of the first.
static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_draft_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    if (write_tiny_config(path, 64, 16, 128, 1505, ", \"rope_theta\": 10000.0")) return -1;
    snprintf(path, sizeof path, "%s/sft.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < 12; i++) {
        fprintf(f, "{\"prompt\": \"count from %d\", \"completion\": \"", i);
        for (int k = 1; k <= 11; k++) fprintf(f, "%s%d", k > 1 ? " " : "", i + k);
        fprintf(f, "\"}\n");
    }
    if (fclose(f)) return -1;
    const char *tok = "tests/fixtures/tok/tokenizer.json";
    if (sh("%s init --model %s/config.json --tokenizer %s --out %s/init.h5 >/dev/null", pocket(), g_dir, tok, g_dir) ||
        sh("%s tokenize --chat --tokenizer %s %s/sft.jsonl --out %s/sft.h5 >/dev/null", pocket(), tok, g_dir, g_dir) ||
        sh("head -1 %s/sft.jsonl > %s/one.jsonl && %s tokenize --chat --tokenizer %s %s/one.jsonl --out %s/one.h5 "
           ">/dev/null", g_dir, g_dir, pocket(), tok, g_dir, g_dir) ||
        sh("%s tokenize --tokenizer %s tests/fixtures/tok/corpus.txt --out %s/cpt.h5 >/dev/null", pocket(), tok, g_dir))
        return -1;
    snprintf(path, sizeof path, "%s/sft.ini", g_dir);
    f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/sft.h5\n[train]\nmode = sft\nmicro_batch = 4\n"
               "seq_len = 64\nsteps = 100\neval_interval = 0\nsave_interval = 0\nthreads = 1\nrun_dir = %s/sft\n"
               "[optim]\nlr = 0.03\nwarmup = 2\n", g_dir, g_dir, g_dir);
    if (fclose(f)) return -1;
    if (sh("%s train %s/sft.ini >/dev/null && cp %s/sft/ckpt-00000100.h5 %s/target.h5", pocket(), g_dir, g_dir, g_dir))
        return -1;
    return write_draft_recipe("draft.ini", "sft.h5", "");
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

// The per-step losses of a run's metrics.jsonl (training steps only: they have "lr").
static int step_losses(const char *run, double *loss, int cap) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep '\"lr\"' %s/metrics.jsonl | grep -o '\"loss\": *[-0-9.e+]*' | cut -d: -f2", run);
    FILE *p = popen(cmd, "r");
    int n = 0;
    while (n < cap && fscanf(p, "%lf", &loss[n]) == 1) n++;
    pclose(p);
    return n;
}

// The lines of run/metrics.jsonl: step lines (with a grad_norm) when steps, else evaluation lines (with a val_loss).
static int metric_lines(const char *run, int steps, json_t **out, int cap) {
    char path[600], line[16384];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", g_dir, run);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: no metrics.jsonl", run);
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        json_t *j = json_loads(line, 0, NULL);
        if (j && json_object_get(j, steps ? "grad_norm" : "val_loss")) out[n++] = j;
        else json_decref(j);
    }
    fclose(f);
    return n;
}

static double num(json_t *j, const char *key) {
    json_t *v = json_object_get(j, key);
    if (!v) fail_msg("no %s in %s", key, json_dumps(j, 0));
    return json_number_value(v);
}

// On one example every batch holds the same rows: the draft's loss falls.
static void test_loss_decreases(void **s) {
    (void)s;
    assert_int_equal(write_draft_recipe("one.ini", "one.h5", ""), 0);
    assert_int_equal(sh("%s train %s/one.ini --set train.steps=24 --set train.eval_interval=0 --set "
                        "train.save_interval=0 --set optim.lr=0.02 --set train.run_dir=%s/one >/dev/null", pocket(),
                        g_dir, g_dir), 0);
    char run[300];
    snprintf(run, sizeof run, "%s/one", g_dir);
    double loss[64];
    int n = step_losses(run, loss, 64);
    assert_int_equal(n, 24);
    double first = (loss[0] + loss[1] + loss[2]) / 3, last = (loss[n - 1] + loss[n - 2] + loss[n - 3]) / 3;
    printf("  draft loss on one example: %.4f over the first 3 steps, %.4f over the last 3\n", first, last);
    assert_true(last < 0.6 * first);
    // The KL term alone, on the target's own greedy reply to the example (draft-data), teaches the draft the
    // target's next tokens: its KL falls and most validation blocks' first drafted token comes to be the
    // target's.
    assert_int_equal(sh("%s draft-data --ckpt %s/target.h5 --data %s/one.h5 --out %s/own.h5 --max-new 14 --threads 1 "
                        ">/dev/null 2>&1", pocket(), g_dir, g_dir, g_dir), 0);
    assert_int_equal(write_draft_recipe("own.ini", "own.h5", "ce_weight = 0\nkl_weight = 1\n"), 0);
    assert_int_equal(sh("%s train %s/own.ini --set train.steps=48 --set train.eval_interval=48 --set "
                        "train.save_interval=0 --set optim.lr=0.02 --set draft.anchors=16 --set train.run_dir=%s/own "
                        ">/dev/null", pocket(), g_dir, g_dir), 0);
    snprintf(run, sizeof run, "%s/own", g_dir);
    assert_int_equal(n = step_losses(run, loss, 64), 48);
    first = (loss[0] + loss[1] + loss[2]) / 3, last = (loss[n - 1] + loss[n - 2] + loss[n - 3]) / 3;
    json_t *evals[4];
    assert_int_equal(metric_lines("own", 0, evals, 4), 2);
    const double before = num(evals[0], "val_accept_1"), after = num(evals[1], "val_accept_1");
    printf("  the KL term alone on the target's reply: %.4f over the first 3 steps, %.4f over the last 3; "
           "accept_1 %.3f -> %.3f, %.3f tokens per target pass\n", first, last, before, after,
           num(evals[1], "val_accept_length"));
    assert_true(last < 0.6 * first);
    // 16 anchors give the evaluation 13 blocks (4 gave 2, whose one near tie the build's rounding decided): 9 of
    // them right in every build tried (gcc native, clang, x86-64-v3, the sanitizer build); a teacher taken one
    // position off gets 1.
    assert_true(before == 0 && after > 0.5);
    // and the draft's cross-entropy to the target's own tokens, which it never trained on, falls with the KL
    const double ce_before = num(evals[0], "val_ce"), ce_after = num(evals[1], "val_ce");
    printf("  its validation cross-entropy to the target's tokens %.4f -> %.4f\n", ce_before, ce_after);
    assert_true(ce_after < 0.25 * ce_before);
    // the evaluation that saved best.h5 says so: the first always, the second when its loss is lower
    assert_true(json_is_true(json_object_get(evals[0], "best")));
    assert_int_equal(json_is_true(json_object_get(evals[1], "best")),
                     num(evals[1], "val_loss") < num(evals[0], "val_loss"));
    json_decref(evals[0]), json_decref(evals[1]);
}

static void load_draft(const char *path, Draft *d) {
    ModelConfig c;
    PtError e;
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/config.json", g_dir);
    if (config_load(&c, cfg, &e) || draft_checkpoint_load(path, &c, NULL, NULL, d, &e)) fail_msg("%s", e.msg);
}

// Stopped after 2 steps (mid-way between saves and evaluations) and resumed = uninterrupted, bit for bit.
static void test_resume_is_bit_identical(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/draft.ini --set train.run_dir=%s/full >/dev/null", pocket(), g_dir, g_dir), 0);
    assert_int_equal(sh("%s train %s/draft.ini --set train.run_dir=%s/split --set train.stop_after=2 >/dev/null",
                        pocket(), g_dir, g_dir), 0);
    assert_int_equal(sh("%s train %s/draft.ini --set train.run_dir=%s/split >/dev/null", pocket(), g_dir, g_dir), 0);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/full", g_dir);
    snprintf(b, sizeof b, "%s/split", g_dir);
    assert_same_losses(a, b);
    // every dataset (parameters, AdamW moments) and attribute (config, hash, state) alike
    assert_int_equal(sh("h5diff %s/ckpt-00000006.h5 %s/ckpt-00000006.h5", a, b), 0);
    assert_int_equal(sh("h5diff %s/best.h5 %s/best.h5", a, b), 0);
    snprintf(a, sizeof a, "%s/full/ckpt-00000006.h5", g_dir);
    snprintf(b, sizeof b, "%s/split/ckpt-00000006.h5", g_dir);
    Draft x, y;
    load_draft(a, &x);
    load_draft(b, &y);
    assert_int_equal(x.tt.total, y.tt.total);
    assert_memory_equal(x.params, y.params, x.tt.total * sizeof(float));
    assert_int_equal(x.cfg.n_target, 2);   // min(3, L) of a 2-layer target: both
    assert_int_equal(x.cfg.target_layers[0], 0);
    assert_int_equal(x.cfg.target_layers[1], 1);
    assert_int_equal(x.cfg.mask_token, 1500);   // the config's pad_id
    assert_int_equal(x.cfg.block, 4);
    // the draft only: no target tensor; its moments are there
    assert_int_equal(sh("h5ls -r %s | grep -q embed_tokens", a), 1);
    assert_int_equal(sh("h5ls -r %s | grep -q 'optim/v/layers.0.mlp.down_proj.weight'", a), 0);
    // inspect names it and the target's hash
    assert_int_equal(sh("%s inspect %s | grep -q 'speculative draft, 1 layer(s), block 4, mask token 1500' && "
                        "%s inspect %s | grep -q 'sha256 %s'", pocket(), a, pocket(), a, x.base_sha256), 0);
    draft_free(&x);
    draft_free(&y);
}

// [draft] kl_weight = 0.5: a run stopped after 2 steps and resumed is an uninterrupted one, bit for bit. Every
// step's loss is its ce + 0.5 kl; every evaluation's acceptance shares (block 4: accept_1..3) lie in [0, 1], do
// not increase with the position, and give accept_length = 1 + their sum; steps carry no acceptance.
static void test_kl_resume_and_metrics(void **s) {
    (void)s;
    assert_int_equal(write_draft_recipe("kl.ini", "sft.h5", "kl_weight = 0.5\n"), 0);
    assert_stopped_run_identical(g_dir, "kl.ini", 2, 6);
    assert_int_equal(sh("h5diff %s/kl.ini-full/best.h5 %s/kl.ini-split/best.h5", g_dir, g_dir), 0);
    json_t *lines[16];
    int n = metric_lines("kl.ini-full", 1, lines, 16);
    assert_int_equal(n, 6);
    for (int k = 0; k < n; k++) {
        const double loss = num(lines[k], "loss"), ce = num(lines[k], "ce"), kl = num(lines[k], "kl");
        assert_true(kl > 0 && ce > 0);
        if (!(fabs(loss - (ce + 0.5 * kl)) <= 1e-6 * loss))   // metrics.jsonl keeps 7 digits
            fail_msg("step %d: loss %.17g, but ce %.17g + 0.5 kl %.17g", k + 1, loss, ce, kl);
        assert_null(json_object_get(lines[k], "accept_1"));
        json_decref(lines[k]);
    }
    n = metric_lines("kl.ini-full", 0, lines, 16);
    assert_int_equal(n, 3);   // steps 0, 3, 6
    for (int k = 0; k < n; k++) {
        double length = 1, prev = 1;
        char key[32];
        for (int i = 1; i < 4; i++) {
            snprintf(key, sizeof key, "val_accept_%d", i);
            const double share = num(lines[k], key);
            assert_true(share >= 0 && share <= prev);
            length += share, prev = share;
        }
        assert_true(fabs(num(lines[k], "val_accept_length") - length) < 1e-6 * length);
        assert_true(num(lines[k], "val_kl") > 0);
        assert_null(json_object_get(lines[k], "val_accept_4"));
        printf("  evaluation %d: val_accept_1..3 %.3f %.3f %.3f, %.3f tokens per target pass\n", k,
               num(lines[k], "val_accept_1"), num(lines[k], "val_accept_2"), num(lines[k], "val_accept_3"), length);
        json_decref(lines[k]);
    }
}

static void assert_refused(const char *cmd, const char *out, const char *says) {
    assert_refused_in(g_dir, cmd, out, says);
}

static void test_bad_input(void **s) {
    (void)s;
    char cmd[1200], run[300];
    // A run on other weights: model.init's file replaced between the stop and the resume.
    assert_int_equal(sh("cp %s/target.h5 %s/moving.h5 && %s train %s/draft.ini --set model.init=%s/moving.h5 --set "
                        "train.run_dir=%s/moved --set train.stop_after=3 >/dev/null && cp %s/init.h5 %s/moving.h5 && "
                        "ls %s/moved > %s/before.txt", g_dir, g_dir, pocket(), g_dir, g_dir, g_dir, g_dir, g_dir, g_dir,
                        g_dir), 0);
    snprintf(cmd, sizeof cmd, "%s train %s/draft.ini --set model.init=%s/moving.h5 --set train.run_dir=%s/moved",
             pocket(), g_dir, g_dir, g_dir);
    assert_refused(cmd, NULL, "a draft for the target with sha256 ");
    assert_int_equal(sh("grep -q 'but %s/moving.h5 has sha256 [0-9a-f]\\{64\\}' %s/err.txt", g_dir, g_dir), 0);
    assert_int_equal(sh("ls %s/moved | cmp -s - %s/before.txt", g_dir, g_dir), 0);
    // generate with that draft on the other weights: the refusal is the only line (no int4 line before it)
    snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/moving.h5 --draft %s/moved/ckpt-00000003.h5 --prompt-ids 5 --ids",
             pocket(), g_dir, g_dir);
    assert_refused(cmd, NULL, "a draft for the target with sha256 ");
    // Recipes that cannot run: nothing is made, not even the run directory.
    const struct { const char *set, *says; } cases[] = {
        {"draft.target_layers=0,9", "target layer 9 is outside the target's 2 layers"},
        {"draft.target_layers=1,0", "the target layers must increase"},
        {"draft.block=1", "[draft] block: 1 is out of range [2, 64]"},
        {"draft.block=65", "[draft] block: 65 is out of range [2, 64]"},
        {"lora.enabled=1", "[draft] enabled with [lora] enabled is not supported"},
        {"train.mode=cpt", "[draft] needs train.mode = sft"},
        {"draft.ce_weight=0", "[draft] ce_weight and kl_weight are both 0"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(run, sizeof run, "%s/bad%zu", g_dir, k);
        snprintf(cmd, sizeof cmd, "%s train %s/draft.ini --set train.run_dir=%s --set %s", pocket(), g_dir, run,
                 cases[k].set);
        assert_refused(cmd, run, cases[k].says);
    }
    // draft-data wants SFT data: prompts
    char out[300];
    snprintf(out, sizeof out, "%s/dd-bad.h5", g_dir);
    snprintf(cmd, sizeof cmd, "%s draft-data --ckpt %s/target.h5 --data %s/cpt.h5 --out %s", pocket(), g_dir, g_dir,
             out);
    assert_refused(cmd, out, "cpt.h5: a cpt dataset, not SFT data");
    const struct { const char *flags, *says; } sampling[] = {
        {"--samples -1", "--samples '-1' is not an integer in [0, 1024]"},
        {"--samples 2 --temperature 0", "--temperature '0' is not a number in (0, 10000]"},
        {"--samples 2 --top-p 0", "--top-p '0' is not a number in (0, 1]"},
        {"--samples 2 --top-p 1.5", "--top-p '1.5' is not a number in (0, 1]"},
        {"--temperature 0.5", "--temperature, --top-p, --top-k and --seed go with --samples N"},
    };
    for (size_t k = 0; k < sizeof sampling / sizeof sampling[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s draft-data --ckpt %s/target.h5 --data %s/sft.h5 --out %s %s", pocket(), g_dir,
                 g_dir, out, sampling[k].flags);
        assert_refused(cmd, out, sampling[k].says);
    }
    assert_true(no_entry_with_prefix(g_dir, "dd-bad.h5"));
}

// Document k of d as space-separated ids: its prompt (the tokens before the first with loss) and its reply (the
// rest, all with loss). The prompt's length.
static uint64_t doc_ids(const Dataset *d, uint64_t k, char *prompt, char *reply, size_t cap) {
    const uint64_t off = d->doc_offsets[k], len = dataset_doc_len(d, k);
    uint64_t np = 0;
    while (np < len && !d->loss_mask[off + np]) np++;
    size_t a = 0, b = 0;
    prompt[0] = reply[0] = 0;
    for (uint64_t i = 0; i < len; i++) {
        if (i < np) {
            a += (size_t)snprintf(prompt + a, cap - a, "%s%u", i ? " " : "", dataset_token(d, off + i));
        } else {
            assert_int_equal(d->loss_mask[off + i], 1);
            b += (size_t)snprintf(reply + b, cap - b, "%s%u", i > np ? " " : "", dataset_token(d, off + i));
        }
    }
    return np;
}

// The new ids pocket generate --int4 --max-new 14 (and `flags`) prints for the prompt ids, into got.
static void generate_ids(const char *prompt, const char *flags, char *got, size_t cap) {
    char cmd[6000];
    snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/target.h5 --int4 --ids --max-new 14 %s --prompt-ids \"%s\" "
             "2>/dev/null", pocket(), g_dir, flags, prompt);
    FILE *p = popen(cmd, "r");
    size_t n = fread(got, 1, cap - 1, p);
    pclose(p);
    got[n] = 0;
    got[strcspn(got, "\n")] = 0;
}

static void open_dd(const char *name, Dataset *d) {
    char path[300];
    PtError e;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (dataset_open(d, path, &e)) fail_msg("%s", e.msg);
}

// a and b hold the same documents: tokens, loss masks and boundaries.
static void assert_same_docs(const Dataset *a, const Dataset *b) {
    assert_int_equal(a->n_docs, b->n_docs);
    assert_int_equal(a->n_tokens, b->n_tokens);
    for (uint64_t k = 0; k <= a->n_docs; k++) assert_int_equal(a->doc_offsets[k], b->doc_offsets[k]);
    for (uint64_t i = 0; i < a->n_tokens; i++) {
        assert_int_equal(dataset_token(a, i), dataset_token(b, i));
        assert_int_equal(a->loss_mask[i], b->loss_mask[i]);
    }
}

// draft-data <flags> --max-new 14 --threads 1 on sft.h5 into NAME.
static int draft_data(const char *name, const char *flags) {
    return sh("%s draft-data --ckpt %s/target.h5 --data %s/sft.h5 --out %s/%s --max-new 14 --threads 1 %s "
              ">/dev/null 2>&1", pocket(), g_dir, g_dir, g_dir, name, flags);
}

// draft-data: each example's prompt, then (with loss) what pocket generate --int4 makes of it, in the
// dataset's order, with 4 rows decoded together by the batched sampler (prompts of two lengths).
static void test_draft_data_is_generate(void **s) {
    (void)s;
    assert_int_equal(draft_data("dd.h5", "--batch 4"), 0);
    Dataset d, src;
    open_dd("dd.h5", &d);
    open_dd("sft.h5", &src);
    assert_int_equal(d.kind, DATASET_SFT);
    assert_string_equal(d.tokenizer_hash, src.tokenizer_hash);
    assert_int_equal((int)d.n_docs, 12);   // 10 prompts of one length, 2 of another, sharing the rows
    int distinct = 0;
    for (uint64_t k = 0; k < d.n_docs; k++) {
        const uint64_t off = d.doc_offsets[k], len = dataset_doc_len(&d, k), soff = src.doc_offsets[k];
        char ids[4096], want[4096], got[4096];
        const uint64_t np = doc_ids(&d, k, ids, want, sizeof ids);
        assert_true(np > 0 && np < len);
        for (uint64_t i = 0; i < np; i++) {   // the prompt is the source example's, up to its first trained token
            assert_int_equal(dataset_token(&d, off + i), dataset_token(&src, soff + i));
            assert_int_equal(src.loss_mask[soff + i], 0);
        }
        assert_int_equal(src.loss_mask[soff + np], 1);
        for (uint64_t i = np + 1; i < len; i++)
            distinct += dataset_token(&d, off + i) != dataset_token(&d, off + i - 1);
        generate_ids(ids, "", got, sizeof got);
        if (strcmp(got, want))
            fail_msg("example %d: draft-data wrote [%s], generate --int4 says [%s]", (int)k, want, got);
    }
    assert_true(distinct > 0);   // the replies say something
    dataset_close(&d);
    dataset_close(&src);
}

// --samples 2: each prompt's greedy reply (dd.h5's), then each sample pocket generate --int4 draws for it at the
// same temperature with seed 7 + 2k + j (example k, sample j), a sample equal to a reply kept before dropped and
// counted; the same documents with --batch 8 --threads 1, --batch 1 --threads 2 and --batch 16 --threads 2 (past
// 8 rows the passes read the float int4 weights, not the packed ones).
static void test_draft_data_samples(void **s) {
    (void)s;
    const char *sampling = "--samples 2 --temperature 0.2 --seed 7";
    const char *runs[3][2] = {{"dd-s8.h5", "--batch 8"}, {"dd-s1.h5", "--batch 1 --threads 2"},
                              {"dd-s16.h5", "--batch 16 --threads 2"}};
    char flags[200];
    Dataset greedy, d, other;
    for (int r = 0; r < 3; r++) {
        snprintf(flags, sizeof flags, "%s %s", sampling, runs[r][1]);
        assert_int_equal(draft_data(runs[r][0], flags), 0);
        open_dd(runs[r][0], r == 0 ? &d : &other);
        if (r == 0) continue;
        assert_same_docs(&d, &other);   // not the batch's, nor the threads'
        assert_int_equal(d.n_duplicates, other.n_duplicates);
        dataset_close(&other);
    }
    open_dd("dd.h5", &greedy);
    uint64_t doc = 0, duplicates = 0, differ = 0;
    for (uint64_t k = 0; k < greedy.n_docs; k++) {
        char prompt[4096], kept[3][4096], p[4096], r[4096];
        int n_kept = 1;
        doc_ids(&greedy, k, prompt, kept[0], sizeof prompt);
        for (int j = -1; j < 2; j++) {   // j = -1: the greedy reply
            char got[4096];
            if (j < 0) {
                snprintf(got, sizeof got, "%s", kept[0]);
            } else {
                snprintf(flags, sizeof flags, "--temperature 0.2 --seed %d", 7 + 2 * (int)k + j);
                generate_ids(prompt, flags, got, sizeof got);
                int seen = 0;
                for (int i = 0; i < n_kept; i++) seen |= !strcmp(got, kept[i]);
                if (seen) { duplicates++; continue; }
                snprintf(kept[n_kept++], sizeof kept[0], "%s", got);
                differ++;
            }
            assert_true(doc < d.n_docs);
            doc_ids(&d, doc++, p, r, sizeof p);
            assert_string_equal(p, prompt);
            if (strcmp(r, got)) fail_msg("example %d, sample %d: draft-data wrote [%s], generate says [%s]", (int)k, j,
                                         r, got);
        }
    }
    assert_int_equal(doc, d.n_docs);
    assert_int_equal(d.n_duplicates, duplicates);
    assert_true(duplicates > 0 && differ > 0);   // at 0.2 both kinds of sample, so both ways are checked
    printf("  --samples 2 at temperature 0.2: %llu documents for %llu prompts, %llu samples unlike the replies "
           "before them, %llu duplicates dropped\n", (unsigned long long)d.n_docs, (unsigned long long)greedy.n_docs,
           (unsigned long long)differ, (unsigned long long)duplicates);
    dataset_close(&greedy);
    dataset_close(&d);
}

// At temperature 5 the tiny target's samples are none of them its greedy reply, nor each other: every one is kept.
// With --top-k 1 every sample is the greedy reply: all dropped, counted, the dataset the greedy one's.
static void test_draft_data_duplicates(void **s) {
    (void)s;
    assert_int_equal(draft_data("dd-hot.h5", "--limit 4 --samples 2 --temperature 5"), 0);
    Dataset d;
    open_dd("dd-hot.h5", &d);
    assert_int_equal(d.n_docs, 12);
    assert_int_equal(d.n_duplicates, 0);
    for (uint64_t k = 0; k < 4; k++) {
        char p[3][4096], r[3][4096];
        for (int j = 0; j < 3; j++) doc_ids(&d, 3 * k + (uint64_t)j, p[j], r[j], sizeof p[0]);
        assert_string_equal(p[1], p[0]);
        assert_string_equal(p[2], p[0]);
        assert_true(strcmp(r[1], r[0]) && strcmp(r[2], r[0]) && strcmp(r[2], r[1]));
    }
    dataset_close(&d);
    assert_int_equal(draft_data("dd-top1.h5", "--samples 3 --top-k 1"), 0);
    Dataset greedy;
    open_dd("dd-top1.h5", &d);
    open_dd("dd.h5", &greedy);
    assert_same_docs(&d, &greedy);
    assert_int_equal(d.n_duplicates, 3 * greedy.n_docs);
    dataset_close(&d);
    dataset_close(&greedy);
}

// [draft] vocab = 5: the checkpoint holds the 5 tokens the responses of sft.h5 hold most (counted here by
// repeated maxima, ties to the lower id), in increasing order; inspect says so; a resume asking another
// vocabulary is refused, one line, its run untouched.
static void test_vocab(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/draft.ini --set draft.vocab=5 --set train.run_dir=%s/vocab --set "
                        "train.stop_after=3 >/dev/null", pocket(), g_dir, g_dir), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/sft.h5", g_dir);
    Dataset ds;
    PtError e;
    if (dataset_open(&ds, path, &e)) fail_msg("%s", e.msg);
    long counts[1505] = {0};
    for (uint64_t i = 0; i < ds.n_tokens; i++)
        if (ds.loss_mask[i]) counts[dataset_token(&ds, i)]++;
    dataset_close(&ds);
    int want[5];
    for (int k = 0; k < 5; k++) {
        int best = 0;
        for (int i = 1; i < 1505; i++)
            if (counts[i] > counts[best]) best = i;
        want[k] = best;
        counts[best] = -1;
    }
    for (int a = 0; a < 5; a++)   // increasing order
        for (int b = a + 1; b < 5; b++)
            if (want[b] < want[a]) { int t = want[a]; want[a] = want[b]; want[b] = t; }
    snprintf(path, sizeof path, "%s/vocab/ckpt-00000003.h5", g_dir);
    Draft d;
    load_draft(path, &d);
    assert_int_equal(d.n_vocab, 5);
    for (int k = 0; k < 5; k++) assert_int_equal(d.vocab[k], want[k]);
    draft_free(&d);
    assert_int_equal(sh("%s inspect %s | grep -q 'vocabulary: the 5 tokens'", pocket(), path), 0);
    assert_int_equal(sh("ls %s/vocab > %s/before.txt", g_dir, g_dir), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s train %s/draft.ini --set draft.vocab=6 --set train.run_dir=%s/vocab", pocket(), g_dir,
             g_dir);
    assert_refused(cmd, NULL, "the resumed draft proposes 5 tokens, but [draft] vocab = 6");
    assert_int_equal(sh("ls %s/vocab | cmp -s - %s/before.txt", g_dir, g_dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_kl_resume_and_metrics),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_draft_data_is_generate),
        cmocka_unit_test(test_draft_data_samples),
        cmocka_unit_test(test_draft_data_duplicates),
        cmocka_unit_test(test_vocab),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
