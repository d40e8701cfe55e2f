// test_layers: the `#include "..."` graph between the top-level source folders
// follows LAYER_RULES below (lowest layer first):
//
//     util <- model <- qat <- formats, export <- train <- cli      util <- data, dist
//
// Quoted includes resolve against the including file's folder (the build has
// no -I for our headers). It fails naming the file and include that break a
// rule, and each cycle between folders with one include per edge. Only libc
// and cmocka: the checker must not depend on the code it checks.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The folders whose headers each folder's files may include besides their own
// (may_include is NULL-terminated), and why.
typedef struct { const char *folder, *may_include[10], *why; } LayerRule;

static const LayerRule LAYER_RULES[] = {
    {"util", {NULL}, "basics (errors, files, fp16) that every folder may use, so it uses none"},
    {"data", {"util", NULL}, "tokenizer and corpora work without a model, so any tool can use them"},
    {"model", {"util", NULL}, "compute only: no file format, QAT or tokenizer in what a GPU backend replaces"},
    {"cuda", {"model", "util", NULL}, "GPU versions of model/'s compute, held to the same bar"},
    {"qat", {"model", "util", NULL}, "the int4 quantizer's state is built on the model's tensor table"},
    {"dist", {"util", NULL}, "the ranks of a data-parallel run exchange plain buffers; they know no model"},
    {"formats", {"qat", "model", "data", "util", NULL}, "files carry the weights, their int4 state and the tokenizer"},
    {"export", {"qat", "model", "data", "util", NULL}, "the MNN package is made of the same parts; a sibling of formats"},
    {"train", {"dist", "cuda", "formats", "export", "qat", "model", "data", "util", NULL},
     "training reads data, saves checkpoints, runs on one rank or many"},
    {"cli", {"train", "dist", "cuda", "formats", "export", "qat", "model", "data", "util", NULL},
     "commands wire it all together"},
};
#define N_FOLDERS ((int)(sizeof LAYER_RULES / sizeof LAYER_RULES[0]))
#define PATH_CAP 1024

typedef struct { char file[PATH_CAP], include[PATH_CAP]; } Edge;   // the first include seen

typedef struct {
    Edge edge[N_FOLDERS][N_FOLDERS];   // [from][to]; file[0] == 0: no include
    char report[16384];
    size_t used;
    int problems;
} LayerCheck;

static int folder_index(const char *name, size_t len) {
    for (int i = 0; i < N_FOLDERS; i++)
        if (strlen(LAYER_RULES[i].folder) == len && memcmp(LAYER_RULES[i].folder, name, len) == 0) return i;
    return -1;
}

static int may_include(int from, int to) {
    for (const char *const *f = LAYER_RULES[from].may_include; *f; f++)
        if (strcmp(*f, LAYER_RULES[to].folder) == 0) return 1;
    return from == to;
}

__attribute__((format(printf, 2, 3))) static void note(LayerCheck *c, const char *fmt, ...) {
    if (c->used >= sizeof c->report) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->report + c->used, sizeof c->report - c->used, fmt, ap);
    va_end(ap);
    if (n > 0) c->used += (size_t)n;
}

// "a/b" into out (PATH_CAP bytes); a longer path fails the test.
static void join(char *out, const char *a, const char *b) {
    if (snprintf(out, PATH_CAP, "%s/%s", a, b) >= PATH_CAP) fail_msg("path too long: %s/%s", a, b);
}

// The folder that `include`, seen from the file `rel` (a path from the root),
// lands in: "." and ".." apply to rel's directory. -1 when the path leaves the
// root or its first component is not a folder of LAYER_RULES.
static int include_folder(const char *rel, const char *include) {
    char dir[PATH_CAP], joined[PATH_CAP], *parts[64];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(rel, '/') - rel), rel);
    join(joined, dir, include);
    int depth = 0;
    for (char *part = strtok(joined, "/"); part; part = strtok(NULL, "/")) {
        if (strcmp(part, "..") == 0 && depth-- == 0) return -1;
        if (strcmp(part, "..") != 0 && strcmp(part, ".") != 0 && depth < 64) parts[depth++] = part;
    }
    return depth > 0 ? folder_index(parts[0], strlen(parts[0])) : -1;
}

static void scan_file(LayerCheck *c, const char *root, const char *rel, int from) {
    char path[PATH_CAP], line[PATH_CAP];
    join(path, root, rel);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: cannot be read", path);
    while (fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (*p++ != '#') continue;
        p += strspn(p, " \t");
        if (strncmp(p, "include", 7) != 0) continue;
        p += 7 + strspn(p + 7, " \t");
        char *include = p + 1, *end = *p == '"' ? strchr(include, '"') : NULL;
        if (!end) continue;   // <system> header
        *end = '\0';
        int to = include_folder(rel, include);
        if (to < 0) {
            note(c, "  %s: #include \"%s\" is outside the source folders\n", rel, include);
            c->problems++;
            continue;
        }
        Edge *e = &c->edge[from][to];
        if (!e->file[0]) {
            strcpy(e->file, rel);
            strcpy(e->include, include);
        }
        if (may_include(from, to)) continue;
        note(c, "  %s: #include \"%s\": %s may not include %s (%s may include:", rel, include,
             LAYER_RULES[from].folder, LAYER_RULES[to].folder, LAYER_RULES[from].folder);
        for (const char *const *m = LAYER_RULES[from].may_include; *m; m++) note(c, " %s", *m);
        note(c, "%s)\n", LAYER_RULES[from].may_include[0] ? "" : " no other folder");
        c->problems++;
    }
    fclose(f);
}

static int not_hidden(const struct dirent *d) { return d->d_name[0] != '.'; }

// C and CUDA sources and headers: .c .h .cu .cuh.
static int is_source(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    return !strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".cu") || !strcmp(dot, ".cuh");
}

// Every .c, .h, .cu and .cuh under rel (none when rel is absent), in name order so that
// the report is stable.
static void scan_dir(LayerCheck *c, const char *root, const char *rel, int from) {
    char path[PATH_CAP], child[PATH_CAP];
    join(path, root, rel);
    struct dirent **entries;
    int n = scandir(path, &entries, not_hidden, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = entries[i]->d_name;
        join(child, rel, name);
        join(path, root, child);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) scan_dir(c, root, child, from);
        else if (is_source(name))
            scan_file(c, root, child, from);
        free(entries[i]);
    }
    if (n >= 0) free(entries);
}

// Depth-first over the folder graph: an edge back into the current path
// closes a cycle, reported from where it starts with the include behind each edge.
static void find_cycles(LayerCheck *c, int node, int *state, int *path, int depth) {
    state[node] = 1;   // on the path
    path[depth] = node;
    for (int next = 0; next < N_FOLDERS; next++) {
        if (next == node || !c->edge[node][next].file[0]) continue;
        if (state[next] == 0) find_cycles(c, next, state, path, depth + 1);
        if (state[next] != 1) continue;
        int start = depth;
        while (path[start] != next) start--;
        note(c, "  cycle: ");
        for (int i = start; i <= depth; i++) note(c, "%s -> ", LAYER_RULES[path[i]].folder);
        note(c, "%s\n", LAYER_RULES[next].folder);
        for (int i = start; i <= depth; i++) {
            int from = path[i], to = i < depth ? path[i + 1] : next;
            note(c, "    %s -> %s: %s: #include \"%s\"\n", LAYER_RULES[from].folder, LAYER_RULES[to].folder,
                 c->edge[from][to].file, c->edge[from][to].include);
        }
        c->problems++;
    }
    state[node] = 2;   // done
}

// Checks the folders of LAYER_RULES present under root; returns the number of
// problems, described in c->report.
static int check_layers(const char *root, LayerCheck *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_FOLDERS; i++) scan_dir(c, root, LAYER_RULES[i].folder, i);
    int state[N_FOLDERS] = {0}, path[N_FOLDERS];
    for (int i = 0; i < N_FOLDERS; i++)
        if (state[i] == 0) find_cycles(c, i, state, path, 0);
    return c->problems;
}

static void test_source_tree_follows_layering(void **state) {
    (void)state;
    static LayerCheck c;   // static: 160 KB is a lot for a stack
    if (check_layers(".", &c) == 0) return;
    print_message("%d layering problem(s) (rules: LAYER_RULES in tests/test_layers.c):\n%s", c.problems, c.report);
    fail_msg("the include graph breaks the layering");
}

// ---- the checker itself, on small trees written to a temporary folder -------------------

typedef struct { const char *path, *text; } TreeFile;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int check_tree(const TreeFile *files, int n, LayerCheck *c) {
    char root[] = "/tmp/pocket-test-layers-XXXXXX";
    assert_non_null(mkdtemp(root));
    for (int i = 0; i < n; i++) {   // a later entry with the same path replaces an earlier one
        char path[PATH_CAP];
        join(path, root, files[i].path);
        for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
            *s = '\0';
            mkdir(path, 0755);
            *s = '/';
        }
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(files[i].text, f);
        fclose(f);
    }
    int problems = check_layers(root, c);
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return problems;
}

#define CLEAN_TREE                                                                       \
    {"util/util.h", "#pragma once\n#include <stdio.h>\n"},                               \
    {"model/ops/matmul.c", "#include \"matmul.h\"\n#include \"../../util/util.h\"\n"},   \
    {"model/ops/matmul.h", "#pragma once\n"},                                            \
    {"model/model.h", "#include \"ops/matmul.h\"\n  #  include \"../util/util.h\"\n"},   \
    {"qat/qat.h", "#include \"../model/model.h\"\n"},                                    \
    {"data/tokenizer.h", "#include \"../util/util.h\"\n"},                               \
    {"formats/gguf.c", "#include \"../qat/qat.h\"\n#include \"../data/tokenizer.h\"\n"}, \
    {"train/trainer.h", "#include \"../formats/gguf.h\"\n"},                             \
    {"cli/main.c", "#include \"../formats/../train/trainer.h\"\n"}
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void test_clean_tree_passes(void **state) {
    (void)state;
    static LayerCheck c;
    const TreeFile tree[] = {CLEAN_TREE};
    if (check_tree(tree, N_OF(tree), &c)) fail_msg("a clean tree failed:\n%s", c.report);
}

// A cycle (model -> qat -> model) and compute including a format (which is a
// cycle too, as formats depend on model through qat).
static void test_broken_trees_fail(void **state) {
    (void)state;
    static LayerCheck c;
    const TreeFile cycle[] = {CLEAN_TREE, {"model/model.c", "#include \"../qat/qat.h\"\n"}};
    assert_int_equal(check_tree(cycle, N_OF(cycle), &c), 2);
    print_message("%s", c.report);
    assert_non_null(strstr(c.report, "model/model.c: #include \"../qat/qat.h\": model may not include qat"));
    assert_non_null(strstr(c.report, "cycle: model -> qat -> model\n"));
    assert_non_null(strstr(c.report, "qat -> model: qat/qat.h: #include \"../model/model.h\""));

    const TreeFile compute_format[] = {CLEAN_TREE, {"model/ops/matmul.h", "#include \"../../formats/gguf.h\"\n"}};
    assert_int_equal(check_tree(compute_format, N_OF(compute_format), &c), 2);
    print_message("%s", c.report);
    assert_non_null(strstr(c.report, "model/ops/matmul.h: #include \"../../formats/gguf.h\": model may not include formats"));
    assert_non_null(strstr(c.report, "cycle: model -> formats -> qat -> model\n"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_tree_passes),
        cmocka_unit_test(test_broken_trees_fail),
        cmocka_unit_test(test_source_tree_follows_layering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
