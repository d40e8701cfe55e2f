// libFuzzer target: preference pairs as `pocket tokenize --pairs` reads them:
// the file through the corpus reader, then every line through
// pair_encode_line (the four forms found from the keys: plain strings with
// the end token appended, message lists rendered with the chat template, the
// implicit prompt split off message lists or off text at a character's
// first byte; the role checks; the tokens' shared prompt) and pair_fit
// (--max-len with and without --truncate, the equality check). Byte 0: bit 0
// the template (bundled or Qwen2.5's), bit 1 --truncate, bits 2-7 --max-len
// in units of 4 tokens (0: none); the rest is the file. Errors and drops are
// fine; a crash, a sanitizer report, a leak, a timeout or an allocation over
// the limit is a bug.
#include "../../data/corpus.h"
#include "../../data/pairs.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const ChatTemplate *t = fuzz_template(data[0] & 1);
    const int truncate = (data[0] >> 1) & 1;
    const size_t max_len = 4 * (size_t)(data[0] >> 2);
    PairCoder coder = {fuzz_tokenizer(), t, pair_eos_token(fuzz_tokenizer(), t)};
    char *path = (char *)fuzz_file("pairs.jsonl", data + 1, size - 1);
    Corpus *c;
    PtError e;
    if (corpus_open(&c, &path, 1, &e)) return 0;
    PairExample ex = {0};
    CorpusRecord rec;
    for (int k = 0; k < 1000 && corpus_next(c, &rec, &e) == 1; k++) {
        char where[1100];
        int drop, cut;
        if (pair_encode_line(&coder, rec.data, rec.len, corpus_where(&rec, where, sizeof where), &ex, &drop, &e) == 0 &&
            drop == PAIR_KEPT)
            pair_fit(&ex, max_len, truncate, where, &cut, &e);
        free(rec.data);
    }
    pair_example_free(&ex);
    corpus_close(c);
    return 0;
}
