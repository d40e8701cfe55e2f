// run_dir.c: the files of a training run (run_dir.h).
#include "run_dir.h"
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static long ckpt_step(const char *name) {
    long step;
    int used = 0;
    if (sscanf(name, "ckpt-%ld.h5%n", &step, &used) == 1 && name[used] == 0) return step;
    return -1;
}

static int newest_first(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

// The steps of the checkpoints in dir, newest first (the first `cap` found).
static int checkpoint_steps(const char *dir, long *steps, int cap) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent *ent;
    while ((ent = readdir(d)) && n < cap) {
        long s = ckpt_step(ent->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, newest_first);
    return n;
}

enum { MAX_CHECKPOINTS = 4096 };

char *run_dir_first_missing(const char *dir) {
    if (path_exists(dir)) return NULL;
    char *p = xstrdup(dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (!path_exists(p)) return p;
            *s = '/';
        }
    return p;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void run_dir_remove_tree(const char *top) { nftw(top, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

int run_dir_create(const char *dir, PtError *e) {
    char *p = xstrdup(dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    int ok = (mkdir(p, 0755) == 0 || errno == EEXIST) && path_is_dir(p);
    free(p);
    if (!ok) return pt_fail(e, "%s: cannot create the run directory", dir);
    DIR *d = opendir(dir);
    struct dirent *ent;
    while (d && (ent = readdir(d)))
        if (strstr(ent->d_name, ".tmp.")) {
            char *tmp = path_join(dir, ent->d_name);
            unlink(tmp);
            free(tmp);
        }
    if (d) closedir(d);
    return 0;
}

long run_dir_newest_checkpoint(const char *dir) {
    long steps[MAX_CHECKPOINTS];
    return checkpoint_steps(dir, steps, MAX_CHECKPOINTS) ? steps[0] : -1;
}

char *run_dir_checkpoint_path(const char *dir, long step) {
    char name[64];
    snprintf(name, sizeof name, "ckpt-%08ld.h5", step);
    return path_join(dir, name);
}

void run_dir_keep_newest(const char *dir, int keep) {
    long steps[MAX_CHECKPOINTS];
    int n = checkpoint_steps(dir, steps, MAX_CHECKPOINTS);
    for (int i = keep; i < n; i++) {
        char *old = run_dir_checkpoint_path(dir, steps[i]);
        unlink(old);
        free(old);
    }
}

int run_dir_keep_steps(const char *dir, const char *name, long step, void (*each)(void *ctx, json_t *line, long s),
                       void *ctx, PtError *e) {
    char *path = path_join(dir, name);
    FILE *f = fopen(path, "r");
    int rc = 0;
    if (f) {
        AtomicFile af;
        if ((rc = atomic_open(&af, path, e)) == 0) {
            char *line = NULL;
            size_t cap = 0;
            while (getline(&line, &cap, f) > 0) {
                json_t *j = json_loads(line, 0, NULL);
                if (!j) continue;
                long s = (long)json_integer_value(json_object_get(j, "step"));
                if (s <= step) {
                    fputs(line, af.f);
                    if (each) each(ctx, j, s);
                }
                json_decref(j);
            }
            free(line);
            rc = atomic_commit(&af, e);
        }
        fclose(f);
    }
    free(path);
    return rc;
}

typedef struct {
    const char *const *keys;
    Series *series;
    int n;
} Curves;

static void add_to_curves(void *ctx, json_t *j, long s) {
    const Curves *c = ctx;
    for (int k = 0; k < c->n; k++) {
        json_t *v = json_object_get(j, c->keys[k]);
        if (json_is_number(v)) series_add(&c->series[k], s, json_number_value(v));
    }
}

int run_dir_reload_metrics(const char *dir, long step, const char *const *keys, Series *series, int n, PtError *e) {
    Curves c = {keys, series, n};
    return run_dir_keep_steps(dir, "metrics.jsonl", step, add_to_curves, &c, e);
}

void run_dir_append_metrics(const char *dir, json_t *j) {
    char *path = path_join(dir, "metrics.jsonl");
    FILE *f = fopen(path, "a");
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (f && s) {
        fprintf(f, "%s\n", s);
        fflush(f);
    }
    if (f) fclose(f);
    free(s);
    free(path);
    json_decref(j);
}
