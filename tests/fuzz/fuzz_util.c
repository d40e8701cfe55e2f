// fuzz_util.c: see fuzz_util.h.
#include "fuzz_util.h"
#include <dirent.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../formats/checkpoint.h"
#include "../../util/util.h"

#ifndef FUZZ_ROOT
#define FUZZ_ROOT "."
#endif

static char dir[64];
static char path[sizeof dir + 128];

// Everything the directory holds, then the directory: at exit, and before a
// crash report only what libFuzzer's own exit leaves (a crashed run may leave
// /dev/shm/pocket-fuzz.* behind; `make fuzz-run` removes those of its runs).
static void remove_dir(void) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d)))
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) unlink(fuzz_path(ent->d_name));
    closedir(d);
    rmdir(dir);
}

const char *fuzz_dir(void) {
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "/dev/shm/pocket-fuzz.XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof dir, "/tmp/pocket-fuzz.XXXXXX");   // no /dev/shm: a temporary directory
        if (!mkdtemp(dir)) die("fuzz: cannot make a temporary directory");
    }
    atexit(remove_dir);
    // One thread: the loaders' OpenMP loops (int4 weights, tokenizing) then run
    // where libFuzzer measures, and no thread pool outlives an input.
    omp_set_num_threads(1);
    return dir;
}

const char *fuzz_path(const char *name) {
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    return path;
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
    const char *p = fuzz_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) die("fuzz: cannot write %s", p);
    return p;
}

void fuzz_remove(const char *name) { unlink(fuzz_path(name)); }

void fuzz_write_parts(const uint8_t *data, size_t size, const char *const *names, int n_names) {
    FuzzPart parts[16];
    int n = fuzz_parts(data, size, parts, n_names < 16 ? n_names : 16);
    for (int i = 0; i < n_names; i++) {
        if (i < n && parts[i].n) fuzz_file(names[i], parts[i].p, parts[i].n);
        else fuzz_remove(names[i]);
    }
}

const char *fuzz_fixture_path(const char *rel) {
    static char p[4096];
    snprintf(p, sizeof p, "%s/%s", FUZZ_ROOT, rel);
    return p;
}

uint8_t *fuzz_fixture(const char *rel, size_t *len) {
    uint8_t *data;
    PtError e;
    if (read_whole_file(fuzz_fixture_path(rel), &data, len, &e)) die("fuzz: %s", e.msg);
    return data;
}

FILE *fuzz_devnull(void) {
    static FILE *f;
    if (!f && !(f = fopen("/dev/null", "w"))) die("fuzz: cannot open /dev/null");
    return f;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_dir();
    fuzz_tokenizer();
    fuzz_template(0);
    fuzz_template(1);
    fuzz_lora_base();
    if (fuzz_setup) fuzz_setup();
    return 0;
}

const Tokenizer *fuzz_tokenizer(void) {
    static Tokenizer *tok;
    PtError e;
    if (!tok && tokenizer_load_file(&tok, fuzz_fixture_path("tests/fixtures/tok/tokenizer.json"), &e)) die("fuzz: %s", e.msg);
    return tok;
}

const ChatTemplate *fuzz_template(int which) {
    static ChatTemplate *t[2];
    PtError e;
    if (which == 0 && !t[0] && chat_template_load(&t[0], NULL, 0, "bundled", &e)) die("fuzz: %s", e.msg);
    if (which == 1 && !t[1]) {
        size_t len;
        uint8_t *text = fuzz_fixture("tests/fixtures/chat/qwen2.5.jinja", &len);
        if (chat_template_from_text(&t[1], (const char *)text, len, "qwen2.5.jinja", NULL, 0, &e)) die("fuzz: %s", e.msg);
        free(text);
    }
    return t[which];
}

const ModelConfig *fuzz_lora_base(void) {
    static ModelConfig c;
    PtError e;
    if (!c.n_layer && config_load(&c, fuzz_fixture_path("tests/fixtures/hf/qwen3-tied"), &e)) die("fuzz: %s", e.msg);
    return &c;
}

void fuzz_train_state(const char *path, const TensorTable *tt) {
    const size_t n = tt->total;
    float *m = malloc(n * sizeof(float) + 1), *v = malloc(n * sizeof(float) + 1);
    TrainState st;
    PtError e;
    checkpoint_load_train(path, tt, 0, n, m, v, &st, &e);
    free(m);
    free(v);
}
