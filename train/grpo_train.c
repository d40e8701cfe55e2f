// grpo_train.c: train.mode = grpo (grpo_train.h): rollouts of the training
// set's prompts by the batched sampler, their rewards and advantages, and
// model/grpo.h's loss over them.
//
// [rl] updates_per_rollout = U > 1: steps kU ... kU + U - 1 (a cycle) train
// on the rollouts step kU samples (of the prompts and seeds a U = 1 run's
// step k would), kept in the micro-batch's slot with what step kU's pass
// gave each token's log-probability: the ratio's denominator of the steps
// after it (step kU's own ratio is 1, as TRL computes its old log-
// probabilities with the weights that sampled). A checkpoint saved inside a
// cycle keeps the slots in run_dir/rollout_buffer-rank<R>.h5 for the resume.
#include "grpo_train.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../formats/checkpoint.h"
#include "../model/grpo.h"
#include "../util/h5.h"
#include "evaluate.h"
#include "frozen_model.h"
#include "reward.h"
#include "rollout.h"

// The metrics, as TRL's GRPOTrainer names them; rewards/<name>/mean follow.
enum { M_REWARD, M_REWARD_STD, M_ZERO_STD, M_LENGTH, M_CLIPPED, M_KL, M_CLIP_LOW, M_CLIP_HIGH, M_ROLLOUT_TPS,
       M_FIXED };
// At most SLOT_METRICS of them (a slot of the rollout buffer file stores that many).
enum { SLOT_METRICS = 16 };
_Static_assert((int)SLOT_METRICS <= (int)OBJECTIVE_MAX_METRICS, "the objective holds GRPO's metrics");
static const char *const metric_names[M_FIXED] = {
    "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio", "kl",
    "clip_ratio/low_mean", "clip_ratio/high_mean", "rollout_tokens_per_s"};

typedef struct {
    GrpoLoss loss;
    int scale;                 // GrpoScale
    Rollouts ro;
    Rewards rewards;
    char reward_name[REWARD_MAX][40], reward_metric[REWARD_MAX][56];
    double *total, *values;    // [n], [n * rewards]: n completions a micro-batch
    // What the head needs of each of a step's micro-batches (grad_accum of
    // them are made before the first pass), found by the batch's address.
    struct Slot {
        const Batch *b;
        double *advantage;     // [n]
        int *row0, *last;      // [n]: each completion's first and last flat position
        float *ref_logp;       // [B*T], beta > 0
        // updates > 1: the cycle's rollout, for its steps after the first
        int replay;            // this step trains on the stored rollout
        Batch batch;           // the micro-batch it made
        float *old_logp;       // [B*T]: each counted row's log-probability in the cycle's first pass
        double sums[OBJECTIVE_MAX_METRICS], counts[OBJECTIVE_MAX_METRICS];   // what it added to the metrics
    } *slot;
    int updates;               // [rl] updates_per_rollout
    int rank;
    int n_slots;
    float *logp;               // [B*T]
    GrpoHead head;
    LossHead inner;
    FrozenModel ref;           // beta > 0: the reference, model.init (its int4 model under [qat])
} Grpo;

static Grpo *grpo_of(Objective *o) { return o->impl; }

// beta > 0: model.init on the device, forward only, as the reference: the model the run starts from.
static int open_reference(Grpo *g, const Recipe *r, const ObjectiveData *d, PtError *e) {
    if (!checkpoint_is_hdf5(r->model.init))
        return pt_fail(e, "[rl] beta > 0 takes its reference from model.init, which must be a checkpoint (.h5), not "
                          "%s", r->model.init);
    if (frozen_model_load(&g->ref, r->model.init, e)) return -1;
    const ModelConfig *c = &g->ref.b.cfg;
    if (c->vocab_size != d->cfg->vocab_size || c->d_model != d->cfg->d_model)
        return pt_fail(e, "%s: the reference has %d vocabulary rows of hidden size %d, the model %d of %d", r->model.init,
                       c->vocab_size, c->d_model, d->cfg->vocab_size, d->cfg->d_model);
    // With [qat] from the first update the run starts from the int4 model, and so does the KL: a float
    // reference would measure the int4 rounding as drift (0.14 nats a token on SmolLM2-135M) and pull
    // the model towards the float weights.
    if (r->qat.enabled && r->qat.start_step == 0) {
        QatRunConfig qc;
        int from_qat;
        recipe_qat(r, &qc);
        if (frozen_model_int4(&g->ref, r->model.init, &qc.spec, qc.quant_embedding, r->qat.init, d->dev->threads,
                              &from_qat, e))
            return -1;
        if (d->log)
            fprintf(d->log, "GRPO: the KL reference is %s's int4 model (%s)\n", r->model.init,
                    from_qat ? "its QAT scales" : "scales made from its weights, as the run makes them");
    }
    ModelOptions opt;
    recipe_model_options(r, &opt);
    return frozen_model_start(&g->ref, d->dev, &opt, d->B, d->T, e);
}

static int grpo_open(Objective *o, const ObjectiveData *d, PtError *e) {
    Grpo *g = grpo_of(o);
    const Recipe *r = o->r;
    if (rollouts_open(&g->ro, r, d, "GRPO", e)) return -1;
    const int nr = g->rewards.n, B = d->B, T = d->T, n = g->ro.n;
    g->total = xmalloc((size_t)n * sizeof(double), "rewards");
    g->values = xmalloc((size_t)n * (nr ? nr : 1) * sizeof(double), "rewards");
    g->logp = xmalloc((size_t)B * T * sizeof(float), "log-probabilities");
    g->n_slots = r->train.grad_accum;
    g->slot = xcalloc((size_t)g->n_slots, sizeof *g->slot, "micro-batch slots");
    for (int a = 0; a < g->n_slots; a++) {
        struct Slot *sl = &g->slot[a];
        sl->advantage = xmalloc((size_t)n * sizeof(double), "advantages");
        sl->row0 = xmalloc((size_t)n * sizeof(int), "completion rows");
        sl->last = xmalloc((size_t)n * sizeof(int), "completion rows");
        if (g->loss.beta > 0) sl->ref_logp = xmalloc((size_t)B * T * sizeof(float), "reference log-probabilities");
        if (g->updates > 1) {
            batch_alloc(&sl->batch, B, T);
            sl->old_logp = xmalloc((size_t)B * T * sizeof(float), "rollout log-probabilities");
        }
    }
    if (g->loss.beta > 0 && open_reference(g, r, d, e)) return -1;
    if (rewards_start(&g->rewards, r->rl.reward_timeout, e)) return -1;
    o->flops_per_token = rollout_flops_per_token(d->cfg, d->T, r->rl.max_new, r->rl.group);
    if (d->log) {
        fprintf(d->log, "GRPO: %d prompts x %d completions a micro-batch, up to %d new tokens at temperature %g, "
                "%d update%s a rollout; clip [%g, %g], %s scaling, loss_type %s%s; rewards:", g->ro.P, g->ro.group,
                r->rl.max_new, (double)r->rl.temperature, g->updates, g->updates > 1 ? "s" : "",
                1 - g->loss.epsilon_low, 1 + g->loss.epsilon_high,
                (const char *[]){"group", "batch", "no"}[g->scale], grpo_norm_name(g->loss.norm),
                g->loss.beta > 0 ? ", KL to model.init" : "");
        for (int k = 0; k < nr; k++) fprintf(d->log, " %s x %g", g->reward_name[k], g->rewards.r[k].weight);
        fprintf(d->log, "\n");
    }
    return 0;
}

// The rewards of the batch's completions, and the rollout's metrics.
static int score(Objective *o, Grpo *g, double *advantage, PtError *e) {
    const Rollouts *ro = &g->ro;
    const int n = ro->n, group = ro->group, nr = g->rewards.n;
    for (int c = 0; c < n; c++) {
        const SampleJob *job = &ro->jobs[c];
        const RolloutPrompt *p = ro->of_job[c];
        const int stopped = rollout_stopped(ro, c);
        char *text = tokenizer_decode(ro->tok, job->out, (size_t)(job->n_out - stopped), 1);
        char id[64];
        snprintf(id, sizeof id, "%s:%llu", ro->path, (unsigned long long)p->doc);
        const RewardInput in = {id, p->text, text, p->reference, job->n_out};
        const int rc = rewards_score(&g->rewards, &in, g->values + (size_t)c * nr, &g->total[c], e);
        free(text);
        if (rc) return -1;
        for (int k = 0; k < nr && M_FIXED + k < SLOT_METRICS; k++) {
            o->sums[M_FIXED + k] += g->values[(size_t)c * nr + k];
            o->counts[M_FIXED + k] += 1;
        }
    }
    const int zero = grpo_advantages(g->total, n, group, g->scale, advantage);
    double reward = 0, spread = 0;
    for (int c = 0; c < n; c++) reward += g->total[c];
    for (int q = 0; q < ro->P; q++) {   // each group's sample std, as TRL's reward_std
        double mean = 0, ss = 0;
        for (int k = 0; k < group; k++) mean += g->total[q * group + k] / group;
        for (int k = 0; k < group; k++) ss += pow(g->total[q * group + k] - mean, 2);
        spread += sqrt(ss / (group - 1));
    }
    o->sums[M_REWARD] += reward, o->counts[M_REWARD] += n;
    o->sums[M_REWARD_STD] += spread, o->counts[M_REWARD_STD] += ro->P;
    o->sums[M_ZERO_STD] += zero, o->counts[M_ZERO_STD] += ro->P;
    return 0;
}

// What rollouts.jsonl adds to completion c's line: its rewards and advantage.
typedef struct {
    const Grpo *g;
    const double *advantage;
} Scored;

static json_t *reward_fields(void *ctx, int c) {
    const Scored *sc = ctx;
    const Grpo *g = sc->g;
    const int nr = g->rewards.n;
    json_t *values = json_array();
    for (int k = 0; k < nr; k++) json_array_append_new(values, json_real(g->values[(size_t)c * nr + k]));
    return json_pack("{s:f, s:o, s:f}", "reward", g->total[c], "rewards", values, "advantage", sc->advantage[c]);
}

// The slot of micro-batch b: its own, else a free one (make_batch), NULL when none.
static struct Slot *slot_of(Grpo *g, const Batch *b, int take) {
    for (int a = 0; a < g->n_slots; a++)
        if (g->slot[a].b == b) return &g->slot[a];
    for (int a = 0; take && a < g->n_slots; a++)
        if (!g->slot[a].b) return g->slot[a].b = b, &g->slot[a];
    return NULL;
}

// A step after its cycle's first: the stored rollout, and its metrics again.
static void replay(Objective *o, const struct Slot *sl, Batch *b) {
    batch_copy(b, &sl->batch);
    for (int k = 0; k < o->n_metrics; k++) o->sums[k] += sl->sums[k], o->counts[k] += sl->counts[k];
}

static int grpo_make_batch(Objective *o, Model *m, uint64_t index, Batch *b, PtError *e) {
    Grpo *g = grpo_of(o);
    struct Slot *sl = slot_of(g, b, 1);
    if (!sl) die("GRPO: more micro-batches than train.grad_accum");
    // The cycle's rollout is what a run of one update per rollout samples at step (step / updates).
    const uint64_t per_step = (uint64_t)g->ro.steps_per_index, step = index / per_step;
    const uint64_t sample_index = step / (uint64_t)g->updates * per_step + index % per_step;
    sl->replay = step % (uint64_t)g->updates != 0;
    if (sl->replay) {
        replay(o, sl, b);
        return 0;
    }
    double sums[OBJECTIVE_MAX_METRICS], counts[OBJECTIVE_MAX_METRICS], seconds;
    memcpy(sums, o->sums, sizeof sums);
    memcpy(counts, o->counts, sizeof counts);
    if (rollouts_sample(&g->ro, m, sample_index, b, &seconds, e)) return -1;
    const Rollouts *ro = &g->ro;
    const int n = ro->n;
    rollouts_metrics(ro, seconds, o, M_LENGTH, M_CLIPPED, M_ROLLOUT_TPS);
    if (score(o, g, sl->advantage, e)) return -1;
    Scored scored = {g, sl->advantage};
    rollouts_log(&g->ro, index, reward_fields, &scored);
    for (int c = 0; c < n; c++) {
        sl->row0[c] = ro->at[c];
        sl->last[c] = ro->at[c] + ro->jobs[c].n_prompt + ro->jobs[c].n_out - 1;
    }
    if (g->loss.norm == GRPO_NORM_SEQUENCE) b->n_loss = n;
    if (g->loss.beta > 0) {   // the reference's log-probability of every completion token
        GrpoHead rh = {.loss = {0, 0, 0, g->loss.norm}, .n = n, .row0 = sl->row0, .last = sl->last,
                       .advantage = sl->advantage, .logp = sl->ref_logp};
        const LossHead head = grpo_loss_head(&rh);
        const ModelInput in = batch_input(b);
        model_forward_head(&g->ref.m, &in, &head, NULL);
    }
    if (g->updates > 1) {
        batch_copy(&sl->batch, b);
        for (int k = 0; k < o->n_metrics; k++) sl->sums[k] = o->sums[k] - sums[k], sl->counts[k] = o->counts[k] - counts[k];
    }
    return 0;
}

// ---- the slots of a cycle in progress, kept beside a checkpoint saved inside it

typedef struct {
    const char *name;
    hid_t type;
    void *data;
    hsize_t n;
} SlotArray;

// Slot sl's arrays as the buffer file stores them; their number.
static int slot_arrays(const Grpo *g, struct Slot *sl, SlotArray a[16]) {
    const hsize_t B = (hsize_t)g->ro.B, BT = B * (hsize_t)g->ro.T, n = (hsize_t)g->ro.n;
    Batch *b = &sl->batch;
    int k = 0;
    a[k++] = (SlotArray){"tokens", H5T_NATIVE_INT, b->tokens, BT};
    a[k++] = (SlotArray){"targets", H5T_NATIVE_INT, b->targets, BT};
    a[k++] = (SlotArray){"pos", H5T_NATIVE_INT, b->pos, BT};
    a[k++] = (SlotArray){"seg", H5T_NATIVE_INT, b->seg, BT};
    a[k++] = (SlotArray){"mask", H5T_NATIVE_UINT8, b->mask, BT};
    a[k++] = (SlotArray){"src", H5T_NATIVE_INT64, b->src, BT};
    a[k++] = (SlotArray){"advantage", H5T_NATIVE_DOUBLE, sl->advantage, n};
    a[k++] = (SlotArray){"row0", H5T_NATIVE_INT, sl->row0, n};
    a[k++] = (SlotArray){"last", H5T_NATIVE_INT, sl->last, n};
    a[k++] = (SlotArray){"old_logp", H5T_NATIVE_FLOAT, sl->old_logp, BT};
    if (sl->ref_logp) a[k++] = (SlotArray){"ref_logp", H5T_NATIVE_FLOAT, sl->ref_logp, BT};
    a[k++] = (SlotArray){"metric_sums", H5T_NATIVE_DOUBLE, sl->sums, SLOT_METRICS};
    a[k++] = (SlotArray){"metric_counts", H5T_NATIVE_DOUBLE, sl->counts, SLOT_METRICS};
    return k;
}

static char *buffer_path(const char *run_dir, int rank) {
    char name[64];
    snprintf(name, sizeof name, "rollout_buffer-rank%d.h5", rank);
    return path_join(run_dir, name);
}

// The file's attributes: the checkpoint's step it goes with, and the shape it was made for.
enum { A_STEP, A_UPDATES, A_B, A_T, A_SLOTS, A_REF, A_N, A_COUNT };

static int grpo_save(Objective *o, const char *run_dir, long step, PtError *e) {
    Grpo *g = grpo_of(o);
    if (g->updates == 1) return 0;
    char *path = buffer_path(run_dir, g->rank);
    H5Output out;
    if (step % g->updates == 0 || h5_output_create(&out, path, e)) {   // at a cycle's end the next step samples anew
        const int rc = step % g->updates == 0 ? (unlink(path), 0) : -1;
        free(path);
        return rc;
    }
    const long long attrs[A_COUNT] = {step, g->updates, g->ro.B, g->ro.T, g->n_slots, g->loss.beta > 0, g->ro.n};
    int rc = h5_write_attr(out.file, "shape", H5T_NATIVE_LLONG, attrs, A_COUNT);
    for (int s = 0; s < g->n_slots && rc == 0; s++) {
        char name[32];
        snprintf(name, sizeof name, "slot%d", s);
        hid_t grp = h5_create_group(out.file, name);
        SlotArray a[16];
        const int n = slot_arrays(g, &g->slot[s], a);
        rc = grp < 0 ? -1 : h5_write_attr(grp, "n_loss", H5T_NATIVE_INT, &g->slot[s].batch.n_loss, 1);
        if (rc == 0) rc = h5_write_attr(grp, "rows", H5T_NATIVE_INT, &g->slot[s].batch.rows, 1);
        for (int k = 0; k < n && rc == 0; k++) rc = h5_write_dataset(grp, a[k].name, a[k].type, 1, &a[k].n, a[k].data);
        if (grp >= 0) H5Gclose(grp);
    }
    if (rc) {
        h5_output_abort(&out);
        pt_fail(e, "%s: writing failed (disk full or not writable?)", path);
    } else {
        rc = h5_output_commit(&out, e);
    }
    free(path);
    return rc;
}

// A run resumed inside a cycle: its slots as the checkpoint's save left them.
static int load_buffer(Grpo *g, const char *run_dir, long step, PtError *e) {
    char *path = buffer_path(run_dir, g->rank);
    hid_t f = h5_open_read(path, e);
    long long attrs[A_COUNT];
    int rc = f < 0 ? -1 : h5_read_attr(f, "shape", H5T_NATIVE_LLONG, attrs, A_COUNT, path, e);
    const long long want[A_COUNT] = {step, g->updates, g->ro.B, g->ro.T, g->n_slots, g->loss.beta > 0, g->ro.n};
    if (rc == 0 && attrs[A_STEP] != step)
        rc = pt_fail(e, "%s: holds the rollouts of step %lld's cycle, the checkpoint is step %ld's", path,
                     attrs[A_STEP], step);
    if (rc == 0 && memcmp(attrs, want, sizeof want))
        rc = pt_fail(e, "%s: made for updates_per_rollout %lld, micro-batch %lld x %lld of %lld completions, "
                        "grad_accum %lld%s; the recipe resumes with %d, %d x %d of %d, %d%s", path, attrs[A_UPDATES],
                     attrs[A_B], attrs[A_T], attrs[A_N], attrs[A_SLOTS], attrs[A_REF] ? ", a KL term" : "",
                     g->updates, g->ro.B, g->ro.T, g->ro.n, g->n_slots, g->loss.beta > 0 ? ", a KL term" : "");
    for (int s = 0; s < g->n_slots && rc == 0; s++) {
        char name[32];
        snprintf(name, sizeof name, "slot%d", s);
        hid_t grp = H5Gopen2(f, name, H5P_DEFAULT);
        SlotArray a[16];
        const int n = slot_arrays(g, &g->slot[s], a);
        rc = grp < 0 ? pt_fail(e, "%s: no /%s", path, name)
                     : h5_read_attr(grp, "n_loss", H5T_NATIVE_INT, &g->slot[s].batch.n_loss, 1, path, e);
        if (rc == 0) rc = h5_read_attr(grp, "rows", H5T_NATIVE_INT, &g->slot[s].batch.rows, 1, path, e);
        for (int k = 0; k < n && rc == 0; k++) rc = h5_read_dataset(grp, a[k].name, a[k].type, 1, &a[k].n, a[k].data, path, e);
        if (grp >= 0) H5Gclose(grp);
    }
    if (f >= 0) H5Fclose(f);
    free(path);
    return rc;
}

static int grpo_start(Objective *o, Model *m, Comm *comm, const char *run_dir, long resumed_at, PtError *e) {
    (void)m;
    Grpo *g = grpo_of(o);
    g->rank = comm->rank;
    if (rollouts_start(&g->ro, comm, run_dir, resumed_at, e)) return -1;
    return resumed_at % g->updates ? load_buffer(g, run_dir, resumed_at, e) : 0;
}

// A pass's token metrics reach the objective's sums.
static double grpo_pass(const LossHead *h, Model *m, const ModelInput *in, float *dh, float grad_scale, int *count) {
    Objective *o = h->ctx;
    Grpo *g = grpo_of(o);
    memset(g->head.metrics, 0, sizeof g->head.metrics);
    const double loss = g->inner.loss(&g->inner, m, in, dh, grad_scale, count);
    const double tokens = g->head.metrics[GRPO_TOKENS];
    o->sums[M_KL] += g->head.metrics[GRPO_KL], o->counts[M_KL] += tokens;
    o->sums[M_CLIP_LOW] += g->head.metrics[GRPO_CLIP_LOW], o->counts[M_CLIP_LOW] += tokens;
    o->sums[M_CLIP_HIGH] += g->head.metrics[GRPO_CLIP_HIGH], o->counts[M_CLIP_HIGH] += tokens;
    return loss;
}

// Training: the GRPO head over the completions make_batch put in b; an
// evaluation: the next-token loss of the validation set's replies.
static const LossHead *grpo_head(Objective *o, const Batch *b, const ModelInput *in, int training) {
    (void)in;
    if (!training) return NULL;
    Grpo *g = grpo_of(o);
    const struct Slot *sl = slot_of(g, b, 0);
    if (!sl) die("GRPO: a training pass over a micro-batch it did not make");
    // A cycle's first pass keeps its log-probabilities as the later steps' old ones.
    g->head = (GrpoHead){.loss = g->loss, .n = g->ro.n, .row0 = sl->row0, .last = sl->last,
                         .advantage = sl->advantage, .ref_logp = sl->ref_logp,
                         .old_logp = sl->replay ? sl->old_logp : NULL,
                         .logp = g->updates > 1 && !sl->replay ? sl->old_logp : g->logp};
    g->inner = grpo_loss_head(&g->head);
    o->head = (LossHead){grpo_pass, o};
    return &o->head;
}

static void grpo_free(Objective *o) {
    Grpo *g = grpo_of(o);
    if (!g) return;
    rollouts_free(&g->ro);
    rewards_free(&g->rewards);
    free(g->total);
    free(g->values);
    for (int a = 0; a < g->n_slots; a++) {
        free(g->slot[a].advantage);
        free(g->slot[a].row0);
        free(g->slot[a].last);
        free(g->slot[a].ref_logp);
        free(g->slot[a].old_logp);
        if (g->slot[a].batch.tokens) batch_free(&g->slot[a].batch);
    }
    free(g->slot);
    free(g->logp);
    frozen_model_free(&g->ref);
    free(g);
}

static const ObjectiveOps objective_grpo = {.name = "grpo", .open = grpo_open, .start = grpo_start,
                                            .make_batch = grpo_make_batch, .save = grpo_save, .head = grpo_head,
                                            .free = grpo_free};

// [rl] rewards: "a; b; c", each as reward.h writes one.
static int parse_rewards(Rewards *rs, const char *text, PtError *e) {
    char *copy = xstrdup(text), *save = NULL;
    int rc = 0;
    for (char *part = strtok_r(copy, ";", &save); part && rc == 0; part = strtok_r(NULL, ";", &save)) {
        while (*part == ' ') part++;
        char *end = part + strlen(part);
        while (end > part && end[-1] == ' ') *--end = 0;
        if (*part) rc = rewards_add(rs, part, "[rl] rewards", e);
    }
    free(copy);
    if (rc == 0 && rs->n == 0) rc = pt_fail(e, "[rl] rewards: no reward given");
    return rc;
}

int grpo_objective_open(Objective *o, PtError *e) {
    Grpo *g = xcalloc(1, sizeof *g, "GRPO objective");
    const Recipe *r = o->r;
    o->ops = &objective_grpo;
    o->impl = g;
    recipe_grpo_loss(r, &g->loss);
    g->scale = r->rl.scale;
    g->updates = r->rl.updates_per_rollout;
    if (parse_rewards(&g->rewards, r->rl.rewards, e)) return -1;
    o->n_metrics = M_FIXED;
    for (int k = 0; k < M_FIXED; k++) o->metric[k] = metric_names[k];
    for (int k = 0; k < g->rewards.n && M_FIXED + k < SLOT_METRICS; k++) {
        char label[sizeof g->reward_name[k]];
        reward_label(&g->rewards.r[k], label, sizeof label);
        memcpy(g->reward_name[k], label, sizeof label);
        snprintf(g->reward_metric[k], sizeof g->reward_metric[k], "rewards/%s/mean", label);
        o->metric[o->n_metrics++] = g->reward_metric[k];
    }
    o->plotted[M_REWARD] = o->plotted[M_LENGTH] = 1;
    o->progress_metric = 1 + M_REWARD;
    return 0;
}
