// Every input of tests/fuzz/regressions (each once crashed, hung, leaked or
// ran away in a fuzz target; docs/fuzzing.md) given to the `pocket` command
// that reads that kind of file, as a user would meet it: the command ends by
// itself, and when it refuses the input it exits 1 with one stderr line
// starting "pocket COMMAND: ", leaves no output behind (nor a temporary one),
// and the input files are unchanged. Accepted inputs leave their output.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "fuzz/fuzz_util.h"
#include "test_cli_util.h"

#define REG "tests/fuzz/regressions/"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    strcpy(g_dir, "/tmp/pocket_fuzzin_XXXXXX");
    if (!mkdtemp(g_dir) || make_tiny_checkpoint(g_dir)) return -1;
    // The base the adapter and PEFT inputs were made for.
    return sh("%s import tests/fixtures/hf/qwen3-tied --out %s/base.h5 >/dev/null", pocket(), g_dir);
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

// The input files of one case, read before the command runs and compared after.
typedef struct {
    char path[8][600];
    uint8_t *data[8];
    size_t len[8];
    int n;
} Inputs;

static void inputs_add(Inputs *in, const char *path) {
    PtError e;
    snprintf(in->path[in->n], sizeof in->path[0], "%s", path);
    if (read_whole_file(path, &in->data[in->n], &in->len[in->n], &e)) fail_msg("%s", e.msg);
    in->n++;
}

static void inputs_check_and_free(Inputs *in, const char *cmd) {
    for (int i = 0; i < in->n; i++) {
        uint8_t *now;
        size_t len;
        PtError e;
        if (read_whole_file(in->path[i], &now, &len, &e)) fail_msg("%s: %s", cmd, e.msg);
        if (len != in->len[i] || memcmp(now, in->data[i], len)) fail_msg("%s changed its input %s", cmd, in->path[i]);
        free(now);
        free(in->data[i]);
    }
    in->n = 0;
}

// Runs `pocket CMD ARGS` (in g_dir's err file for stderr) and checks the
// guarantee for output path `out` (NULL: the command writes nothing).
static void run(Inputs *in, const char *out, const char *cmd, const char *fmt, ...) {
    char args[3000], line[4096] = "", err[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(err, sizeof err, "%s/err.txt", g_dir);
    if (out) sh("rm -rf %s", out);
    int rc = sh("timeout 60 %s %s %s >/dev/null 2>%s", pocket(), cmd, args, err);
    FILE *f = fopen(err, "r");
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    // Under ASan (make test SAN=1) a request libhdf5 makes for a corrupt header's size fails with a warning
    // of ASan's own before libhdf5 reports the failure: not pocket's output.
    static const char asan_note[] = "WARNING: AddressSanitizer failed to allocate";
    for (char *at; (at = strstr(line, asan_note));) {
        char *start = at, *end = strchr(at, '\n');
        while (start > line && start[-1] != '\n') start--;
        memmove(start, end ? end + 1 : at + strlen(at), strlen(end ? end + 1 : at + strlen(at)) + 1);
    }
    if (rc != 0 && rc != 1) fail_msg("pocket %s %s: exit %d (a crash, a kill or a hang): %s", cmd, args, rc, line);
    if (rc == 1) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "pocket %s: ", cmd);
        char *nl = strchr(line, '\n');
        if (strncmp(line, prefix, strlen(prefix)) || !nl || nl[1])
            fail_msg("pocket %s %s: stderr is not one line of its own: [%s]", cmd, args, line);
        if (out && (path_exists(out) || !no_entry_with_prefix(g_dir, strrchr(out, '/') + 1)))
            fail_msg("pocket %s %s: refused, but left %s (or a temporary one)", cmd, args, out);
    } else if (out && !path_exists(out)) {
        fail_msg("pocket %s %s: exit 0 without %s", cmd, args, out);
    }
    inputs_check_and_free(in, args);
}

// The regression inputs of a target, each with its file name and a copy path in g_dir.
typedef void (*CaseFn)(const char *input, const char *name);

static int for_each_input(const char *target, CaseFn fn) {
    char dir[256];
    snprintf(dir, sizeof dir, REG "%s", target);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *ent;
    int n = 0;
    while ((ent = readdir(d)))
        if (ent->d_name[0] != '.') {
            char path[600];
            snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
            fn(path, ent->d_name);
            n++;
        }
    closedir(d);
    return n;
}

// A regression input's parts written as the files of a directory (a part left out or empty: absent).
static void unpack(const char *input, const char *dir, const char *const *names, int n_names, Inputs *in) {
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file(input, &data, &len, &e)) fail_msg("%s", e.msg);
    FuzzPart parts[8];
    int n = fuzz_parts(data, len, parts, n_names);
    assert_int_equal(sh("rm -rf %s && mkdir -p %s", dir, dir), 0);
    for (int i = 0; i < n && i < n_names; i++) {
        if (!parts[i].n) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
        assert_true(f && fwrite(parts[i].p, 1, parts[i].n, f) == parts[i].n && fclose(f) == 0);
        inputs_add(in, path);
    }
    free(data);
}

// A copy of the input under g_dir named `name` (the commands pick formats by name), added to `in`.
static const char *copy_as(const char *input, const char *name, Inputs *in) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    assert_int_equal(sh("cp '%s' %s", input, path), 0);
    inputs_add(in, path);
    return path;
}

static char out_path[600];
static const char *out(const char *name) {
    snprintf(out_path, sizeof out_path, "%s/%s", g_dir, name);
    return out_path;
}

static void template_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    static const char *const NAMES[] = {"t.jinja", "tokenizer_config.json"};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/tpl", g_dir);
    unpack(input, dir, NAMES, 2, &in);
    run(&in, out("sft.h5"), "tokenize", "--chat --chat-template %s/t.jinja --tokenizer tests/fixtures/tok/tokenizer.json "
        "tests/fixtures/data/chat.jsonl --out %s/sft.h5", dir, g_dir);
}

static void sft_case(const char *input, const char *name) {
    (void)name;
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file(input, &data, &len, &e)) fail_msg("%s", e.msg);
    static const char *const FILES[8] = {"c.jsonl", "c.jsonl", "c.jsonl", "c.jsonl", "c.csv", "c.tsv", "c.txt", "c.jsonl.gz"};
    static const char *const FORMATS[8] = {"", "--format openai", "--format sharegpt", "--format alpaca", "", "",
                                           "--format csv", ""};
    int pick = data[0] & 7;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, FILES[pick]);
    FILE *f = fopen(path, "wb");
    assert_true(f && fwrite(data + 1, 1, len - 1, f) == len - 1 && fclose(f) == 0);
    free(data);
    Inputs in = {0};
    inputs_add(&in, path);
    run(&in, out("sft.h5"), "tokenize", "--chat %s --tokenizer tests/fixtures/tok/tokenizer.json %s --out %s/sft.h5",
        FORMATS[pick], path, g_dir);
}

static void checkpoint_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    const char *ckpt = copy_as(input, "c.h5", &in);
    run(&in, NULL, "inspect", "%s", ckpt);
    inputs_add(&in, ckpt);
    run(&in, out("hf-out"), "export", "--ckpt %s --format hf --out %s/hf-out", ckpt, g_dir);
}

static void adapter_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    const char *a = copy_as(input, "a.h5", &in);
    run(&in, NULL, "inspect", "%s", a);
    inputs_add(&in, a);
    run(&in, out("peft-out"), "export", "--ckpt %s/base.h5 --lora %s --format peft --out %s/peft-out", g_dir, a, g_dir);
}

static void dataset_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    const char *d = copy_as(input, "d.h5", &in);
    run(&in, NULL, "inspect", "%s --tokenizer tests/fixtures/tok/tokenizer.json", d);
    inputs_add(&in, d);
    run(&in, NULL, "eval", "--ckpt %s/init.h5 --data %s --max-batches 2", g_dir, d);
}

static void config_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    const char *c = copy_as(input, "config.json", &in);
    run(&in, out("init.h5x"), "init", "--model %s --out %s/init.h5x", c, g_dir);
}

static void hf_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    static const char *const NAMES[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "tokenizer_config.json"};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/hf-in", g_dir);
    unpack(input, dir, NAMES, 4, &in);
    run(&in, out("imported.h5"), "import", "%s --out %s/imported.h5", dir, g_dir);
}

static void peft_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    static const char *const NAMES[] = {"adapter_config.json", "adapter_model.safetensors"};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/peft-in", g_dir);
    unpack(input, dir, NAMES, 2, &in);
    run(&in, out("adapter.h5"), "import", "%s --base %s/base.h5 --out %s/adapter.h5", dir, g_dir, g_dir);
}

static void mnn_case(const char *input, const char *name) {
    (void)name;
    Inputs in = {0};
    static const char *const NAMES[] = {"llm.mnn", "llm.mnn.weight", "config.json", "llm_config.json"};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/mnn", g_dir);
    unpack(input, dir, NAMES, 4, &in);
    run(&in, NULL, "inspect", "%s", dir);
}

static void test_regression_inputs(void **state) {
    (void)state;
    const struct { const char *target; CaseFn fn; } cases[] = {
        {"fuzz_chat_template", template_case}, {"fuzz_sft", sft_case},          {"fuzz_checkpoint", checkpoint_case},
        {"fuzz_lora_checkpoint", adapter_case}, {"fuzz_dataset", dataset_case}, {"fuzz_hf_config", config_case},
        {"fuzz_hf_import", hf_case},            {"fuzz_peft", peft_case},       {"fuzz_mnn_inspect", mnn_case},
    };
    int total = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) total += for_each_input(cases[i].target, cases[i].fn);
    // Every folder of tests/fuzz/regressions is one of the cases above.
    DIR *d = opendir(REG);
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        size_t k = 0;
        while (k < sizeof cases / sizeof cases[0] && strcmp(cases[k].target, ent->d_name)) k++;
        if (k == sizeof cases / sizeof cases[0]) fail_msg("no command checks the inputs of " REG "%s", ent->d_name);
    }
    closedir(d);
    assert_true(total >= 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_regression_inputs)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
