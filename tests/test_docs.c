// test_docs: the documentation is held to the code and to the repository.
//
// 1. Every option a command's argument loop accepts (the "--flag" literals of
//    cli/cmd_NAME.c, and run_flag's in cli/open_model.c for the commands that
//    call it) is in `pocket NAME --help`.
// 2. Every flag `pocket NAME --help` prints appears in docs/commands.md, in the
//    section `## pocket NAME` (the top-level `pocket --help`'s anywhere on the
//    page).
// 3. Every recipe key `pocket train --help` lists (train/recipe.c's key table)
//    has a row in docs/recipes.md's table under `## [section]`, with the
//    default the code has.
// 4. Every relative link in the repository's Markdown files names a file of the
//    repository, and a `#anchor` a heading of that file (GitHub's slugs).
// 5. No committed file points outside the repository: no link that climbs above
//    it, no path into the shared folder beside it or into a machine's own
//    folders (OUTSIDE below).
//
// Each checker also runs on made-up input that must fail (the negative cases):
// a flag or key added without documentation, a help text missing an option,
// broken links, a reference outside the repository. Needs POCKET (the binary,
// as `make test` sets it) and git (for the list of committed files).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { MAX_ITEMS = 512, ITEM_CHARS = 96, REPORT_CHARS = 32768 };

// Problems found, one line each, for the failure message.
typedef struct {
    int problems;
    char text[REPORT_CHARS];
} Report;

static void report(Report *r, const char *fmt, ...) {
    size_t len = strlen(r->text);
    va_list ap;
    va_start(ap, fmt);
    if (len + 2 < sizeof r->text) vsnprintf(r->text + len, sizeof r->text - len - 1, fmt, ap);
    va_end(ap);
    len = strlen(r->text);
    if (len + 1 < sizeof r->text) strcat(r->text, "\n");
    r->problems++;
}

static void assert_clean(const Report *r, const char *what) {
    if (r->problems == 0) return;
    print_message("%d problem(s): %s\n%s", r->problems, what, r->text);
    fail_msg("%s", what);
}

// ---- reading files and command output ----

// All of a stream, NUL-terminated.
static char *read_stream(FILE *f) {
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    buf[n] = '\0';
    return buf;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = read_stream(f);
    fclose(f);
    return text;
}

static char *must_read(const char *path) {
    char *text = read_text(path);
    if (!text) fail_msg("cannot read %s (the test runs from the repository root)", path);
    return text;
}

// stdout of a shell command; fails the test when it cannot run or exits non-zero.
static char *command_output(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("cannot run: %s", cmd);
    char *out = read_stream(p);
    if (pclose(p) != 0) fail_msg("failed: %s", cmd);
    return out;
}

static const char *pocket_binary(void) {
    const char *p = getenv("POCKET");
    return p && p[0] ? p : "./pocket";
}

static char *pocket_help(const char *command) {
    char cmd[512];
    if (snprintf(cmd, sizeof cmd, "%s %s --help", pocket_binary(), command ? command : "") >= (int)sizeof cmd)
        fail_msg("command line too long");
    return command_output(cmd);
}

// ---- words in text ----

static int flag_char(char c) { return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-'; }

// s[0..] starts an occurrence of word that is not part of a longer name.
static int word_at(const char *text, const char *s, const char *word) {
    size_t n = strlen(word);
    if (strncmp(s, word, n) != 0) return 0;
    if (s > text && (isalnum((unsigned char)s[-1]) || s[-1] == '-' || s[-1] == '_')) return 0;
    return !flag_char(s[n]) && s[n] != '_';
}

static int has_word(const char *text, size_t len, const char *word) {
    for (const char *s = text; s < text + len; s++)
        if (*s == word[0] && word_at(text, s, word)) return 1;
    return 0;
}

// The distinct "--flag" words of text (up to stop, when given), --help left out.
static int flags_in(const char *text, const char *stop, char out[][ITEM_CHARS]) {
    const char *end = stop ? strstr(text, stop) : NULL;
    if (!end) end = text + strlen(text);
    int n = 0;
    for (const char *s = text; s + 2 < end; s++) {
        if (s[0] != '-' || s[1] != '-' || !islower((unsigned char)s[2])) continue;
        if (s > text && (isalnum((unsigned char)s[-1]) || s[-1] == '-')) continue;
        size_t len = 2;
        while (flag_char(s[len])) len++;
        while (s[len - 1] == '-') len--;   // "--flag-" at a line break is "--flag"
        char f[ITEM_CHARS];
        snprintf(f, sizeof f, "%.*s", (int)len, s);
        int seen = !strcmp(f, "--help");
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(out[i], f);
        if (!seen && n < MAX_ITEMS) strcpy(out[n++], f);
        s += len - 1;
    }
    return n;
}

// ---- Markdown sections ----

// The body of the section whose heading line is exactly `heading` (e.g.
// "## pocket eval"), up to the next heading of the same or a higher level.
static const char *md_section(const char *md, const char *heading, size_t *len) {
    size_t hlen = strlen(heading);
    int level = 0;
    while (heading[level] == '#') level++;
    for (const char *line = md; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, heading, hlen) != 0 || (line[hlen] != '\n' && line[hlen] != '\0')) continue;
        const char *body = line + hlen, *s = body;
        while ((s = strchr(s, '\n'))) {
            s++;
            int l = 0;
            while (s[l] == '#') l++;
            if (l > 0 && l <= level && s[l] == ' ') break;
        }
        *len = s ? (size_t)(s - body) : strlen(body);
        return body;
    }
    return NULL;
}

// ---- 1. the help lists what the argument loop accepts ----

// The "--flag" string literals of a command's source: what its loop compares
// argv with (usage text is never a whole literal of one flag).
static int source_flags(const char *source, char out[][ITEM_CHARS]) {
    int n = 0;
    for (const char *s = source; (s = strstr(s, "\"--")); s++) {
        size_t len = 3;
        while (flag_char(s[len])) len++;
        if (s[len] != '"' || len < 4 || !islower((unsigned char)s[3])) continue;
        char f[ITEM_CHARS];
        snprintf(f, sizeof f, "%.*s", (int)len - 1, s + 1);
        int seen = !strcmp(f, "--help");
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(out[i], f);
        if (!seen && n < MAX_ITEMS) strcpy(out[n++], f);
    }
    return n;
}

static void check_help_covers_source(const char *command, const char *help, const char *source,
                                     const char *run_flags_source, Report *r) {
    static char flags[MAX_ITEMS][ITEM_CHARS];
    int n = source_flags(source, flags);
    if (strstr(source, "run_flag(")) n += source_flags(run_flags_source, flags + n);
    for (int i = 0; i < n; i++)
        if (!has_word(help, strlen(help), flags[i]))
            report(r, "pocket %s accepts %s, but `pocket %s --help` does not print it", command, flags[i], command);
}

// ---- 2. every flag a help prints is documented ----

static void check_flags_documented(const char *command, const char *help, const char *commands_md, Report *r) {
    static char flags[MAX_ITEMS][ITEM_CHARS];
    const char *body = commands_md;
    size_t len = strlen(commands_md);
    char heading[128] = "the page";
    if (command) {
        snprintf(heading, sizeof heading, "## pocket %s", command);
        body = md_section(commands_md, heading, &len);
        if (!body) {
            report(r, "docs/commands.md has no section \"%s\"", heading);
            return;
        }
    }
    int n = flags_in(help, "\nRecipe keys:", flags);   // train's keys are checked against docs/recipes.md
    for (int i = 0; i < n; i++)
        if (!has_word(body, len, flags[i]))
            report(r, "`pocket %s --help` prints %s, which docs/commands.md does not mention in %s", command ? command : "",
                   flags[i], heading);
}

// The command names `pocket --help` lists ("  NAME  what it does").
static int command_names(const char *help, char out[][ITEM_CHARS]) {
    int n = 0;
    for (const char *line = help; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (line[0] != ' ' || line[1] != ' ' || !islower((unsigned char)line[2])) continue;
        size_t len = 2;
        while (islower((unsigned char)line[len]) || line[len] == '-') len++;
        if (line[len] == ' ' && n < MAX_ITEMS) snprintf(out[n++], ITEM_CHARS, "%.*s", (int)len - 2, line + 2);
    }
    return n;
}

// ---- 3. every recipe key is documented with its default ----

// The cell after the key in the first table row "| `key` | default |" of body.
static int doc_default(const char *body, size_t len, const char *key, char *out, size_t cap) {
    char start[ITEM_CHARS + 8];
    snprintf(start, sizeof start, "| `%s` |", key);
    for (const char *s = body; s < body + len; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : body + len) {
        if (strncmp(s, start, strlen(start)) != 0) continue;
        const char *cell = s + strlen(start), *end = strchr(cell, '|');
        if (!end) return 0;
        while (cell < end && *cell == ' ') cell++;
        while (end > cell && end[-1] == ' ') end--;
        if (end - cell >= 2 && cell[0] == '`' && end[-1] == '`') cell++, end--;
        snprintf(out, cap, "%.*s", (int)(end - cell), cell);
        return 1;
    }
    return 0;
}

static void check_keys_documented(const char *train_help, const char *recipes_md, Report *r) {
    const char *keys = strstr(train_help, "\nRecipe keys:");
    if (!keys) {
        report(r, "`pocket train --help` has no \"Recipe keys:\" list");
        return;
    }
    char section[ITEM_CHARS] = "", heading[ITEM_CHARS + 8];
    const char *body = NULL;
    size_t len = 0;
    int n_keys = 0;
    for (const char *next = keys + 1; next;) {
        char line[1024], name[ITEM_CHARS], def[ITEM_CHARS], doc[ITEM_CHARS];
        const char *eol = strchr(next, '\n');   // one line at a time: sscanf's blanks would cross lines
        snprintf(line, sizeof line, "%.*s", (int)(eol ? eol - next : (long)strlen(next)), next);
        next = eol ? eol + 1 : NULL;
        if (!strncmp(line, "  [", 3) && sscanf(line + 3, "%95[a-z0-9_]", name) == 1) {
            strcpy(section, name);
            snprintf(heading, sizeof heading, "## [%s]", section);
            body = md_section(recipes_md, heading, &len);
            if (!body) report(r, "docs/recipes.md has no section \"%s\"", heading);
            continue;
        }
        if (strncmp(line, "    ", 4) != 0 || line[4] == ' ' || sscanf(line, "%95s %95s", name, def) != 2) continue;
        n_keys++;
        if (!body) continue;
        if (!strcmp(def, "(required)")) strcpy(def, "required");
        if (!doc_default(body, len, name, doc, sizeof doc))
            report(r, "recipe key [%s] %s is not in docs/recipes.md's table under \"%s\"", section, name, heading);
        else if (strcmp(doc, def) != 0)
            report(r, "recipe key [%s] %s: docs/recipes.md says the default is '%s', the code '%s'", section, name, doc,
                   def);
    }
    if (n_keys == 0) report(r, "`pocket train --help` lists no recipe keys");
}

// ---- 4. links ----

// GitHub's anchor for a heading: lower case; letters, digits, '-' and '_' kept
// (bytes of non-ASCII characters too), spaces become '-', the rest dropped; the
// n-th repeat of an anchor gets "-n".
static int heading_anchors(const char *md, char out[][ITEM_CHARS]) {
    int n = 0, fenced = 0;
    for (const char *line = md; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (!strncmp(line, "```", 3)) fenced = !fenced;
        int level = 0;
        while (line[level] == '#') level++;
        if (fenced || level == 0 || level > 6 || line[level] != ' ' || n >= MAX_ITEMS) continue;
        char slug[ITEM_CHARS];
        size_t k = 0;
        for (const char *s = line + level + 1; *s && *s != '\n' && k + 1 < sizeof slug; s++) {
            unsigned char c = (unsigned char)*s;
            if (isalnum(c) || c == '-' || c == '_' || c >= 0x80) slug[k++] = (char)tolower(c);
            else if (c == ' ') slug[k++] = '-';
        }
        slug[k] = '\0';
        int repeats = 0;
        for (int i = 0; i < n; i++) repeats += !strcmp(out[i], slug);
        char anchor[ITEM_CHARS];
        int w = repeats ? snprintf(anchor, sizeof anchor, "%s-%d", slug, repeats) : snprintf(anchor, sizeof anchor, "%s", slug);
        if (w < ITEM_CHARS) strcpy(out[n++], anchor);   // a longer one is too long to be linked
    }
    return n;
}

static int has_anchor(const char *md, const char *anchor) {
    static char anchors[MAX_ITEMS][ITEM_CHARS];
    int n = heading_anchors(md, anchors);
    for (int i = 0; i < n; i++)
        if (!strcmp(anchors[i], anchor)) return 1;
    return 0;
}

// dir/rel made into a path from the repository root ("a/b/../c" -> "a/c");
// returns 0 when it climbs above the root.
static int repo_path(const char *dir, const char *rel, char *out, size_t cap) {
    char joined[PATH_MAX];
    if (snprintf(joined, sizeof joined, "%s%s%s", dir, dir[0] ? "/" : "", rel) >= (int)sizeof joined) return 0;
    char *parts[256], *save;
    int n = 0;
    for (char *p = strtok_r(joined, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (!strcmp(p, ".")) continue;
        if (!strcmp(p, "..")) {
            if (n == 0) return 0;
            n--;
        } else if (n < 256) parts[n++] = p;
    }
    out[0] = '\0';
    for (int i = 0; i < n; i++) snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "/" : "", parts[i]);
    if (n == 0) snprintf(out, cap, ".");
    return 1;
}

// An indented code block: a line of 4 spaces or a tab after a blank line or
// another such line.
static int indented_code(const char *line, int prev_blank, int prev_code) {
    return (prev_blank || prev_code) && (!strncmp(line, "    ", 4) || line[0] == '\t');
}

static void check_link(const char *md_path, const char *md, const char *target, int line_no, Report *r) {
    if (!strncmp(target, "http://", 7) || !strncmp(target, "https://", 8) || !strncmp(target, "mailto:", 7)) return;
    char file[PATH_MAX], anchor[ITEM_CHARS] = "";
    const char *hash = strchr(target, '#');
    snprintf(file, sizeof file, "%.*s", (int)(hash ? hash - target : (long)strlen(target)), target);
    if (hash) snprintf(anchor, sizeof anchor, "%s", hash + 1);
    char dir[PATH_MAX], path[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", md_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else dir[0] = '\0';
    if (file[0] == '\0') snprintf(path, sizeof path, "%s", md_path);   // "#anchor": this file
    else if (file[0] == '/' || !repo_path(dir, file, path, sizeof path)) {
        report(r, "%s:%d: link \"%s\" points outside the repository", md_path, line_no, target);
        return;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        report(r, "%s:%d: link \"%s\": no such file %s", md_path, line_no, target, path);
        return;
    }
    if (!anchor[0]) return;
    const size_t plen = strlen(path);
    if (plen < 3 || strcmp(path + plen - 3, ".md") != 0) return;   // anchors are checked in Markdown only
    char *text = file[0] ? read_text(path) : NULL;
    if (!has_anchor(file[0] ? (text ? text : "") : md, anchor))
        report(r, "%s:%d: link \"%s\": %s has no heading with the anchor #%s", md_path, line_no, target, path, anchor);
    free(text);
}

// Every inline link "](target)" outside code.
static void check_links(const char *md_path, const char *md, Report *r) {
    int fenced = 0, prev_blank = 1, prev_code = 0, line_no = 0;
    for (const char *line = md; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        line_no++;
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        int blank = strspn(line, " \t") >= len;
        int code = indented_code(line, prev_blank, prev_code) && !blank;
        if (!strncmp(line, "```", 3)) fenced = !fenced;
        else if (!fenced && !code) {
            int in_span = 0;   // inside `code`
            for (size_t i = 0; i + 1 < len; i++) {
                if (line[i] == '`') in_span = !in_span;
                if (in_span || line[i] != ']' || line[i + 1] != '(') continue;
                const char *t = line + i + 2;
                size_t tlen = strcspn(t, ") \n");
                char target[PATH_MAX];
                snprintf(target, sizeof target, "%.*s", (int)tlen, t);
                check_link(md_path, md, target, line_no, r);
            }
        }
        prev_blank = blank;
        prev_code = code || (prev_code && blank);
    }
}

// ---- 5. nothing points outside the repository ----

// Written in pieces so that this file does not name them itself.
static const char *const OUTSIDE[] = {"../" "shared", "/" "work/", "/" "root/", "/" "home/"};

static void check_outside_refs(const char *path, const char *text, size_t len, Report *r) {
    if (memchr(text, '\0', len)) return;   // a binary file
    for (size_t k = 0; k < sizeof OUTSIDE / sizeof OUTSIDE[0]; k++) {
        const char *hit = strstr(text, OUTSIDE[k]);
        if (!hit) continue;
        int line_no = 1;
        for (const char *s = text; s < hit; s++) line_no += *s == '\n';
        report(r, "%s:%d: refers to \"%s...\", a path outside the repository", path, line_no, OUTSIDE[k]);
    }
}

// The committed files, one name per line.
static char *committed_files(void) { return command_output("git ls-files"); }

static int is_markdown(const char *name) {
    size_t n = strlen(name);
    return n > 3 && !strcmp(name + n - 3, ".md");
}

// ---- the checks on the repository ----

// Runs check on each command `pocket --help` lists, with its --help text.
typedef void (*CommandCheck)(const char *name, const char *help, const char *ctx, Report *r);

static void each_command(CommandCheck check, const char *ctx, Report *r) {
    static char names[MAX_ITEMS][ITEM_CHARS];
    char *top = pocket_help(NULL);
    int n = command_names(top, names);
    assert_true(n >= 10);
    for (int i = 0; i < n; i++) {
        char *help = pocket_help(names[i]);
        check(names[i], help, ctx, r);
        free(help);
    }
    free(top);
}

static void help_covers_its_source(const char *name, const char *help, const char *run_flags, Report *r) {
    char path[256];   // pocket teacher-topk: cli/cmd_teacher_topk.c
    if (snprintf(path, sizeof path, "cli/cmd_%s.c", name) >= (int)sizeof path) fail_msg("name too long");
    for (char *c = path; *c; c++)
        if (*c == '-') *c = '_';
    char *source = read_text(path);
    if (!source) report(r, "`pocket --help` lists %s, but there is no %s", name, path);
    else check_help_covers_source(name, help, source, run_flags, r);
    free(source);
}

static void test_help_lists_every_flag_the_command_accepts(void **state) {
    (void)state;
    Report r = {0};
    char *run_flags = must_read("cli/open_model.c");
    each_command(help_covers_its_source, run_flags, &r);
    free(run_flags);
    assert_clean(&r, "a command accepts an option its --help does not print");
}

static void test_every_flag_is_documented(void **state) {
    (void)state;
    Report r = {0};
    char *commands_md = must_read("docs/commands.md"), *top = pocket_help(NULL);
    check_flags_documented(NULL, top, commands_md, &r);
    each_command(check_flags_documented, commands_md, &r);
    free(top);
    free(commands_md);
    assert_clean(&r, "a flag of `pocket CMD --help` is not in docs/commands.md");
}

static void test_every_recipe_key_is_documented(void **state) {
    (void)state;
    Report r = {0};
    char *help = pocket_help("train"), *recipes_md = must_read("docs/recipes.md");
    check_keys_documented(help, recipes_md, &r);
    free(help);
    free(recipes_md);
    assert_clean(&r, "a recipe key is not in docs/recipes.md, or has another default there");
}

static void test_every_markdown_link_resolves(void **state) {
    (void)state;
    Report r = {0};
    char *files = committed_files(), *save;
    int n_md = 0;
    for (char *name = strtok_r(files, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
        if (!is_markdown(name)) continue;
        char *md = read_text(name);   // NULL: deleted in the work tree, not yet committed
        if (md) check_links(name, md, &r), n_md++;
        free(md);
    }
    free(files);
    assert_true(n_md >= 12);   // README.md, docs/, cuda/README.md, tests/ref/README.md, ...
    assert_clean(&r, "a Markdown link does not resolve");
}

static void test_nothing_points_outside_the_repository(void **state) {
    (void)state;
    Report r = {0};
    char *files = committed_files(), *save;
    for (char *name = strtok_r(files, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
        char *text = read_text(name);
        if (!text) continue;   // deleted in the work tree, not yet committed
        struct stat st;
        size_t len = stat(name, &st) == 0 ? (size_t)st.st_size : strlen(text);
        check_outside_refs(name, text, len, &r);
        free(text);
    }
    free(files);
    assert_clean(&r, "a committed file refers to a path outside the repository");
}

// ---- the negative cases: each checker fails where it must ----

static const char FAKE_HELP[] =
    "usage: pocket frob --ckpt CKPT.h5 [--brand-new]\n\n"
    "  --ckpt CKPT.h5   the checkpoint\n"
    "  --brand-new      an option added to the code and its help, not to docs/\n";
static const char FAKE_COMMANDS_MD[] =
    "# Commands\n\n## pocket frob\n\n| `--ckpt` | the checkpoint |\n| `--brand-new-ish` | another |\n\n"
    "## pocket other\n\n`--brand-new` is documented here, under another command\n";

static void test_an_undocumented_flag_fails(void **state) {
    (void)state;
    Report r = {0};
    check_flags_documented("frob", FAKE_HELP, FAKE_COMMANDS_MD, &r);
    assert_int_equal(r.problems, 1);
    assert_non_null(strstr(r.text, "prints --brand-new, which docs/commands.md does not mention in ## pocket frob"));
    Report missing = {0};   // a command without a section
    check_flags_documented("nope", FAKE_HELP, FAKE_COMMANDS_MD, &missing);
    assert_int_equal(missing.problems, 1);
    assert_non_null(strstr(missing.text, "no section \"## pocket nope\""));
    Report ok = {0};        // documented once it is in its own section
    check_flags_documented("other", "  --brand-new   x\n", FAKE_COMMANDS_MD, &ok);
    assert_int_equal(ok.problems, 0);
}

static void test_a_help_missing_an_accepted_flag_fails(void **state) {
    (void)state;
    const char *source = "else if ((v = arg_value(argc, argv, &i, \"--ckpt\"))) ckpt = v;\n"
                         "else if (!strcmp(argv[i], \"--secret\")) secret = 1;\n"
                         "fprintf(stderr, \"--ckpt is required\");\n"
                         "else if ((flag = run_flag(argc, argv, &i, &oo))) {}\n";
    const char *run_flags = "if ((v = arg_value(argc, argv, i, \"--device\"))) {";
    Report r = {0};
    check_help_covers_source("frob", FAKE_HELP, source, run_flags, &r);
    assert_int_equal(r.problems, 2);
    assert_non_null(strstr(r.text, "pocket frob accepts --secret"));
    assert_non_null(strstr(r.text, "pocket frob accepts --device"));
}

static const char FAKE_TRAIN_HELP[] =
    "usage: pocket train RECIPE.ini\n\nRecipe keys:\n"
    "  [train]\n"
    "    steps           0           optimizer updates; range [0, 1e12]\n"
    "    brand_new_key   7           a key added to the table, not to docs/\n"
    "    seed            1234        the seed\n\n"
    "  [model]\n"
    "    init            (required)  checkpoint\n\n"
    "  [newsec]\n"
    "    k1              0           a section added to the table, not to docs/\n";
static const char FAKE_RECIPES_MD[] =
    "# Recipes\n\n## [train]\n\n| key | default | what |\n| --- | --- | --- |\n"
    "| `steps` | `0` | updates |\n| `seed` | `42` | a default that drifted |\n\n"
    "## [model]\n\n| `init` | required | checkpoint |\n\n## [optim]\n\n| `brand_new_key` | `7` | another section |\n";

static void test_an_undocumented_recipe_key_fails(void **state) {
    (void)state;
    Report r = {0};
    check_keys_documented(FAKE_TRAIN_HELP, FAKE_RECIPES_MD, &r);
    assert_int_equal(r.problems, 3);
    assert_non_null(strstr(r.text, "docs/recipes.md has no section \"## [newsec]\"\n"));
    assert_non_null(strstr(r.text, "recipe key [train] brand_new_key is not in docs/recipes.md's table under \"## [train]\""));
    assert_non_null(strstr(r.text, "recipe key [train] seed: docs/recipes.md says the default is '42', the code '1234'"));
}

static void test_broken_links_fail(void **state) {
    (void)state;
    const char *md = "# Title\n\n## A section: with `code`, punctuation\n\n"
                     "[ok](docs/commands.md#pocket-eval) [here](#a-section-with-code-punctuation)\n"
                     "[gone](docs/no-such-page.md) [bad anchor](docs/commands.md#no-such-heading)\n"
                     "[up](../outside.md) [abs](/etc/passwd) [web](https://example.org/x)\n"
                     "`[not a link](nowhere.md)`\n\n    [code](nowhere.md)\n\n```\n[fenced](nowhere.md)\n```\n";
    Report r = {0};
    check_links("README.md", md, &r);
    assert_int_equal(r.problems, 4);
    assert_non_null(strstr(r.text, "README.md:6: link \"docs/no-such-page.md\": no such file"));
    assert_non_null(strstr(r.text, "docs/commands.md has no heading with the anchor #no-such-heading"));
    assert_non_null(strstr(r.text, "README.md:7: link \"../outside.md\" points outside the repository"));
    assert_non_null(strstr(r.text, "link \"/etc/passwd\" points outside the repository"));
    Report nested = {0};   // relative to the page's folder: docs/ links up to the root and no further
    check_links("docs/x.md", "[root](../README.md) [too far](../../README.md)\n", &nested);
    assert_int_equal(nested.problems, 1);
    assert_non_null(strstr(nested.text, "\"../../README.md\" points outside"));
}

static void test_a_reference_outside_the_repository_fails(void **state) {
    (void)state;
    char text[256];
    snprintf(text, sizeof text, "a line\nsee %s/notes.md for the plan\n", OUTSIDE[0]);
    Report r = {0};
    check_outside_refs("notes.txt", text, strlen(text), &r);
    assert_int_equal(r.problems, 1);
    assert_non_null(strstr(r.text, "notes.txt:2: refers to"));
    Report ok = {0};
    const char *fine = "#include \"../../util/util.h\"\n/tmp/pocket-prefix\n";
    check_outside_refs("x.c", fine, strlen(fine), &ok);
    assert_int_equal(ok.problems, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_undocumented_flag_fails),
        cmocka_unit_test(test_a_help_missing_an_accepted_flag_fails),
        cmocka_unit_test(test_an_undocumented_recipe_key_fails),
        cmocka_unit_test(test_broken_links_fail),
        cmocka_unit_test(test_a_reference_outside_the_repository_fails),
        cmocka_unit_test(test_help_lists_every_flag_the_command_accepts),
        cmocka_unit_test(test_every_flag_is_documented),
        cmocka_unit_test(test_every_recipe_key_is_documented),
        cmocka_unit_test(test_every_markdown_link_resolves),
        cmocka_unit_test(test_nothing_points_outside_the_repository),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
