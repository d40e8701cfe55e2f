// Placeholder so the binary links while the command is written.
#include <stdio.h>
#include "commands.h"
int cmd_export(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "pocket export: not built yet\n"); return 1; }
