// reward.h: what a completion of a task earns, for training on the model's
// own samples (GRPO): built-in checks of its text against the example's
// reference, and an external program for any other check
// (reward_program.h), several of them weighted. A reward is a finite number;
// the built-ins give 0 or 1, or a share in [0, 1], or a penalty in [-1, 0].
//
//     exact        1 when the completion equals the reference, spaces at
//                  either end aside
//     json         1 when the completion is one JSON value (an object, a
//                  list, ...), spaces at either end aside
//     json_fields  the share of the reference object's keys the completion,
//                  a JSON object, gives equal values (JSON equality); 0
//                  when it is not an object
//     regex=P      1 when the PCRE2 pattern P matches somewhere in it
//     number       1 when its last number equals the reference's number
//                  (within 1e-9 relative): "the answer is 42." for "42"
//     length=L     0 up to L tokens, then -(n - L) / L, at least -1
//     program=CMD  what the command answers (reward_program.h)
//
// A reward is written NAME, NAME:WEIGHT, NAME=ARG or NAME=ARG:WEIGHT (the
// weight 1 when not given; the last ':' of an ARG is its weight's when what
// follows is a number).
#pragma once
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include "../util/util.h"
#include "reward_program.h"

typedef enum { REWARD_EXACT, REWARD_JSON, REWARD_JSON_FIELDS, REWARD_REGEX, REWARD_NUMBER, REWARD_LENGTH,
               REWARD_PROGRAM, REWARD_KIND_COUNT } RewardKind;

enum { REWARD_MAX = 8 };

typedef struct {
    int kind;                 // RewardKind
    double weight;
    char *arg;                // the pattern, the command; NULL for the others
    long length;              // length=L
    pcre2_code *re;           // regex
    RewardProgram *program;   // program, started by rewards_start
} Reward;

typedef struct {
    Reward r[REWARD_MAX];
    int n;
} Rewards;

// One completion as the rewards see it.
typedef struct {
    const char *id;           // the example's name in messages and for the program (e.g. "pairs.h5:17")
    const char *prompt, *completion, *reference;   // UTF-8 text
    long n_tokens;            // the completion's tokens
} RewardInput;

const char *reward_kind_name(int kind);   // "exact", "json", ...
// The reward as metrics name it: "exact", "regex=P", "length=L", "program=CMD" (cut to cap).
void reward_label(const Reward *r, char *out, size_t cap);
// Adds one reward written as above; `where` names the setting in errors.
int rewards_add(Rewards *rs, const char *text, const char *where, PtError *e);
// Starts the programs (each once, for every completion after).
int rewards_start(Rewards *rs, double timeout_s, PtError *e);
// Each reward of the completion into values[rs->n], their weighted sum into
// *total. A program's failure (it exits, hangs past the time limit, answers
// something that is not a finite number) fails with one line naming the
// program and the completion's id.
int rewards_score(Rewards *rs, const RewardInput *in, double *values, double *total, PtError *e);
void rewards_free(Rewards *rs);   // stops the programs
