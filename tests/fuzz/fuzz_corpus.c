// libFuzzer target: pre-training text as `pocket tokenize` (without --chat)
// reads it: the file through the corpus reader (a .txt document, JSON lines,
// or either gzip-compressed), every record's text (corpus_record_text: UTF-8
// checks, the "text" field) and its tokens. Byte 0 picks the file name
// (.txt, .jsonl, .txt.gz, .jsonl.gz); the rest is the file. Errors are fine;
// a crash, a sanitizer report, a leak, a timeout or an allocation over the
// limit is a bug.
#include "../../data/corpus.h"
#include "../../data/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *const NAMES[4] = {"corpus.txt", "corpus.jsonl", "corpus.txt.gz", "corpus.jsonl.gz"};
    char *path = (char *)fuzz_file(NAMES[data[0] & 3], data + 1, size - 1);
    Corpus *c;
    PtError e;
    if (corpus_open(&c, &path, 1, &e)) return 0;
    CorpusRecord rec;
    int *ids = NULL;
    size_t cap = 0;
    for (int k = 0; k < 1000 && corpus_next(c, &rec, &e) == 1; k++) {
        char *text;
        size_t len, n = 0;
        if (corpus_record_text(&rec, &text, &len, &e) == 0) {
            tokenizer_encode(fuzz_tokenizer(), text, len, &ids, &n, &cap, &e);
            free(text);
        }
        free(rec.data);
    }
    free(ids);
    corpus_close(c);
    return 0;
}
