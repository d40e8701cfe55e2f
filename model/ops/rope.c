// rope.c: rotary position embedding, rotate-half pairing (i, i + hd/2), in
// place on rows of n_heads * head_dim values (transformers' apply_rotary_pos_emb).
//
// The table (rope_table_init, backend.c) holds the angles as transformers
// computes them, in float.
#include <math.h>
#include "../../util/util.h"
#include "ops.h"

static void check_positions(const RopeTable *rt, const int *pos, int N, int head_dim) {
    if (head_dim != 2 * rt->half)
        die("rope: head_dim %d does not match the table's %d", head_dim, 2 * rt->half);
    for (int n = 0; n < N; n++)
        if (pos[n] < 0 || pos[n] >= rt->max_pos)
            die("rope: position %d of row %d is outside the table [0, %d)", pos[n], n, rt->max_pos);
}

// direction +1 rotates by +angle (forward), -1 by -angle (the transpose, for
// the backward): y0 = x0 c - x1 s, y1 = x1 c + x0 s with s negated for -1.
static void rope_rotate(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim,
                        float direction) {
    check_positions(rt, pos, N, head_dim);
    int half = rt->half;
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int n = 0; n < N; n++) {
        const float *c = rt->cos + (size_t)pos[n] * half;
        const float *s = rt->sin + (size_t)pos[n] * half;
        for (int h = 0; h < n_heads; h++) {
            float *x0 = x + ((size_t)n * n_heads + h) * head_dim, *x1 = x0 + half;
            #pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = x0[i], b = x1[i], si = direction * s[i];
                x0[i] = a * c[i] - b * si;
                x1[i] = b * c[i] + a * si;
            }
        }
    }
}

void rope_forward(Device *d, float *x, const RopeTable *rt, const int *pos, int N, int n_heads, int head_dim) {
    rope_rotate(d, x, rt, pos, N, n_heads, head_dim, 1.0f);
}

void rope_backward(Device *d, float *dx, const RopeTable *rt, const int *pos, int N, int n_heads,
                   int head_dim) {
    rope_rotate(d, dx, rt, pos, N, n_heads, head_dim, -1.0f);
}

static void rope_rotate_ref(double *x, const int *pos, int N, int n_heads, int head_dim, double theta,
                            double direction) {
    int half = head_dim / 2;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < n_heads; h++) {
            double *x0 = x + ((size_t)n * n_heads + h) * head_dim, *x1 = x0 + half;
            for (int i = 0; i < half; i++) {
                double angle = pos[n] / pow(theta, 2.0 * i / head_dim);
                double c = cos(angle), s = direction * sin(angle);
                double a = x0[i], b = x1[i];
                x0[i] = a * c - b * s;
                x1[i] = b * c + a * s;
            }
        }
}

void rope_forward_ref(double *x, const int *pos, int N, int n_heads, int head_dim, double theta) {
    rope_rotate_ref(x, pos, N, n_heads, head_dim, theta, 1.0);
}

void rope_backward_ref(double *dx, const int *pos, int N, int n_heads, int head_dim, double theta) {
    rope_rotate_ref(dx, pos, N, n_heads, head_dim, theta, -1.0);
}
