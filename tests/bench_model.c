// bench_model: forward+backward of a whole model (default the pocket-0.3b
// preset, random weights, B=1) in the configurations a recipe can pick:
//   T=512:  fp32 matmuls, bf16 matmuls ([train] matmul = bf16), QAT (fp32),
//           LoRA r=16 on every projection ([lora], fp32: the base frozen, no base gradients)
//   T=1024: fp32 with recompute off and on ([train] recompute), bf16
// Prints tokens/s, GFLOP/s as a fraction of this machine's fp32 FMA peak
// measured in the same run (bf16 products can go past it: their peak is 2x),
// and the peak RSS of each configuration: the high-water mark is reset before
// each one is built (Linux /proc/self/clear_refs), so each figure covers that
// configuration alone (model, grads, activations, plus the process itself).
// FLOPs count the useful work (model/config.c): recompute's extra forward is
// not counted, so it shows as a lower rate.
// usage: bench_model [PRESET] [T] [steps] [plain]
//   with T given: only the T=T runs; with "plain": only the fp32 and bf16
//   steps (tests/bench_isa.sh, once per instruction set)
#include <stdlib.h>
#include <string.h>
#include "../model/ops/matmul_kernels.h"
#include "../qat/qat.h"
#include "../util/cpu.h"
#include "bench_header.h"
#include "test_model_util.h"

typedef struct {
    int T, steps;    // timed steps after one warm-up step; the best counts
    int qat;         // the QAT step: fake-quant before the forward, STE after the backward
    int bf16, recompute;
    int lora;        // a LoRA adapter of this rank on every projection: only its gradients
} RunSpec;

typedef struct {
    double tok_s, gflops, step_s, rss_gb;
} RunResult;

// Restarts the peak-RSS count from the current RSS; 0 when the kernel lacks it.
static int reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

// VmHWM (peak RSS since the last reset) in GB, or the process peak if absent.
static double peak_rss_gb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return (kb >= 0 ? kb : peak_rss_kb()) / 1048576.0;
}

static RunResult run(const char *preset, const RunSpec *r, double peak, int rss_reset) {
    PtError e;
    ModelConfig cfg;
    if (config_preset(&cfg, preset, &e)) die("%s", e.msg);
    if (rss_reset) reset_peak_rss();
    ModelBundle b;
    bundle_alloc(&b, &cfg);
    bundle_init_random(&b, 1);
    TestModel tm;
    ModelOptions opt = {r->recompute, r->bf16 ? MATMUL_BF16 : MATMUL_FP32, A16_OFF};
    test_model_from_bundle(&tm, &b, &opt);
    Model *m = &tm.m;
    const TensorTable *tt = &tm.b.tt;
    float *params = tm.b.params;
    const int T = r->T;
    LoraAdapter ad = {0};
    if (r->lora) {
        LoraConfig lc = {.rank = r->lora, .alpha = 2.0f * r->lora, .targets = (1u << LORA_N_TARGETS) - 1};
        lora_adapter_alloc(&ad, &cfg, &lc);
        lora_init(ad.params, &ad.tt, &lc, LORA_INIT_PEFT, 1);
        model_use_lora(m, &ad.cfg, &ad.tt, ad.params);
    }
    if (model_plan(m, 1, T, 1, stdout, &e)) die("%s", e.msg);
    int *tokens = xmalloc(T * sizeof(int), "tokens"), *targets = xmalloc(T * sizeof(int), "targets");
    Rng rng;
    rng_seed(&rng, 7);
    for (int i = 0; i < T; i++) tokens[i] = (int)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
    for (int i = 0; i < T; i++) targets[i] = i + 1 < T ? tokens[i + 1] : -1;
    ModelInput in = {.B = 1, .T = T, .tokens = tokens, .targets = targets};
    double flops = config_train_flops_per_token(&cfg, T) * T, best = 1e30;
    QatState q;
    float *effective = NULL;
    if (r->qat) {
        // group 64 as deployed; tiny test presets have widths only 16 divides
        int g = cfg.d_model % 64 == 0 && cfg.d_ff % 64 == 0 && (cfg.n_head * cfg.head_dim) % 64 == 0 ? 64 : 16;
        QuantSpec spec = {g, 0};
        if (qat_init(&q, tt, &spec, cfg.tied_embeddings, 1, preset, &e) ||
            qat_init_from_weights(&q, tt, params, QAT_INIT_RTN, NULL, NULL, preset, &e))
            die("%s", e.msg);
        effective = xaligned(tt->total * sizeof(float), "fake-quantized weights");
        model_use_weights(m, effective);
    }
    for (int s = 0; s < r->steps + 1; s++) {   // the first step warms caches and pages
        model_zero_grads(m);
        double t0 = now_seconds();
        int count;
        if (r->qat) qat_forward_weights(&tm.dev, &q, tt, params, effective);
        double loss = model_forward_backward(m, &in, 1.0f / (T - 1), NULL, &count);
        if (r->qat) qat_backward(&tm.dev, &q, tt, params, m->grads, m->grads);
        double dt = now_seconds() - t0;
        if (s > 0 && dt < best) best = dt;
        if (s == 0) printf("  warmup step %.2f s (loss %.4f)\n", dt, loss / count);
    }
    RunResult res = {T / best, flops / best / 1e9, best, peak_rss_gb()};
    printf("%s %s B=1 T=%d matmul=%s recompute=%s: %.1f tokens/s, %.1f GFLOP/s = %.1f%% of fp32 peak, step %.2f s "
           "(best of %d), peak RSS %.2f GB\n",
           preset, r->qat ? "QAT fwd+bwd (int4 fake-quant + STE)" : r->lora ? "LoRA r=16 fwd+bwd" : "fwd+bwd", T,
           r->bf16 ? "bf16" : "fp32",
           r->recompute ? "on" : "off", res.tok_s, res.gflops, 100 * res.gflops / peak, best, r->steps, res.rss_gb);
    if (r->qat) {
        qat_free(&q);
        free(effective);
    }
    free(tokens);
    free(targets);
    test_model_free(&tm);
    lora_adapter_free(&ad);
    return res;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "pocket-0.3b";
    int T = argc > 2 ? atoi(argv[2]) : 512, steps = argc > 3 ? atoi(argv[3]) : 2;
    const int plain = argc > 4 && !strcmp(argv[4], "plain");
    if (argc > 4 && !plain) die("bench_model: unknown option '%s' (usage: bench_model [PRESET] [T] [steps] [plain])", argv[4]);
    Device dev;   // the kernels every configuration's device gets (POCKET_KERNELS may force them)
    cpu_device_init(&dev, 0, NULL);
    bench_header("bench_model", &dev);
    double peak = bench_peak(&dev, 2);
    int rss_reset = reset_peak_rss();
    printf("== bench_model: fp32 FMA peak (2 threads, %s): %.1f GFLOP/s; bf16 matmul kernel %s; peak RSS %s\n",
           cpu_kernels(&dev)->f32->name, peak, cpu_kernels(&dev)->bf16->name,
           rss_reset ? "per configuration (high-water mark reset before each)" : "of the whole process so far");
    const char *note = cpu_kernels_bf16_notice(cpu_kernels(&dev));
    if (note) printf("%s\n", note);
    dev_free(&dev);
    RunResult fp32 = run(preset, &(RunSpec){T, steps, 0, 0, 0, 0}, peak, rss_reset);
    if (plain) {
        RunResult bf16 = run(preset, &(RunSpec){T, steps, 0, 1, 0, 0}, peak, rss_reset);
        printf("bf16 step throughput: %.2fx the fp32 step (T=%d)\n", bf16.tok_s / fp32.tok_s, T);
        return 0;
    }
    // right after the full step, so that both meet the same machine
    ModelConfig cfg;
    PtError e;
    if (config_preset(&cfg, preset, &e)) die("%s", e.msg);
    const double params_gb = config_param_count(&cfg) * 4.0 / (1 << 30);
    RunResult lora = run(preset, &(RunSpec){T, steps, 0, 0, 0, 16}, peak, rss_reset);
    printf("LoRA r=16 step (every projection, fp32): %.2f s vs %.2f s full (%.0f%% of the time), peak RSS %.2f GB vs "
           "%.2f GB; a training run also keeps no AdamW moments for the base (2 x %.2f GB)\n",
           lora.step_s, fp32.step_s, 100 * lora.step_s / fp32.step_s, lora.rss_gb, fp32.rss_gb, params_gb);
    RunResult bf16 = run(preset, &(RunSpec){T, steps, 0, 1, 0, 0}, peak, rss_reset);
    RunResult qat = run(preset, &(RunSpec){T, steps, 1, 0, 0, 0}, peak, rss_reset);
    printf("bf16 step throughput: %.2fx the fp32 step (T=%d)\n", bf16.tok_s / fp32.tok_s, T);
    printf("QAT step throughput: %.1f%% of the plain step (same batch)\n", 100 * qat.tok_s / fp32.tok_s);
    if (argc <= 2) {   // the memory figures at T=1024
        RunResult off = run(preset, &(RunSpec){1024, 2, 0, 0, 0, 0}, peak, rss_reset);
        RunResult on = run(preset, &(RunSpec){1024, 2, 0, 0, 1, 0}, peak, rss_reset);
        RunResult b16 = run(preset, &(RunSpec){1024, 2, 0, 1, 0, 0}, peak, rss_reset);
        printf("recompute at T=1024 (fp32): peak RSS %.2f GB off, %.2f GB on (saves %.2f GB, %.0f%%); "
               "step %.2f s off, %.2f s on (%.0f%% more time)\n",
               off.rss_gb, on.rss_gb, off.rss_gb - on.rss_gb, 100 * (off.rss_gb - on.rss_gb) / off.rss_gb,
               off.step_s, on.step_s, 100 * (on.step_s / off.step_s - 1));
        printf("bf16 step throughput: %.2fx the fp32 step (T=1024)\n", b16.tok_s / off.tok_s);
    }
    return 0;
}
