// choose.h: the one place a run's objective and trainee are chosen from its
// recipe (objective.h, trainee.h): what it trains for from [train] mode and
// [distill], what trains from [lora] and [draft]. Everything else of a run
// works through their interfaces.
#pragma once
#include "objective.h"
#include "trainee.h"

// The recipe's objective.
int objective_open(Objective *o, const Recipe *r, PtError *e);
// The recipe's trainee: loads what it starts from (the run's newest
// checkpoint when resuming), lets the objective prepare it (the decision
// head's row) and opens the kind, which puts it on the device.
int trainee_open(Trainee *t, const TraineeSetup *s, PtError *e);
