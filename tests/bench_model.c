// bench_model: forward+backward of a whole model (default the pocket-0.3b
// preset, random weights) at B=1 and T=512, then a step at T=1024 for the
// memory figure. Prints tokens/s, GFLOP/s as a fraction of this machine's
// fp32 FMA peak measured in the same run, and peak RSS.
// usage: bench_model [PRESET] [T] [steps]
#include <stdlib.h>
#include <string.h>
#include "../model/model.h"
#include "../qat/qat.h"
#include "../util/cpu.h"

// qat != 0: the QAT step (fake-quant of every quantized weight before the
// forward, the straight-through backward after it), as pocket train does it.
static double run(const char *preset, int T, int steps, double peak, int qat) {
    PtError e;
    ModelConfig cfg;
    if (config_preset(&cfg, preset, &e)) die("%s", e.msg);
    ModelBundle b;
    bundle_alloc(&b, &cfg);
    bundle_init_random(&b, 1);
    Model m;
    model_from_bundle(&m, &b);
    if (model_plan(&m, 1, T, 1, stdout, &e)) die("%s", e.msg);
    int *tokens = xmalloc(T * sizeof(int), "tokens"), *targets = xmalloc(T * sizeof(int), "targets");
    Rng rng;
    rng_seed(&rng, 7);
    for (int i = 0; i < T; i++) tokens[i] = (int)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
    for (int i = 0; i < T; i++) targets[i] = i + 1 < T ? tokens[i + 1] : -1;
    ModelInput in = {.B = 1, .T = T, .tokens = tokens, .targets = targets};
    double flops = config_train_flops_per_token(&cfg, T) * T, best = 1e30;
    QatState q;
    float *effective = NULL;
    if (qat) {
        // group 64 as deployed; tiny test presets have widths only 16 divides
        int g = cfg.d_model % 64 == 0 && cfg.d_ff % 64 == 0 && (cfg.n_head * cfg.head_dim) % 64 == 0 ? 64 : 16;
        QuantSpec spec = {g, 0};
        if (qat_init(&q, &m.w.tt, &spec, cfg.tied_embeddings, 1, preset, &e) ||
            qat_init_from_weights(&q, &m.w.tt, m.w.params, QAT_INIT_RTN, NULL, NULL, preset, &e))
            die("%s", e.msg);
        effective = xaligned(m.w.tt.total * sizeof(float), "fake-quantized weights");
        model_use_weights(&m, effective);
    }
    for (int s = 0; s < steps + 1; s++) {   // the first step warms caches and pages
        model_zero_grads(&m);
        double t0 = now_seconds();
        int count;
        if (qat) qat_forward_weights(&q, &m.w.tt, m.w.params, effective);
        double loss = model_forward_backward(&m, &in, 1.0f / (T - 1), NULL, &count);
        if (qat) qat_backward(&q, &m.w.tt, m.w.params, m.grads, m.grads);
        double dt = now_seconds() - t0;
        if (s > 0 && dt < best) best = dt;
        if (s == 0) printf("  warmup step %.2f s (loss %.4f)\n", dt, loss / count);
    }
    double gflops = flops / best / 1e9;
    printf("%s %s B=1 T=%d: %.1f tokens/s, %.1f GFLOP/s = %.1f%% of peak, step %.2f s, peak RSS %.2f GB\n",
           preset, qat ? "QAT fwd+bwd (int4 fake-quant + STE)" : "fwd+bwd", T, T / best, gflops,
           100 * gflops / peak, best, peak_rss_kb() / 1048576.0);
    if (qat) {
        qat_free(&q);
        free(effective);
    }
    free(tokens);
    free(targets);
    model_free(&m);
    return T / best;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "pocket-0.3b";
    int T = argc > 2 ? atoi(argv[2]) : 512, steps = argc > 3 ? atoi(argv[3]) : 2;
    double peak = cpu_peak_fp32_gflops(2);
    printf("== bench_model: fp32 FMA peak (2 threads, %s): %.1f GFLOP/s\n", cpu_kernel_name(), peak);
    double plain = run(preset, T, steps, peak, 0);
    double qat = run(preset, T, steps, peak, 1);
    printf("QAT step throughput: %.1f%% of the plain step (same batch)\n", 100 * qat / plain);
    if (argc <= 2) run(preset, 1024, 1, peak, 0);   // memory figure at T=1024 (RSS is the process peak)
    return 0;
}
