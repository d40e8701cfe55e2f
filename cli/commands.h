// commands.h: the `pocket` subcommands. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code. Each
// prints its own --help.
#pragma once

int cmd_init(int argc, char **argv);       // cli/cmd_init.c
int cmd_import(int argc, char **argv);     // cli/cmd_import.c
int cmd_export(int argc, char **argv);     // cli/cmd_export.c
int cmd_quantize(int argc, char **argv);   // cli/cmd_quantize.c
int cmd_forward(int argc, char **argv);    // cli/cmd_forward.c
int cmd_inspect(int argc, char **argv);    // cli/cmd_inspect.c
int cmd_tokenize(int argc, char **argv);   // cli/cmd_tokenize.c
int cmd_train(int argc, char **argv);      // cli/cmd_train.c
int cmd_eval(int argc, char **argv);       // cli/cmd_eval.c
int cmd_generate(int argc, char **argv);   // cli/cmd_generate.c
int cmd_choose(int argc, char **argv);     // cli/cmd_choose.c
int cmd_synth(int argc, char **argv);      // cli/cmd_synth.c
int cmd_teacher_topk(int argc, char **argv);   // cli/cmd_teacher_topk.c
int cmd_prune_vocab(int argc, char **argv);   // cli/cmd_prune_vocab.c
int cmd_draft_data(int argc, char **argv);    // cli/cmd_draft_data.c
