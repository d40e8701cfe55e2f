// distill.cu: the classifier with a distillation loss (model/ops/distill.c
// states the loss and its gradient). As classifier.cu: chunks of token rows,
// here CLS_DISTILL_ROWS, whose student logits and (dense teacher) teacher
// logits share the classifier's workspace; one block per row computes the
// row's loss parts in double and overwrites the student's row with the
// gradient; the host reads every row's parts once at the end and adds them
// in row order.
#include "cuda_impl.cuh"

// Half of the classifier's rows (CLS_ROWS in classifier.cu) for each side.
enum { DST_ROWS = 512, DST_THREADS = 512 };

__device__ static float row_max(const float *z, int n, float *red) {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += DST_THREADS) mx = fmaxf(mx, z[i]);
    return cu_block_reduce<DST_THREADS>(mx, red, CuMax());
}

// log sum exp(z * inv_t) of a row whose largest value is z_max.
__device__ static double row_lse(const float *z, int n, float z_max, float inv_t, double *red) {
    double part = 0.0;
    for (int i = threadIdx.x; i < n; i += DST_THREADS) part += (double)expf((z[i] - z_max) * inv_t);
    return (double)z_max * inv_t + log(cu_block_reduce<DST_THREADS>(part, red, CuAdd()));
}

__global__ void __launch_bounds__(DST_THREADS) distill_rows_kernel(float *zs, const float *zt, const int *ids,
                                                                     const float *tl, const float *tlse, int k,
                                                                     double *row_out,
                                                                     int *row_counted, const int *targets,
                                                                     const uint8_t *mask, int n0, int V, float a,
                                                                     float b, float T, float scale, int reverse,
                                                                     int make_grad, int *err) {
    __shared__ double red_d[DST_THREADS];
    __shared__ float red_f[DST_THREADS], q_sh[DISTILL_MAX_TOPK], p_sh[DISTILL_MAX_TOPK];
    const int r = blockIdx.x, n = n0 + r, tid = threadIdx.x;
    float *z = zs + (size_t)r * V;
    const int target = targets ? targets[n] : -1;
    const int counted = target >= 0 && (!mask || mask[n] != 0);
    if (!counted || target >= V) {
        if (make_grad)
            for (int i = tid; i < V; i += DST_THREADS) z[i] = 0.0f;
        if (tid == 0) {
            row_out[3 * n] = row_out[3 * n + 1] = row_out[3 * n + 2] = 0.0;
            row_counted[n] = 0;
            if (counted) cu_report(err, CU_ERR_TARGET, n);
        }
        return;
    }
    const float inv_t = 1.0f / T, z_max = row_max(z, V, red_f), z_target = z[target];
    const double lse1 = row_lse(z, V, z_max, 1.0f, red_d);
    const double lse_s = T == 1.0f ? lse1 : row_lse(z, V, z_max, inv_t, red_d);
    const float ls = (float)lse_s, l1 = (float)lse1;
    double part = 0.0;
    if (k == 0) {
        const float *t = zt + (size_t)r * V;
        const float lt = (float)row_lse(t, V, row_max(t, V, red_f), inv_t, red_d);
        for (int i = tid; i < V; i += DST_THREADS) {
            const float log_pt = t[i] * inv_t - lt, log_ps = z[i] * inv_t - ls;
            part += reverse ? (double)(expf(log_ps) * (log_ps - log_pt)) : (double)(expf(log_pt) * (log_pt - log_ps));
        }
    } else {
        // The k ids and the rest as one outcome (model/ops/distill.c).
        const int *id = ids + (size_t)n * k;
        const float *lg = tl + (size_t)n * k;
        const double lse_t = tlse[n];
        double qs = 0.0, ps = 0.0;
        for (int j = tid; j < k; j += DST_THREADS) {
            const double log_q = (double)lg[j] * inv_t - lse_t, log_p = (double)z[id[j]] * inv_t - lse_s;
            q_sh[j] = (float)exp(log_q);
            p_sh[j] = (float)exp(log_p);
            part += exp(log_q) * (log_q - log_p);
            qs += exp(log_q);
            ps += exp(log_p);
        }
        const double q_sum = cu_block_reduce<DST_THREADS>(qs, red_d, CuAdd());
        const double p_sum = cu_block_reduce<DST_THREADS>(ps, red_d, CuAdd());
        const double q_rest = q_sum < 1.0 ? 1.0 - q_sum : 0.0, p_rest = p_sum < 1.0 - 1e-30 ? 1.0 - p_sum : 1e-30;
        if (tid == 0 && q_rest > 0) part += q_rest * (log(q_rest) - log(p_rest));
        if (make_grad) {
            const float spread = 1.0f - (float)(q_rest / p_rest);
            const double kl_k = cu_block_reduce<DST_THREADS>(part, red_d, CuAdd());   // before z is overwritten
            for (int i = tid; i < V; i += DST_THREADS)
                z[i] = scale * (a * expf(z[i] - l1) + b * T * expf(z[i] * inv_t - ls) * spread);
            __syncthreads();
            for (int j = tid; j < k; j += DST_THREADS) z[id[j]] += scale * b * T * (p_sh[j] * (1.0f - spread) - q_sh[j]);
            __syncthreads();
            if (tid == 0) {
                z[target] -= scale * a;
                const double ce = lse1 - (double)z_target, klr = kl_k > 0 ? kl_k : 0.0;
                row_out[3 * n] = (double)a * ce + (double)b * T * T * klr;
                row_out[3 * n + 1] = ce;
                row_out[3 * n + 2] = klr;
                row_counted[n] = 1;
            }
            return;
        }
    }
    const double kl = cu_block_reduce<DST_THREADS>(part, red_d, CuAdd());   // its barriers order the reads before the writes
    if (make_grad) {   // the dense teacher (top-k returned above)
        const float *t = zt + (size_t)r * V;
        const float lt = (float)row_lse(t, V, row_max(t, V, red_f), inv_t, red_d);
        const float klf = (float)kl;
        for (int i = tid; i < V; i += DST_THREADS) {
            const float log_ps = z[i] * inv_t - ls, log_pt = t[i] * inv_t - lt, ps = expf(log_ps);
            const float p1 = T == 1.0f ? ps : expf(z[i] - l1);
            z[i] = scale * (a * p1 + b * T * (reverse ? ps * (log_ps - log_pt - klf) : ps - expf(log_pt)));
        }
        __syncthreads();
        if (tid == 0) z[target] -= scale * a;
    }
    if (tid == 0) {
        const double ce = lse1 - (double)z_target, klr = kl > 0 ? kl : 0.0;
        row_out[3 * n] = (double)a * ce + (double)b * T * T * klr;
        row_out[3 * n + 1] = ce;
        row_out[3 * n + 2] = klr;
        row_counted[n] = 1;
    }
}

double cu_classifier_distill(Device *d, float *dh, float *dW, const float *h, const float *W, const int *targets,
                             const uint8_t *mask, int N, int C, int V, float scale, const DistillTarget *t,
                             DistillSums *sums, int *count, MatmulPrecision p) {
    if (t->k < 0 || t->k > DISTILL_MAX_TOPK) die("classifier_distill: top-k %d outside [0, %d]", t->k, DISTILL_MAX_TOPK);
    double loss = 0.0, ce = 0.0, kl = 0.0;
    int counted = 0;
    if (N > 0 && targets) {
        cudaStream_t stream = cu_stream(d);
        const int make_grad = dh || dW, chunk = N < 2 * DST_ROWS ? (N / 2 < 1 ? 1 : N / 2) : DST_ROWS;
        const size_t mark = dev_scratch_mark(d);
        float *zs = (float *)dev_scratch(d, (size_t)chunk * V * sizeof(float), "distillation logits");
        float *zt = t->k ? NULL : (float *)dev_scratch(d, (size_t)chunk * V * sizeof(float), "teacher logits");
        double *row_out = (double *)dev_scratch(d, (size_t)N * 3 * sizeof(double), "distillation row losses");
        int *row_counted = (int *)dev_scratch(d, (size_t)N * sizeof(int), "distillation rows counted");
        for (int n0 = 0; n0 < N; n0 += chunk) {
            const int rows = N - n0 < chunk ? N - n0 : chunk;
            cu_matmul_forward(d, zs, h + (size_t)n0 * C, W, rows, C, V, p);
            if (!t->k) cu_matmul_forward(d, zt, t->h + (size_t)n0 * C, t->W, rows, C, V, p);
            distill_rows_kernel<<<rows, DST_THREADS, 0, stream>>>(zs, zt, t->topk_ids, t->topk_logits, t->topk_lse, t->k,
                                                                   row_out,
                                                                   row_counted, targets, mask, n0, V, t->ce_weight,
                                                                   t->kd_weight, t->temperature, scale,
                                                                   t->k == 0 && t->reverse, make_grad,
                                                                   cu_state(d)->err);
            CU_LAUNCHED();
            if (make_grad) cu_matmul_backward(d, dh ? dh + (size_t)n0 * C : NULL, dW, zs, h + (size_t)n0 * C, W, rows, C, V, p);
        }
        double *out_host = (double *)xmalloc((size_t)N * 3 * sizeof(double), "distillation row losses");
        int *counted_host = (int *)xmalloc((size_t)N * sizeof(int), "distillation rows counted");
        CU_CHECK(cudaMemcpyAsync(out_host, row_out, (size_t)N * 3 * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CU_CHECK(cudaMemcpyAsync(counted_host, row_counted, (size_t)N * sizeof(int), cudaMemcpyDeviceToHost, stream));
        cu_check_errors(d, "classifier_distill");
        for (int n = 0; n < N; n++) {
            loss += out_host[3 * n];
            ce += out_host[3 * n + 1];
            kl += out_host[3 * n + 2];
            counted += counted_host[n];
        }
        free(out_host);
        free(counted_host);
        dev_scratch_release(d, mark);
    }
    if (sums) {
        sums->ce = ce;
        sums->kl = kl;
    }
    if (count) *count = counted;
    return loss;
}
