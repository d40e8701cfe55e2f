// bench_sampler: the batched sampler (model/sampler.h) decoding the
// pocket-0.3b preset (random weights), as GRPO's rollouts and draft-data run
// it: `rows` jobs at once (default 64), each a 16-token prompt and `new`
// greedy tokens (default 64; no stop, so every job makes all of them), with
// bf16 and with fp32 matmuls; then one job alone (128 new tokens), as
// `pocket generate` decodes: on the int4 model (group 64, round to nearest)
// through its packed weights (qat_pack), as `--int4` runs, and in fp32 and
// bf16 on the float weights.
// Prints new tokens/s and the useful GFLOP/s (each new token's forward:
// 2 x the matmul parameters plus attention over the positions before it;
// the prompt's forward is counted too) as a fraction of this machine's peak
// measured in the same run (before and after the runs, the higher: a busy
// machine only lowers it): the vdpbf16ps peak for bf16 matmuls, the fp32 FMA
// peak for fp32. Each figure is the best of `reps` runs (default 2); the table
// is printed at the end.
// usage: bench_sampler [PRESET] [rows] [new] [reps]
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../model/sampler.h"
#include "../qat/qat.h"
#include "bench_bf16_peak.h"
#include "bench_header.h"
#include "test_model_util.h"

enum { PROMPT = 16 };

// The FLOPs of a sequence's forward over positions [from, to): the
// projections and lm_head (2 per parameter) and attention (QK^T and AV, 4 per
// head dimension and earlier position).
static double forward_flops(const ModelConfig *c, int from, int to) {
    const double H = c->d_model, q = (double)c->n_head * c->head_dim, kv = (double)c->n_kv_head * c->head_dim;
    const double matmul_params = c->n_layer * (2 * H * q + 2 * H * kv + 3 * H * c->d_ff) + (double)c->vocab_size * H;
    double flops = 0;
    for (int p = from; p < to; p++) flops += 2 * matmul_params + 4.0 * c->n_layer * q * (p + 1);
    return flops;
}

typedef struct {
    double tok_s, gflops;
} Result;

static Result run(const char *preset, int bf16, int int4, int rows, int jobs_n, int new_tokens, int reps) {
    PtError e;
    ModelConfig cfg;
    if (config_preset(&cfg, preset, &e)) die("%s", e.msg);
    ModelBundle b;
    bundle_alloc(&b, &cfg);
    bundle_init_random(&b, 1);
    TestModel tm;
    ModelOptions opt = {0, bf16 ? MATMUL_BF16 : MATMUL_FP32, A16_OFF};
    test_model_from_bundle(&tm, &b, &opt);
    // The int4 model: its float values for the passes of many rows (the
    // prompt), its packed codes for the one-row decode steps.
    QatState q;
    PackedViews *pv = NULL;
    float *int4_w = NULL;
    if (int4) {
        const QuantSpec spec = {QUANT_GROUP_DEFAULT, 0};
        if (qat_init(&q, &tm.b.tt, &spec, cfg.tied_embeddings, 0, preset, &e) ||
            qat_init_from_weights(&q, &tm.b.tt, tm.b.params, QAT_INIT_RTN, NULL, NULL, preset, &e))
            die("%s", e.msg);
        int4_w = xaligned(tm.b.tt.total * sizeof(float), "int4 weights");
        qat_host_weights(&q, &tm.b.tt, tm.b.params, int4_w, 0);
        model_use_weights(&tm.m, int4_w);
        pv = xcalloc(1, sizeof *pv, "packed views");
        qat_pack(&tm.dev, &q, &tm.b.tt, tm.b.params, pv);
        model_use_packed(&tm.m, pv);
    }
    Sampler s;
    if (sampler_init(&s, &tm.m, rows, PROMPT + new_tokens, &e)) die("%s", e.msg);
    GenParams gp;
    gen_params_default(&gp);
    gp.max_new = new_tokens;
    gp.temperature = 0;
    SampleJob *jobs = xcalloc((size_t)jobs_n, sizeof *jobs, "jobs");
    int *outs = xmalloc((size_t)jobs_n * new_tokens * sizeof(int), "outputs");
    int **prompts = xcalloc((size_t)jobs_n, sizeof *prompts, "prompts");
    for (int j = 0; j < jobs_n; j++) prompts[j] = random_tokens(PROMPT, cfg.vocab_size, 100 + (uint64_t)j);
    Result best = {0, 0};
    for (int rep = 0; rep < reps; rep++) {
        for (int j = 0; j < jobs_n; j++) jobs[j] = (SampleJob){prompts[j], PROMPT, &gp, outs + (size_t)j * new_tokens, 0};
        const double t0 = now_seconds();
        if (sampler_run(&s, jobs, jobs_n, NULL, NULL, &e)) die("%s", e.msg);
        const double dt = now_seconds() - t0;
        double made = 0;
        for (int j = 0; j < jobs_n; j++) made += jobs[j].n_out;
        const double flops = jobs_n * forward_flops(&cfg, 0, PROMPT + new_tokens - 1);
        if (made / dt > best.tok_s) best = (Result){made / dt, flops / dt * 1e-9};
    }
    for (int j = 0; j < jobs_n; j++) free(prompts[j]);
    free(prompts);
    free(outs);
    free(jobs);
    sampler_free(&s);
    if (int4) {
        qat_pack_free(&tm.dev, pv);
        free(pv);
        free(int4_w);
        qat_free(&q);
    }
    test_model_free(&tm);
    return best;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "pocket-0.3b";
    const int rows = argc > 2 ? atoi(argv[2]) : 64, new_tokens = argc > 3 ? atoi(argv[3]) : 64;
    const int reps = argc > 4 ? atoi(argv[4]) : 2;
    if (rows < 1 || new_tokens < 1 || reps < 1) die("usage: bench_sampler [PRESET] [rows] [new] [reps]");
    Device dev;
    cpu_device_init(&dev, 0, NULL);
    bench_header("bench_sampler", &dev);
    const int threads = omp_get_max_threads();
    double fp32_peak = bench_peak(&dev, threads), bf16_peak = bf16_peak_gflops(&dev, threads);
    const struct { int bf16, int4, rows, jobs, new_tokens; const char *what; } CASES[] = {
        {1, 0, rows, rows, new_tokens, "batched, bf16 matmuls"},
        {0, 0, rows, rows, new_tokens, "batched, fp32 matmuls"},
        {0, 1, 1, 1, 128, "one sequence, int4 packed (generate --int4)"},
        {0, 0, 1, 1, 128, "one sequence, fp32"},
        {1, 0, 1, 1, 128, "one sequence, bf16 matmuls"},
    };
    enum { N_CASES = sizeof CASES / sizeof CASES[0] };
    Result res[N_CASES];
    for (int k = 0; k < N_CASES; k++) {
        res[k] = run(preset, CASES[k].bf16, CASES[k].int4, CASES[k].rows, CASES[k].jobs, CASES[k].new_tokens, reps);
        printf("(%s, rows %d: %.1f new tokens/s)\n", CASES[k].what, CASES[k].rows, res[k].tok_s);
        fflush(stdout);
    }
    fp32_peak = fmax(fp32_peak, bench_peak(&dev, threads));
    bf16_peak = fmax(bf16_peak, bf16_peak_gflops(&dev, threads));
    dev_free(&dev);
    printf("== bench_sampler: %s, %d threads; fp32 FMA peak %.1f GFLOP/s, bf16 (vdpbf16ps) peak %s%.1f GFLOP/s\n",
           preset, threads, fp32_peak, bf16_peak > 0 ? "" : "(none: no AVX512_BF16) ", bf16_peak);
    for (int k = 0; k < N_CASES; k++) {
        const Result r = res[k];
        const double peak = CASES[k].bf16 ? bf16_peak : fp32_peak;
        printf("sampler %-48s rows %2d, %d-token prompts + %3d new: %7.1f new tokens/s, %6.1f GFLOP/s = %5.1f%% of "
               "the %s peak\n", CASES[k].what, CASES[k].rows, PROMPT, CASES[k].new_tokens, r.tok_s, r.gflops,
               peak > 0 ? 100 * r.gflops / peak : 0.0, CASES[k].bf16 ? "bf16" : "fp32");
        fflush(stdout);
    }
    return 0;
}
