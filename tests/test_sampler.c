// test_sampler.c: the batched sampler (model/sampler.h) gives every job
// the tokens generate() gives it alone, token for token, whatever the number
// of rows and the order the jobs arrive in: greedy and sampled jobs
// (temperature, top-k, top-p, each its own seed), prompts of 1 to 40
// tokens, stop ids (met by some jobs) and max_new from 0 up, samples of one
// prompt array in a row (read once), with fp32 and bf16 matmuls; its checks
// of bad jobs; and eval_exact_match, which decodes on it, on replies made
// to match or to miss.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <unistd.h>
#include "../model/sampler.h"
#include "../train/evaluate.h"
#include "test_model_util.h"

enum { JOBS = 23, MAX_NEW = 24 };

typedef struct {
    int *prompt[JOBS], n_prompt[JOBS];
    GenParams p[JOBS];
    int want[JOBS][MAX_NEW], n_want[JOBS];
} Case;

// Jobs of every kind, their expected tokens from generate() one at a time.
static void make_case(TestModel *tm, Case *c) {
    const int V = tm->b.cfg.vocab_size;
    GenContext g;
    PtError e;
    assert_int_equal(gen_init(&g, &tm->m, 40 + MAX_NEW, &e), 0);
    int stopped = 0;
    for (int j = 0; j < JOBS; j++) {
        if (j >= JOBS - 2) {   // the last three: samples of one prompt (one array), each its own seed
            c->n_prompt[j] = c->n_prompt[j - 1];
            c->prompt[j] = c->prompt[j - 1];
        } else {
            c->n_prompt[j] = 1 + (j * 7) % 40;
            c->prompt[j] = random_tokens(c->n_prompt[j], V, 100 + j);
        }
        GenParams *p = &c->p[j];
        gen_params_default(p);
        p->max_new = j == 3 ? 0 : j == 4 ? 1 : 4 + (j * 5) % (MAX_NEW - 3);
        if (j % 3) {   // sampled; the rest greedy
            p->temperature = 0.6f + 0.2f * (j % 4);
            p->top_k = j % 2 ? 0 : 20;
            p->top_p = j % 5 ? 1.0f : 0.9f;
            p->seed = 1000 + (uint64_t)j;
        }
        if (j % 4 == 1 && p->max_new >= 3) {   // a stop id it meets: its third token without one
            assert_int_equal(generate(&g, c->prompt[j], c->n_prompt[j], p, c->want[j], MAX_NEW, &e), p->max_new);
            gen_add_stop(p, c->want[j][2], V);
        }
        c->n_want[j] = generate(&g, c->prompt[j], c->n_prompt[j], p, c->want[j], MAX_NEW, &e);
        assert_true(c->n_want[j] >= 0);
        stopped += c->n_want[j] < p->max_new;
    }
    assert_true(stopped >= 3);   // the stop branch is exercised
    gen_free(&g);
}

static void free_case(Case *c) {
    for (int j = 0; j < JOBS; j++)
        if (j == 0 || c->prompt[j] != c->prompt[j - 1]) free(c->prompt[j]);
}

// The jobs in `order` through a sampler of R rows: each equals generate()'s.
static void check_rows(TestModel *tm, const Case *c, int R, const int *order) {
    Sampler s;
    PtError e;
    assert_int_equal(sampler_init(&s, &tm->m, R, 40 + MAX_NEW, &e), 0);
    SampleJob jobs[JOBS];
    int out[JOBS][MAX_NEW];
    for (int k = 0; k < JOBS; k++) {
        const int j = order[k];
        jobs[k] = (SampleJob){.prompt = c->prompt[j], .n_prompt = c->n_prompt[j], .p = &c->p[j], .out = out[k]};
    }
    assert_int_equal(sampler_run(&s, jobs, JOBS, NULL, NULL, &e), 0);
    int tokens = 0;
    for (int k = 0; k < JOBS; k++) {
        const int j = order[k];
        if (jobs[k].n_out != c->n_want[j]) fail_msg("rows %d, job %d: %d tokens, generate %d", R, j, jobs[k].n_out, c->n_want[j]);
        for (int t = 0; t < c->n_want[j]; t++)
            if (out[k][t] != c->want[j][t])
                fail_msg("rows %d, job %d, token %d: %d, generate %d", R, j, t, out[k][t], c->want[j][t]);
        tokens += jobs[k].n_out;
    }
    printf("  %d rows: %d jobs, %d tokens, every one generate()'s\n", R, JOBS, tokens);
    sampler_free(&s);
}

static void check_model(TestModel *tm) {
    Case c;
    make_case(tm, &c);
    int forward[JOBS], shuffled[JOBS];
    for (int j = 0; j < JOBS; j++) forward[j] = j, shuffled[j] = (j * 10) % JOBS;   // 10 is prime to 23
    check_rows(tm, &c, 1, forward);
    check_rows(tm, &c, 3, forward);
    check_rows(tm, &c, 8, shuffled);
    check_rows(tm, &c, JOBS + 5, shuffled);   // more rows than jobs: some never work
    free_case(&c);
}

static void test_equals_generate_fp32(void **s) {
    (void)s;
    TestModel tm;
    load_preset("tiny", 5, &tm);
    check_model(&tm);
    test_model_free(&tm);
}

static void test_equals_generate_bf16(void **s) {
    (void)s;
    TestModel tm;
    load_preset("tiny", 6, &tm);
    tm.m.opt.matmul = MATMUL_BF16;
    check_model(&tm);
    test_model_free(&tm);
}

static void test_bad_jobs(void **s) {
    (void)s;
    TestModel tm;
    load_preset("tiny", 7, &tm);
    Sampler smp;
    PtError e;
    assert_int_equal(sampler_init(&smp, &tm.m, 2, 16, &e), 0);
    int prompt[20] = {1, 2, 3}, out[16];
    GenParams p;
    gen_params_default(&p);
    p.max_new = 8;
    SampleJob job = {.prompt = prompt, .n_prompt = 0, .p = &p, .out = out};
    assert_int_equal(sampler_run(&smp, &job, 1, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "empty"));
    job.n_prompt = 9;   // 9 + 8 > 16
    assert_int_equal(sampler_run(&smp, &job, 1, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "exceeds"));
    job.n_prompt = 3;
    prompt[1] = tm.b.cfg.vocab_size;
    assert_int_equal(sampler_run(&smp, &job, 1, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "outside the vocabulary"));
    sampler_free(&smp);
    assert_int_equal(sampler_init(&smp, &tm.m, 0, 16, &e), -1);
    test_model_free(&tm);
}

// An SFT dataset of 10 examples whose replies are generate()'s greedy ones
// (even examples) or that with the first token changed (odd): exact match
// is 1/2 of all of them and 4/7 of the first 7, whatever decodes them.
static void test_exact_match_counts_replies(void **s) {
    (void)s;
    TestModel tm;
    load_preset("tiny", 8, &tm);
    const int V = tm.b.cfg.vocab_size;
    char dir[] = "/tmp/test_sampler_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sft.h5", dir);
    DatasetWriter *w;
    PtError e;
    assert_int_equal(dataset_writer_open(&w, path, DATASET_SFT, V, "0123456789abcdef0123456789abcdef0123456789abcdef"
                                         "0123456789abcdef", &e), 0);
    GenContext g;
    assert_int_equal(gen_init(&g, &tm.m, 64, &e), 0);
    GenParams p;
    gen_params_default(&p);
    add_default_stops(&p, &tm.b.cfg, NULL);   // as eval_exact_match stops without a tokenizer
    p.max_new = 6;
    for (int k = 0; k < 10; k++) {
        const int np = 3 + (k * 11) % 30;
        int *prompt = random_tokens(np, V, 500 + k), doc[64];
        uint8_t mask[64] = {0};
        memcpy(doc, prompt, (size_t)np * sizeof(int));
        const int n = generate(&g, prompt, np, &p, doc + np, 64 - np, &e);
        assert_true(n >= 1);
        if (k % 2) doc[np] = (doc[np] + 1) % V;   // a reply the model does not give
        memset(mask + np, 1, (size_t)n);
        assert_int_equal(dataset_writer_add(w, doc, mask, (size_t)(np + n), &e), 0);
        free(prompt);
    }
    gen_free(&g);
    assert_int_equal(dataset_writer_commit(w, &e), 0);
    Dataset d;
    assert_int_equal(dataset_open(&d, path, &e), 0);
    int scored;
    assert_true(eval_exact_match(&tm.m, NULL, &d, 100, &scored, NULL, &e) == 0.5);
    assert_int_equal(scored, 10);
    assert_true(eval_exact_match(&tm.m, NULL, &d, 7, &scored, NULL, &e) == 4.0 / 7);
    assert_int_equal(scored, 7);
    dataset_close(&d);
    unlink(path);
    rmdir(dir);
    test_model_free(&tm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_generate_fp32),
        cmocka_unit_test(test_equals_generate_bf16),
        cmocka_unit_test(test_bad_jobs),
        cmocka_unit_test(test_exact_match_counts_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
