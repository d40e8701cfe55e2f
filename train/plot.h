// plot.h: the loss curves of a run as a small standalone SVG.
#pragma once
#include "../util/util.h"

typedef struct {
    double *x, *y;
    int n, cap;
} Series;

void series_add(Series *s, double x, double y);
void series_truncate_after(Series *s, double x_max);   // drops points with x > x_max
void series_free(Series *s);
enum { PLOT_MAX_VAL = 8 };
// Panels stacked top to bottom, each a figure against step with its own
// y-axis: its training series (a line) and one or more validation series
// (lines with dots, one per validation set, each in its own colour), any of
// them possibly empty. Written atomically.
typedef struct {
    const char *name;                     // "loss", "rewards/accuracies", ...
    const Series *train;
    const Series *val[PLOT_MAX_VAL];      // n_val validation series
    const char *val_name[PLOT_MAX_VAL];   // each one's label; NULL: "validation"
    int n_val;
} PlotPanel;
int plot_svg(const char *path, const char *title, const PlotPanel *panels, int n, PtError *e);
// One panel: train (line) and validation (line with dots) loss against step.
int plot_loss_svg(const char *path, const char *title, const Series *train, const Series *val, PtError *e);
