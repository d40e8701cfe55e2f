// sft_formats.h: the SFT data formats users hold, each read into the chat
// messages the OpenAI form gives, so rendering, masking and packing are one
// path (data/sft.h) whatever the file held.
//
//   openai    {"messages": [{"role", "content"}, ...]} or {"prompt", "completion"} (+ "system")
//   sharegpt  {"conversations": [{"from", "value"}, ...]} (+ "system"); from: human or user, gpt or
//             assistant, system (first turn only); tool turns (function_call, observation, tool,
//             function) are refused
//   alpaca    {"instruction", "input", "output"} (+ "system", "history": [[instruction, reply], ...]);
//             the user turn is instruction and input joined by "\n", either left out when empty
//             (as LLaMA-Factory joins them)
//   csv, tsv  a table (data/csv.h) with a header row naming the prompt and completion columns
//             (and, optionally, a system column)
//
// A JSON line's format is found from its keys: "messages", "prompt" or
// "completion" (openai), "conversations" (sharegpt), "instruction" or
// "output" (alpaca); a line with keys of two formats, or none, is refused.
// A file holds one format: sft_format_guard refuses a line of another.
#pragma once
#include <stdint.h>
#include "../util/util.h"
#include "chat.h"
#include "corpus.h"

typedef enum {
    SFT_FORMAT_AUTO = 0,
    SFT_FORMAT_OPENAI,
    SFT_FORMAT_SHAREGPT,
    SFT_FORMAT_ALPACA,
    SFT_FORMAT_CSV,
    SFT_FORMAT_TSV,
} SftFormat;

const char *sft_format_name(SftFormat f);
// "openai", "sharegpt", "alpaca", "csv" or "tsv": 0; else -1.
int sft_format_parse(const char *name, SftFormat *out);

// A table's column names; system NULL: a column named "system" when the
// header has one.
typedef struct {
    const char *prompt, *completion, *system;
} SftColumns;

// One record's messages and what holds their text.
typedef struct {
    ChatMessage *m;
    int n;
    SftFormat format;    // the record's format, found or forced (AUTO when none was found)
    void *json;          // owners of the strings
    char *joined;
    void *row;
} SftMessages;

// Reads one record (a JSON line, or a table row with its header) in format
// want (AUTO: found from the line's keys; a table's by its file). where
// names the record in errors. The messages are not yet checked against the
// rules every format shares (sft.h does that).
int sft_read_messages(const CorpusRecord *rec, SftFormat want, const SftColumns *cols, const char *where,
                      SftMessages *out, PtError *e);
void sft_messages_free(SftMessages *m);
// A JSON line that must be an object: valid UTF-8, well-formed, an object.
// *root (a json_t *, the caller's to json_decref) on success, NULL otherwise.
int sft_json_line(const char *line, size_t len, const char *where, void **root, PtError *e);
// The messages of a JSON array (a json_t *) of {"role", "content"} objects
// with string values, OpenAI's form, into m[0 .. its size), pointing into
// it. Roles are not checked here. what names an entry in errors ("message",
// "\"chosen\" message").
int sft_json_messages(const void *array, const char *what, const char *where, ChatMessage *m, PtError *e);

// The one-format-per-file rule, fed the records in input order: the first
// record of a file whose format was found sets the file's; a later record of
// another format is an error naming it (-1).
typedef struct {
    const char *file;
    SftFormat format;
    uint64_t line;
} SftFormatGuard;
int sft_format_guard(SftFormatGuard *g, const CorpusRecord *rec, SftFormat format, PtError *e);
