// pocket train: CPT, SFT, Dec, QAT, LoRA or distillation from an INI recipe; running the same
// command again resumes from the run directory's newest checkpoint.
#include <signal.h>
#include <string.h>
#include "../train/run_dir.h"
#include "args.h"
#include "commands.h"
#include "../dist/comm.h"
#include "../train/trainer.h"

// The one piece of process-wide state: set by the signal handler, read by the
// training loop between steps (a handler can reach nothing else).
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    g_stop = 1;
    signal(sig, SIG_DFL);   // a second Ctrl-C kills at once
}

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket train RECIPE.ini [--set section.key=value]...\n\n"
            "Trains as the recipe says: continued pre-training or SFT ([train] mode = cpt, sft), the\n"
            "decision head (mode = choice), W4A16 QAT ([qat]) or a LoRA adapter ([lora]); with [distill]\n"
            "(not in choice mode) on a teacher's next-token distributions too. The run directory gets\n"
            "recipe.ini (resolved), metrics.jsonl, loss.svg, samples.txt, ckpt-<step>.h5 (the newest\n"
            "train.keep_last) and best.h5 (lowest validation loss). Running the same command again\n"
            "resumes from the newest checkpoint: weights, Adam state, schedule and data order.\n"
            "Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves and exits.\n\n"
            "  --set section.key=value  override one recipe key (repeatable; applied after the file)\n\n"
            "Data-parallel (a pocket built with make MPI=1): mpirun -np N pocket train RECIPE.ini runs N\n"
            "ranks; each reads every N-th micro-batch, gradients are summed, and each rank keeps 1/N of\n"
            "the optimizer state. The run directory and data must be on storage every rank sees.\n\n"
            "Recipe keys:\n");
    recipe_help(f);
}

int cmd_train(int argc, char **argv) {
    const char *recipe_path = NULL;
    char **sets = xcalloc(argc, sizeof(char *), "--set list");
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help(stdout);
            free(sets);
            return 0;
        } else if ((v = arg_value(argc, argv, &i, "--set"))) sets[n_sets++] = (char *)v;
        else if (argv[i][0] == '-' || recipe_path) {
            free(sets);
            return arg_usage("unexpected argument '%s' (see --help)", argv[i]);
        } else recipe_path = argv[i];
    }
    if (!recipe_path) {
        free(sets);
        return arg_usage("a RECIPE.ini is required (see --help)");
    }
    PtError e;
    Recipe r;
    int rc = recipe_load(&r, recipe_path, n_sets, sets, &e);
    free(sets);
    if (rc) {
        fprintf(stderr, "pocket train: %s\n", e.msg);
        return 1;
    }
    Comm comm;
    if (comm_init(&comm, &argc, &argv, &e)) {
        fprintf(stderr, "pocket train: %s\n", e.msg);
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    // A run that refuses its inputs leaves no directory behind: the part of
    // the run directory's path this call creates goes again on failure.
    char *created = comm.rank == 0 ? run_dir_first_missing(r.train.run_dir) : NULL;
    rc = train_run(&r, &comm, &g_stop, &e);
    if (rc && created && run_dir_newest_checkpoint(r.train.run_dir) < 0) run_dir_remove_tree(created);
    free(created);
    if (rc && comm.world > 1) fprintf(stderr, "pocket train: rank %d: %s\n", comm.rank, e.msg);
    else if (rc) fprintf(stderr, "pocket train: %s\n", e.msg);
    comm_finalize(&comm);
    return rc ? 1 : 0;
}
