// test_layers: the `#include "..."` graph of the source tree, at two scales.
//
// Folders follow LAYER_RULES below (lowest layer first):
//
//     util <- model <- model/ops, cuda, qat <- formats, export <- train <- cli      util <- data, dist
//
// model/ops/ (the CPU backend) is a layer of its own: model/ outside it never
// includes it. Quoted includes resolve against the including file's folder
// (the build has no -I for our headers). It fails naming the file and include
// that break a rule, and each cycle between folders with one include per edge.
//
// Files: a module is a source file and its header (x.c, x.h; x.cu, x.cuh), or
// one of SPLIT_MODULES, several files that share a header of their own. One
// module uses another when it includes its header, or when it calls a function
// the other defines through a header it includes; such uses must not go round
// in a circle (a table file that calls every op, each op calling back into the
// table file for its settings; a package writer and a graph builder calling
// each other). It fails naming each circle with the include or the call
// behind each step. The C is read as tokens (comments, strings and
// preprocessor lines left out), not compiled: a function is defined where a
// file's top level has `name(...) {` without `static`.
//
// Only libc and cmocka: the checker must not depend on the code it checks.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ctype.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The folders whose headers each folder's files may include besides their own
// (may_include is NULL-terminated), and why. A folder inside another
// (model/ops) is a layer of its own: its files are not the outer folder's.
typedef struct { const char *folder, *may_include[11], *why; } LayerRule;

static const LayerRule LAYER_RULES[] = {
    {"util", {NULL}, "basics (errors, files, fp16) that every folder may use, so it uses none"},
    {"data", {"util", NULL}, "tokenizer and corpora work without a model, so any tool can use them"},
    {"model", {"util", NULL},
     "compute only: no file format, QAT or tokenizer in what a GPU backend replaces, and no backend's kernels"},
    {"model/ops", {"model", "util", NULL}, "the CPU backend implements model/'s interface; model/ never includes it"},
    {"cuda", {"model", "util", NULL}, "GPU versions of model/'s compute, held to the same bar; not the CPU's kernels"},
    {"qat", {"model", "util", NULL}, "the int4 quantizer's state is built on the model's tensor table and grid"},
    {"dist", {"util", NULL}, "the ranks of a data-parallel run exchange plain buffers; they know no model"},
    {"formats", {"qat", "model", "data", "util", NULL}, "files carry the weights, their int4 state and the tokenizer"},
    {"export", {"qat", "model", "data", "util", NULL}, "the MNN package is made of the same parts; a sibling of formats"},
    {"train", {"dist", "cuda", "formats", "export", "qat", "model/ops", "model", "data", "util", NULL},
     "training reads data, saves checkpoints, runs on one rank or many, on a CPU or GPU device"},
    {"cli", {"train", "dist", "cuda", "formats", "export", "qat", "model/ops", "model", "data", "util", NULL},
     "commands wire it all together"},
};

// Modules split over several files that share a header of their own: their
// files may use each other in any direction. A name ending in '*' covers the
// file of that name and every file whose name continues with '_'.
typedef struct { const char *files[4], *why; } SplitModule;

static const SplitModule SPLIT_MODULES[] = {
    {{"util/h5*"}, "the HDF5 helper: the reader, the child process that walks a file first, chunked reads"},
    {{"util/cpu*"}, "CPU features and the FMA peak, one file per architecture"},
    {{"data/tokenizer*"}, "the tokenizer: models, normalizers and pre-tokenizers (tokenizer_internal.h)"},
    {{"data/jinja*"}, "the Jinja interpreter: lexer, parser, values, evaluator and builtins (jinja_internal.h)"},
    {{"model/ops/matmul", "model/ops/matmul_bf16"}, "the matmul op: fp32 and bf16 products, one workspace"},
    {{"model/ops/matmul_kernels*"}, "the register kernels, portable and one file per instruction set"},
    {{"formats/checkpoint*"}, "HDF5 checkpoints: the file, the parts adapter and draft checkpoints share, the /qat part"},
};
#define N_FOLDERS ((int)(sizeof LAYER_RULES / sizeof LAYER_RULES[0]))
#define N_SPLIT ((int)(sizeof SPLIT_MODULES / sizeof SPLIT_MODULES[0]))
#define PATH_CAP 1024

typedef struct { char file[PATH_CAP], include[PATH_CAP]; } Edge;   // the first include seen

// A source file of the tree: its includes (paths from the root) and names.
typedef struct {
    char path[PATH_CAP];
    int layer, module, header;
    char **inc;            // the includes, as paths from the root
    char **inc_text;       // as written
    int *inc_file;         // as files of the tree (-1: none)
    int n_inc;
    int *names, n_names;   // a source: the identifiers it uses; a header: the functions it declares
} SrcFile;

// A use of one module by another: the first seen, as the report shows it.
typedef struct { int from, to; char why[2 * PATH_CAP + 64]; } ModEdge;

typedef struct {
    Edge edge[N_FOLDERS][N_FOLDERS];   // [from][to]; file[0] == 0: no include
    char report[16384];
    size_t used;
    int problems;
    SrcFile *files;
    int n_files;
    char **modules;                    // module names ("data/tokenizer"), by index
    int n_modules;
    ModEdge *medges;
    int n_medges;
    char **idents;                     // interned identifiers
    int *ident_def;                    // the file defining each (-1: none, -2: several)
    int *ident_mark;                   // scratch: the last file (+1) that noted each
    int n_idents;
    int *hash, hash_cap;               // ident + 1 by hash of its name; 0: empty
} LayerCheck;

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

// An array of n elements with room for one more (capacities: 16, then powers of 2).
static void *grow(void *p, int n, size_t size) {
    if (n != 0 && (n < 16 || (n & (n - 1)))) return p;
    void *q = realloc(p, (size_t)(n ? 2 * n : 16) * size);
    if (!q) fail_msg("out of memory");
    return q;
}

static char *dup(const char *s) {
    char *d = strdup(s);
    if (!d) fail_msg("out of memory");
    return d;
}

// "a/b" into out (PATH_CAP bytes); a longer path fails the test.
static void join(char *out, const char *a, const char *b) {
    if (snprintf(out, PATH_CAP, "%s/%s", a, b) >= PATH_CAP) fail_msg("path too long: %s/%s", a, b);
}

// The layer of a path from the root: the longest rule folder it lies in; -1: none.
static int layer_of(const char *rel) {
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < N_FOLDERS; i++) {
        size_t n = strlen(LAYER_RULES[i].folder);
        if (n > best_len && strncmp(rel, LAYER_RULES[i].folder, n) == 0 && rel[n] == '/') best = i, best_len = n;
    }
    return best;
}

// The path from the root that `include`, seen from the file `rel`, names:
// "." and ".." apply to rel's directory. -1 when it leaves the root.
static int resolve(const char *rel, const char *include, char *out) {
    char dir[PATH_CAP], joined[PATH_CAP], *parts[64];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(rel, '/') - rel), rel);
    join(joined, dir, include);
    int depth = 0;
    for (char *part = strtok(joined, "/"); part; part = strtok(NULL, "/")) {
        if (strcmp(part, "..") == 0 && depth-- == 0) return -1;
        if (strcmp(part, "..") != 0 && strcmp(part, ".") != 0 && depth < 64) parts[depth++] = part;
    }
    out[0] = '\0';
    for (int i = 0; i < depth; i++) {
        if (i) strcat(out, "/");
        strcat(out, parts[i]);
    }
    return depth > 0 ? 0 : -1;
}

// ---- modules

// A path without its extension.
static void stem_of(const char *path, char *out) {
    snprintf(out, PATH_CAP, "%s", path);
    char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (dot && (!slash || dot > slash)) *dot = '\0';
}

static int split_match(const char *pattern, const char *stem) {
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*')
        return strncmp(stem, pattern, n - 1) == 0 && (stem[n - 1] == '\0' || stem[n - 1] == '_');
    return strcmp(stem, pattern) == 0;
}

static int module_index(LayerCheck *c, const char *path) {
    char stem[PATH_CAP];
    stem_of(path, stem);
    for (int i = 0; i < N_SPLIT; i++)
        for (int j = 0; j < 4 && SPLIT_MODULES[i].files[j]; j++)
            if (split_match(SPLIT_MODULES[i].files[j], stem)) {
                snprintf(stem, sizeof stem, "%s", SPLIT_MODULES[i].files[0]);
                size_t n = strlen(stem);
                if (n && stem[n - 1] == '*') stem[n - 1] = '\0';
                j = 4, i = N_SPLIT;
            }
    for (int i = 0; i < c->n_modules; i++)
        if (strcmp(c->modules[i], stem) == 0) return i;
    c->modules = grow(c->modules, c->n_modules, sizeof *c->modules);
    c->modules[c->n_modules] = dup(stem);
    return c->n_modules++;
}

static unsigned hash_of(const char *s, size_t n) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

// The identifier's index (open addressing, kept at most half full).
static int intern(LayerCheck *c, const char *name, size_t len) {
    if (2 * (c->n_idents + 1) > c->hash_cap) {
        int cap = c->hash_cap ? 2 * c->hash_cap : 1 << 14, *h = calloc((size_t)cap, sizeof(int));
        if (!h) fail_msg("out of memory");
        for (int i = 0; i < c->n_idents; i++) {
            unsigned k = hash_of(c->idents[i], strlen(c->idents[i])) & (unsigned)(cap - 1);
            while (h[k]) k = (k + 1) & (unsigned)(cap - 1);
            h[k] = i + 1;
        }
        free(c->hash);
        c->hash = h, c->hash_cap = cap;
    }
    unsigned k = hash_of(name, len) & (unsigned)(c->hash_cap - 1);
    for (; c->hash[k]; k = (k + 1) & (unsigned)(c->hash_cap - 1)) {
        const char *have = c->idents[c->hash[k] - 1];
        if (strlen(have) == len && memcmp(have, name, len) == 0) return c->hash[k] - 1;
    }
    c->idents = grow(c->idents, c->n_idents, sizeof *c->idents);
    c->ident_def = grow(c->ident_def, c->n_idents, sizeof *c->ident_def);
    c->ident_mark = grow(c->ident_mark, c->n_idents, sizeof *c->ident_mark);
    c->idents[c->n_idents] = strndup(name, len);
    c->ident_def[c->n_idents] = -1;
    c->ident_mark[c->n_idents] = 0;
    c->hash[k] = c->n_idents + 1;
    return c->n_idents++;
}

// The text with comments, string and character literals and preprocessor
// lines blanked (newlines kept), in place.
static void blank_non_code(char *t) {
    int line_start = 1;
    for (char *p = t; *p;) {
        if (line_start && *p == '#') {   // a directive, with its continuation lines
            while (*p && *p != '\n') {
                if (*p == '\\' && p[1] == '\n') *p++ = ' ';
                if (*p != '\n') *p++ = ' ';
            }
            continue;
        }
        if (*p == '\n') {
            line_start = 1;
            p++;
            continue;
        }
        if (*p != ' ' && *p != '\t') line_start = 0;
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
        } else if (p[0] == '/' && p[1] == '*') {
            *p++ = ' ', *p++ = ' ';
            while (*p && !(p[0] == '*' && p[1] == '/'))
                if (*p++ != '\n') p[-1] = ' ';
            if (*p) *p++ = ' ', *p++ = ' ';
        } else if (*p == '"' || *p == '\'') {   // blanked whole, quotes too: extern "C" { reads extern {
            char q = *p;
            *p++ = ' ';
            while (*p && *p != q && *p != '\n') {
                if (*p == '\\' && p[1] && p[1] != '\n') *p++ = ' ';
                *p++ = ' ';
            }
            if (*p == q) *p++ = ' ';
        } else {
            p++;
        }
    }
}

typedef struct { const char *s; size_t n; } Tok;

// The tokens of blanked code: identifiers and numbers whole, "->" as one, every other character alone.
static int tokenize(const char *t, Tok **out) {
    Tok *tok = NULL;
    int n = 0;
    for (const char *p = t; *p;) {
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        const char *s = p;
        if (isalnum((unsigned char)*p) || *p == '_')
            while (isalnum((unsigned char)*p) || *p == '_' || (isdigit((unsigned char)*s) && *p == '.')) p++;
        else if (p[0] == '-' && p[1] == '>')
            p += 2;
        else
            p++;
        tok = grow(tok, n, sizeof *tok);
        tok[n++] = (Tok){s, (size_t)(p - s)};
    }
    *out = tok;
    return n;
}

static int is(const Tok *t, const char *s) { return t->n == strlen(s) && memcmp(t->s, s, t->n) == 0; }
static int is_ident(const Tok *t) { return isalpha((unsigned char)t->s[0]) || t->s[0] == '_'; }

static void add_name(LayerCheck *c, int fi, int id) {
    SrcFile *f = &c->files[fi];
    if (c->ident_mark[id] == fi + 1) return;
    c->ident_mark[id] = fi + 1;
    f->names = grow(f->names, f->n_names, sizeof *f->names);
    f->names[f->n_names++] = id;
}

// A header: the functions it declares or defines (a name before "(", not a
// function pointer's "(*name)" nor a member). A source: every identifier it
// names outside member access, and the functions it defines at its top level
// without `static` (an `extern "C" {` block counts as the top level).
static void read_names(LayerCheck *c, int fi, char *text) {
    SrcFile *f = &c->files[fi];
    blank_non_code(text);
    Tok *tok;
    const int n = tokenize(text, &tok);
    int depth = 0, paren = 0, in_statement = 0, local = 0, named = -1, extern_blocks = 0;
    for (int i = 0; i < n; i++) {
        const Tok *t = &tok[i];
        const int member = i > 0 && (is(&tok[i - 1], ".") || is(&tok[i - 1], "->"));
        if (is_ident(t) && !member) {
            const int call = i + 1 < n && is(&tok[i + 1], "(");
            const int pointer = i > 1 && is(&tok[i - 1], "*") && is(&tok[i - 2], "(");
            if (!f->header || (call && !pointer)) add_name(c, fi, intern(c, t->s, t->n));
            if (depth == 0 && paren == 0) {
                if (is(t, "static") || is(t, "typedef")) local = 1;
                if (call && named < 0 && strncmp(t->s, "__", 2) != 0) named = intern(c, t->s, t->n);
            }
        }
        if (is(t, "(")) paren++;
        else if (is(t, ")")) paren--;
        else if (depth == 0 && paren == 0 && is(t, "=")) local = 1;
        if (depth == 0 && paren == 0 && is(t, "{") && in_statement == 1 && i > 0 && is(&tok[i - 1], "extern")) {
            extern_blocks++;   // extern "C" { ... }: its contents are the top level
            in_statement = local = 0, named = -1;
            continue;
        }
        if (is(t, "{")) {
            if (depth == 0 && !f->header && named >= 0 && !local) {
                int *def = &c->ident_def[named];
                *def = *def == -1 || *def == fi ? fi : -2;
            }
            depth++;
        } else if (is(t, "}")) {
            if (depth == 0 && extern_blocks) extern_blocks--;
            else if (--depth == 0) in_statement = local = 0, named = -1;
            continue;
        } else if (depth == 0 && is(t, ";")) {
            in_statement = local = 0, named = -1;
            continue;
        }
        if (depth == 0) in_statement++;
    }
    free(tok);
}

static void scan_file(LayerCheck *c, const char *root, const char *rel) {
    char path[PATH_CAP], line[PATH_CAP], to_path[PATH_CAP];
    join(path, root, rel);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: cannot be read", path);
    c->files = grow(c->files, c->n_files, sizeof *c->files);
    SrcFile *sf = &c->files[c->n_files];
    memset(sf, 0, sizeof *sf);
    snprintf(sf->path, sizeof sf->path, "%s", rel);
    const char *dot = strrchr(rel, '.');
    sf->header = !strcmp(dot, ".h") || !strcmp(dot, ".cuh");
    sf->layer = layer_of(rel);
    sf->module = module_index(c, rel);
    const int from = sf->layer;
    while (fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (*p++ != '#') continue;
        p += strspn(p, " \t");
        if (strncmp(p, "include", 7) != 0) continue;
        p += 7 + strspn(p + 7, " \t");
        char *include = p + 1, *end = *p == '"' ? strchr(include, '"') : NULL;
        if (!end) continue;   // <system> header
        *end = '\0';
        int to = resolve(rel, include, to_path) ? -1 : layer_of(to_path);
        if (to < 0) {
            note(c, "  %s: #include \"%s\" is outside the source folders\n", rel, include);
            c->problems++;
            continue;
        }
        sf->inc = grow(sf->inc, sf->n_inc, sizeof *sf->inc);
        sf->inc_text = grow(sf->inc_text, sf->n_inc, sizeof *sf->inc_text);
        sf->inc_text[sf->n_inc] = dup(include);
        sf->inc[sf->n_inc++] = dup(to_path);
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
    // The names, from the whole text.
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) fail_msg("%s: cannot be read", path);
    text[size] = '\0';
    fclose(f);
    c->n_files++;
    read_names(c, c->n_files - 1, text);
    free(text);
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
static void scan_dir(LayerCheck *c, const char *root, const char *rel) {
    char path[PATH_CAP], child[PATH_CAP];
    join(path, root, rel);
    struct dirent **entries;
    int n = scandir(path, &entries, not_hidden, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = entries[i]->d_name;
        join(child, rel, name);
        join(path, root, child);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) scan_dir(c, root, child);
        else if (is_source(name))
            scan_file(c, root, child);
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

static int file_index(const LayerCheck *c, const char *path) {
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->files[i].path, path) == 0) return i;
    return -1;
}

__attribute__((format(printf, 4, 5))) static void use(LayerCheck *c, int from, int to, const char *fmt, ...) {
    if (from == to) return;
    for (int i = 0; i < c->n_medges; i++)
        if (c->medges[i].from == from && c->medges[i].to == to) return;
    c->medges = grow(c->medges, c->n_medges, sizeof *c->medges);
    ModEdge *e = &c->medges[c->n_medges++];
    e->from = from, e->to = to;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->why, sizeof e->why, fmt, ap);
    va_end(ap);
}

// The uses between modules: calls of functions defined in another module's
// file through a header the caller includes (directly or not), then includes
// (an edge shows the first use found: a call where there is one).
static void module_uses(LayerCheck *c) {
    for (int fi = 0; fi < c->n_files; fi++) {
        SrcFile *f = &c->files[fi];
        f->inc_file = malloc(((size_t)f->n_inc + 1) * sizeof(int));
        for (int k = 0; k < f->n_inc; k++) f->inc_file[k] = file_index(c, f->inc[k]);
    }
    char *seen = malloc((size_t)c->n_files + 1);
    int *stack = malloc(((size_t)c->n_files + 1) * sizeof(int));
    for (int fi = 0; fi < c->n_files; fi++) {
        const SrcFile *f = &c->files[fi];
        if (f->header) continue;
        // What the headers it includes, directly or through others, declare.
        memset(seen, 0, (size_t)c->n_files);
        int top = 0;
        stack[top++] = fi;
        while (top) {
            const SrcFile *g = &c->files[stack[--top]];
            for (int k = 0; k < g->n_inc; k++) {
                const int h = g->inc_file[k];
                if (h < 0 || seen[h] || !c->files[h].header) continue;
                seen[h] = 1, stack[top++] = h;
                for (int j = 0; j < c->files[h].n_names; j++) c->ident_mark[c->files[h].names[j]] = -(fi + 1);
            }
        }
        for (int u = 0; u < f->n_names; u++) {
            const int id = f->names[u], def = c->ident_def[id];
            if (def < 0 || def == fi || c->files[def].module == f->module || c->ident_mark[id] != -(fi + 1)) continue;
            use(c, f->module, c->files[def].module, "%s calls %s (%s)", f->path, c->idents[id], c->files[def].path);
        }
    }
    for (int fi = 0; fi < c->n_files; fi++) {
        const SrcFile *f = &c->files[fi];
        for (int k = 0; k < f->n_inc; k++)
            if (f->inc_file[k] >= 0)
                use(c, f->module, c->files[f->inc_file[k]].module, "%s: #include \"%s\"", f->path, f->inc_text[k]);
    }
    free(seen);
    free(stack);
}

// Depth-first over the module graph, as find_cycles over the folders'.
static void find_module_cycles(LayerCheck *c, int node, int *state, int *path, int depth) {
    state[node] = 1;
    path[depth] = node;
    for (int i = 0; i < c->n_medges; i++) {
        if (c->medges[i].from != node) continue;
        const int next = c->medges[i].to;
        if (state[next] == 0) find_module_cycles(c, next, state, path, depth + 1);
        if (state[next] != 1) continue;
        int start = depth;
        while (path[start] != next) start--;
        note(c, "  circle of modules: ");
        for (int k = start; k <= depth; k++) note(c, "%s -> ", c->modules[path[k]]);
        note(c, "%s\n", c->modules[next]);
        for (int k = start; k <= depth; k++) {
            const int from = path[k], to = k < depth ? path[k + 1] : next;
            for (int j = 0; j < c->n_medges; j++)
                if (c->medges[j].from == from && c->medges[j].to == to) note(c, "    %s\n", c->medges[j].why);
        }
        c->problems++;
    }
    state[node] = 2;
}

static void check_free(LayerCheck *c) {
    for (int i = 0; i < c->n_files; i++) {
        for (int k = 0; k < c->files[i].n_inc; k++) free(c->files[i].inc[k]), free(c->files[i].inc_text[k]);
        free(c->files[i].inc);
        free(c->files[i].inc_text);
        free(c->files[i].inc_file);
        free(c->files[i].names);
    }
    for (int i = 0; i < c->n_modules; i++) free(c->modules[i]);
    for (int i = 0; i < c->n_idents; i++) free(c->idents[i]);
    free(c->files), free(c->modules), free(c->medges), free(c->idents), free(c->ident_def), free(c->ident_mark);
    free(c->hash);
}

// Checks the folders of LAYER_RULES present under root; returns the number of
// problems, described in c->report.
static int check_layers(const char *root, LayerCheck *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_FOLDERS; i++)
        if (!strchr(LAYER_RULES[i].folder, '/')) scan_dir(c, root, LAYER_RULES[i].folder);
    int state[N_FOLDERS] = {0}, path[N_FOLDERS];
    for (int i = 0; i < N_FOLDERS; i++)
        if (state[i] == 0) find_cycles(c, i, state, path, 0);
    module_uses(c);
    int *mstate = calloc((size_t)c->n_modules + 1, sizeof(int)), *mpath = malloc(((size_t)c->n_modules + 1) * sizeof(int));
    for (int i = 0; i < c->n_modules; i++)
        if (mstate[i] == 0) find_module_cycles(c, i, mstate, mpath, 0);
    free(mstate);
    free(mpath);
    check_free(c);
    return c->problems;
}

static void test_source_tree_follows_layering(void **state) {
    (void)state;
    static LayerCheck c;   // static: 160 KB is a lot for a stack
    if (check_layers(".", &c) == 0) return;
    // printf, not print_message: cmocka cuts its messages short.
    printf("%d layering problem(s) (rules: LAYER_RULES and SPLIT_MODULES in tests/test_layers.c):\n%s", c.problems,
           c.report);
    fflush(stdout);
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

// A tree that follows the rules: model/ops/ includes model/, train/ includes
// model/ops/, and the tokenizer (a split module) calls across its files in
// both directions through its internal header.
#define CLEAN_TREE                                                                                       \
    {"util/util.h", "#pragma once\n#include <stdio.h>\n"},                                               \
    {"model/backend.h", "#pragma once\n#include \"../util/util.h\"\n"},                                  \
    {"model/ops/matmul.c", "#include \"matmul.h\"\n#include \"../backend.h\"\n#include \"../../util/util.h\"\n"}, \
    {"model/ops/matmul.h", "#pragma once\n"},                                                            \
    {"model/model.h", "#include \"backend.h\"\n  #  include \"../util/util.h\"\n"},                      \
    {"qat/qat.h", "#include \"../model/model.h\"\n"},                                                    \
    {"data/tokenizer.h", "#include \"../util/util.h\"\nint tok_encode(const char *s);\n"},               \
    {"data/tokenizer_internal.h", "#include \"tokenizer.h\"\nint tok_merge(int a);\n"},                  \
    {"data/tokenizer.c", "#include \"tokenizer_internal.h\"\nint tok_encode(const char *s) {\n"          \
                         "    return tok_merge(s[0]); // \"{\" '}'\n}\n"},                                \
    {"data/tokenizer_bpe.c", "#include \"tokenizer_internal.h\"\nint tok_merge(int a) {\n"               \
                             "    return a ? tok_encode(\"x\") : 0;\n}\n"},                               \
    {"formats/gguf.h", "#include \"../data/tokenizer.h\"\nint gguf_write(void);\n"},                     \
    {"formats/gguf.c", "#include \"gguf.h\"\n#include \"../qat/qat.h\"\n"                                 \
                       "int gguf_write(void) { return tok_encode(\"a\"); }\n"},                           \
    {"train/trainer.h", "#include \"../formats/gguf.h\"\n#include \"../model/ops/matmul.h\"\n"},          \
    {"cli/main.c", "#include \"../formats/../train/trainer.h\"\nint main(void) { return gguf_write(); }\n"}
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void test_clean_tree_passes(void **state) {
    (void)state;
    static LayerCheck c;
    const TreeFile tree[] = {CLEAN_TREE};
    if (check_tree(tree, N_OF(tree), &c)) fail_msg("a clean tree failed:\n%s", c.report);
}

// A cycle of folders (model -> qat -> model, a circle of modules too), and
// the decoder including the CPU backend.
static void test_broken_trees_fail(void **state) {
    (void)state;
    static LayerCheck c;
    const TreeFile cycle[] = {CLEAN_TREE, {"model/model.c", "#include \"../qat/qat.h\"\n"}};
    assert_int_equal(check_tree(cycle, N_OF(cycle), &c), 3);
    print_message("%s", c.report);
    assert_non_null(strstr(c.report, "model/model.c: #include \"../qat/qat.h\": model may not include qat"));
    assert_non_null(strstr(c.report, "cycle: model -> qat -> model\n"));
    assert_non_null(strstr(c.report, "qat -> model: qat/qat.h: #include \"../model/model.h\""));
    assert_non_null(strstr(c.report, "circle of modules: model/model -> qat/qat -> model/model\n"));

    const TreeFile backend[] = {CLEAN_TREE, {"model/model.h", "#include \"ops/matmul.h\"\n"}};
    assert_int_equal(check_tree(backend, N_OF(backend), &c), 2);
    print_message("%s", c.report);
    assert_non_null(strstr(c.report, "model/model.h: #include \"ops/matmul.h\": model may not include model/ops "
                                     "(model may include: util)"));
    assert_non_null(strstr(c.report, "cycle: model -> model/ops -> model\n"));
}

// The tree fails with one problem: the circle `circle` ("a -> b -> a"), whose
// two steps the report gives as `step1` and `step2`.
static void expect_circle(const TreeFile *tree, int n, const char *circle, const char *step1, const char *step2) {
    static LayerCheck c;
    char line[512];
    assert_int_equal(check_tree(tree, n, &c), 1);
    print_message("%s", c.report);
    snprintf(line, sizeof line, "circle of modules: %s\n", circle);
    assert_non_null(strstr(c.report, line));
    snprintf(line, sizeof line, "    %s\n", step1);
    assert_non_null(strstr(c.report, line));
    snprintf(line, sizeof line, "    %s\n", step2);
    assert_non_null(strstr(c.report, line));
}

// Circles between modules of one folder: two files that call each other
// through their headers; and an op calling into the table file that
// references it, through one header both include (no include goes round).
static void test_module_circles_fail(void **state) {
    (void)state;
    static LayerCheck c;
    const TreeFile calls[] = {
        CLEAN_TREE,
        {"formats/a.h", "#pragma once\nint a_fn(void);\n"},
        {"formats/b.h", "#pragma once\nint b_fn(void);\n"},
        {"formats/a.c", "#include \"a.h\"\n#include \"b.h\"\nint a_fn(void) {\n    return b_fn();\n}\n"},
        {"formats/b.c", "#include \"b.h\"\n#include \"a.h\"\nint b_fn(void) { return 1 + a_fn(); }\n"},
    };
    expect_circle(calls, N_OF(calls), "formats/a -> formats/b -> formats/a", "formats/a.c calls b_fn (formats/b.c)",
                  "formats/b.c calls a_fn (formats/a.c)");

    const TreeFile table[] = {
        CLEAN_TREE,
        {"model/ops/ops.h", "#pragma once\n#include \"../backend.h\"\ntypedef struct { void (*op1)(int); } Table;\n"
                            "void op1(int n);\nint settings(void);\n"},
        {"model/ops/op1.c", "#include \"ops.h\"\nvoid op1(int n) {\n    (void)(n * settings());\n}\n"},
        {"model/ops/table.c", "#include \"ops.h\"\nstatic const Table T = {.op1 = op1};\n"
                              "int settings(void) { return T.op1 != 0; }\n"},
    };
    expect_circle(table, N_OF(table), "model/ops/op1 -> model/ops/table -> model/ops/op1",
                  "model/ops/op1.c calls settings (model/ops/table.c)", "model/ops/table.c calls op1 (model/ops/op1.c)");

    // A static function of the same name, a member and a name no included header declares are no calls.
    const TreeFile not_calls[] = {
        CLEAN_TREE,
        {"formats/a.h", "#pragma once\nint a_fn(void);\n"},
        {"formats/b.h", "#pragma once\nstruct B { int (*a_fn)(void); };\nint b_fn(void);\n"},
        {"formats/a.c", "#include \"a.h\"\n#include \"b.h\"\nint a_fn(void) {\n    return b_fn();\n}\n"},
        {"formats/b.c", "#include \"b.h\"\nstatic int a_fn(void) { return 2; }\n"
                        "int b_fn(void) { struct B x = {a_fn}; return x.a_fn(); }\n"},
        {"formats/c.c", "#include \"b.h\"\nint c_fn(void) { return a_fn(); }\n"},
    };
    if (check_tree(not_calls, N_OF(not_calls), &c)) fail_msg("a tree without circles failed:\n%s", c.report);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_tree_passes),
        cmocka_unit_test(test_broken_trees_fail),
        cmocka_unit_test(test_module_circles_fail),
        cmocka_unit_test(test_source_tree_follows_layering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
