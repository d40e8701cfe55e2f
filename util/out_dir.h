// out_dir.h: an output directory written whole or not at all. Files go into
// DIR.tmp.PID beside it; commit swaps it into place (replacing an old DIR only
// when asked), abort deletes it. Shared by the directory exporters (hf, mnn).
#pragma once
#include <stddef.h>
#include "util.h"

typedef struct {
    char *dir;     // the final path, without trailing slashes
    char *tmp;     // where the files are written meanwhile
    int replace;   // dir exists and is not empty: it is replaced on commit
} OutDir;

// Fails when dir exists and is not a directory, or is non-empty and !force.
int out_dir_begin(OutDir *d, const char *dir, int force, PtError *e);
// Those checks alone, before the work that fills the directory.
int out_dir_check(const char *dir, int force, PtError *e);
// A text or binary file `name` inside the temporary directory, atomically.
int out_dir_write(const OutDir *d, const char *name, const void *data, size_t len, PtError *e);
// Path of `name` inside the temporary directory (malloc'd).
char *out_dir_path(const OutDir *d, const char *name);
int out_dir_commit(OutDir *d, PtError *e);   // frees d
void out_dir_abort(OutDir *d);               // deletes the temporary directory, frees d
