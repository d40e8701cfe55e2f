// bench_loss_bf16: does training with bf16 matmuls (MATMUL_BF16: bf16
// operands, fp32 accumulation, fp32 master weights and AdamW) follow the fp32
// loss curve? A small Qwen3 (4 layers, hidden 128, byte vocabulary) is trained
// twice from the same initial weights on the same batches (bytes of this
// repository's model/ops/*.c sources, random windows), once with every matmul
// in fp32 and once in bf16, and the two loss curves are compared step by step
// (raw, and as 10-step moving means, which average out the per-batch jitter
// of two slightly different trajectories). For scale, a third run repeats fp32
// with every initial weight moved by one ulp: how far two fp32 runs drift apart
// from the smallest possible difference. A held-out tail of the bytes gives a
// validation loss for each final model.
// usage: bench_loss_bf16 [steps]   (default 200; run from the repository root)
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../model/ops/ops.h"
#include "../train/schedule.h"
#include "test_model_util.h"

#define BATCH 4
#define SEQ 128

static unsigned char *read_corpus(size_t *n) {
    glob_t g;
    if (glob("model/ops/*.c", 0, NULL, &g) != 0) die("bench_loss_bf16: no model/ops/*.c here (run from the repo root)");
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = xmalloc(cap, "corpus");
    for (size_t i = 0; i < g.gl_pathc; i++) {   // glob sorts the names: the same bytes on every run
        FILE *f = fopen(g.gl_pathv[i], "rb");
        if (!f) die("bench_loss_bf16: cannot open %s", g.gl_pathv[i]);
        size_t got;
        while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
            len += got;
            if (len == cap) {
                unsigned char *bigger = xmalloc(cap * 2, "corpus");
                memcpy(bigger, buf, len);
                free(buf);
                buf = bigger;
                cap *= 2;
            }
        }
        fclose(f);
    }
    globfree(&g);
    *n = len;
    return buf;
}

// Batch `step`: BATCH windows of SEQ+1 bytes at offsets drawn from the step's own
// seed, inside [0, limit).
static void make_batch(int *tokens, int *targets, const unsigned char *bytes, size_t limit, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int b = 0; b < BATCH; b++) {
        size_t off = (size_t)(rng_next(&r) % (uint64_t)(limit - SEQ - 1));
        for (int t = 0; t < SEQ; t++) {
            tokens[b * SEQ + t] = bytes[off + t];
            targets[b * SEQ + t] = bytes[off + t + 1];
        }
    }
}

// Trains `steps` updates; losses[s] = mean training loss of update s. Returns
// the validation loss of the final weights over the held-out bytes.
static double train(const ModelConfig *cfg, int bf16, int nudge, int steps, const unsigned char *bytes,
                    size_t n_train, size_t n_total, double *losses, double *seconds) {
    PtError e;
    ModelBundle bundle;
    bundle_alloc(&bundle, cfg);
    bundle_init_random(&bundle, 1);
    if (nudge)
        for (size_t i = 0; i < bundle.tt.total; i++)
            if (bundle.params[i] != 0.0f) bundle.params[i] = nextafterf(bundle.params[i], INFINITY);
    TestModel tm;
    const ModelOptions opt = {.matmul = bf16 ? MATMUL_BF16 : MATMUL_FP32};
    test_model_from_bundle(&tm, &bundle, &opt);
    Model *m = &tm.m;
    Device *d = &tm.dev;
    if (model_plan(m, BATCH, SEQ, 1, NULL, &e)) die("bench_loss_bf16: %s", e.msg);
    const size_t P = m->tt->total;
    float *mom = d->be->alloc(d, P * sizeof(float), "adam m"), *var = d->be->alloc(d, P * sizeof(float), "adam v");
    AdamWConfig ac = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
    Schedule sched = {.kind = SCHED_COSINE, .warmup = steps / 10, .total = steps, .min_lr_ratio = 0.1f};
    int tokens[BATCH * SEQ], targets[BATCH * SEQ];
    ModelInput in = {.B = BATCH, .T = SEQ, .tokens = tokens, .targets = targets};
    double t0 = now_seconds();
    for (int s = 0; s < steps; s++) {
        make_batch(tokens, targets, bytes, n_train, 1000 + (uint64_t)s);
        model_zero_grads(m);
        int count;
        double sum = model_forward_backward(m, &in, 1.0f / (BATCH * SEQ), NULL, &count);
        losses[s] = sum / count;
        double norm = dev_grad_norm(d, m->grads, m->tt->total);
        if (!isfinite(norm)) die("bench_loss_bf16: non-finite gradient at step %d (%s)", s, bf16 ? "bf16" : "fp32");
        OP(d, grad_scale, m->grads, m->tt->total, grad_clip_factor(norm, ac.grad_clip));
        OP(d, adamw_step, m->weights, m->grads, mom, var, m->tt, &ac, schedule_lr(&sched, ac.lr, s), s + 1);
    }
    *seconds = now_seconds() - t0;
    // Validation: consecutive windows of the held-out tail, forward only.
    double val_sum = 0.0;
    long val_count = 0;
    for (size_t off = n_train; off + BATCH * (SEQ + 1) <= n_total; off += BATCH * (SEQ + 1)) {
        for (int b = 0; b < BATCH; b++)
            for (int t = 0; t < SEQ; t++) {
                tokens[b * SEQ + t] = bytes[off + b * (SEQ + 1) + t];
                targets[b * SEQ + t] = bytes[off + b * (SEQ + 1) + t + 1];
            }
        int count;
        val_sum += model_forward(m, &in, NULL, &count);
        val_count += count;
    }
    d->be->release(d, mom);
    d->be->release(d, var);
    test_model_free(&tm);
    return val_count ? val_sum / val_count : NAN;
}

typedef struct {
    double worst, worst_smooth, tail;   // max relative difference raw / of 10-step means; mean of the last 20
    int worst_at;
} Agreement;

static Agreement agreement(const double *ref, const double *other, int steps) {
    Agreement a = {0};
    int tail_n = 0;
    double sum_ref = 0.0, sum_other = 0.0;
    for (int s = 0; s < steps; s++) {
        double d = fabs(other[s] - ref[s]) / ref[s];
        if (d > a.worst) a.worst = d, a.worst_at = s;
        if (s >= steps - 20) a.tail += d, tail_n++;
        sum_ref += ref[s], sum_other += other[s];
        if (s >= 10) sum_ref -= ref[s - 10], sum_other -= other[s - 10];
        if (s >= 9 && fabs(sum_other - sum_ref) / sum_ref > a.worst_smooth) a.worst_smooth = fabs(sum_other - sum_ref) / sum_ref;
    }
    a.tail /= tail_n;
    return a;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    if (steps < 10) steps = 10;
    ModelConfig cfg = {.name = "bench-bytes", .model_type = "qwen3", .n_layer = 4, .d_model = 128, .n_head = 4,
                       .n_kv_head = 2, .head_dim = 32, .d_ff = 384, .vocab_size = 256, .max_seq = SEQ,
                       .rope_theta = 1e4f, .norm_eps = 1e-6f, .init_std = 0.02f, .tied_embeddings = 1, .qk_norm = 1,
                       .bos_id = -1, .eos_id = -1, .pad_id = -1};
    PtError e;
    if (config_validate(&cfg, "bench_loss_bf16", &e)) die("%s", e.msg);
    size_t n;
    unsigned char *bytes = read_corpus(&n);
    size_t n_train = n - n / 10;   // the last 10% is held out
    if (n_train < 4 * (SEQ + 1)) die("bench_loss_bf16: only %zu bytes of corpus", n);
    printf("== bench_loss_bf16: %s, %d layers x %d hidden, vocab %d (bytes), B=%d T=%d, %d AdamW steps, "
           "%zu training bytes (model/ops/*.c), %zu held out\n",
           cfg.name, cfg.n_layer, cfg.d_model, cfg.vocab_size, BATCH, SEQ, steps, n_train, n - n_train);
    double *l32 = xmalloc((size_t)steps * sizeof(double), "losses"), *l16 = xmalloc((size_t)steps * sizeof(double), "losses");
    double *lnudge = xmalloc((size_t)steps * sizeof(double), "losses");
    double s32, s16, snudge;
    double v32 = train(&cfg, 0, 0, steps, bytes, n_train, n, l32, &s32);
    double v16 = train(&cfg, 1, 0, steps, bytes, n_train, n, l16, &s16);
    double vnudge = train(&cfg, 0, 1, steps, bytes, n_train, n, lnudge, &snudge);
    printf("%6s %10s %10s %10s %14s\n", "step", "fp32 loss", "bf16 loss", "rel diff", "fp32 nudged");
    for (int s = 0; s < steps; s++)
        if (s % 20 == 0 || s == steps - 1)
            printf("%6d %10.5f %10.5f %10.2e %14.5f\n", s, l32[s], l16[s], fabs(l16[s] - l32[s]) / l32[s], lnudge[s]);
    const Agreement bf16 = agreement(l32, l16, steps), nudged = agreement(l32, lnudge, steps);
    printf("loss curve agreement bf16 vs fp32 (%d steps): max |loss diff| / loss %.2e (step %d), of 10-step means "
           "%.2e, mean over the last 20 steps %.2e; loss %.3f -> %.3f (fp32), %.3f -> %.3f (bf16)\n",
           steps, bf16.worst, bf16.worst_at, bf16.worst_smooth, bf16.tail, l32[0], l32[steps - 1], l16[0],
           l16[steps - 1]);
    printf("  for scale, fp32 vs fp32 with each initial weight one ulp up: max %.2e (step %d), of 10-step means %.2e, "
           "last 20 steps %.2e\n", nudged.worst, nudged.worst_at, nudged.worst_smooth, nudged.tail);
    printf("held-out loss: fp32 %.5f, bf16 %.5f (rel diff %.2e), fp32 nudged %.5f (rel diff %.2e); "
           "training time %.1f s fp32, %.1f s bf16\n", v32, v16, fabs(v16 - v32) / v32, vnudge,
           fabs(vnudge - v32) / v32, s32, s16);
    (void)snudge;
    free(l32);
    free(l16);
    free(lnudge);
    free(bytes);
    return 0;
}
