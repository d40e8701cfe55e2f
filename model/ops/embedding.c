// embedding.c: token embedding lookup out[N,C] = E[tokens[n], :] and its
// scatter-add backward. Token ids are trusted to lie in [0, V): the data
// loader checks them against the vocabulary before they reach the model.
#include <string.h>
#include "ops.h"

void embedding_forward(Device *d, float *out, const int *tokens, const float *E, int N, int C) {
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, E + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

// Repeated tokens scatter into the same row of dE, so threads split the
// columns instead of the rows: every thread walks all tokens but owns a
// disjoint column range, which makes the result race-free and deterministic.
void embedding_backward(Device *d, float *dE, const float *dout, const int *tokens, int N, int C, int skip_id) {
    enum { COLS = 64 };
    int n_blocks = (C + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) num_threads(d->threads)
    for (int blk = 0; blk < n_blocks; blk++) {
        int c0 = blk * COLS, c1 = c0 + COLS < C ? c0 + COLS : C;
        for (int n = 0; n < N; n++) {
            if (tokens[n] == skip_id) continue;
            float *row = dE + (size_t)tokens[n] * C;
            const float *g = dout + (size_t)n * C;
            #pragma omp simd
            for (int c = c0; c < c1; c++) row[c] += g[c];
        }
    }
}

void embedding_forward_ref(double *out, const int *tokens, const double *E, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = E[(size_t)tokens[n] * C + c];
}

void embedding_backward_ref(double *dE, const double *dout, const int *tokens, int N, int C, int skip_id) {
    for (int n = 0; n < N; n++) {
        if (tokens[n] == skip_id) continue;
        for (int c = 0; c < C; c++) dE[(size_t)tokens[n] * C + c] += dout[(size_t)n * C + c];
    }
}
