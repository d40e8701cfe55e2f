// pocket export: a checkpoint out as deployment files. Each format is one
// function in the FORMATS table.
#include <string.h>
#include "../export/hf_export.h"
#include "checkpoint.h"
#include "commands.h"

typedef struct {
    const char *out;
    const char *dtype;   // NULL: the format's default
    int force;
} ExportOptions;

typedef int (*ExportFn)(const ModelBundle *b, const ExportOptions *o, PtError *e);

static int export_hf(const ModelBundle *b, const ExportOptions *o, PtError *e) {
    return hf_export(b, o->out, o->dtype ? o->dtype : "f32", o->force, e);
}

static const struct {
    const char *name;
    ExportFn run;   // NULL: not written yet
    const char *what;
} FORMATS[] = {
    {"hf", export_hf, "Hugging Face directory: config.json, model.safetensors, tokenizer files"},
    {"mnn", NULL, "MNN INT4 package"},
    {"gguf", NULL, "GGUF file for llama.cpp"},
};
#define N_FORMATS (int)(sizeof FORMATS / sizeof FORMATS[0])

static void help(FILE *f) {
    fprintf(f, "usage: pocket export --ckpt CKPT.h5 --format FORMAT --out PATH [--dtype f32|bf16] [--force]\n\n");
    for (int i = 0; i < N_FORMATS; i++)
        fprintf(f, "  --format %-5s %s%s\n", FORMATS[i].name, FORMATS[i].what, FORMATS[i].run ? "" : " (not supported yet)");
    fprintf(f,
            "\n  --ckpt CKPT.h5   the checkpoint to export\n"
            "  --out PATH       output directory (hf); written to PATH.tmp.PID and renamed\n"
            "  --dtype D        weight storage type for hf: f32 (default) or bf16\n"
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
    double t0 = now_seconds();
    PtError err;
    ModelBundle b;
    if (checkpoint_load(ckpt, &b, &err)) {
        fprintf(stderr, "pocket export: %s\n", err.msg);
        return 1;
    }
    int rc = FORMATS[f].run(&b, &o, &err);
    if (rc) fprintf(stderr, "pocket export: %s\n", err.msg);
    else printf("exported %s -> %s (%s%s%s), %.2f s\n", ckpt, o.out, format, o.dtype ? ", " : "", o.dtype ? o.dtype : "",
                now_seconds() - t0);
    bundle_free(&b);
    return rc ? 1 : 0;
}
