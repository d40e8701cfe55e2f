// libFuzzer target: SFT data as `pocket tokenize --chat` reads it: the file
// (the input after its first byte) through the corpus reader (JSON lines, or
// RFC 4180 / TSV rows with quoted newlines, a byte order mark, the header),
// then every record through sft_encode_record (the format found from the
// keys, or forced; the OpenAI, ShareGPT and Alpaca readers, the table reader
// with its columns; the checks every format shares; the chat template; the
// tokenizer; the loss mask), the one-format-per-file guard and --max-len.
// Byte 0 picks the file (its low 3 bits: .jsonl found from keys, .jsonl with
// --format openai, sharegpt or alpaca, .csv, .tsv, --format csv on a .txt
// name, .jsonl.gz), bit 3 the column flags (--prompt-column q
// --completion-column a --system-column s), bit 4 the template (bundled or
// Qwen2.5's), bit 5 --truncate. Errors are fine; a crash, a sanitizer report,
// a leak, a timeout or an allocation over the limit is a bug.
#include "../../data/sft.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const struct { const char *name; SftFormat format; char table; } FILES[8] = {
        {"chat.jsonl", SFT_FORMAT_AUTO, 0},   {"chat.jsonl", SFT_FORMAT_OPENAI, 0},
        {"chat.jsonl", SFT_FORMAT_SHAREGPT, 0}, {"chat.jsonl", SFT_FORMAT_ALPACA, 0},
        {"chat.csv", SFT_FORMAT_AUTO, 0},     {"chat.tsv", SFT_FORMAT_AUTO, 0},
        {"chat.txt", SFT_FORMAT_CSV, ','},    {"chat.jsonl.gz", SFT_FORMAT_AUTO, 0},
    };
    const int pick = data[0] & 7;
    const SftColumns cols = data[0] & 8 ? (SftColumns){"q", "a", "s"} : (SftColumns){"prompt", "completion", NULL};
    const ChatTemplate *t = fuzz_template((data[0] >> 4) & 1);
    const int truncate = (data[0] >> 5) & 1;
    char *path = (char *)fuzz_file(FILES[pick].name, data + 1, size - 1);
    Corpus *c;
    PtError e;
    if (corpus_open_chat(&c, &path, 1, FILES[pick].table, &e)) return 0;
    SftFormatGuard guard = {0};
    SftExample ex = {0};
    CorpusRecord rec;
    for (int k = 0; k < 1000 && corpus_next(c, &rec, &e) == 1; k++) {
        char where[1100];
        SftFormat found;
        corpus_where(&rec, where, sizeof where);
        if (sft_encode_record(fuzz_tokenizer(), t, &rec, FILES[pick].format, &cols, where, &ex, &found, &e) == 0)
            sft_fit(&ex, 24, truncate);
        sft_format_guard(&guard, &rec, found, &e);
        free(rec.data);
    }
    sft_example_free(&ex);
    corpus_close(c);
    return 0;
}
