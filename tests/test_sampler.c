// test_sampler.c: the batched sampler (model/sampler.h) gives every job
// the tokens generate() gives it alone, token for token, whatever the number
// of rows and the order the jobs arrive in: greedy and sampled jobs
// (temperature, top-k, top-p, each its own seed), prompts of 1 to 40
// tokens, stop ids (met by some jobs) and max_new from 0 up, samples of one
// prompt array in a row (read once), with fp32 and bf16 matmuls; and its
// checks of bad jobs.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "../model/sampler.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_generate_fp32),
        cmocka_unit_test(test_equals_generate_bf16),
        cmocka_unit_test(test_bad_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
