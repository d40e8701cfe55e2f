// fuzz_util.h: what the libFuzzer targets of tests/fuzz share. The loaders
// take paths, as the commands call them, so a target writes its input to a
// file in a directory of its own under /dev/shm (memory; removed at exit);
// a target whose input is several files (a model directory, an MNN package,
// a PEFT folder) takes them from one input cut at FUZZ_PART_MARK.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "../../data/chat.h"
#include "../../data/tokenizer.h"
#include "../../model/config.h"
#include "../../model/tensors.h"

// Between the files of a many-file input (a line of its own, as the seeds
// write it; the dictionaries carry it, so mutations can add and drop files).
#define FUZZ_PART_MARK "\n--8<-- fuzz part --8<--\n"

// Writes data to NAME in this process's directory (made on the first call)
// and returns the path (valid until the next call with the same name).
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);
// The directory itself, and the path NAME would have in it (not written).
const char *fuzz_dir(void);
const char *fuzz_path(const char *name);
// Removes NAME from the directory (a file an earlier input wrote that this one lacks).
void fuzz_remove(const char *name);

// Cuts data at FUZZ_PART_MARK into at most max parts; returns their number
// (1 when there is no mark). Parts past max join the last one. (Inline: the
// CLI test of the regression inputs, tests/test_fuzz_inputs.c, cuts them too.)
typedef struct {
    const uint8_t *p;
    size_t n;
} FuzzPart;
static inline int fuzz_parts(const uint8_t *data, size_t size, FuzzPart *parts, int max) {
    const size_t mark = sizeof FUZZ_PART_MARK - 1;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n + 1 < max && i + mark <= size; i++)
        if (!memcmp(data + i, FUZZ_PART_MARK, mark)) {
            parts[n++] = (FuzzPart){data + start, i - start};
            start = i + mark;
            i = start - 1;
        }
    parts[n++] = (FuzzPart){data + start, size - start};
    return n;
}
// Writes part i to names[i] for each name; a part that is empty or absent
// removes that file instead (so inputs can leave out optional files).
void fuzz_write_parts(const uint8_t *data, size_t size, const char *const *names, int n_names);

// A file of the repository (tests/fixtures/...), by its path from the root;
// dies when it cannot be read (the target cannot run without it).
uint8_t *fuzz_fixture(const char *rel, size_t *len);
const char *fuzz_fixture_path(const char *rel);

// /dev/null for the reports a target prints (opened once).
FILE *fuzz_devnull(void);

// What the targets run their input through, loaded once from the fixtures:
// the fixture tokenizer (tests/fixtures/tok/tokenizer.json), a chat template
// (0: the bundled one, 1: Qwen2.5's), and the config of the base the PEFT and
// adapter fixtures were made for (tests/fixtures/hf/qwen3-tied).
const Tokenizer *fuzz_tokenizer(void);
const ChatTemplate *fuzz_template(int which);
const ModelConfig *fuzz_lora_base(void);
// A run's AdamW moments and training state for the table tt (all its floats),
// read from path as a resume reads them; the result is not looked at.
void fuzz_train_state(const char *path, const TensorTable *tt);

// fuzz_util.c's LLVMFuzzerInitialize loads those before the first input (so
// no input's time includes them), makes the directory, and then calls the
// target's own fuzz_setup when it has one.
void fuzz_setup(void) __attribute__((weak));
