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
// Train (line) and validation (line with dots) loss against step; written atomically.
int plot_loss_svg(const char *path, const char *title, const Series *train, const Series *val, PtError *e);
