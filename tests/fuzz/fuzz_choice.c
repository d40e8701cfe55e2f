// libFuzzer target: choice JSONL as `pocket tokenize --choice` reads it: the
// file through the corpus reader, then every line through choice_encode_line
// ({"prompt" or "messages", "candidates", "label" as index or text,
// "system"}: the JSON walk, the candidate and label checks, the prompt
// rendered with the chat template as `generate --chat` renders it, the
// tokenizer, the end-of-turn token). Byte 0 picks the template (bundled or
// Qwen2.5's); the rest is the file. Errors are fine; a crash, a sanitizer
// report, a leak, a timeout or an allocation over the limit is a bug.
#include "../../data/choice.h"
#include "../../data/corpus.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const ChatTemplate *t = fuzz_template(data[0] & 1);
    char *path = (char *)fuzz_file("choice.jsonl", data + 1, size - 1);
    Corpus *c;
    PtError e;
    if (corpus_open(&c, &path, 1, &e)) return 0;
    ChoiceExample ex = {0};
    CorpusRecord rec;
    for (int k = 0; k < 1000 && corpus_next(c, &rec, &e) == 1; k++) {
        char where[1100];
        choice_encode_line(fuzz_tokenizer(), t, rec.data, rec.len, corpus_where(&rec, where, sizeof where), &ex, &e);
        free(rec.data);
    }
    choice_example_free(&ex);
    corpus_close(c);
    return 0;
}
