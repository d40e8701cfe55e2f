// classifier.c: lm head plus cross-entropy, chunked over token rows so that
// at most chunk x V logits exist at a time. Loss per counted position is
// logsumexp(z) - z[target], as torch's cross_entropy; the caller divides the returned sum.
#include <math.h>
#include <string.h>
#include "../../util/util.h"
#include "fast_exp.h"
#include "ops.h"

static inline int is_counted(const int *targets, const uint8_t *mask, int n) {
    return targets && targets[n] >= 0 && (!mask || mask[n] != 0);
}

// The largest of z[V], in 16 lanes: elementwise selects that gcc and clang
// both vectorise (clang does not vectorise a compare-select max reduction,
// and fmaxf's reduction crashes Debian's aarch64 gcc 12).
static float row_max(const float *z, int V) {
    float lane[16];
    for (int l = 0; l < 16; l++) lane[l] = -INFINITY;
    int i = 0;
    for (; i + 16 <= V; i += 16)
        for (int l = 0; l < 16; l++) lane[l] = z[i + l] > lane[l] ? z[i + l] : lane[l];
    for (; i < V; i++) lane[0] = z[i] > lane[0] ? z[i] : lane[0];
    float m = lane[0];
    for (int l = 1; l < 16; l++) m = lane[l] > m ? lane[l] : m;
    return m;
}

// The sum of exp(z - max) over one row of logits z[V], max its largest: on
// fast_exp.h's vectorised blocks (expf one logit at a time was a tenth of the
// classifier's time), each block summed in float, the blocks in double. With
// keep, z is overwritten by exp(z - max), which the gradient scales.
static double row_exp_sum(float *z, int V, float z_max, int keep) {
    double sum = 0.0;
    for (int i0 = 0; i0 < V; i0 += EXP_CHUNK) {
        const int m = V - i0 < EXP_CHUNK ? V - i0 : EXP_CHUNK;
        float tmp[EXP_CHUNK];
        float *e = keep ? z + i0 : tmp;
        #pragma omp simd
        for (int i = 0; i < m; i++) e[i] = z[i0 + i] - z_max;
        exp_block(e, e, m);
        float block = 0.0f;
        #pragma omp simd reduction(+:block)
        for (int i = 0; i < m; i++) block += e[i];
        sum += block;
    }
    return sum;
}

// A row whose z holds exp(z - max) (row_exp_sum with keep) becomes
// scale * (softmax(z) - onehot(target)).
static void row_grad(float *z, int target, int V, double sum, float scale) {
    const float p_scale = (float)(scale / sum);
    #pragma omp simd
    for (int i = 0; i < V; i++) z[i] *= p_scale;
    z[target] -= scale;
}

// One row of logits z[V]: returns -log p(target), *sum its exp sum (keep: as
// row_exp_sum's, z left holding exp(z - max) for row_grad).
static double row_nll(float *z, int target, int V, int keep, double *sum) {
    const float z_max = row_max(z, V), z_target = z[target];
    *sum = row_exp_sum(z, V, z_max, keep);
    return (double)z_max + log(*sum) - (double)z_target;
}

// One row of logits z[V]: returns -log p(target). If make_grad, z is
// overwritten by scale * (softmax(z) - onehot(target)).
static double row_loss(float *z, int target, int V, float scale, int make_grad) {
    double sum;
    const double loss = row_nll(z, target, V, make_grad, &sum);
    if (make_grad) row_grad(z, target, V, sum, scale);
    return loss;
}

// Also what classifier_distill (distill.c) takes: the same logits as two
// halves (student and teacher, at least one row each) and 3 doubles a row.
size_t classifier_workspace_bytes(const Device *d, int N, int V) {
    int rows = N < cpu_kernels(d)->classifier_rows ? N : cpu_kernels(d)->classifier_rows;
    rows = rows < 2 ? 2 : rows;
    return (size_t)rows * V * sizeof(float) + (size_t)rows * 3 * sizeof(double) + 192 + matmul_workspace_bytes(d);
}

double classifier(Device *d, float *dh, float *dW, float *logits_out, const float *h, const float *W,
                  const int *targets, const uint8_t *mask, int N, int C, int V, float scale, int *count,
                  MatmulPrecision p) {
    for (int n = 0; targets && n < N; n++)
        if (targets[n] >= V) die("classifier: target %d at row %d is outside the vocabulary of %d", targets[n], n, V);
    // Each chunk streams the whole W (and, for bf16, converts it twice), so
    // fewer, larger chunks are faster: 256 rows of 65536 are 64 MiB.
    const int chunk = N < cpu_kernels(d)->classifier_rows ? N : cpu_kernels(d)->classifier_rows;
    const size_t mark = dev_scratch_mark(d);
    float *scratch = dev_scratch(d, (size_t)chunk * V * sizeof(float), "classifier logits");
    double *row_losses = dev_scratch(d, (size_t)chunk * sizeof(double), "classifier row losses");
    const int make_grad = dh != NULL || dW != NULL;
    double loss_sum = 0.0;
    int counted = 0;
    int n0 = 0;
    while (n0 < N) {
        // Without logits_out, rows nobody counts need no logits at all: start
        // each chunk at a counted row and trim uncounted rows off its end
        // (prompt-masked chat data skips its prompts this way).
        if (!logits_out) {
            while (n0 < N && !is_counted(targets, mask, n0)) n0++;
            if (n0 == N) break;
        }
        int n1 = n0 + chunk < N ? n0 + chunk : N;
        if (!logits_out)
            while (n1 - 1 > n0 && !is_counted(targets, mask, n1 - 1)) n1--;
        const int rows = n1 - n0;
        const float *h_chunk = h + (size_t)n0 * C;
        matmul_forward(d, scratch, h_chunk, W, rows, C, V, p);
        if (logits_out) memcpy(logits_out + (size_t)n0 * V, scratch, (size_t)rows * V * sizeof(float));

        // Each row's loss kept, then summed in row order: the sum does not
        // depend on the thread count (an OpenMP reduction's order does).
        #pragma omp parallel for schedule(static) num_threads(d->threads)
        for (int r = 0; r < rows; r++) {
            float *z = scratch + (size_t)r * V;
            row_losses[r] = 0.0;
            if (!is_counted(targets, mask, n0 + r)) {
                if (make_grad) memset(z, 0, (size_t)V * sizeof(float));
                continue;
            }
            row_losses[r] = row_loss(z, targets[n0 + r], V, scale, make_grad);
        }
        int chunk_count = 0;
        for (int r = 0; r < rows; r++)
            if (is_counted(targets, mask, n0 + r)) {
                loss_sum += row_losses[r];
                chunk_count++;
            }
        counted += chunk_count;
        if (make_grad && chunk_count > 0)
            matmul_backward(d, dh ? dh + (size_t)n0 * C : NULL, dW, scratch, h_chunk, W, rows, C, V, p);
        n0 = n1;
    }
    dev_scratch_release(d, mark);
    if (count) *count = counted;
    return loss_sum;
}

double classifier_ref(double *dh, double *dW, const double *h, const double *W, const int *targets,
                      const uint8_t *mask, int N, int C, int V, double scale) {
    double *z = xmalloc((size_t)V * sizeof(double), "classifier_ref logits");
    double loss = 0.0;
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0 || (mask && !mask[n])) continue;
        const double *hn = h + (size_t)n * C;
        double z_max = -INFINITY;
        for (int i = 0; i < V; i++) {
            double acc = 0.0;
            for (int c = 0; c < C; c++) acc += hn[c] * W[(size_t)i * C + c];
            z[i] = acc;
            if (acc > z_max) z_max = acc;
        }
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += exp(z[i] - z_max);
        double lse = z_max + log(sum);
        loss += lse - z[targets[n]];
        for (int i = 0; i < V; i++) {
            double g = scale * (exp(z[i] - lse) - (i == targets[n] ? 1.0 : 0.0));
            for (int c = 0; c < C; c++) {
                if (dh) dh[(size_t)n * C + c] += g * W[(size_t)i * C + c];
                if (dW) dW[(size_t)i * C + c] += g * hn[c];
            }
        }
    }
    free(z);
    return loss;
}

// As the classifier, with each row's scale chosen from the rows' losses: per
// chunk, the logits, each counted row's loss (exp(z - max) kept), the
// caller's scales, then the gradient rows and the two matmuls.
void classifier_scaled(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                       const uint8_t *mask, int N, int C, int V, RowScaleFn scale_of, void *ctx, MatmulPrecision p) {
    for (int n = 0; n < N; n++)
        if (targets[n] >= V) die("classifier: target %d at row %d is outside the vocabulary of %d", targets[n], n, V);
    const int chunk = N < cpu_kernels(d)->classifier_rows ? N : cpu_kernels(d)->classifier_rows;
    const size_t mark = dev_scratch_mark(d);
    float *scratch = dev_scratch(d, (size_t)chunk * V * sizeof(float), "classifier logits");
    double *losses = dev_scratch(d, (size_t)chunk * 2 * sizeof(double), "classifier row losses");
    double *sums = losses + chunk;
    float *scales = dev_scratch(d, (size_t)chunk * sizeof(float), "classifier row scales");
    const int make_grad = dh != NULL || dW != NULL;
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int rows = N - n0 < chunk ? N - n0 : chunk;
        int counted = 0;
        for (int r = 0; r < rows; r++) counted += is_counted(targets, mask, n0 + r);
        if (!counted) continue;
        const float *h_chunk = h + (size_t)n0 * C;
        matmul_forward(d, scratch, h_chunk, W, rows, C, V, p);
        #pragma omp parallel for schedule(static) num_threads(d->threads)
        for (int r = 0; r < rows; r++) {
            float *z = scratch + (size_t)r * V;
            losses[r] = 0.0, sums[r] = 1.0;
            if (!is_counted(targets, mask, n0 + r)) continue;
            losses[r] = row_nll(z, targets[n0 + r], V, make_grad, &sums[r]);
        }
        for (int r = 0; r < rows; r++) scales[r] = 0.0f;
        scale_of(ctx, n0, rows, losses, scales);
        if (!make_grad) continue;
        #pragma omp parallel for schedule(static) num_threads(d->threads)
        for (int r = 0; r < rows; r++) {
            float *z = scratch + (size_t)r * V;
            if (!is_counted(targets, mask, n0 + r) || scales[r] == 0.0f)
                memset(z, 0, (size_t)V * sizeof(float));
            else
                row_grad(z, targets[n0 + r], V, sums[r], scales[r]);
        }
        matmul_backward(d, dh ? dh + (size_t)n0 * C : NULL, dW, scratch, h_chunk, W, rows, C, V, p);
    }
    dev_scratch_release(d, mark);
}
