// open_model.c: checkpoint -> bundle, int4 state, device and model (open_model.h).
#include "open_model.h"
#include <omp.h>
#include <string.h>
#include "../formats/checkpoint.h"
#include "../model/ops/ops.h"
#include "../train/devices.h"
#include "args.h"

int run_flag(int argc, char **argv, int *i, OpenOptions *oo) {
    ModelOptions *o = &oo->numerics;
    const char *v;
    if ((v = arg_value(argc, argv, i, "--device"))) {
        oo->device = v;
        return 1;
    }
    if ((v = arg_value(argc, argv, i, "--lora"))) {
        oo->lora = v;
        return 1;
    }
    if ((v = arg_value(argc, argv, i, "--matmul"))) {
        if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
            arg_usage("--matmul '%s' is not fp32 or bf16", v);
            return -1;
        }
        o->matmul = strcmp(v, "bf16") ? MATMUL_FP32 : MATMUL_BF16;
        return 1;
    }
    if ((v = arg_value(argc, argv, i, "--a16"))) {
        if ((o->a16 = a16_mode_from_name(v)) < 0) {
            arg_usage("--a16 '%s' is not off, bf16 or fp16", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

// The line open_model logs about the int4 weights (which scales, the grid).
static void open_model_print_int4(const OpenModel *om, FILE *f) {
    const int untied_float_embedding = !om->q.quant_embedding && !om->b.cfg.tied_embeddings;
    fprintf(f, "int4 weights: %s, group %d, %s%s\n", om->from_qat ? "the checkpoint's QAT scales" : "RTN from float",
            om->q.spec.group, om->q.spec.symmetric ? "symmetric" : "asymmetric",
            om->q.quant_embedding ? ", embedding quantized" : untied_float_embedding ? ", embedding in bf16" : "");
}

// The int4 state (the checkpoint's QAT scales, else RTN), and with `weights`
// the weights of the int4 model on the host, as the exporters make them.
static int load_int4(OpenModel *om, const char *ckpt, const OpenOptions *o, int weights, PtError *e) {
    if (int4_load_state(&om->b, ckpt, o->grid, &om->q, &om->from_qat, e)) return -1;
    om->int4 = 1;
    const QuantSpec spec = om->q.spec, *g = o->grid;
    if (om->from_qat && o->grid_chosen && g && (g->group != spec.group || !g->symmetric != !spec.symmetric))
        return pt_fail(e,
                       "%s: holds QAT scales for int4 group %d %s, not the requested group %d %s "
                       "(a chosen grid applies to float checkpoints only)",
                       ckpt, spec.group, spec.symmetric ? "symmetric" : "asymmetric", g->group,
                       g->symmetric ? "symmetric" : "asymmetric");
    if (weights) {
        om->int4_host = xaligned(om->b.tt.total * sizeof(float), "int4 weights");
        int4_weights(&om->q, &om->b, o->threads, om->int4_host);
    }
    if (o->log) open_model_print_int4(om, o->log);
    return 0;
}


void open_model_base_hash(const OpenModel *om, char hex[65]) {
    lora_base_hash(&om->b.tt, om->int4 ? om->int4_host : om->b.params, hex);
}

// The adapter, checked against the hash of the weights the model runs.
static int load_lora(OpenModel *om, const char *ckpt, const OpenOptions *o, PtError *e) {
    char hash[65];
    open_model_base_hash(om, hash);
    char base[600];
    snprintf(base, sizeof base, "%s%s", ckpt, om->int4 ? " (its int4 model)" : " (its float weights)");
    if (lora_checkpoint_load(o->lora, &om->b.cfg, hash, base, &om->ad, e)) return -1;
    if (o->log) {
        char targets[64];
        lora_targets_format(om->ad.cfg.targets, targets, sizeof targets);
        fprintf(o->log, "LoRA adapter %s: rank %d, alpha %g, on %s\n", o->lora, om->ad.cfg.rank, om->ad.cfg.alpha,
                targets);
    }
    return 0;
}

// The host part of open_model: the bundle, the int4 state (with the int4
// weights when `weights`, or an adapter needs their hash), the adapter.
static int open_host(OpenModel *om, const char *ckpt, const OpenOptions *o, int weights, PtError *e) {
    memset(om, 0, sizeof *om);
    // The host steps (RTN, the int4 weights) run on the threads the device will.
    if (o->threads > 0) omp_set_num_threads(o->threads);
    if (checkpoint_load(ckpt, &om->b, e) || (o->int4 && load_int4(om, ckpt, o, weights || o->lora, e)) ||
        (o->lora && load_lora(om, ckpt, o, e))) {
        open_model_close(om);
        return -1;
    }
    return 0;
}

int open_checkpoint(OpenModel *om, const char *ckpt, const OpenOptions *o, PtError *e) {
    return open_host(om, ckpt, o, o->int4_weights, e);
}

int open_model(OpenModel *om, const char *ckpt, const OpenOptions *o, PtError *e) {
    if (open_host(om, ckpt, o, 1, e)) return -1;
    if (device_open(&om->dev, o->device ? o->device : "cpu", o->threads, e)) {
        open_model_close(om);
        return -1;
    }
    const size_t bytes = om->b.tt.total * sizeof(float);
    om->params = dev_mirror(&om->dev, om->b.params, bytes, "weights");
    if (om->int4) om->int4_weights = dev_mirror(&om->dev, om->int4_host, bytes, "int4 weights");
    model_init(&om->m, &om->dev, &om->b.cfg, &om->b.tt, om->int4 ? om->int4_weights : om->params, &o->numerics);
    if (om->int4 && o->pack_int4 && o->numerics.matmul == MATMUL_FP32 && om->dev.be->pack_int4) {
        om->packed = xcalloc(1, sizeof *om->packed, "packed int4 weights");
        qat_pack(&om->dev, &om->q, &om->b.tt, om->b.params, om->packed);
        model_use_packed(&om->m, om->packed);
    }
    if (o->lora) {
        om->lora_params = dev_mirror(&om->dev, om->ad.params, om->ad.tt.total * sizeof(float), "LoRA adapter");
        model_use_lora(&om->m, &om->ad.cfg, &om->ad.tt, om->lora_params);
    }
    // Only the bf16 notice: the kernels themselves are in `pocket --version`.
    const char *note = o->log && om->dev.be == backend_cpu() && o->numerics.matmul == MATMUL_BF16
                           ? cpu_kernels_bf16_notice(cpu_kernels(&om->dev))
                           : NULL;
    if (note) fprintf(o->log, "%s\n", note);
    return 0;
}

void open_model_close(OpenModel *om) {
    model_free(&om->m);
    if (om->packed) qat_pack_free(&om->dev, om->packed);
    free(om->packed);
    if (om->dev.be) {
        dev_unmirror(&om->dev, om->int4_weights, om->int4_host);
        dev_unmirror(&om->dev, om->lora_params, om->ad.params);
        dev_unmirror(&om->dev, om->params, om->b.params);
        dev_free(&om->dev);
    }
    free(om->int4_host);
    if (om->int4) qat_free(&om->q);
    lora_adapter_free(&om->ad);
    bundle_free(&om->b);
    memset(om, 0, sizeof *om);
}
