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

int out_dir_begin(OutDir *d, const char *dir_arg, int force, PtError *e) {
    memset(d, 0, sizeof *d);
    // "out/" and "out" name the same directory; the temporary sits beside it.
    d->dir = xstrdup(dir_arg);
    for (size_t n = strlen(d->dir); n > 1 && d->dir[n - 1] == '/'; n--) d->dir[n - 1] = 0;
    if (path_exists(d->dir)) {
        if (!path_is_dir(d->dir)) {
            pt_fail(e, "%s: exists and is not a directory", d->dir);
            out_dir_free(d);
            return -1;
        }
        if (!dir_is_empty(d->dir) && !force) {
            pt_fail(e, "%s: directory exists and is not empty (use --force to replace it)", d->dir);
            out_dir_free(d);
            return -1;
        }
        d->replace = !dir_is_empty(d->dir);
    }
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
