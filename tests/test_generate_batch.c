// test_generate_batch.c: pocket generate --batch-file, end to end on a tiny
// checkpoint: every completion is the one `pocket generate --prompt` prints
// alone for the same prompt, parameters and seed (greedy and sampled lines,
// per-line parameters, several samples, --chat, --int4), whatever --rows;
// and bad input is one line naming the file and the line, with no output.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include "test_cli_util.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_genbatch_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    if (write_tiny_config(path, 64, 16, 128, 1505, ", \"rope_theta\": 10000.0")) return -1;
    return sh("%s init --model %s/config.json --tokenizer tests/fixtures/tok/tokenizer.json --seed 3 --out %s/m.h5 "
              ">/dev/null", pocket(), g_dir, g_dir);
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

// pocket generate's stdout for one prompt (its ids: --ids), the trailing newline removed.
static void single(const char *flags, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/m.h5 --ids %s 2>/dev/null", pocket(), g_dir, flags);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, cap - 1, p);
    assert_int_equal(pclose(p), 0);
    while (n && out[n - 1] == '\n') n--;
    out[n] = 0;
}

// The ids of OUT's line k as "a b c".
static void batch_ids(const char *out_path, int k, char *out, size_t cap) {
    FILE *f = fopen(out_path, "r");
    assert_non_null(f);
    char line[8192];
    for (int i = 0; i <= k; i++) assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    json_t *o = json_loads(line, 0, NULL);
    assert_non_null(o);
    json_t *ids = json_object_get(o, "ids");
    size_t used = 0;
    out[0] = 0;
    for (size_t i = 0; i < json_array_size(ids); i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%lld", i ? " " : "", json_integer_value(json_array_get(ids, i)));
    json_decref(o);
}

static void test_each_completion_is_the_single_one(void **s) {
    (void)s;
    char path[600];
    snprintf(path, sizeof path, "%s/prompts.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"prompt\": \"red cat\"}\n"
               "\n"   // blank lines are skipped
               "{\"prompt\": \"blue sun moon river stone\", \"temperature\": 0.8, \"top_k\": 50, \"id\": \"b\"}\n"
               "{\"prompt\": \"tree\", \"max_new\": 4, \"seed\": 99}\n"
               "{\"prompt\": \"the dog and the bird\", \"temperature\": 0, \"top_p\": 0.5}\n");
    fclose(f);
    // line i (numbered from 1 over the file's lines) samples with seed 5 + (i-1) x 2, its sample k with + k
    const char *flags[][2] = {
        {"--prompt 'red cat' --temperature 1 --max-new 12 --seed 5", "--prompt 'red cat' --temperature 1 --max-new 12 --seed 6"},
        {"--prompt 'blue sun moon river stone' --temperature 0.8 --top-k 50 --max-new 12 --seed 9",
         "--prompt 'blue sun moon river stone' --temperature 0.8 --top-k 50 --max-new 12 --seed 10"},
        {"--prompt tree --temperature 1 --max-new 4 --seed 99", "--prompt tree --temperature 1 --max-new 4 --seed 100"},
        {"--prompt 'the dog and the bird' --max-new 12", "--prompt 'the dog and the bird' --max-new 12"},
    };
    const char *modes[] = {"--rows 1", "--rows 3", "--rows 16", "--rows 2 --int4"};
    for (int m = 0; m < 4; m++) {
        char out[600];
        snprintf(out, sizeof out, "%s/out%d.jsonl", g_dir, m);
        assert_int_equal(sh("%s generate --ckpt %s/m.h5 --batch-file %s --out %s --samples 2 --temperature 1 "
                            "--max-new 12 --seed 5 --ids %s 2>/dev/null", pocket(), g_dir, path, out, modes[m]), 0);
        for (int line = 0; line < 4; line++)
            for (int k = 0; k < 2; k++) {
                char want[4096], got[4096], fl[600];
                snprintf(fl, sizeof fl, "%s%s", flags[line][k], m == 3 ? " --int4" : "");
                single(fl, want, sizeof want);
                batch_ids(out, 2 * line + k, got, sizeof got);
                if (strcmp(want, got)) fail_msg("%s, line %d sample %d: [%s], alone [%s]", modes[m], line, k, got, want);
            }
        printf("  %s: 8 completions, each the single run's\n", modes[m]);
    }
    // ids, samples and order as documented
    assert_int_equal(sh("sed -n 3p %s/out1.jsonl | grep -q '\"id\":\"b\",\"sample\":0'", g_dir), 0);
    // --chat: a prompt as a user turn = pocket generate --chat
    snprintf(path, sizeof path, "%s/chat.jsonl", g_dir);
    f = fopen(path, "w");
    fprintf(f, "{\"prompt\": \"hello\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}\n");
    fclose(f);
    char out[600], want[4096], got[4096];
    snprintf(out, sizeof out, "%s/chat-out.jsonl", g_dir);
    assert_int_equal(sh("%s generate --ckpt %s/m.h5 --batch-file %s --out %s --chat --max-new 8 --ids 2>/dev/null",
                        pocket(), g_dir, path, out), 0);
    single("--chat --prompt hello --max-new 8", want, sizeof want);
    for (int k = 0; k < 2; k++) {
        batch_ids(out, k, got, sizeof got);
        assert_string_equal(got, want);
    }
}

static void test_bad_input(void **s) {
    (void)s;
    const char *lines[][2] = {
        {"{\"prompt\": \"a\"}\\n{\"prompt\": 3}", "bad.jsonl:2: \"prompt\" must be a string"},
        {"{\"prompt\": \"a\"}\\nnot json", "bad.jsonl:2: not a JSON object"},
        {"{\"text\": \"a\"}", "bad.jsonl:1: a line needs \"prompt\""},
        {"{\"prompt\": \"a\", \"temperature\": -1}", "bad.jsonl:1: \"temperature\" must be a number"},
        {"{\"prompt\": \"a\", \"max_new\": 1000}",
         "bad.jsonl:1: a prompt of 1 tokens + 1000 new tokens exceeds the model's context"},
    };
    char path[600], out[600], cmd[1600];
    snprintf(path, sizeof path, "%s/bad.jsonl", g_dir);
    snprintf(out, sizeof out, "%s/bad-out.jsonl", g_dir);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sh("printf '%s\\n' > %s", lines[i][0], path), 0);
        // (--max-new 8: the good lines fit the tiny model's 128 positions)
        snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/m.h5 --batch-file %s --out %s --max-new 8", pocket(), g_dir,
                 path, out);
        assert_refused_in(g_dir, cmd, out, lines[i][1]);
    }
    snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/m.h5 --batch-file %s", pocket(), g_dir, path);
    assert_refused_in(g_dir, cmd, NULL, "needs --ckpt and --out");
    snprintf(cmd, sizeof cmd, "%s generate --ckpt %s/m.h5 --prompt x --samples 2", pocket(), g_dir);
    assert_refused_in(g_dir, cmd, NULL, "go with --batch-file");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_completion_is_the_single_one),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
