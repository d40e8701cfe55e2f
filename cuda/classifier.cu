// classifier.cu: lm head + cross-entropy (classifier.c), over chunks of at
// most CLS_ROWS token rows so that at most CLS_ROWS x V logits exist at once:
//   1. logits = h W^T for the chunk (the matmul op, in the model's precision);
//   2. one block per row: max, then sum of exp(z - max) in double (each
//      thread's share in index order, then a fixed tree over the block), the
//      row's loss logsumexp - z[target] (double), and, for the gradient, the
//      row overwritten in place by scale * (softmax - onehot); rows that do
//      not count (target < 0, mask 0, no targets) become zeros;
//   3. dh += dlogits W, dW += dlogits^T h (the matmul backward, beta = 1).
// Each row's loss and whether it counted are kept on the device; at the end
// the host reads them once (the one synchronization) and adds the losses in
// row order, in double. So the sum does not depend on the chunking or on
// scheduling.
#include "cuda_impl.cuh"

enum { CLS_ROWS = 1024, CLS_THREADS = 512 };

// Row r of the chunk (token row n0 + r): z[V] in place; row_scale (chunk rows, or NULL: scale) its own scale.
__global__ void __launch_bounds__(CLS_THREADS) classifier_rows_kernel(float *logits, double *row_loss,
                                                                        int *row_counted, const int *targets,
                                                                        const uint8_t *mask, int n0, int V,
                                                                        float scale, const float *row_scale,
                                                                        int make_grad, int *err) {
    __shared__ double red_d[CLS_THREADS];
    __shared__ float red_f[CLS_THREADS];
    const int r = blockIdx.x, n = n0 + r, tid = threadIdx.x;
    float *z = logits + (size_t)r * V;
    const int target = targets ? targets[n] : -1;
    const int counted = target >= 0 && (!mask || mask[n] != 0);
    if (!counted || target >= V) {
        if (make_grad)
            for (int i = tid; i < V; i += CLS_THREADS) z[i] = 0.0f;
        if (tid == 0) {
            row_loss[n] = 0.0;
            row_counted[n] = 0;
            if (counted) cu_report(err, CU_ERR_TARGET, n);   // the CPU dies on it; the host will
        }
        return;
    }
    float mx = -INFINITY;
    for (int i = tid; i < V; i += CLS_THREADS) mx = fmaxf(mx, z[i]);
    const float z_max = cu_block_reduce<CLS_THREADS>(mx, red_f, CuMax()), z_target = z[target];
    double part = 0.0;
    for (int i = tid; i < V; i += CLS_THREADS) part += (double)expf(z[i] - z_max);
    const double sum = cu_block_reduce<CLS_THREADS>(part, red_d, CuAdd());   // its barriers order the reads above before the writes below
    if (make_grad) {
        if (row_scale) scale = row_scale[r];
        const float p_scale = (float)(scale / sum);
        for (int i = tid; i < V; i += CLS_THREADS) z[i] = expf(z[i] - z_max) * p_scale;
        __syncthreads();
        if (tid == 0) z[target] -= scale;
    }
    if (tid == 0) {
        row_loss[n] = (double)z_max + log(sum) - (double)z_target;
        row_counted[n] = 1;
    }
}

static size_t lined(size_t bytes) { return (bytes + 63) / 64 * 64; }

size_t cu_classifier_workspace_bytes(const Device *d, int N, int C, int V) {
    int rows = N < CLS_ROWS ? N : CLS_ROWS;
    rows = rows < 2 ? 2 : rows;
    // distill.cu's classifier_distill takes the same logits in two halves
    // (student and teacher) and three doubles per row.
    return lined((size_t)rows * V * sizeof(float)) + lined((size_t)N * 3 * sizeof(double)) +
           lined((size_t)N * sizeof(int)) + cu_matmul_workspace_bytes(d, rows, C, V) + 256;
}

double cu_classifier(Device *d, float *dh, float *dW, float *logits_out, const float *h, const float *W,
                     const int *targets, const uint8_t *mask, int N, int C, int V, float scale, int *count,
                     MatmulPrecision p) {
    if (N <= 0) {
        if (count) *count = 0;
        return 0.0;
    }
    cudaStream_t stream = cu_stream(d);
    // Without targets nothing counts: no loss and no gradient, only logits (if asked).
    const int make_grad = targets && (dh || dW);
    if (!targets && !logits_out) {
        if (count) *count = 0;
        return 0.0;
    }
    const int chunk = N < CLS_ROWS ? N : CLS_ROWS;
    const size_t mark = dev_scratch_mark(d);
    float *scratch = (float *)dev_scratch(d, (size_t)chunk * V * sizeof(float), "classifier logits");
    double *row_loss = (double *)dev_scratch(d, (size_t)N * sizeof(double), "classifier row losses");
    int *row_counted = (int *)dev_scratch(d, (size_t)N * sizeof(int), "classifier rows counted");
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int rows = N - n0 < chunk ? N - n0 : chunk;
        const float *h_chunk = h + (size_t)n0 * C;
        cu_matmul_forward(d, scratch, h_chunk, W, rows, C, V, p);
        if (logits_out)
            CU_CHECK(cudaMemcpyAsync(logits_out + (size_t)n0 * V, scratch, (size_t)rows * V * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream));
        if (!targets) continue;
        classifier_rows_kernel<<<rows, CLS_THREADS, 0, stream>>>(scratch, row_loss, row_counted, targets, mask, n0, V,
                                                                 scale, NULL, make_grad,
                                                                 cu_state(d)->err);
        CU_LAUNCHED();
        if (make_grad) cu_matmul_backward(d, dh ? dh + (size_t)n0 * C : NULL, dW, scratch, h_chunk, W, rows, C, V, p);
    }
    double loss = 0.0;
    int counted = 0;
    if (targets) {
        double *loss_host = (double *)xmalloc((size_t)N * sizeof(double), "classifier row losses");
        int *counted_host = (int *)xmalloc((size_t)N * sizeof(int), "classifier rows counted");
        CU_CHECK(cudaMemcpyAsync(loss_host, row_loss, (size_t)N * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CU_CHECK(cudaMemcpyAsync(counted_host, row_counted, (size_t)N * sizeof(int), cudaMemcpyDeviceToHost, stream));
        cu_check_errors(d, "classifier");   // waits for the copies; dies on a target outside the vocabulary
        for (int n = 0; n < N; n++) {
            loss += loss_host[n];
            counted += counted_host[n];
        }
        free(loss_host);
        free(counted_host);
    }
    dev_scratch_release(d, mark);
    if (count) *count = counted;
    return loss;
}

// classifier_scaled (model/ops/ops.h): per chunk, the rows' losses first (the
// kernel without the gradient), read back for the caller's scales, then the
// kernel again with them, which rewrites each row as its gradient.
void cu_classifier_scaled(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                          const uint8_t *mask, int N, int C, int V, RowScaleFn scale_of, void *ctx,
                          MatmulPrecision p) {
    if (N <= 0) return;
    cudaStream_t stream = cu_stream(d);
    const int make_grad = dh || dW, chunk = N < CLS_ROWS ? N : CLS_ROWS;
    const size_t mark = dev_scratch_mark(d);
    float *scratch = (float *)dev_scratch(d, (size_t)chunk * V * sizeof(float), "classifier logits");
    double *row_loss = (double *)dev_scratch(d, (size_t)N * sizeof(double), "classifier row losses");
    int *row_counted = (int *)dev_scratch(d, (size_t)N * sizeof(int), "classifier rows counted");
    float *scale_dev = (float *)dev_scratch(d, (size_t)chunk * sizeof(float), "classifier row scales");
    double *loss_host = (double *)xmalloc((size_t)chunk * sizeof(double), "classifier row losses");
    float *scale_host = (float *)xmalloc((size_t)chunk * sizeof(float), "classifier row scales");
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int rows = N - n0 < chunk ? N - n0 : chunk;
        const float *h_chunk = h + (size_t)n0 * C;
        cu_matmul_forward(d, scratch, h_chunk, W, rows, C, V, p);
        classifier_rows_kernel<<<rows, CLS_THREADS, 0, stream>>>(scratch, row_loss, row_counted, targets, mask, n0, V,
                                                                 0.0f, NULL, 0, cu_state(d)->err);
        CU_LAUNCHED();
        CU_CHECK(cudaMemcpyAsync(loss_host, row_loss + n0, (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost,
                                 stream));
        cu_check_errors(d, "classifier");   // waits for the copy; dies on a target outside the vocabulary
        for (int r = 0; r < rows; r++) scale_host[r] = 0.0f;
        scale_of(ctx, n0, rows, loss_host, scale_host);
        if (!make_grad) continue;
        CU_CHECK(cudaMemcpyAsync(scale_dev, scale_host, (size_t)rows * sizeof(float), cudaMemcpyHostToDevice, stream));
        classifier_rows_kernel<<<rows, CLS_THREADS, 0, stream>>>(scratch, row_loss, row_counted, targets, mask, n0, V,
                                                                 0.0f, scale_dev, 1, cu_state(d)->err);
        CU_LAUNCHED();
        cu_matmul_backward(d, dh ? dh + (size_t)n0 * C : NULL, dW, scratch, h_chunk, W, rows, C, V, p);
        // scale_host is written again for the next chunk only after this copy has been read
        CU_CHECK(cudaStreamSynchronize(stream));
    }
    free(loss_host);
    free(scale_host);
    dev_scratch_release(d, mark);
}
