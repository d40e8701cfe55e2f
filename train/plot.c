#include "plot.h"
#include <math.h>
#include <string.h>

void series_add(Series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = realloc(s->x, s->cap * sizeof(double));
        s->y = realloc(s->y, s->cap * sizeof(double));
        if (!s->x || !s->y) die("out of memory growing a plot series");
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

void series_truncate_after(Series *s, double x_max) {
    int k = 0;
    for (int i = 0; i < s->n; i++)
        if (s->x[i] <= x_max) {
            s->x[k] = s->x[i];
            s->y[k] = s->y[i];
            k++;
        }
    s->n = k;
}

void series_free(Series *s) {
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

#define W 720
#define PANEL_H 380   // a panel's height: the plot area and its axis labels
#define LEFT 70
#define RIGHT 20
#define TOP 40
#define BOTTOM 50

// A panel's value range and where its plot area lies (top .. top + PANEL_H - TOP - BOTTOM).
typedef struct { double x0, x1, y0, y1, top; } Box;

static double px(const Box *b, double x) { return LEFT + (x - b->x0) / (b->x1 - b->x0) * (W - LEFT - RIGHT); }
static double py(const Box *b, double y) {
    return b->top + (PANEL_H - TOP - BOTTOM) - (y - b->y0) / (b->y1 - b->y0) * (PANEL_H - TOP - BOTTOM);
}

static void extend(Box *b, const Series *s) {
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i])) continue;
        b->x0 = fmin(b->x0, s->x[i]);
        b->x1 = fmax(b->x1, s->x[i]);
        b->y0 = fmin(b->y0, s->y[i]);
        b->y1 = fmax(b->y1, s->y[i]);
    }
}

static void polyline(FILE *f, const Box *b, const Series *s, const char *color, int dots) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->y[i])) fprintf(f, "%.1f,%.1f ", px(b, s->x[i]), py(b, s->y[i]));
    fprintf(f, "\"/>\n");
    for (int i = 0; dots && i < s->n; i++)
        if (isfinite(s->y[i]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(b, s->x[i]), py(b, s->y[i]), color);
}

// One panel whose title line is at y = top - 18 and plot area starts at top.
static void panel(FILE *f, const PlotPanel *p, double top) {
    Box b = {INFINITY, -INFINITY, INFINITY, -INFINITY, top};
    extend(&b, p->train);
    for (int k = 0; k < p->n_val; k++) extend(&b, p->val[k]);
    if (!isfinite(b.x0)) b = (Box){0, 1, 0, 1, top};
    if (b.x1 <= b.x0) b.x1 = b.x0 + 1;
    if (b.y1 <= b.y0) b.y1 = b.y0 + 1;
    double pad = 0.05 * (b.y1 - b.y0);
    b.y0 -= pad;
    b.y1 += pad;
    const double bottom = top + PANEL_H - TOP - BOTTOM;
    for (int i = 0; i <= 5; i++) {   // grid with labelled ticks
        double yv = b.y0 + (b.y1 - b.y0) * i / 5, xv = b.x0 + (b.x1 - b.x0) * i / 5;
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, W - RIGHT, py(&b, yv), py(&b, yv));
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", LEFT - 6, py(&b, yv) + 4, yv);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px(&b, xv), bottom + 18, xv);
    }
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", (W + LEFT) / 2, bottom + 38);
    // The training curve blue, the validation sets' in the colours after it;
    // the labels share the title line.
    static const char *const colour[1 + PLOT_MAX_VAL] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
    polyline(f, &b, p->train, colour[0], 0);
    for (int k = 0; k < p->n_val; k++) polyline(f, &b, p->val[k], colour[1 + k], 1);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"%s\">train %s</text>\n", LEFT, top - 8, colour[0], p->name);
    const double slot = (double)(W - RIGHT - W / 2) / (p->n_val ? p->n_val : 1);
    for (int k = 0; k < p->n_val; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s %s</text>\n", W / 2 + k * slot, top - 8,
                colour[1 + k], p->val_name[k] ? p->val_name[k] : "validation", p->name);
}

int plot_svg(const char *path, const char *title, const PlotPanel *panels, int n, PtError *e) {
    AtomicFile af;
    if (atomic_open(&af, path, e)) return -1;
    FILE *f = af.f;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, 40 + n * PANEL_H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\">%s</text>\n", LEFT, title);
    for (int i = 0; i < n; i++) panel(f, &panels[i], 40 + TOP + (double)i * PANEL_H);
    fprintf(f, "</svg>\n");
    return atomic_commit(&af, e);
}

int plot_loss_svg(const char *path, const char *title, const Series *train, const Series *val, PtError *e) {
    const PlotPanel loss = {"loss", train, {val}, {NULL}, 1};
    return plot_svg(path, title, &loss, 1, e);
}
