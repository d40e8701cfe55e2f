#include "out_dir.h"
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *ent;
    int empty = 1;
    while (empty && (ent = readdir(d)) != NULL)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0) empty = 0;
    closedir(d);
    return empty;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

// Deletes a directory tree without following symlinks.
static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void out_dir_free(OutDir *d) {
    free(d->dir);
    free(d->tmp);
    memset(d, 0, sizeof *d);
}

// dir without trailing slashes: "out/" and "out" name the same directory (malloc'd).
static char *dir_name(const char *dir_arg) {
    char *dir = xstrdup(dir_arg);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = 0;
    return dir;
}

// out_dir_begin's refusals for dir (trailing slashes removed).
static int check(const char *dir, int force, PtError *e) {
    if (!path_exists(dir)) return 0;
    if (!path_is_dir(dir)) return pt_fail(e, "%s: exists and is not a directory", dir);
    if (!dir_is_empty(dir) && !force)
        return pt_fail(e, "%s: directory exists and is not empty (use --force to replace it)", dir);
    return 0;
}

int out_dir_check(const char *dir_arg, int force, PtError *e) {
    char *dir = dir_name(dir_arg);
    int rc = check(dir, force, e);
    free(dir);
    return rc;
}

int out_dir_begin(OutDir *d, const char *dir_arg, int force, PtError *e) {
    memset(d, 0, sizeof *d);
    d->dir = dir_name(dir_arg);   // the temporary sits beside it
    if (check(d->dir, force, e)) {
        out_dir_free(d);
        return -1;
    }
    d->replace = path_exists(d->dir) && !dir_is_empty(d->dir);
    d->tmp = temp_path_for(d->dir);
    remove_tree(d->tmp);   // a leftover of an earlier run with the same pid
    if (mkdir(d->tmp, 0755) != 0) {
        pt_fail(e, "%s: cannot create the temporary directory %s: %s", d->dir, d->tmp, strerror(errno));
        out_dir_free(d);
        return -1;
    }
    return 0;
}

char *out_dir_path(const OutDir *d, const char *name) { return path_join(d->tmp, name); }

int out_dir_write(const OutDir *d, const char *name, const void *data, size_t len, PtError *e) {
    char *path = path_join(d->tmp, name);
    AtomicFile af;
    int rc = atomic_open(&af, path, e);
    if (rc == 0) {
        if (len && fwrite(data, 1, len, af.f) != len) {
            atomic_abort(&af);
            rc = pt_fail(e, "%s: write failed: %s", path, strerror(errno));
        } else {
            rc = atomic_commit(&af, e);
        }
    }
    free(path);
    return rc;
}

int out_dir_commit(OutDir *d, PtError *e) {
    int rc = 0;
    if (!d->replace) {
        if (rename(d->tmp, d->dir) != 0)
            rc = pt_fail(e, "%s: cannot rename %s into place: %s", d->dir, d->tmp, strerror(errno));
    } else {
        size_t n = strlen(d->dir) + 32;
        char *old = xmalloc(n, "path");
        snprintf(old, n, "%s.old.%ld", d->dir, (long)getpid());
        if (rename(d->dir, old) != 0) {
            rc = pt_fail(e, "%s: cannot move the old directory aside: %s", d->dir, strerror(errno));
        } else if (rename(d->tmp, d->dir) != 0) {
            rc = pt_fail(e, "%s: cannot rename %s into place: %s", d->dir, d->tmp, strerror(errno));
            rename(old, d->dir);   // put the old one back
        } else {
            remove_tree(old);
        }
        free(old);
    }
    if (rc) remove_tree(d->tmp);
    out_dir_free(d);
    return rc;
}

void out_dir_abort(OutDir *d) {
    if (d->tmp) remove_tree(d->tmp);
    out_dir_free(d);
}
