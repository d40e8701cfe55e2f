// pocket export: a checkpoint out as deployment files. Each format is a row of
// FORMATS: what its options must be (a usage error otherwise), what it needs
// of the checkpoint, checked on its config and tokenizer files before any
// weight is read, and the export itself, of the checkpoint opened without a
// device (open_checkpoint): the int4 model's weights are made only where a
// draft's or an adapter's base hash, or a merge, needs them.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "../data/chat.h"
#include "../export/mnn_export.h"
#include "../export/mnn_lora.h"
#include "../formats/checkpoint.h"
#include "../formats/draft_checkpoint.h"
#include "../formats/gguf_export.h"
#include "../formats/hf_export.h"
#include "../formats/lora_peft.h"
#include "../util/out_dir.h"
#include "args.h"
#include "commands.h"
#include "export_lora.h"
#include "open_model.h"

typedef struct {
    const char *ckpt;
    const char *out;
    const char *dtype;   // NULL: the format's default
    const char *quant;   // gguf tensor type; NULL: f16
    const char *graph;   // mnn graph form: "fused" (default) or "plain"
    const char *memory;  // mnn config.json "memory": "low" (default) or "normal"
    const char *sampler; // mnn config.json sampling: "mixed" (default) or "greedy"
    const char *lora;    // an adapter checkpoint: peft, or for the runtimes cli/export_lora.h (mnn, gguf)
    const char *draft;   // mnn: a DFlash draft checkpoint to ship in the package (export/mnn_draft.h)
    int force, merge;
} ExportOptions;

// What the checks read and the export uses: the checkpoint without its
// weights (config, table, tokenizer files with the bundled template), the
// int4 grid it deploys with (int4: the checkpoint's QAT state's, else RTN
// with group 64, asymmetric; symmetric for q4_0, whose blocks have no
// offset), a draft read before the weights, the MNN options.
typedef struct {
    ModelBundle meta;
    int int4;
    QuantSpec spec;
    int quant_embedding;
    Draft draft;
    MnnExportOptions mo;
} Job;

// A format: `options` checks the options alone (a usage error), `check` what
// the package needs of the checkpoint without its weights, `run` exports the
// checkpoint opened as `pocket forward --int4` opens it (int4 weights) or
// plain. `check` and `run` may be NULL.
typedef struct {
    const char *name;
    int (*options)(const ExportOptions *o, PtError *e);
    int (*check)(Job *j, const ExportOptions *o, PtError *e);
    int (*run)(const OpenModel *om, Job *j, const ExportOptions *o, PtError *e);
    const char *what;
} Format;

static int hf_options(const ExportOptions *o, PtError *e) {
    return o->quant ? pt_fail(e, "--quant is for gguf; hf takes --dtype f32|bf16") : 0;
}
static int hf_check(Job *j, const ExportOptions *o, PtError *e) {
    (void)j;
    return hf_export_check(o->out, o->dtype ? o->dtype : "f32", o->force, e);
}
static int hf_run(const OpenModel *om, Job *j, const ExportOptions *o, PtError *e) {
    (void)j;
    return hf_export(&om->b, o->out, o->dtype ? o->dtype : "f32", o->force, e);
}

static int gguf_options(const ExportOptions *o, PtError *e) {
    return o->dtype ? pt_fail(e, "--dtype is for hf; gguf takes --quant f32|f16|bf16|q8_0|q4_0|q4_1") : 0;
}
static int gguf_check(Job *j, const ExportOptions *o, PtError *e) {
    if (o->lora) return 0;   // an adapter file: the adapter was checked against the config
    return gguf_export_check(&j->meta, o->out, o->quant ? o->quant : "f16", j->int4 ? &j->spec : NULL, e);
}
static int gguf_run(const OpenModel *om, Job *j, const ExportOptions *o, PtError *e) {
    (void)j;
    LoraExportArgs la = {o->lora, "gguf", o->out, o->quant, 0, o->force, NULL};
    if (o->lora) return export_lora(om, &la, e);
    GgufExportStats st;
    const char *quant = o->quant ? o->quant : "f16";
    const QatState *q = om->int4 ? &om->q : NULL;
    int rc = gguf_export(&om->b, o->out, quant, q, &st, e);
    if (rc == 0) {
        printf("%s: %d tensors: %d norms F32, %d %s", o->out, st.n_tensors, st.n_norm, st.n_quant, quant);
        if (st.n_fallback) printf(", %d F16 (ne[0] not a multiple of 32)", st.n_fallback);
        if (st.n_int4_float)
            printf(", %d F32/BF16/Q8_0 (int4 mode leaves them unquantized; %d exactly Q8_0 values kept Q8_0)",
                   st.n_int4_float, st.n_int4_q8_0);
        printf("; %.2f MB\n", st.bytes / 1e6);
        if (q)
            printf("int4 codes from %s (group %d, %s): %llu %s blocks; %llu (%.2f%%) with an offset fp16 could not "
                   "hold exactly\n",
                   om->from_qat ? "the checkpoint's QAT state" : "RTN of the float weights", st.int4_group,
                   q->spec.symmetric ? "symmetric" : "asymmetric", (unsigned long long)st.int4_blocks, quant,
                   (unsigned long long)st.inexact_offset_blocks,
                   st.int4_blocks ? 100.0 * (double)st.inexact_offset_blocks / (double)st.int4_blocks : 0.0);
    }
    return rc;
}

static int mnn_options(const ExportOptions *o, PtError *e) {
    if (o->draft && o->lora) return pt_fail(e, "--draft goes with a base package, not with --lora");
    if (o->lora && !o->merge && (o->graph || o->memory || o->sampler))
        return pt_fail(e, "--graph, --memory and --sampler are the base package's: lora.mnn follows the package in --out");
    if (o->dtype || o->quant) return pt_fail(e, "--dtype and --quant are not for mnn: it is always int4 (group of the checkpoint's QAT state, else 64)");
    const char *graph = o->graph ? o->graph : "fused", *memory = o->memory ? o->memory : "low";
    if (strcmp(graph, "fused") != 0 && strcmp(graph, "plain") != 0)
        return pt_fail(e, "unknown --graph '%s' (fused, plain)", graph);
    if (strcmp(memory, "low") != 0 && strcmp(memory, "normal") != 0)
        return pt_fail(e, "unknown --memory '%s' (low, normal)", memory);
    const char *sampler = o->sampler ? o->sampler : "mixed";
    if (strcmp(sampler, "mixed") != 0 && strcmp(sampler, "greedy") != 0)
        return pt_fail(e, "unknown --sampler '%s' (mixed, greedy)", sampler);
    return 0;
}
static int mnn_check(Job *j, const ExportOptions *o, PtError *e) {
    const char *graph = o->graph ? o->graph : "fused", *sampler = o->sampler ? o->sampler : "mixed";
    j->mo = (MnnExportOptions){.fused = strcmp(graph, "fused") == 0, .memory = o->memory ? o->memory : "low",
                               .force = o->force, .greedy = !strcmp(sampler, "greedy")};
    if (o->lora && !o->merge) return mnn_lora_export_check(o->out, o->force, e);
    // The draft is read now; that it was trained on exactly the int4 weights the package ships is checked once
    // they are made.
    if (o->draft) {
        if (draft_checkpoint_load(o->draft, &j->meta.cfg, NULL, NULL, &j->draft, e)) return -1;
        j->mo.draft = &j->draft;
    }
    return mnn_export_check(&j->meta, &j->spec, j->quant_embedding, &j->mo, o->out, e);
}
static int mnn_run(const OpenModel *om, Job *j, const ExportOptions *o, PtError *e) {
    LoraExportArgs la = {o->lora, "mnn", o->out, NULL, o->merge, o->force, &j->mo};
    if (o->lora) return export_lora(om, &la, e);
    if (o->draft) {
        char hash[65], base[1100];
        open_model_base_hash(om, hash);
        snprintf(base, sizeof base, "%s (its int4 model)", o->ckpt);
        if (draft_check_base(o->draft, j->draft.base_sha256, hash, base, e)) return -1;
    }
    MnnExportStats st;
    const QatState *q = &om->q;
    const char *graph = o->graph ? o->graph : "fused";
    int rc = mnn_export(&om->b, q, o->out, &j->mo, &st, e);
    if (rc == 0 && o->draft) {
        char layers[128];
        draft_layers_format(&j->draft.cfg, layers, sizeof layers);
        char head[96];
        if (j->draft.n_vocab) snprintf(head, sizeof head, "its vocabulary's %d rows of", j->draft.n_vocab);
        else snprintf(head, sizeof head, "all of");
        printf("%s: DFlash draft %s (%d layer(s), block %d, target layers %s): dflash.mnn %.1f kB (%d ops, fp32 "
               "weights; %s the target's int4 lm_head in dflash.mnn.weight, %.2f MB), dflash_fc.mnn %.1f kB; llm.mnn "
               "outputs hidden_states; speculative_type dflash for MNN 3.6.1\n",
               o->out, o->draft, j->draft.cfg.n_layer, j->draft.cfg.block, layers, st.draft_graph_bytes / 1e3, st.draft_ops,
               head, st.draft_weight_bytes / 1e6, st.draft_fc_bytes / 1e3);
    }
    if (rc == 0)
        printf("%s/config.json: %s\n", o->out,
               j->mo.greedy ? "greedy decoding (sampler_type greedy), as pocket generate's default"
                         : "MNN's mixed sampler (temperature 0.8, top_k 40, top_p 0.9, min_p 0.05): replies vary "
                           "from run to run; --sampler greedy matches pocket generate's default");
    if (rc == 0)
        printf("%s: %s graph, %d ops; %d int4 linears from %s (group %d, %s); llm.mnn.weight %.2f MB, llm.mnn %.1f kB, "
               "tokenizer.mtok %.1f kB%s\n",
               o->out, graph, st.n_ops, st.n_linears, om->from_qat ? "the checkpoint's QAT state" : "RTN of the float weights",
               q->spec.group, q->spec.symmetric ? "symmetric" : "asymmetric", st.weight_bytes / 1e6, st.graph_bytes / 1e3,
               st.tokenizer_bytes / 1e3, st.embedding_bytes ? ", embeddings_bf16.bin" : "");
    return rc;
}

static int peft_options(const ExportOptions *o, PtError *e) {
    if (!o->lora) return pt_fail(e, "--format peft writes an adapter: give --lora ADAPTER.h5");
    if (o->dtype || o->quant) return pt_fail(e, "--dtype and --quant are not for peft: the adapter is written in f32");
    return 0;
}
static int peft_check(Job *j, const ExportOptions *o, PtError *e) {
    (void)j;
    return out_dir_check(o->out, o->force, e);
}
static int peft_run(const OpenModel *om, Job *j, const ExportOptions *o, PtError *e) {
    (void)j;
    int rc = lora_peft_export(&om->ad, o->out, o->ckpt, o->force, e);
    if (rc == 0)
        printf("%s: adapter_config.json, adapter_model.safetensors (%d tensors, r=%d, alpha=%g)%s\n", o->out,
               om->ad.tt.n, om->ad.cfg.rank, om->ad.cfg.alpha,
               om->ad.base_int4 ? "; trained on the int4 model: PEFT applies it to the float base it is given" : "");
    return rc;
}

static const Format FORMATS[] = {
    {"hf", hf_options, hf_check, hf_run, "Hugging Face directory: config.json, model.safetensors, tokenizer files"},
    {"mnn", mnn_options, mnn_check, mnn_run,
     "MNN INT4 package for MNN's LLM runtime (llm.mnn, llm.mnn.weight, configs, tokenizer.mtok)"},
    {"gguf", gguf_options, gguf_check, gguf_run, "GGUF file for llama.cpp (qwen3; llama for Llama-style models)"},
    {"peft", peft_options, peft_check, peft_run,
     "with --lora ADAPTER.h5: PEFT adapter folder (adapter_config.json, adapter_model.safetensors)"},
};
#define N_FORMATS (int)(sizeof FORMATS / sizeof FORMATS[0])

static void help(FILE *f) {
    fprintf(f, "usage: pocket export --ckpt CKPT.h5 --format FORMAT --out PATH [--dtype f32|bf16] [--quant Q]\n"
                 "                     [--graph fused|plain] [--memory low|normal] [--sampler mixed|greedy] [--force]\n"
                 "                     [--lora ADAPTER.h5 [--merge]] [--draft DRAFT.h5]\n\n");
    for (int i = 0; i < N_FORMATS; i++)
        fprintf(f, "  --format %-5s %s\n", FORMATS[i].name, FORMATS[i].what);
    fprintf(f,
            "\n  --ckpt CKPT.h5   the checkpoint to export\n"
            "  --out PATH       output directory (hf) or file (gguf); written to PATH.tmp.PID and renamed\n"
            "  --dtype D        weight storage type for hf: f32 (default) or bf16\n"
            "  --quant Q        matrix type for gguf: f32, f16 (default), bf16, q8_0, q4_0, q4_1\n"
            "                   f16/bf16/q8_0: rounded as llama.cpp; matrices whose rows are not a\n"
            "                   multiple of 32 fall back to F16. q4_0/q4_1: the int4 weights that\n"
            "                   `pocket forward --int4` runs (the checkpoint's QAT scales, else RTN\n"
            "                   group 64: asymmetric for q4_1, symmetric for q4_0), codes unchanged,\n"
            "                   each group split into 32-weight blocks; matrices int4 mode does not\n"
            "                   quantize are written as it runs them (an untied embedding BF16, else\n"
            "                   F32). Norms are always F32.\n"
            "  --graph G        mnn graph form: fused (default; MNN's RoPE op, NC4HW4 attention output and\n"
            "                   MUL_SILU, needs MNN >= 3.6.1) or plain (elementwise ops, any 3.6.x runtime)\n"
            "  --memory M       mnn config.json \"memory\": low (default: int4 weight kernels with int8\n"
            "                   dynamic activations, the smallest and fastest) or normal (weights\n"
            "                   dequantized to float at load: the numerics of `pocket forward --int4`)\n"
            "                   mnn: int4 codes and fp16 scales of the checkpoint's QAT state, else RTN\n"
            "                   group 64 asymmetric, written unchanged; output is a directory\n"
            "  --sampler S      mnn config.json sampling: mixed (default, as MNN's exporter: temperature 0.8,\n"
            "                   top_k 40, top_p 0.9, min_p 0.05) or greedy (the most likely token, as\n"
            "                   `pocket generate` does by default)\n"
            "  --lora ADAPTER   the adapter checkpoint to export (it must be CKPT's: its base hash) as\n"
            "                   peft: a PEFT folder; mnn: lora.mnn for MNN's Llm::create_lora, written into\n"
            "                   the package --out DIR made by --format mnn from CKPT (or --out DIR/NAME.mnn;\n"
            "                   a QLoRA adapter: MNN runs the int4 model); gguf: a llama.cpp adapter file\n"
            "                   (--quant f32, the default, or f16) for any GGUF of CKPT\n"
            "  --merge          with --lora and mnn: a whole package with the adapter folded into the\n"
            "                   weights (codes re-derived on the base's int4 grid, see docs/exports.md)\n"
            "  --draft DRAFT    mnn: ship a DFlash speculative draft (a checkpoint of a [draft] run) in the\n"
            "                   package for MNN 3.6.1's speculative decoding: dflash.mnn, dflash.mnn.weight,\n"
            "                   dflash_fc.mnn, llm.mnn's extra output hidden_states and speculative_type\n"
            "                   dflash in config.json. The draft must have been trained on CKPT's int4 model\n"
            "                   (its hash) and read target layers CKPT has; see docs/exports.md\n"
            "  --force          replace an existing non-empty output directory\n");
}

// Every export carries the chat template training and `pocket generate` use:
// a checkpoint without one gets the bundled template written into its
// tokenizer_config.json (the copy being exported), so the runtimes render
// chats as pocket did.
static void add_bundled_template(ModelBundle *b) {
    if (!b->tokenizer_json) return;
    json_t *cfg = b->tokenizer_config_json ? json_loadb(b->tokenizer_config_json, b->tokenizer_config_json_len, 0, NULL)
                                           : json_object();
    if (!cfg || json_is_string(json_object_get(cfg, "chat_template")) || json_is_array(json_object_get(cfg, "chat_template"))) {
        json_decref(cfg);
        return;
    }
    json_object_set_new(cfg, "chat_template", json_string(chat_bundled_template()));
    free(b->tokenizer_config_json);
    b->tokenizer_config_json = json_dumps(cfg, JSON_INDENT(2));
    b->tokenizer_config_json_len = strlen(b->tokenizer_config_json);
    json_decref(cfg);
}

// What the export needs of the checkpoint and the files beside it, read and
// checked before any weight is: the config and the tokenizer files, the int4
// grid, the adapter against the config, the format's own checks.
static int prepare(Job *j, const Format *f, const ExportOptions *o, const OpenOptions *oo, PtError *e) {
    if (checkpoint_load_meta(o->ckpt, &j->meta, e)) return -1;
    add_bundled_template(&j->meta);
    j->int4 = oo->int4;
    int from_qat;   // open_model says which, with the weights
    if (j->int4 && int4_read_spec(&j->meta.cfg, o->ckpt, oo->grid, &j->spec, &j->quant_embedding, &from_qat, e))
        return -1;
    if (o->lora) {   // its shapes against the config; its base hash once the weights are read
        LoraAdapter ad;
        if (lora_checkpoint_load(o->lora, &j->meta.cfg, NULL, NULL, &ad, e)) return -1;
        lora_adapter_free(&ad);
    }
    return f->check ? f->check(j, o, e) : 0;
}

int cmd_export(int argc, char **argv) {
    const char *ckpt = NULL, *format = NULL, *v;
    ExportOptions o = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help(stdout);
            return 0;
        } else if ((v = arg_value(argc, argv, &i, "--ckpt"))) {
            ckpt = o.ckpt = v;
        } else if ((v = arg_value(argc, argv, &i, "--format"))) {
            format = v;
        } else if ((v = arg_value(argc, argv, &i, "--out"))) {
            o.out = v;
        } else if ((v = arg_value(argc, argv, &i, "--dtype"))) {
            o.dtype = v;
        } else if ((v = arg_value(argc, argv, &i, "--quant"))) {
            o.quant = v;
        } else if ((v = arg_value(argc, argv, &i, "--graph"))) {
            o.graph = v;
        } else if ((v = arg_value(argc, argv, &i, "--memory"))) {
            o.memory = v;
        } else if ((v = arg_value(argc, argv, &i, "--sampler"))) {
            o.sampler = v;
        } else if ((v = arg_value(argc, argv, &i, "--lora"))) {
            o.lora = v;
        } else if ((v = arg_value(argc, argv, &i, "--draft"))) {
            o.draft = v;
        } else if (!strcmp(argv[i], "--merge")) {
            o.merge = 1;
        } else if (!strcmp(argv[i], "--force")) {
            o.force = 1;
        } else {
            return arg_usage("unknown argument '%s' (see --help)", argv[i]);
        }
    }
    if (!ckpt || !format || !o.out)
        return arg_usage("missing %s (see --help)", !ckpt ? "--ckpt CKPT.h5" : !format ? "--format" : "--out PATH");
    int f = 0;
    while (f < N_FORMATS && strcmp(FORMATS[f].name, format) != 0) f++;
    if (f == N_FORMATS) return arg_usage("unknown format '%s' (known: hf, mnn, gguf, peft)", format);
    if (o.quant && gguf_quant_type(o.quant) < 0)
        return arg_usage("unknown --quant '%s' (f32, f16, bf16, q8_0, q4_0, q4_1)", o.quant);
    if (o.draft && strcmp(format, "mnn")) return arg_usage("--draft is for --format mnn (MNN's DFlash speculative decoding)");
    if ((o.lora && !strcmp(format, "hf")) || (o.merge && (!o.lora || strcmp(format, "mnn"))))
        return arg_usage("%s", o.merge ? "--merge needs --lora and --format mnn" : "--lora exports to peft, mnn or gguf");
    PtError err;
    if (FORMATS[f].options(&o, &err)) return arg_usage("%s", err.msg);
    double t0 = now_seconds();
    const int q4_0 = o.quant && !strcmp(o.quant, "q4_0"), q4_1 = o.quant && !strcmp(o.quant, "q4_1");
    QuantSpec grid = {QUANT_GROUP_DEFAULT, q4_0};
    OpenOptions oo = {.int4 = !strcmp(format, "mnn") || (!strcmp(format, "gguf") && (q4_0 || q4_1)), .grid = &grid,
                      .lora = o.lora, .int4_weights = o.draft || o.merge};
    if (o.lora) {   // the adapter is checked against the base it was trained on: the int4 one for QLoRA
        int q = lora_checkpoint_base_int4(o.lora, &err);
        if (q < 0 || (q == 0 && !strcmp(format, "mnn"))) {
            fprintf(stderr, "pocket export: %s\n", q < 0 ? err.msg : "--lora with mnn needs a QLoRA adapter ([lora] base = int4): MNN runs the int4 model, and this one was trained on the float weights");
            return 1;
        }
        if (strcmp(format, "mnn")) oo.int4 = q;   // peft, gguf: the files do not depend on it
    }
    Job job = {0};
    OpenModel om;
    int rc = prepare(&job, &FORMATS[f], &o, &oo, &err) || open_checkpoint(&om, ckpt, &oo, &err) ? -1 : 0;
    if (rc == 0) {
        add_bundled_template(&om.b);
        rc = FORMATS[f].run(&om, &job, &o, &err);
        open_model_close(&om);
    }
    if (rc) fprintf(stderr, "pocket export: %s\n", err.msg);
    else {
        const char *kind = o.dtype ? o.dtype : o.quant;
        printf("exported %s -> %s (%s%s%s), %.2f s\n", ckpt, o.out, format, kind ? ", " : "", kind ? kind : "",
               now_seconds() - t0);
    }
    draft_free(&job.draft);
    bundle_free(&job.meta);
    return rc ? 1 : 0;
}
