// run_dir.h: a training run's directory: ckpt-<step>.h5 (each complete,
// written to a temporary name and renamed; the newest is where the run
// resumes), best.h5, metrics.jsonl (one JSON object per step or evaluation),
// loss.svg, samples.txt and the resolved recipe.ini.
#pragma once
#include <jansson.h>
#include "plot.h"

// Creates the directory (and its parents) and removes the leftovers of
// writes that were killed (PATH.tmp.PID).
int run_dir_create(const char *dir, PtError *e);
// The outermost directory of dir's path that does not exist yet (dir itself
// or a parent; malloc'd), NULL when dir exists.
char *run_dir_first_missing(const char *dir);
// Deletes a directory tree this process created (a run that failed before
// its first checkpoint).
void run_dir_remove_tree(const char *top);
// The step of the newest ckpt-<step>.h5, -1 when there is none.
long run_dir_newest_checkpoint(const char *dir);
char *run_dir_checkpoint_path(const char *dir, long step);   // malloc'd
// Deletes all but the `keep` newest ckpt-*.h5 (best.h5 is not one of them).
void run_dir_keep_newest(const char *dir, int keep);
// A JSON-lines file of the run (dir/name) on resume: drops the lines whose
// "step" is past `step` (those steps run again), calling each (may be NULL)
// with every line kept. No file: nothing to do.
int run_dir_keep_steps(const char *dir, const char *name, long step, void (*each)(void *ctx, json_t *line, long s),
                       void *ctx, PtError *e);
// metrics.jsonl on resume: drops the lines past `step` (those steps run
// again) and rebuilds the curves from the rest: series[k] gets every value
// of keys[k] with its step.
int run_dir_reload_metrics(const char *dir, long step, const char *const *keys, Series *series, int n, PtError *e);
// Appends one line and takes the reference to j.
void run_dir_append_metrics(const char *dir, json_t *j);
