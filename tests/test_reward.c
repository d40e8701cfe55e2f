// test_reward.c: the rewards (train/reward.h) on completions whose rewards
// follow from the definitions: exact and JSON checks, per-field match,
// regex, the last number, the length penalty, weights; how a reward is
// written and what is refused; and the external program: the JSON line it
// reads (judged by Python's json), its answers, and one clear error when it
// exits, hangs, stops reading, or answers garbage or a non-finite number.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../train/reward.h"

// The one reward `spec` gives the completion (n_tokens long) against reference.
static double one(const char *spec, const char *completion, const char *reference, long n_tokens) {
    Rewards rs = {0};
    PtError e;
    if (rewards_add(&rs, spec, "test", &e)) fail_msg("%s", e.msg);
    RewardInput in = {"t:1", "prompt", completion, reference, n_tokens};
    double v, total;
    if (rewards_score(&rs, &in, &v, &total, &e)) fail_msg("%s", e.msg);
    assert_true(total == rs.r[0].weight * v);
    rewards_free(&rs);
    return v;
}

static void test_builtin_rewards(void **s) {
    (void)s;
    assert_true(one("exact", " 42\n", "42", 2) == 1);
    assert_true(one("exact", "42.", "42", 2) == 0);
    assert_true(one("json", " {\"a\": [1, 2]} ", NULL, 9) == 1);
    assert_true(one("json", "{\"a\": 1", NULL, 5) == 0);
    assert_true(one("json", "7", NULL, 1) == 1);
    assert_true(one("json", "", NULL, 0) == 0);
    const char *ref = "{\"brand\":\"荣耀\",\"category\":\"平板电脑\",\"color\":\"白色\",\"size\":\"128GB\"}";
    assert_true(one("json_fields", ref, ref, 20) == 1);
    assert_true(one("json_fields", "{\"brand\":\"荣耀\",\"category\":\"平板电脑\",\"color\":\"紫\",\"size\":\"128GB\"}", ref,
                    20) == 0.75);
    assert_true(one("json_fields", "{\"size\":\"128GB\",\"brand\":\"荣耀\",\"extra\":1}", ref, 9) == 0.5);
    assert_true(one("json_fields", "{\"n\":1}", "{\"n\":\"1\"}", 4) == 0);   // JSON equality: 1 is not "1"
    assert_true(one("json_fields", "[1, 2]", ref, 4) == 0);
    assert_true(one("json_fields", "{\"brand\":\"荣耀\"", ref, 4) == 0);   // not JSON
    assert_true(one("regex=^\\{.*\\}$", "{\"a\":1}", NULL, 4) == 1);
    assert_true(one("regex=^\\{.*\\}$", "{\"a\":1} and more", NULL, 4) == 0);
    assert_true(one("regex=白色", ref, NULL, 4) == 1);
    assert_true(one("regex=a:b", "xa:by", NULL, 4) == 1);   // the ':' of a pattern: no weight follows it
    assert_true(one("number", "The answer is 42.", "42", 5) == 1);
    assert_true(one("number", "41, no: 42", "#### 42", 5) == 1);
    assert_true(one("number", "42, no: 41", "42", 5) == 0);
    assert_true(one("number", "it is -3.5", "-3.50", 4) == 1);
    assert_true(one("number", "1e3 apples", "1000", 3) == 1);
    assert_true(one("number", "no number", "42", 2) == 0);
    assert_true(one("length=10", "x", NULL, 10) == 0);
    assert_true(one("length=10", "x", NULL, 15) == -0.5);
    assert_true(one("length=10", "x", NULL, 40) == -1);

    // weights: 2 x exact + 0.5 x length + 1 x regex with a weight after a ':' in its pattern
    Rewards rs = {0};
    PtError e;
    assert_int_equal(rewards_add(&rs, "exact:2", "r", &e), 0);
    assert_int_equal(rewards_add(&rs, "length=10:0.5", "r", &e), 0);
    assert_int_equal(rewards_add(&rs, "regex=a:b:-1", "r", &e), 0);
    RewardInput in = {"t:2", "p", "a:b", "a:b", 15};
    double v[3], total;
    assert_int_equal(rewards_score(&rs, &in, v, &total, &e), 0);
    assert_true(v[0] == 1 && v[1] == -0.5 && v[2] == 1);
    assert_true(total == 2 - 0.25 - 1);
    rewards_free(&rs);
}

// A reward refused as written: one line naming the setting and what is wrong.
static void refused(const char *spec, const char *says) {
    Rewards rs = {0};
    PtError e;
    assert_int_equal(rewards_add(&rs, spec, "run.ini: [rl] reward", &e), -1);
    if (!strstr(e.msg, says) || !strstr(e.msg, "run.ini: [rl] reward") || strchr(e.msg, '\n'))
        fail_msg("'%s': %s (wanted '%s')", spec, e.msg, says);
    assert_int_equal(rs.n, 0);
}

static void test_bad_rewards_are_refused(void **s) {
    (void)s;
    refused("bogus", "unknown reward 'bogus'");
    refused("regex", "regex needs regex=...");
    refused("program=", "program needs program=...");
    refused("exact=3", "takes no argument");
    refused("length=0", "must be a number of tokens >= 1");
    refused("length=ten", "must be a number of tokens >= 1");
    refused("regex=(", "regex=(:");
    refused("exact:inf", "not a finite number");
    // a reference the check needs
    Rewards rs = {0};
    PtError e;
    assert_int_equal(rewards_add(&rs, "json_fields", "r", &e), 0);
    RewardInput in = {"data.h5:7", "p", "{}", "[1]", 1};
    double v, total;
    assert_int_equal(rewards_score(&rs, &in, &v, &total, &e), -1);
    assert_non_null(strstr(e.msg, "data.h5:7: reward json_fields needs a reference that is a JSON object"));
    in.reference = NULL;
    assert_int_equal(rewards_score(&rs, &in, &v, &total, &e), -1);
    assert_non_null(strstr(e.msg, "data.h5:7: reward json_fields needs the example's reference answer"));
    rewards_free(&rs);
}

// Python reads each line as JSON and answers the completion's length in characters plus 1000 x (id == "c:2"):
// what pocket wrote is the completion, quotes, newline and Chinese included.
static const char *PY_LEN = "program=python3 -c 'import sys, json\n"
                            "for line in sys.stdin:\n"
                            "    d = json.loads(line)\n"
                            "    print(len(d[\"completion\"]) + 1000 * (d[\"id\"] == \"c:2\") + 0 * len(d[\"prompt\"]),"
                            " flush=True)'";

static double score_with(Rewards *rs, const char *id, const char *completion, int expect_rc, PtError *e) {
    RewardInput in = {id, "the prompt", completion, "ref", 3};
    double v = NAN, total;
    assert_int_equal(rewards_score(rs, &in, &v, &total, e), expect_rc);
    return v;
}

// The program `cmd` started with a time limit of 0.5 s, scoring one completion: it must fail saying `says`.
static void program_fails(const char *cmd, const char *completion, const char *says) {
    Rewards rs = {0};
    PtError e;
    char spec[300];
    snprintf(spec, sizeof spec, "program=%s", cmd);
    assert_int_equal(rewards_add(&rs, spec, "r", &e), 0);
    assert_int_equal(rewards_start(&rs, 0.5, &e), 0);
    score_with(&rs, "data.h5:3", completion, -1, &e);
    if (!strstr(e.msg, says) || !strstr(e.msg, "data.h5:3") || !strstr(e.msg, cmd) || strchr(e.msg, '\n'))
        fail_msg("'%s': %s (wanted '%s')", cmd, e.msg, says);
    score_with(&rs, "data.h5:4", "x", -1, &e);   // and it stays stopped
    if (!strstr(e.msg, "has stopped")) fail_msg("'%s', then: %s", cmd, e.msg);
    rewards_free(&rs);
}

static void test_reward_program(void **s) {
    (void)s;
    Rewards rs = {0};
    PtError e;
    assert_int_equal(rewards_add(&rs, PY_LEN, "r", &e), 0);
    assert_int_equal(rewards_start(&rs, 20, &e), 0);
    assert_true(score_with(&rs, "c:1", "abc", 0, &e) == 3);
    assert_true(score_with(&rs, "c:2", "a\"b\nc白色", 0, &e) == 1007);
    assert_true(score_with(&rs, "c:3", "", 0, &e) == 0);
    rewards_free(&rs);
    // an answer as an object
    assert_int_equal(rewards_add(&rs, "program=while read l; do echo '{\"reward\": 0.25}'; done", "r", &e), 0);
    assert_int_equal(rewards_start(&rs, 5, &e), 0);
    assert_true(score_with(&rs, "c:1", "abc", 0, &e) == 0.25);
    rewards_free(&rs);

    program_fails("read l; exit 3", "abc", "exited with status 3");
    program_fails("sleep 5", "abc", "gave no reward for completion data.h5:3 within 0.5 s");
    char *big = malloc(300000);   // more than a pipe holds, to a program that does not read
    memset(big, 'x', 299999);
    big[299999] = 0;
    program_fails("sleep 5", big, "within 0.5 s");
    free(big);
    program_fails("while read l; do echo hello; done", "abc", "with 'hello', not a number");
    program_fails("while read l; do echo nan; done", "abc", "not a finite number");
    program_fails("while read l; do echo '{\"score\": 1}'; done", "abc", "not a number or {\"reward\": number}");
    program_fails("exec 0<&-; sleep 5", "abc", "data.h5:3");   // it closes its stdin and hangs
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_rewards),
        cmocka_unit_test(test_bad_rewards_are_refused),
        cmocka_unit_test(test_reward_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
