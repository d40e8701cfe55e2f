// main.c: `pocket SUBCOMMAND ...` dispatch.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "args.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;   // one line for `pocket` with no arguments; the options are in COMMAND --help
} Command;

static const Command COMMANDS[] = {
    {"init", cmd_init, "a checkpoint with freshly initialised weights, from a preset or a config.json"},
    {"import", cmd_import, "a Hugging Face directory or a GGUF file into a checkpoint; a PEFT adapter folder too"},
    {"tokenize", cmd_tokenize, "text files or chats into a token dataset for train and eval"},
    {"train", cmd_train, "CPT, SFT, the decision head, QAT, LoRA or distillation as a recipe says; the same command resumes"},
    {"eval", cmd_eval, "loss and perplexity over a dataset; exact match (SFT data), accuracy and ECE (choice data)"},
    {"generate", cmd_generate, "text from a checkpoint's model (sampling, --chat, --int4)"},
    {"choose", cmd_choose, "the decision head's scores and pick among given candidates"},
    {"synth", cmd_synth, "a token dataset sampled from the model itself, for data-free QAT and distillation"},
    {"draft-data", cmd_draft_data, "an SFT dataset of the int4 target's own greedy replies to a dataset's prompts ([draft] data)"},
    {"teacher-topk", cmd_teacher_topk, "a dataset with a teacher's top-k logits stored beside its tokens ([distill] source = topk)"},
    {"forward", cmd_forward, "logits, loss and gradients for given tokens, dumped to safetensors"},
    {"prune-vocab", cmd_prune_vocab, "a checkpoint with a smaller vocabulary: the tokens a corpus uses most"},
    {"quantize", cmd_quantize, "a checkpoint whose int4 state covers every matrix (e.g. a GGUF's Q8_0 embedding)"},
    {"export", cmd_export, "a checkpoint out as a Hugging Face directory, an MNN int4 package or a GGUF file; adapters too"},
    {"inspect", cmd_inspect, "what a checkpoint, dataset, safetensors, GGUF file or MNN package holds"},
};

static void usage(FILE *f) {
    fprintf(f, "pocket: training toolkit for MNN-Pocket (Qwen3) models\n\nusage: pocket COMMAND [options]\n\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].what);
    fprintf(f, "\n`pocket COMMAND --help` gives each command's options; `pocket --version` the CPU and kernels.\n");
    fprintf(f, "\nenvironment:\n"
               "  %s=SET[/BF16]  the CPU kernels: avx512, avx2, neon or portable (fp32 matmuls and attention),\n"
               "                 and optionally the bf16 matmuls' kernel: avx512bf16, neonbf16, portable, or a\n"
               "                 set's name for bf16-rounded operands on its fp32 tiles\n"
               "                 (default: the fastest this CPU runs; e.g. avx2 measures the AVX2 path on an\n"
               "                 AVX-512 machine)\n"
               "  OMP_NUM_THREADS  threads when a command's own option leaves it open\n",
            CPU_KERNELS_ENV);
}

// The CPU, the instruction sets found and the kernels a CPU device would run
// (after POCKET_KERNELS): what a benchmark or a bug report needs to say.
static int version(void) {
    char model[64], isa[256], kernels[256];
    cpu_model_name(model, sizeof model);
    cpu_isa_list(isa, sizeof isa);
    printf("pocket-train (built with %s%s)\n", __VERSION__,
#ifdef POCKET_CUDA
           ", CUDA"
#else
           ""
#endif
    );
    printf("cpu: %s, %d threads\n", model, omp_get_max_threads());
    printf("instruction sets: %s\n", isa);
    const char *spec = getenv(CPU_KERNELS_ENV);
    CpuKernels k;
    PtError e;
    if (cpu_kernels_named(&k, spec, &e)) {
        fprintf(stderr, "pocket: %s\n", e.msg);
        return 1;
    }
    cpu_kernels_describe(&k, kernels, sizeof kernels);
    printf("kernels: %s (%s)\n", kernels, spec && spec[0] ? CPU_KERNELS_ENV " set" : "the fastest this CPU runs");
    const char *note = cpu_kernels_bf16_notice(&k);
    if (note) printf("%s\n", note);
    return 0;
}

// OpenMP threads that spin at a barrier steal the core a preempted sibling
// needs: on a machine shared with other work libgomp's default (spin, then
// sleep) ran generation and training several times slower than a passive
// wait (docs/performance.md). libgomp reads OMP_WAIT_POLICY once, when it is
// loaded, before main: so pocket sets it and runs itself again. A policy set
// by the user is kept.
static void passive_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);   // on failure pocket runs on with the default policy
}

int main(int argc, char **argv) {
    passive_wait_policy(argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) return version();
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) {
            args_command(COMMANDS[i].name);
            return COMMANDS[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "pocket: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
