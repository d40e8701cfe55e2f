// mnn_inspect.h: `pocket inspect DIR` for an MNN package: reads llm.mnn back
// (ops per layer, the weight references and quantization fields of every
// op), checks each reference against llm.mnn.weight (in bounds, no overlap,
// IDST headers and alpha sizes consistent with the op, every byte used) and
// the tied-embedding offsets of llm_config.json.
#pragma once
#include <stdio.h>
#include "../util/util.h"

int mnn_is_package(const char *dir);   // DIR holds llm.mnn
// Prints the report; fails (naming the file and the op) on the first
// inconsistency between graph, weight file and configs.
int mnn_inspect(const char *dir, FILE *out, PtError *e);
