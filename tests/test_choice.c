// test_choice.c: the decision head (model/choice_head.h) and its data.
//
// - gradients of the summed choice cross-entropy against central finite
//   differences of the forward, for the head row, the final norm, a layer's
//   weights and an input embedding;
// - candidates behind one prompt in the KV cache score as each (prompt +
//   candidate) fed alone (1e-5), and as the packed training batch does;
// - accuracy and ECE on a case worked by hand;
// - `pocket tokenize --choice` end to end: the documents are the prompt's ids
//   (the Qwen3 chat format written out here, tokenized) followed by each
//   candidate's ids and <|im_end|>, the mask on the candidate, the groups and
//   labels; bad lines name file and line and leave no file; --skip-bad counts;
// - `pocket train` with mode = choice (and with QAT) learns a toy task that
//   `pocket eval` then scores (fp32 and int4) and `pocket choose` picks; the
//   head survives the HF and GGUF round trips (the same scores, bit for bit),
//   and a run stopped and resumed ends with the uninterrupted run's model;
// - with LoRA (the head row frozen with the base): the adapter's gradients
//   under the choice loss against finite differences; a LoRA choice run on a
//   Dec base made by a short full fine-tuning run trains only the adapter and
//   beats the base on held-out groups of a new rule; `pocket choose --lora`
//   gives `pocket eval --lora`'s scores; a base without a head or with an
//   all-zero head row is refused. SANITIZED (test_cli_util.h): the adapter
//   run takes 20 updates instead of 300 and its learning is the plain
//   build's to judge (under ASan the 300 took over 10 minutes).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../model/choice_head.h"
#include "../train/choice_train.h"
#include "test_cli_util.h"
#include "test_model_util.h"

enum { HEAD = 500 };   // the tiny preset's vocabulary is 512; inputs stay below 400

// Two groups packed in one row of 40 (3 and 2 candidates, each its own
// segment), as the loader packs them.
typedef struct {
    int tokens[40], pos[40], seg[40];
    int first[3], last[5], label[2];
    ChoiceGroups g;
} Packed;

static void pack(Packed *p, const int *const *seqs, const int *lens, int n_seqs) {
    int t = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int i = 0; i < lens[s]; i++, t++) p->tokens[t] = seqs[s][i], p->pos[t] = i, p->seg[t] = s;
        p->last[s] = t - 1;
    }
    for (; t < 40; t++) p->tokens[t] = 0, p->pos[t] = t, p->seg[t] = n_seqs;
    p->first[0] = 0, p->first[1] = 3, p->first[2] = 5;
    p->label[0] = 2, p->label[1] = 0;
    p->g = (ChoiceGroups){2, p->first, p->last, p->label};
}

static void make_groups(Packed *p) {
    static const int a0[] = {5, 17, 33, 9, 101, 7}, a1[] = {5, 17, 33, 9, 250}, a2[] = {5, 17, 33, 9, 3, 77, 7};
    static const int b0[] = {60, 61, 62, 8}, b1[] = {60, 61, 62, 300, 8};
    const int *seqs[] = {a0, a1, a2, b0, b1};
    const int lens[] = {6, 5, 7, 4, 5};
    pack(p, seqs, lens, 5);
}

static double loss_of(Model *m, const Packed *p) {
    ModelInput in = {.B = 1, .T = 40, .tokens = p->tokens, .pos = p->pos, .seg = p->seg};
    LossHead head = choice_loss_head(&p->g);
    return model_forward_head(m, &in, &head, NULL);
}

// loss_of for lora_check_finite_differences: the model and the groups.
typedef struct {
    Model *m;
    const Packed *p;
} ChoiceLossAt;

static double choice_loss(void *ctx) {
    const ChoiceLossAt *at = ctx;
    return loss_of(at->m, at->p);
}

// The tiny preset at the fixtures' scale with row HEAD as its decision head.
static Model *load_with_head(uint64_t seed, TestModel *tm) {
    load_preset("tiny", seed, tm);
    tm->m.cfg.choice_id = HEAD;
    return &tm->m;
}

// Under LoRA the head row is frozen with the rest of the base: the choice
// loss reaches the adapter through the hidden state alone. Every adapter
// tensor's gradient against the five-point finite difference of the loss.
static void test_adapter_gradients_vs_finite_differences(void **state) {
    (void)state;
    TestModel tm;
    Model *m = load_with_head(7, &tm);
    LoraAdapter ad;
    lora_random_adapter(&ad, &tm.b.cfg, (1u << LORA_N_TARGETS) - 1);
    model_use_lora(m, &ad.cfg, &ad.tt, ad.params);
    PtError e;
    assert_int_equal(model_plan(m, 1, 40, 1, NULL, &e), 0);
    assert_ptr_equal(model_grad_table(m), &ad.tt);
    Packed p;
    make_groups(&p);
    model_zero_grads(m);
    ModelInput in = {.B = 1, .T = 40, .tokens = p.tokens, .pos = p.pos, .seg = p.seg};
    LossHead head = choice_loss_head(&p.g);
    int count;
    model_forward_backward_head(m, &in, &head, 1.0f, &count);
    assert_int_equal(count, 2);
    assert_null(m->g.lm_head);   // the head row is the base's: no gradient for it
    float *grads = xmalloc(ad.tt.total * sizeof(float), "grads");
    memcpy(grads, m->grads, ad.tt.total * sizeof(float));
    ChoiceLossAt at = {m, &p};
    char why[256];
    const double worst = lora_check_finite_differences(&ad, grads, choice_loss, &at, why);
    if (worst < 0) fail_msg("choice loss: %s", why);
    printf("adapter gradients under the choice loss: %d tensors, worst relative error %.2e\n", ad.tt.n, worst);
    free(grads);
    test_model_free(&tm);
    lora_adapter_free(&ad);
}

static void test_head_gradients_vs_finite_differences(void **state) {
    (void)state;
    TestModel tm;
    Model *m = load_with_head(7, &tm);
    PtError e;
    assert_int_equal(model_plan(m, 1, 40, 1, NULL, &e), 0);
    Packed p;
    make_groups(&p);
    model_zero_grads(m);
    ModelInput in = {.B = 1, .T = 40, .tokens = p.tokens, .pos = p.pos, .seg = p.seg};
    LossHead head = choice_loss_head(&p.g);
    int count;
    double loss = model_forward_backward_head(m, &in, &head, 1.0f, &count);
    assert_int_equal(count, 2);
    assert_true(loss > 0.1);   // the random head is not already right
    ParamViews w, g;
    param_views(&w, &tm.b.tt, tm.b.params);
    param_views(&g, &tm.b.tt, m->grads);
    const int H = m->cfg.d_model;
    struct { const char *what; float *w, *g; } probes[] = {
        {"head row", w.lm_head + (size_t)HEAD * H, g.lm_head + (size_t)HEAD * H},
        {"head row", w.lm_head + (size_t)HEAD * H + 37, g.lm_head + (size_t)HEAD * H + 37},
        {"final norm", w.lnf + 3, g.lnf + 3},
        {"layer 0 q", w.layer[0].wq + 123, g.layer[0].wq + 123},
        {"layer 1 down", w.layer[1].wdown + 999, g.layer[1].wdown + 999},
        {"layer 1 k norm", w.layer[1].knorm + 2, g.layer[1].knorm + 2},
        {"embedding of 33", w.embed + 33 * H + 5, g.embed + 33 * H + 5},
        {"embedding of 300", w.embed + 300 * H + 11, g.embed + 300 * H + 11},
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        const float eps = 1e-2f, w0 = *probes[i].w;
        *probes[i].w = w0 + eps;
        double up = loss_of(m, &p);
        *probes[i].w = w0 - eps;
        double down = loss_of(m, &p);
        *probes[i].w = w0;
        double fd = (up - down) / (2.0 * eps), an = *probes[i].g, err = fabs(fd - an) / fmax(fabs(fd), 0.05);
        worst = fmax(worst, err);
        if (err > 1e-2) fail_msg("%s: analytic %g, finite difference %g", probes[i].what, an, fd);
        assert_true(fabs(an) > 1e-4);   // a probe that does not move the loss checks nothing
    }
    printf("choice head gradients: worst relative error %.2e over %zu probes\n", worst,
           sizeof probes / sizeof probes[0]);
    // The head row's whole gradient: sum over candidates of dL/ds * h (no other
    // vocabulary row receives any: no token loss runs).
    for (int v = 0; v < 512; v++) {
        if (v == HEAD) continue;
        int used = 0;
        for (int t = 0; t < 40; t++) used |= p.tokens[t] == v;
        if (used) continue;
        for (int k = 0; k < H; k++) assert_true(g.lm_head[(size_t)v * H + k] == 0.0f);
    }
    test_model_free(&tm);
}

static void test_shared_prompt_scores_equal_alone(void **state) {
    (void)state;
    TestModel tm;
    Model *m = load_with_head(11, &tm);
    PtError e;
    int prompt[23], c0[] = {44, 7}, c1[] = {45, 46, 47, 7}, c2[] = {300, 7}, c3[] = {44, 48, 49, 50, 51, 52, 7};
    for (int i = 0; i < 23; i++) prompt[i] = (i * 37 + 11) % 400;
    const int *cand[] = {c0, c1, c2, c3};
    int lens[] = {2, 4, 2, 7};
    float shared[4], alone[4], batch[4];
    assert_int_equal(model_plan_cache(m, 40, &e), 0);
    choice_score_shared(m, prompt, 23, cand, lens, 4, shared);
    choice_score_alone(m, prompt, 23, cand, lens, 4, alone);
    // The training batch: each (prompt + candidate) a row of its own, the prompt repeated.
    int seqs_store[4][30];
    const int *seqs[4];
    int slens[4];
    for (int k = 0; k < 4; k++) {
        memcpy(seqs_store[k], prompt, sizeof prompt);
        memcpy(seqs_store[k] + 23, cand[k], (size_t)lens[k] * sizeof(int));
        seqs[k] = seqs_store[k];
        slens[k] = 23 + lens[k];
    }
    assert_int_equal(model_plan(m, 4, 30, 0, NULL, &e), 0);
    int tok[120], pos[120], seg[120], first[] = {0, 4}, last[4], label[] = {1};
    for (int k = 0; k < 4; k++)
        for (int t = 0; t < 30; t++) {
            tok[k * 30 + t] = t < slens[k] ? seqs[k][t] : 0;
            pos[k * 30 + t] = t;
            seg[k * 30 + t] = t < slens[k] ? 0 : 1;
            last[k] = k * 30 + slens[k] - 1;
        }
    ChoiceGroups g = {1, first, last, label};
    ModelInput in = {.B = 4, .T = 30, .tokens = tok, .pos = pos, .seg = seg};
    model_forward(m, &in, NULL, NULL);
    choice_head_loss(m, &g, NULL, 1.0f, batch, NULL);
    double d_alone = max_diff(shared, alone, 4), d_batch = max_diff(shared, batch, 4), spread = 0;
    for (int k = 0; k < 4; k++) spread = fmax(spread, fabs(shared[k] - shared[0]));
    printf("shared-prompt scores vs alone: max |diff| %.2e; vs the packed batch %.2e (scores spread %.3f)\n", d_alone,
           d_batch, spread);
    assert_true(d_alone <= 1e-5);
    assert_true(d_batch <= 1e-5);
    assert_true(spread > 0.01);   // distinct candidates really score differently
    test_model_free(&tm);
}

// Four groups worked by hand. Scores (0, log 3) give p = (1/4, 3/4); (log 7, 0)
// gives (7/8, 1/8); three equal scores give 1/3 each (the first is the pick);
// (0, log 19) gives (0.05, 0.95). No confidence sits on a bin edge.
//   group  pick  label  conf   right   bin
//   A      1     1      0.75   yes     (0.7, 0.8]
//   B      0     1      0.875  no      (0.8, 0.9]
//   C      0     0      1/3    yes     (0.3, 0.4]
//   D      1     1      0.95   yes     (0.9, 1.0]
// accuracy 3/4; ECE = 1/4 (|1 - .75| + |0 - .875| + |1 - 1/3| + |1 - .95|)
//                   = 1/4 (0.25 + 0.875 + 2/3 + 0.05) = 0.4604...
// Then two groups in one bin: the bin's accuracy against its mean confidence.
static void test_accuracy_and_ece_by_hand(void **state) {
    (void)state;
    ChoiceMetrics mt = {0};
    double bins[CHOICE_ECE_BINS][3] = {{0}};
    float a[] = {0, logf(3)}, b[] = {logf(7), 0}, c[] = {2, 2, 2}, d[] = {0, logf(19)};
    choice_metrics_add(&mt, bins, a, 2, 1);
    choice_metrics_add(&mt, bins, b, 2, 1);
    choice_metrics_add(&mt, bins, c, 3, 0);
    choice_metrics_add(&mt, bins, d, 2, 1);
    choice_metrics_finish(&mt, bins);
    assert_int_equal(mt.groups, 4);
    assert_int_equal(mt.correct, 3);
    assert_true(fabs(mt.accuracy - 0.75) < 1e-12);
    assert_true(fabs(mt.ece - (0.25 + 0.875 + 2.0 / 3 + 0.05) / 4) < 1e-6);
    assert_true(fabs(mt.loss - (-log(0.75) - log(0.125) - log(1.0 / 3) - log(0.95))) < 1e-6);
    // Two groups sharing bin (0.8, 0.9]: confidences 0.875 (wrong) and 0.85 (right,
    // scores (0, log(17/3))): |1/2 - 0.8625| weighted 2/2.
    ChoiceMetrics m2 = {0};
    double bins2[CHOICE_ECE_BINS][3] = {{0}};
    float e2[] = {0, logf(17.0f / 3)};
    choice_metrics_add(&m2, bins2, b, 2, 1);
    choice_metrics_add(&m2, bins2, e2, 2, 1);
    choice_metrics_finish(&m2, bins2);
    assert_true(fabs(m2.accuracy - 0.5) < 1e-12);
    assert_true(fabs(m2.ece - fabs(0.5 - (0.875 + 0.85) / 2)) < 1e-6);
}

// ---- the CLI

typedef CliEnv Env;

static int setup(void **state) { return cli_env_setup(state, "choice"); }
static int teardown(void **state) { return cli_env_teardown(state); }

static void write_file(const Env *v, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", v->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int *ids_of(const Env *v, const char *text, size_t *n) {
    int *ids = NULL;
    size_t cap = 0;
    PtError e;
    *n = 0;
    if (tokenizer_encode(v->tok, text, strlen(text), &ids, n, &cap, &e)) fail_msg("%s", e.msg);
    return ids;
}

// `pocket tokenize --choice [flags] DIR/NAME.jsonl --out DIR/NAME.h5`, opened.
static void tokenize_open(const Env *v, const char *name, const char *flags, Dataset *d) {
    assert_int_equal(sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json --choice %s %s/%s.jsonl "
                        "--out %s/%s.h5 >/dev/null 2>&1", pocket(), flags, v->dir, name, v->dir, name), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/%s.h5", v->dir, name);
    PtError e;
    if (dataset_open(d, path, &e)) fail_msg("%s", e.msg);
}

static void test_tokenize_round_trip(void **state) {
    Env *v = *state;
    write_file(v, "c.jsonl",
               "{\"prompt\": \"Category of: red cotton shirt\", \"candidates\": [\"clothing\", \"phone\", \"food\"], "
               "\"label\": \"food\"}\n"
               "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
               "\"\xe4\xbd\xa0\xe5\xa5\xbd\"}], \"candidates\": [\"yes\", \"no\"], \"label\": 1}\n");
    Dataset d;
    tokenize_open(v, "c", "", &d);
    assert_int_equal(d.kind, DATASET_CHOICE);
    assert_int_equal(d.n_groups, 2);
    assert_int_equal(d.n_docs, 5);
    assert_int_equal(d.choice_offsets[1], 3);
    assert_int_equal(d.choice_label[0], 2);
    assert_int_equal(d.choice_label[1], 1);
    // The Qwen3 format as `generate --chat` asks for a reply (thinking off), written out.
    const char *prompts[2] = {
        "<|im_start|>user\nCategory of: red cotton shirt<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"};
    const char *cands[5] = {"clothing", "phone", "food", "yes", "no"};
    const int end = tokenizer_token_id(v->tok, "<|im_end|>");
    for (int doc = 0; doc < 5; doc++) {
        size_t np, nc;
        int *p = ids_of(v, prompts[doc < 3 ? 0 : 1], &np), *c = ids_of(v, cands[doc], &nc);
        uint64_t off = d.doc_offsets[doc];
        assert_int_equal(dataset_doc_len(&d, doc), np + nc + 1);
        for (size_t i = 0; i < np + nc + 1; i++) {
            int want = i < np ? p[i] : i < np + nc ? c[i - np] : end;
            assert_int_equal(dataset_token(&d, off + i), want);
            assert_int_equal(d.loss_mask[off + i], i >= np);
        }
        free(p);
        free(c);
    }
    dataset_close(&d);
}

// One bad line: exit 1, one message naming file:line and the fault, no file.
static void expect_bad(const Env *v, const char *line, const char *want) {
    write_file(v, "bad.jsonl", "{\"prompt\": \"fine\", \"candidates\": [\"a\", \"b\"], \"label\": 0}\n");
    char path[256];
    snprintf(path, sizeof path, "%s/bad.jsonl", v->dir);
    FILE *f = fopen(path, "a");
    fputs(line, f);
    fclose(f);
    int rc = sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json --choice %s/bad.jsonl --out %s/bad.h5 "
                ">/dev/null 2>%s/err.txt", pocket(), v->dir, v->dir, v->dir);
    assert_int_equal(rc, 1);
    snprintf(path, sizeof path, "%s/err.txt", v->dir);
    uint8_t *err;
    size_t len;
    PtError e;
    assert_int_equal(read_whole_file(path, &err, &len, &e), 0);
    if (!strstr((char *)err, want)) fail_msg("stderr \"%s\" lacks \"%s\"", (char *)err, want);
    free(err);
    snprintf(path, sizeof path, "%s/bad.h5", v->dir);
    assert_false(path_exists(path));
    assert_int_equal(sh("ls %s | grep -q tmp", v->dir), 1);   // no temporary file left either
}

static void test_bad_lines(void **state) {
    Env *v = *state;
    static const struct { const char *line, *want; } cases[] = {
        {"{\"prompt\": \"x\", \"candidates\": [\"a\", \"b\"], \"label\": 2}\n",
         "bad.jsonl:2: label 2 is outside the 2 candidates"},
        {"{\"prompt\": \"x\", \"candidates\": [\"a\", \"b\"], \"label\": \"c\"}\n",
         "bad.jsonl:2: label \"c\" is not one of the candidates"},
        {"{\"prompt\": \"x\", \"candidates\": [], \"label\": 0}\n",
         "bad.jsonl:2: 0 candidates (want 2 to 256)"},
        {"{\"prompt\": \"x\", \"candidates\": [\"a\"], \"label\": 0}\n",
         "bad.jsonl:2: 1 candidates"},
        {"{\"prompt\": \"x\", \"candidates\": [\"a\", \"b\", \"a\"], \"label\": 0}\n",
         "bad.jsonl:2: candidates 0 and 2 are the same (\"a\")"},
        {"{\"prompt\": \"x\", \"candidates\": [\"a\", \"\"], \"label\": 0}\n",
         "bad.jsonl:2: candidate 1 is not a non-empty string"},
        {"{\"candidates\": [\"a\", \"b\"], \"label\": 0}\n",
         "bad.jsonl:2: no \"prompt\" string"},
        {"{\"prompt\": \"x\", \"candidates\": [\"a\", \"b\"]}\n",
         "bad.jsonl:2: no \"label\""},
        {"{\"prompt\": \"x\", \"candidates\": [\"a\", \"b\"\n",
         "bad.jsonl:2: malformed JSON"},
        {"{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}], \"candidates\": [\"a\", \"b\"], \"label\": 0}\n",
         "bad.jsonl:2: message 0 needs a \"role\" (system, user or assistant)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_bad(v, cases[i].line, cases[i].want);
    // --skip-bad: skipped and counted, the good lines kept.
    write_file(v, "mixed.jsonl",
               "{\"prompt\": \"x\", \"candidates\": [\"a\", \"b\"], \"label\": 5}\n"
               "{\"prompt\": \"y\", \"candidates\": [\"a\", \"b\"], \"label\": 1}\n"
               "{\"prompt\": \"z\", \"candidates\": [\"a\", \"a\"], \"label\": 0}\n");
    Dataset d;
    tokenize_open(v, "mixed", "--skip-bad", &d);
    assert_int_equal(d.n_skipped, 2);
    assert_int_equal(d.n_groups, 1);
    assert_int_equal(d.choice_label[0], 1);
    dataset_close(&d);
}

// A toy task: the right candidate is the colour named in the prompt. Training
// with mode = choice, plain and with QAT, must reach 100% on its own data as
// `pocket eval` scores it (fp32 and int4), and `pocket choose` must pick it.
static void test_train_and_eval(void **state) {
    Env *v = *state;
    assert_int_equal(make_tiny_checkpoint(v->dir), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/toy.jsonl", v->dir);
    FILE *f = fopen(path, "w");
    const char *colours[4] = {"red", "blue", "green", "black"};
    for (int i = 0; i < 16; i++)
        fprintf(f, "{\"prompt\": \"%s %d\", \"candidates\": [\"red\", \"blue\", \"green\", \"black\"], "
                   "\"label\": \"%s\"}\n", colours[i % 4], i, colours[i % 4]);
    fclose(f);
    assert_int_equal(sh("%s tokenize --tokenizer %s/init.h5 --choice %s/toy.jsonl --out %s/toy.h5 >/dev/null", pocket(),
                        v->dir, v->dir, v->dir), 0);
    snprintf(path, sizeof path, "%s/toy.ini", v->dir);
    f = fopen(path, "w");
    fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/toy.h5\nval = %s/toy.h5\n[train]\nmode = choice\n"
               "micro_batch = 2\nseq_len = 128\nsteps = 80\neval_interval = 80\nsave_interval = 0\n"
               "[optim]\nlr = 3e-3\nwarmup = 5\n", v->dir, v->dir, v->dir);
    fclose(f);
    for (int qat = 0; qat < 2; qat++) {
        int rc = sh("%s train %s/toy.ini --set train.run_dir=%s/run%d %s >%s/train%d.log 2>&1", pocket(), v->dir, v->dir,
                    qat, qat ? "--set qat.enabled=1 --set qat.group=4 --set qat.start_step=20" : "", v->dir, qat);
        if (rc) sh("cat %s/train%d.log", v->dir, qat);
        assert_int_equal(rc, 0);
        // The head is the first row past the fixture tokenizer's 1505 tokens: the
        // vocabulary (1505) has none, so one is appended.
        assert_int_equal(sh("grep -q 'decision head: lm_head row 1505, appended' %s/train%d.log", v->dir, qat), 0);
        for (int int4 = 0; int4 < 2; int4++) {
            rc = sh("%s eval --ckpt %s/run%d/best.h5 --data %s/toy.h5 %s --dump-scores %s/s.jsonl > %s/eval.txt", pocket(),
                    v->dir, qat, v->dir, int4 ? "--int4-group 4" : "", v->dir, v->dir);
            assert_int_equal(rc, 0);
            if (sh("grep -q 'accuracy 100.0%% (16 of 16 groups)' %s/eval.txt", v->dir)) {
                sh("cat %s/eval.txt", v->dir);
                fail_msg("qat %d int4 %d: not every group right", qat, int4);
            }
            assert_int_equal(sh("test $(wc -l < %s/s.jsonl) -eq 16", v->dir), 0);
        }
        rc = sh("%s choose --ckpt %s/run%d/best.h5 --prompt 'green 6' --candidates red blue green black "
                "| grep -q '^pick: green'", pocket(), v->dir, qat);
        assert_int_equal(rc, 0);
    }
    // The head survives the HF and GGUF (f32) round trips: the same scores, bit for bit.
    const char *ref = "'green 6' --candidates red blue green black --json | sed 's/, \"seconds.*//'";
    assert_int_equal(sh("%s export --ckpt %s/run0/best.h5 --format hf --out %s/hf >/dev/null 2>&1 && "
                        "%s import %s/hf --out %s/from-hf.h5 >/dev/null 2>&1 && "
                        "%s export --ckpt %s/run0/best.h5 --format gguf --quant f32 --out %s/d.gguf >/dev/null 2>&1 && "
                        "%s import %s/d.gguf --out %s/from-gguf.h5 >/dev/null 2>&1", pocket(), v->dir, v->dir, pocket(),
                        v->dir, v->dir, pocket(), v->dir, v->dir, pocket(), v->dir, v->dir), 0);
    const char *names[3] = {"run0/best.h5", "from-hf.h5", "from-gguf.h5"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(sh("%s choose --ckpt %s/%s --prompt %s > %s/scores%d.json", pocket(), v->dir, names[i], ref,
                            v->dir, i), 0);
    assert_int_equal(sh("cmp -s %s/scores0.json %s/scores1.json && cmp -s %s/scores0.json %s/scores2.json", v->dir,
                        v->dir, v->dir, v->dir), 0);
    // Stopped at update 30 and resumed: the uninterrupted run's model, bit for bit.
    assert_int_equal(sh("%s train %s/toy.ini --set train.run_dir=%s/split --set train.stop_after=30 >/dev/null 2>&1 && "
                        "%s train %s/toy.ini --set train.run_dir=%s/split >/dev/null 2>&1 && "
                        "%s choose --ckpt %s/split/ckpt-00000080.h5 --prompt %s > %s/split.json && "
                        "%s choose --ckpt %s/run0/ckpt-00000080.h5 --prompt %s > %s/whole.json && "
                        "cmp -s %s/split.json %s/whole.json", pocket(), v->dir, v->dir, pocket(), v->dir, v->dir,
                        pocket(), v->dir, ref, v->dir, pocket(), v->dir, ref, v->dir, v->dir, v->dir), 0);
    // A model without a head has no scores to give.
    assert_int_equal(sh("%s choose --ckpt %s/init.h5 --prompt x --candidates a b 2>&1 | grep -q 'no decision head'",
                        pocket(), v->dir), 0);
}

// The scores after `"scores": [` in the first line of a file holding it.
static int read_scores(const char *path, float *out, int cap) {
    char line[4096];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *at = NULL;
    while (!at && fgets(line, sizeof line, f)) at = strstr(line, "\"scores\": [");
    fclose(f);
    assert_non_null(at);
    int n = 0;
    for (char *c = at + 11, *end; n < cap; c = end + 1) {
        out[n++] = strtof(c, &end);
        if (*end != ',') break;
    }
    return n;
}

// "accuracy X%" and "choice loss Y" of a `pocket eval` report (the line with them).
static void read_eval(const char *path, double *accuracy, double *loss) {
    char line[1024] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    const char *a = NULL, *l = NULL;
    while (!a && fgets(line, sizeof line, f)) a = strstr(line, "accuracy "), l = strstr(line, "choice loss ");
    fclose(f);
    assert_non_null(a);
    assert_non_null(l);
    *accuracy = strtod(a + 9, NULL);
    *loss = strtod(l + 12, NULL);
}

// Dec with LoRA: a base taught one rule by a short full fine-tuning run (the
// candidate named in the prompt), an adapter taught another on it (the next
// colour in the list). The adapter run leaves the base file as it was, its
// loss falls and its held-out accuracy beats the base's; `pocket choose
// --lora` gives `pocket eval --lora`'s scores; a base with no head, or an
// all-zero one, is refused with the way out.
static void test_lora_on_a_dec_base(void **state) {
    Env *v = *state;
    const char *d = v->dir;
    assert_int_equal(make_tiny_checkpoint(d), 0);
    const char *colours[4] = {"red", "blue", "green", "black"};
    const struct { const char *name; int lo, hi, shift; } sets[] = {
        {"same", 0, 16, 0}, {"next", 0, 16, 1}, {"nextval", 16, 24, 1}};
    char path[256];
    for (int s = 0; s < 3; s++) {
        snprintf(path, sizeof path, "%s/%s.jsonl", d, sets[s].name);
        FILE *f = fopen(path, "w");
        for (int i = sets[s].lo; i < sets[s].hi; i++)
            fprintf(f, "{\"prompt\": \"%s %d\", \"candidates\": [\"red\", \"blue\", \"green\", \"black\"], "
                       "\"label\": \"%s\"}\n", colours[i % 4], i, colours[(i + sets[s].shift) % 4]);
        fclose(f);
        assert_int_equal(sh("%s tokenize --tokenizer %s/init.h5 --choice %s/%s.jsonl --out %s/%s.h5 >/dev/null",
                            pocket(), d, d, sets[s].name, d, sets[s].name), 0);
    }
    snprintf(path, sizeof path, "%s/dec.ini", d);
    FILE *f = fopen(path, "w");
    fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/same.h5\nval = %s/same.h5\n[train]\nmode = choice\n"
               "micro_batch = 2\nseq_len = 128\nsteps = 30\neval_interval = 0\nsave_interval = 0\nthreads = 1\n"
               "[optim]\nlr = 3e-3\nwarmup = 5\n", d, d, d);
    fclose(f);
    assert_int_equal(sh("%s train %s/dec.ini --set train.run_dir=%s/dec >/dev/null", pocket(), d, d), 0);
    char base[300];
    snprintf(base, sizeof base, "%s/dec/ckpt-00000030.h5", d);
    assert_int_equal(sh("sha256sum %s > %s/base.sum", base, d), 0);
    const int lora_steps = SANITIZED ? 20 : 300;
    snprintf(path, sizeof path, "%s/lora.ini", d);
    f = fopen(path, "w");
    fprintf(f, "[model]\ninit = %s\n[data]\ntrain = %s/next.h5\nval = %s/nextval.h5\n[train]\nmode = choice\n"
               "micro_batch = 8\nseq_len = 128\nsteps = %d\neval_interval = %d\nsave_interval = 0\nthreads = 1\n"
               "[optim]\nlr = 1e-2\nwarmup = 5\n[lora]\nenabled = 1\nrank = 4\nalpha = 8\n"
               "targets = q,k,v,o,gate,up,down\n", base, d, d, lora_steps, lora_steps);
    fclose(f);
    int rc = sh("%s train %s/lora.ini --set train.run_dir=%s/lora > %s/lora.log 2>&1", pocket(), d, d, d);
    if (rc) sh("cat %s/lora.log", d);
    assert_int_equal(rc, 0);
    assert_int_equal(sh("grep -q 'decision head (Dec): lm_head row 1505' %s/lora.log", d), 0);
    assert_int_equal(sh("sha256sum -c --quiet %s/base.sum", d), 0);   // the base file is untouched
    // Only the adapter was trained: the run saves an adapter, not a model.
    assert_int_equal(sh("%s eval --ckpt %s/lora/best.h5 --data %s/nextval.h5 2>&1 | grep -q 'not a pocket checkpoint'",
                        pocket(), d, d), 0);
    // The loss falls: the mean of the last 30 steps against the first 30.
    if (!SANITIZED) assert_int_equal(sh("awk -F'\"loss\":' '/\"loss\"/ {split($2, a, \",\"); n++; l[n] = a[1]} END {for (i = 1; i <= 30; i++) "
                        "{f += l[i]; e += l[n - 30 + i]} exit !(e < 0.8 * f)}' %s/lora/metrics.jsonl", d), 0);
    double acc_base, loss_base, acc_lora, loss_lora;
    snprintf(path, sizeof path, "%s/base_eval.txt", d);
    assert_int_equal(sh("%s eval --ckpt %s --data %s/nextval.h5 > %s", pocket(), base, d, path), 0);
    read_eval(path, &acc_base, &loss_base);
    snprintf(path, sizeof path, "%s/lora_eval.txt", d);
    assert_int_equal(sh("%s eval --ckpt %s --lora %s/lora/best.h5 --data %s/nextval.h5 --dump-scores %s/dump.jsonl > %s",
                        pocket(), base, d, d, d, path), 0);
    read_eval(path, &acc_lora, &loss_lora);
    printf("held-out (8 groups): base accuracy %.1f%% loss %.4f; with the adapter %.1f%% loss %.4f\n", acc_base,
           loss_base, acc_lora, loss_lora);
    if (!SANITIZED) {
        assert_true(acc_lora >= acc_base + 25);
        assert_true(loss_lora < loss_base);
    }
    // choose --lora scores a dumped group as eval --lora does (the KV cache against the packed batch).
    assert_int_equal(sh("head -1 %s/dump.jsonl > %s/first.jsonl", d, d), 0);
    snprintf(path, sizeof path, "%s/first.jsonl", d);
    float from_eval[4], from_choose[4];
    assert_int_equal(read_scores(path, from_eval, 4), 4);
    int group = -1;
    f = fopen(path, "r");
    assert_int_equal(fscanf(f, "{\"group\": %d", &group), 1);
    fclose(f);
    assert_int_equal(sh("%s choose --ckpt %s --lora %s/lora/best.h5 --prompt '%s %d' --candidates red blue green black "
                        "--json > %s/choose.json", pocket(), base, d, colours[(16 + group) % 4], 16 + group, d), 0);
    snprintf(path, sizeof path, "%s/choose.json", d);
    assert_int_equal(read_scores(path, from_choose, 4), 4);
    for (int k = 0; k < 4; k++)
        if (fabsf(from_eval[k] - from_choose[k]) > 1e-4f)
            fail_msg("candidate %d: eval --lora %g, choose --lora %g", k, from_eval[k], from_choose[k]);
    // Refused: a base without a head (the row would be new), and one whose row is all zeros
    // (lr 0 for the one step of warmup: the appended row stays 0).
    assert_int_equal(sh("%s train %s/dec.ini --set train.run_dir=%s/zero --set train.steps=1 --set optim.warmup=1 "
                        ">/dev/null", pocket(), d, d), 0);
    const struct { const char *init, *says; } bad[] = {
        {"init.h5", "needs a base with a decision head, and this one has none"},
        {"zero/ckpt-00000001.h5", "the decision head (lm_head row 1505) is all zeros"}};
    for (int i = 0; i < 2; i++) {
        rc = sh("%s train %s/lora.ini --set model.init=%s/%s --set train.run_dir=%s/bad > %s/bad.txt 2>&1", pocket(), d,
                d, bad[i].init, d, d);
        assert_int_not_equal(rc, 0);
        if (sh("grep -q '%s' %s/bad.txt && grep -q 'train the head first with full fine-tuning' %s/bad.txt && "
               "test $(wc -l < %s/bad.txt) -eq 1", bad[i].says, d, d, d)) {
            sh("cat %s/bad.txt", d);
            fail_msg("%s: not refused as expected", bad[i].init);
        }
        assert_int_not_equal(sh("test -e %s/bad/best.h5", d), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_gradients_vs_finite_differences),
        cmocka_unit_test(test_adapter_gradients_vs_finite_differences),
        cmocka_unit_test(test_shared_prompt_scores_equal_alone),
        cmocka_unit_test(test_accuracy_and_ece_by_hand),
        cmocka_unit_test(test_tokenize_round_trip),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_train_and_eval),
        cmocka_unit_test(test_lora_on_a_dec_base),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
