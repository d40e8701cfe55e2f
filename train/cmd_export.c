// pocket export: a checkpoint out as deployment files. Each format is one
// function in the FORMATS table.
#include <string.h>
#include "../export/gguf_writer.h"
#include "../export/hf_export.h"
#include "checkpoint.h"
#include "commands.h"

typedef struct {
    const char *out;
    const char *dtype;   // NULL: the format's default
    const char *quant;   // gguf tensor type; NULL: f16
    int force;
} ExportOptions;

typedef int (*ExportFn)(const ModelBundle *b, const ExportOptions *o, PtError *e);

static int export_hf(const ModelBundle *b, const ExportOptions *o, PtError *e) {
    if (o->quant) return pt_fail(e, "--quant is for gguf; hf takes --dtype f32|bf16");
    return hf_export(b, o->out, o->dtype ? o->dtype : "f32", o->force, e);
}

static int export_gguf(const ModelBundle *b, const ExportOptions *o, PtError *e) {
    if (o->dtype) return pt_fail(e, "--dtype is for hf; gguf takes --quant f32|f16|bf16|q8_0|q4_0|q4_1");
    GgufExportStats st;
    const char *quant = o->quant ? o->quant : "f16";
    if (gguf_export(b, o->out, quant, &st, e)) return -1;
    printf("%s: %d tensors: %d norms F32, %d %s", o->out, st.n_tensors, st.n_norm, st.n_quant, quant);
    if (st.n_fallback) printf(", %d F16 (ne[0] not a multiple of 32)", st.n_fallback);
    printf("; %.2f MB\n", st.bytes / 1e6);
    return 0;
}

static const struct {
    const char *name;
    ExportFn run;   // NULL: not written yet
    const char *what;
} FORMATS[] = {
    {"hf", export_hf, "Hugging Face directory: config.json, model.safetensors, tokenizer files"},
    {"mnn", NULL, "MNN INT4 package"},
    {"gguf", export_gguf, "GGUF file for llama.cpp (qwen3; llama for Llama-style models)"},
};
#define N_FORMATS (int)(sizeof FORMATS / sizeof FORMATS[0])

static void help(FILE *f) {
    fprintf(f, "usage: pocket export --ckpt CKPT.h5 --format FORMAT --out PATH [--dtype f32|bf16] [--quant Q] [--force]\n\n");
    for (int i = 0; i < N_FORMATS; i++)
        fprintf(f, "  --format %-5s %s%s\n", FORMATS[i].name, FORMATS[i].what, FORMATS[i].run ? "" : " (not supported yet)");
    fprintf(f,
            "\n  --ckpt CKPT.h5   the checkpoint to export\n"
            "  --out PATH       output directory (hf) or file (gguf); written to PATH.tmp.PID and renamed\n"
            "  --dtype D        weight storage type for hf: f32 (default) or bf16\n"
            "  --quant Q        matrix type for gguf: f32, f16 (default), bf16, q8_0, q4_0, q4_1\n"
            "                   (round to nearest as llama.cpp; norms stay F32; matrices whose rows\n"
            "                   are not a multiple of 32 fall back to F16)\n"
            "  --force          replace an existing non-empty output directory\n");
}

int cmd_export(int argc, char **argv) {
    const char *ckpt = NULL, *format = NULL, *v;
    ExportOptions o = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help(stdout);
            return 0;
        } else if ((v = arg_value(argc, argv, &i, "--ckpt"))) {
            ckpt = v;
        } else if ((v = arg_value(argc, argv, &i, "--format"))) {
            format = v;
        } else if ((v = arg_value(argc, argv, &i, "--out"))) {
            o.out = v;
        } else if ((v = arg_value(argc, argv, &i, "--dtype"))) {
            o.dtype = v;
        } else if ((v = arg_value(argc, argv, &i, "--quant"))) {
            o.quant = v;
        } else if (!strcmp(argv[i], "--force")) {
            o.force = 1;
        } else {
            fprintf(stderr, "pocket export: unknown argument '%s' (see --help)\n", argv[i]);
            return 1;
        }
    }
    if (!ckpt || !format || !o.out) {
        fprintf(stderr, "pocket export: missing %s (see --help)\n", !ckpt ? "--ckpt CKPT.h5" : !format ? "--format" : "--out PATH");
        return 1;
    }
    int f = 0;
    while (f < N_FORMATS && strcmp(FORMATS[f].name, format) != 0) f++;
    if (f == N_FORMATS) {
        fprintf(stderr, "pocket export: unknown format '%s' (known: hf, mnn, gguf)\n", format);
        return 1;
    }
    if (!FORMATS[f].run) {
        fprintf(stderr, "pocket export: format '%s' is not supported yet\n", format);
        return 1;
    }
    if (o.quant && gguf_quant_type(o.quant) < 0) {
        fprintf(stderr, "pocket export: unknown --quant '%s' (f32, f16, bf16, q8_0, q4_0, q4_1)\n", o.quant);
        return 1;
    }
    double t0 = now_seconds();
    PtError err;
    ModelBundle b;
    if (checkpoint_load(ckpt, &b, &err)) {
        fprintf(stderr, "pocket export: %s\n", err.msg);
        return 1;
    }
    int rc = FORMATS[f].run(&b, &o, &err);
    if (rc) fprintf(stderr, "pocket export: %s\n", err.msg);
    else {
        const char *kind = o.dtype ? o.dtype : o.quant;
        printf("exported %s -> %s (%s%s%s), %.2f s\n", ckpt, o.out, format, kind ? ", " : "", kind ? kind : "",
               now_seconds() - t0);
    }
    bundle_free(&b);
    return rc ? 1 : 0;
}
