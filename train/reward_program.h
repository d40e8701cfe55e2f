// reward_program.h: a reward computed by the user's own program, in any
// language. The program is started once (`sh -c CMD`) and kept running: for
// each completion pocket writes one JSON line to its stdin,
//
//     {"id": "...", "prompt": "...", "completion": "...", "reference": "..."}
//
// and reads one line back within the time limit: a number, or a JSON object
// with a number under "reward". Its stderr is the user's terminal.
#pragma once
#include "../util/util.h"

typedef struct RewardProgram RewardProgram;

int reward_program_start(RewardProgram **out, const char *cmd, double timeout_s, PtError *e);
// The program's reward of one completion; fails with one line naming the
// program and id when it has exited, gives nothing within the time limit, or
// answers anything but one finite number; it is stopped then, and every
// later call fails saying so.
int reward_program_score(RewardProgram *p, const char *id, const char *prompt, const char *completion,
                         const char *reference, double *reward, PtError *e);
// Closes its stdin, waits a moment for it to exit, then ends it.
void reward_program_stop(RewardProgram *p);
