// bench_cuda: the training step (forward + backward) of pocket-0.3b (random
// weights) on the GPU, at T=1024 and T=4096 with bf16 matmuls and at T=1024
// with fp32 matmuls, each with the largest batch of at most 16384 tokens that
// fits (from the memory one sequence takes). Prints tokens/s, TFLOP/s, MFU
// against the H200's 989 TFLOP/s dense bf16 peak (the vendor's figure; fp32
// runs too, so their MFU reads low by design), the step time (best of the timed
// steps after one warm-up), and the GPU memory in use at the step's peak
// (total minus the least free memory cudaMemGetInfo reported; it includes the
// CUDA context). Then the W4A16 QAT step at T=1024 (bf16 matmuls, int4 group
// 64 fake-quant before the forward and the straight-through backward after
// it, as the trainer runs them) against the plain step of the same batch, and
// one AdamW step over all parameters, timed alone.
// FLOPs are model/config.c's count (6 x matmul parameters + 12 L nh hd T per
// token, the PaLM convention: attention counted without the causal half).
//
// With --config-out PATH it writes the preset's HF config.json there, so the
// PyTorch side (tests/bench_cuda_torch.py) runs the same model.
// usage: bench_cuda [--preset NAME] [--steps N] [--tokens N] [--config-out PATH]
// Without a GPU (or built without CUDA) it prints one line and exits 0.
#include <stdlib.h>
#include <string.h>
#include "../model/bundle.h"
#include "../model/model.h"
#include "../qat/qat.h"
#ifdef POCKET_CUDA
#include "../cuda/cuda.h"
#endif

#define PEAK_BF16_TFLOPS 989.0

#ifdef POCKET_CUDA
typedef struct {
    int T, bf16, qat;
} Config;

static size_t gpu_free(Device *d) {
    size_t f, t;
    cuda_memory(d, &f, &t);
    return f;
}

// Bytes one sequence of T tokens adds (activations, workspace): a plan at
// B = 1 measured against the free memory before it.
static size_t bytes_per_sequence(Device *d, const ModelBundle *b, float *w, int T, const ModelOptions *opt) {
    PtError e;
    Model m;
    const size_t before = gpu_free(d);
    model_init(&m, d, &b->cfg, &b->tt, w, opt);
    if (model_plan(&m, 1, T, 1, NULL, &e)) die("%s", e.msg);
    const size_t used = before - gpu_free(d);
    model_free(&m);
    return used;
}

// Tokens/s of the best timed step.
static double run(Device *d, const ModelBundle *b, float *w, Config c, int steps, int max_tokens) {
    PtError e;
    const ModelConfig *cfg = &b->cfg;
    const ModelOptions opt = {0, c.bf16 ? MATMUL_BF16 : MATMUL_FP32, A16_OFF};
    const size_t per_seq = bytes_per_sequence(d, b, w, c.T, &opt);
    size_t free_b, total_b;
    cuda_memory(d, &free_b, &total_b);
    int B = max_tokens / c.T > 0 ? max_tokens / c.T : 1;
    while (B > 1 && (double)B * per_seq > 0.8 * (double)free_b) B /= 2;
    const int N = B * c.T;
    int *tokens = malloc((size_t)N * sizeof(int)), *targets = malloc((size_t)N * sizeof(int));
    Rng rng;
    rng_seed(&rng, 7);
    for (int i = 0; i < N; i++) tokens[i] = (int)(rng_next(&rng) % (uint64_t)cfg->vocab_size);
    for (int i = 0; i < N; i++) targets[i] = (i + 1) % c.T ? tokens[i + 1] : -1;
    ModelInput in = {.B = B, .T = c.T, .tokens = tokens, .targets = targets};
    Model m;
    model_init(&m, d, cfg, &b->tt, w, &opt);
    if (model_plan(&m, B, c.T, 1, NULL, &e)) die("%s", e.msg);
    QatRun qat;
    if (c.qat) {
        const QatRunConfig qc = {.spec = {64, 0}, .quant_embedding = 1, .init = QAT_INIT_RTN, .freeze_codes_step = -1};
        const AdamWConfig adam = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f};
        if (qat_run_init(&qat, d, &b->tt, &qc, &adam, NULL, "bench", &e)) die("%s", e.msg);
    }
    size_t min_free = gpu_free(d);
    double best = 1e30, loss = 0;
    int count = 0;
    for (int s = 0; s <= steps; s++) {   // step 0 warms up (cuBLASLt plans, first-touch)
        model_zero_grads(&m);
        cuda_synchronize(d);
        const double t0 = now_seconds();
        if (c.qat) {   // step 0 also makes the RTN scales (on the host), untimed
            float *fake = qat_run_weights(&qat, 0, w, &e);
            if (!fake) die("%s", e.msg);
            model_use_weights(&m, fake);
        }
        loss = model_forward_backward(&m, &in, 1.0f / (float)N, NULL, &count);
        if (c.qat) qat_run_backward(&qat, 0, w, m.grads);
        cuda_synchronize(d);
        const double dt = now_seconds() - t0;
        const size_t f = gpu_free(d);
        min_free = f < min_free ? f : min_free;
        if (s > 0 && dt < best) best = dt;
    }
    const double flops = config_train_flops_per_token(cfg, c.T) * N, tflops = flops / best / 1e12;
    printf("bench_cuda %s%s T=%d B=%d %s matmuls: %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% of %.0f, step %.3f s "
           "(best of %d), peak GPU memory %.2f GiB (of %.1f), loss %.4f\n",
           cfg->name, c.qat ? " QAT (int4 g64 fake-quant + STE)" : "", c.T, B, c.bf16 ? "bf16" : "fp32", N / best, tflops, 100.0 * tflops / PEAK_BF16_TFLOPS,
           PEAK_BF16_TFLOPS, best, steps, (double)(total_b - min_free) / 1073741824.0, total_b / 1073741824.0,
           loss / count);
    fflush(stdout);
    if (c.qat) qat_run_free(&qat);
    model_free(&m);
    free(tokens);
    free(targets);
    return N / best;
}

// One AdamW step over every parameter (moments on the GPU), timed alone.
static void run_adamw(Device *d, const ModelBundle *b, float *w) {
    const size_t bytes = b->tt.total * sizeof(float);
    float *g = d->be->alloc(d, bytes, "bench grads"), *mo = d->be->alloc(d, bytes, "bench m");
    float *v = d->be->alloc(d, bytes, "bench v");
    AdamWConfig ac = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    double best = 1e30;
    for (int s = 0; s < 4; s++) {
        cuda_synchronize(d);
        const double t0 = now_seconds();
        OP(d, adamw_step, w, g, mo, v, &b->tt, &ac, 3e-4f, s + 1);
        cuda_synchronize(d);
        const double dt = now_seconds() - t0;
        if (s > 0 && dt < best) best = dt;
    }
    printf("bench_cuda %s AdamW step over %.0fM parameters: %.2f ms\n", b->cfg.name, b->tt.total / 1e6, best * 1e3);
    d->be->release(d, g);
    d->be->release(d, mo);
    d->be->release(d, v);
}

int main(int argc, char **argv) {
    const char *preset = "pocket-0.3b", *config_out = NULL;
    int steps = 3, max_tokens = 16384;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) max_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--config-out") && i + 1 < argc) config_out = argv[++i];
        else die("usage: bench_cuda [--preset NAME] [--steps N] [--tokens N] [--config-out PATH]");
    }
    PtError e;
    ModelConfig cfg;
    if (config_preset(&cfg, preset, &e)) die("%s", e.msg);
    if (config_out) {
        char *json = config_to_hf_json(&cfg);
        FILE *f = fopen(config_out, "w");
        if (!f || fputs(json, f) < 0 || fclose(f)) die("%s: cannot write the config", config_out);
        free(json);
    }
    if (cuda_device_count() == 0) {
        const char *require = getenv("POCKET_REQUIRE_CUDA");
        if (require && require[0] == '1') die("bench_cuda: POCKET_REQUIRE_CUDA=1 but the CUDA runtime sees no GPU");
        printf("bench_cuda: no GPU on this machine: skipped\n");
        return 0;
    }
    Device d;
    if (cuda_device_init(&d, 0, &e)) die("%s", e.msg);
    char desc[256];
    cuda_describe(&d, desc, sizeof desc);
    printf("== bench_cuda on %s\n", desc);
    ModelBundle b;
    bundle_alloc(&b, &cfg);
    bundle_init_random(&b, 1);
    float *w = dev_mirror(&d, b.params, b.tt.total * sizeof(float), "bench weights");
    const Config runs[4] = {{1024, 1, 0}, {4096, 1, 0}, {1024, 0, 0}, {1024, 1, 1}};
    double tok_s[4];
    for (int i = 0; i < 4; i++) tok_s[i] = run(&d, &b, w, runs[i], steps, max_tokens);
    printf("bench_cuda %s QAT step: %.1f%% of the plain step's tokens/s (T=1024, bf16)\n", cfg.name,
           100.0 * tok_s[3] / tok_s[0]);
    run_adamw(&d, &b, w);
    dev_unmirror(&d, w, b.params);
    bundle_free(&b);
    dev_free(&d);
    return 0;
}

#else

int main(void) {
    printf("bench_cuda: built without CUDA (make CUDA=1): skipped\n");
    return 0;
}

#endif
