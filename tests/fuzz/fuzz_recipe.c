// libFuzzer target: an INI training recipe as `pocket train RECIPE.ini
// [--set section.key=value]...` reads it (libinih, the key table, value
// parsing and ranges, the checks across keys, [lora]'s targets), then what a
// run derives from it (model options, AdamW, the schedule, QAT, LoRA) and the
// resolved recipe it writes, which must read back to the same recipe.
// Input: the recipe file; an optional second part (FUZZ_PART_MARK) holds
// --set arguments, each ended by a NUL byte (a shell can pass a newline
// inside one). Errors are fine; a crash, a sanitizer
// report, a leak, a timeout, an allocation over the limit or a resolved
// recipe that reads back differently is a bug.
#include <string.h>
#include "../../train/recipe.h"
#include "fuzz_util.h"

enum { MAX_SETS = 16 };

static char *resolved(const Recipe *r, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    recipe_write(r, f);
    fclose(f);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzPart parts[2];
    int n = fuzz_parts(data, size, parts, 2);
    const char *path = fuzz_file("recipe.ini", parts[0].p, parts[0].n);
    char *sets_text = NULL, *sets[MAX_SETS];
    int n_sets = 0;
    if (n > 1) {
        sets_text = malloc(parts[1].n + 1);
        memcpy(sets_text, parts[1].p, parts[1].n);
        sets_text[parts[1].n] = 0;
        for (char *s = sets_text, *end = sets_text + parts[1].n; s < end && n_sets < MAX_SETS; s += strlen(s) + 1)
            sets[n_sets++] = s;
    }
    Recipe r;
    PtError e;
    if (recipe_load(&r, path, n_sets, sets, &e) == 0) {
        ModelOptions mo;
        AdamWConfig ac;
        Schedule sc;
        QatRunConfig qc;
        LoraConfig lc;
        recipe_model_options(&r, &mo);
        recipe_adamw(&r, &ac);
        recipe_schedule(&r, r.train.steps ? r.train.steps : 1000, &sc);
        for (long step = 0; step <= sc.total + 1; step += sc.total / 7 + 1) schedule_lr(&sc, r.optim.lr, step);
        recipe_qat(&r, &qc);
        if (recipe_lora(&r, &lc, "fuzz", &e)) abort();   // recipe_load checked [lora]
        size_t len, again_len;
        char *text = resolved(&r, &len);
        Recipe back;
        const char *written = fuzz_file("resolved.ini", (const uint8_t *)text, len);
        if (recipe_load(&back, written, 0, NULL, &e)) {
            fprintf(stderr, "fuzz: the resolved recipe does not load: %s\n%s", e.msg, text);
            abort();
        }
        char *again = resolved(&back, &again_len);
        if (again_len != len || memcmp(text, again, len)) {
            fprintf(stderr, "fuzz: the resolved recipe reads back differently:\n%s\n---\n%s", text, again);
            abort();
        }
        free(text);
        free(again);
    }
    free(sets_text);
    return 0;
}
