// pocket import: an HF model directory or a GGUF file into an HDF5
// checkpoint that training, eval and export start from.
#include <string.h>
#include "../formats/gguf_import.h"
#include "../formats/hf_import.h"
#include "../formats/int4_weights.h"
#include "../formats/lora_checkpoint.h"
#include "../formats/checkpoint.h"
#include "../formats/lora_peft.h"
#include "args.h"
#include "commands.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket import HF_DIR|FILE.gguf --out CKPT.h5\n"
            "       pocket import PEFT_DIR --base CKPT.h5 [--int4] --out ADAPTER.h5\n\n"
            "Reads a Hugging Face model directory: config.json (model_type qwen3 or llama),\n"
            "model.safetensors or model.safetensors.index.json with its shards (F32, BF16\n"
            "or F16), and tokenizer.json / tokenizer_config.json when present, and writes\n"
            "an fp32 checkpoint. Every parameter must be present with the shape config.json\n"
            "implies; extra or missing tensors are an error.\n\n"
            "A GGUF file (architecture qwen3 or llama; tensors F32, F16, BF16, Q8_0, Q4_0 or\n"
            "Q4_1, dequantized to fp32) gives the config from its metadata and a tokenizer.json\n"
            "rebuilt from its tokenizer.ggml.* keys (byte-level BPE, pre-tokenizer qwen2 or gpt-2).\n"
            "Q4_0/Q4_1 matrices also give back the int4 quantizer state (/qat: group size, scales,\n"
            "zero points), so `--int4` and a re-export use the file's codes; groups whose offset\n"
            "no fp16 zero point reproduces (files not written by pocket) are counted and keep\n"
            "GGUF's d*q + m.\n\n"
            "A PEFT LoRA folder (adapter_config.json, adapter_model.safetensors) becomes an adapter\n"
            "checkpoint for --base (the checkpoint of the model it adapts; with --int4 its int4\n"
            "model, as for a QLoRA adapter): `pocket forward/eval/generate --lora` then run it.\n"
            "Refused with one line, nothing written: DoRA, rslora, bias other than none,\n"
            "modules_to_save, layers_to_transform, rank_pattern/alpha_pattern, target modules\n"
            "other than q/k/v/o/gate/up/down_proj, tensors missing, extra or of another shape.\n\n"
            "  HF_DIR          the model directory\n"
            "  FILE.gguf       a GGUF file\n"
            "  PEFT_DIR        a PEFT adapter folder (needs --base)\n"
            "  --out PATH      the checkpoint (or adapter checkpoint) to write (written atomically)\n"
            "  --base CKPT.h5  (PEFT_DIR) the checkpoint of the model the adapter adapts\n"
            "  --int4          (PEFT_DIR) bind the adapter to the base's int4 model (QLoRA) instead of its\n"
            "                  float weights\n");
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// One place decides which reader takes a source; a GGUF file may also give
// back an int4 quantizer state.
static int import_any(const char *src, ModelBundle *b, GgufInt4Import *int4, PtError *e) {
    memset(int4, 0, sizeof *int4);
    if (path_is_dir(src)) return hf_import(src, b, e);
    if (!path_exists(src)) return pt_fail(e, "%s: no such file or directory", src);
    if (ends_with(src, ".gguf") || gguf_is_file(src)) return gguf_import_int4(src, b, int4, e);
    return pt_fail(e, "%s: not an HF model directory or a .gguf file", src);
}

// A PEFT folder into an adapter checkpoint bound to the base's hash.
static int import_peft(const char *src, const char *base, int int4, const char *out) {
    if (!base || !out)
        return arg_usage("%s: a PEFT adapter needs %s", src, !base ? "--base CKPT.h5 (the model it adapts)" : "--out ADAPTER.h5");
    PtError e;
    ModelBundle b;   // the base as the adapter will run on it, for its hash
    if (checkpoint_load(base, &b, &e) || int4_lora_base(&b, base, int4, 0, NULL, NULL, &e)) {
        fprintf(stderr, "pocket import: %s\n", e.msg);
        return 1;
    }
    LoraAdapter ad;
    int rc = lora_peft_import(src, &b.cfg, &ad, &e);
    if (rc == 0) {
        lora_base_hash(&b.tt, b.params, ad.base_sha256);
        ad.base_int4 = int4;
        rc = lora_checkpoint_save(out, &ad, NULL, NULL, &e);
        char targets[64];
        lora_targets_format(ad.cfg.targets, targets, sizeof targets);
        if (rc == 0)
            printf("imported %s -> %s: LoRA r=%d alpha=%g on %s, %d tensors, for %s%s (sha256 %s)\n", src, out,
                   ad.cfg.rank, ad.cfg.alpha, targets, ad.tt.n, base, int4 ? " (int4)" : "", ad.base_sha256);
        lora_adapter_free(&ad);
    }
    if (rc) fprintf(stderr, "pocket import: %s\n", e.msg);
    bundle_free(&b);
    return rc ? 1 : 0;
}

int cmd_import(int argc, char **argv) {
    const char *src = NULL, *out = NULL, *base = NULL, *v;
    int base_int4 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help(stdout);
            return 0;
        } else if ((v = arg_value(argc, argv, &i, "--out"))) {
            out = v;
        } else if ((v = arg_value(argc, argv, &i, "--base"))) {
            base = v;
        } else if (!strcmp(argv[i], "--int4")) {
            base_int4 = 1;
        } else if (argv[i][0] == '-') {
            return arg_usage("unknown option '%s' (see --help)", argv[i]);
        } else if (!src) {
            src = argv[i];
        } else {
            return arg_usage("one source at a time ('%s')", argv[i]);
        }
    }
    if (src && lora_peft_is_dir(src)) return import_peft(src, base, base_int4, out);
    if (base || base_int4)
        return arg_usage("--base and --int4 are for a PEFT adapter folder; %s has no adapter_config.json",
                         src ? src : "(no source)");
    if (!src || !out) return arg_usage("%s", !src ? "missing HF_DIR or FILE.gguf (see --help)" : "missing --out CKPT.h5");
    double t0 = now_seconds();
    PtError err;
    ModelBundle b;
    GgufInt4Import int4;
    if (import_any(src, &b, &int4, &err)) {
        fprintf(stderr, "pocket import: %s\n", err.msg);
        return 1;
    }
    int rc = int4.restored ? checkpoint_save_qat(out, &b, &int4.q, &err) : checkpoint_save(out, &b, &err);
    if (rc) {
        fprintf(stderr, "pocket import: %s\n", err.msg);
        if (int4.restored) qat_free(&int4.q);
        bundle_free(&b);
        return 1;
    }
    size_t numel = 0;
    for (int i = 0; i < b.tt.n; i++) numel += b.tt.t[i].numel;
    config_print(&b.cfg, stdout);
    if (int4.restored) {
        printf("int4 quantizer state restored to /qat: %d Q4 matrices, group %d (%s), %s%s; %llu of %llu groups "
               "(%.2f%%) could not be represented exactly and keep GGUF's d*q+m\n",
               int4.n_q4, int4.q.spec.group, int4.group_from_metadata ? "from pocket.quantization.group_size"
                                                                       : "found from the blocks",
               int4.q.spec.symmetric ? "symmetric" : "asymmetric",
               int4.q.quant_embedding ? ", embedding quantized" : "", (unsigned long long)int4.inexact_groups,
               (unsigned long long)int4.groups,
               int4.groups ? 100.0 * (double)int4.inexact_groups / (double)int4.groups : 0.0);
        if (int4.n_rtn)
            printf("  %d matrices that int4 mode quantizes are not 4-bit in the file: RTN scales from their weights\n",
                   int4.n_rtn);
        qat_free(&int4.q);
    }
    printf("imported %s -> %s: %d tensors, %zu parameters (%.1f MB fp32), tokenizer %s, %.2f s\n", src, out, b.tt.n,
           numel, numel * 4.0 / 1e6, b.tokenizer_json ? "yes" : "no", now_seconds() - t0);
    bundle_free(&b);
    return 0;
}
