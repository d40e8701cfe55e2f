// grpo_train.c: train.mode = grpo (grpo_train.h): rollouts of the training
// set's prompts by the batched sampler, their rewards and advantages, and
// model/grpo.h's loss over them.
#include "grpo_train.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include "../formats/checkpoint.h"
#include "../model/dropout_mask.h"
#include "../model/grpo.h"
#include "../model/sampler.h"
#include "evaluate.h"
#include "objective.h"
#include "reward.h"
#include "run_dir.h"

// The metrics, as TRL's GRPOTrainer names them; rewards/<name>/mean follow.
enum { M_REWARD, M_REWARD_STD, M_ZERO_STD, M_LENGTH, M_CLIPPED, M_KL, M_CLIP_LOW, M_CLIP_HIGH, M_ROLLOUT_TPS,
       M_FIXED };
static const char *const metric_names[M_FIXED] = {
    "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio", "kl",
    "clip_ratio/low_mean", "clip_ratio/high_mean", "rollout_tokens_per_s"};

typedef struct {
    int *tokens, n;            // the prompt
    char *text, *reference;    // decoded; the reference without its end-of-turn token
    int end_stop;              // the reply's end-of-turn token, -1 when none
    uint64_t doc;
} Prompt;

typedef struct {
    GrpoLoss loss;
    int group, P, B, T;        // completions a prompt, prompts a micro-batch, the batch
    int scale;                 // GrpoScale
    GenParams gen;             // the rollouts' sampling (each job its own seed and stops)
    uint64_t seed;
    Prompt *prompts;
    uint64_t n_prompts;
    const char *path;          // the training set
    const Tokenizer *tok;
    // The epoch whose prompt order `order` holds (UINT64_MAX: none yet).
    uint64_t order_epoch, *order;
    Rewards rewards;
    char reward_name[REWARD_MAX][40], reward_metric[REWARD_MAX][56];
    Sampler sampler;
    int sampler_ready;
    SampleJob *jobs;           // [B]
    const Prompt **of_job;     // [B]: job c's prompt
    GenParams *params;         // [B]
    int *outs;                 // [B * max_new]
    double *total, *values;    // [B], [B * rewards]
    // What the head needs of each of a step's micro-batches (grad_accum of
    // them are made before the first pass), found by the batch's address.
    struct Slot {
        const Batch *b;
        double *advantage;     // [B]
        int *row0, *last;      // [B]
        float *ref_logp;       // [B*T], beta > 0
    } *slot;
    int n_slots;
    float *logp;               // [B*T]
    GrpoHead head;
    LossHead inner;
    // beta > 0: the reference, model.init, forward only.
    ModelBundle ref_b;
    float *ref_params;
    Model ref_m;
    Device *dev;
    FILE *rollouts;            // the lead's run_dir/rollouts.jsonl, NULL on other ranks
    int world;
} Grpo;

static Grpo *grpo_of(Objective *o) { return o->impl; }

// The training set's prompts: each example's text before its final reply
// (evaluate.h's split), the reply its reference. Examples without a reply,
// and prompts without max_new positions left in T, are counted and dropped.
static int read_prompts(Grpo *g, const Dataset *d, int max_new, FILE *log, PtError *e) {
    g->prompts = xcalloc(d->n_docs ? d->n_docs : 1, sizeof(Prompt), "GRPO prompts");
    uint64_t no_reply = 0, too_long = 0;
    for (uint64_t k = 0; k < d->n_docs; k++) {
        int64_t start, end;
        if (!sft_reply_span(d, k, &start, &end)) {
            no_reply++;
            continue;
        }
        if (start + max_new > g->T) {
            too_long++;
            continue;
        }
        Prompt *p = &g->prompts[g->n_prompts++];
        const uint64_t off = d->doc_offsets[k];
        int *reply = xmalloc((size_t)(end - start + 1) * sizeof(int), "a reference reply");
        p->tokens = xmalloc((size_t)start * sizeof(int), "a prompt");
        for (int64_t i = 0; i < start; i++) p->tokens[i] = (int)dataset_token(d, off + (uint64_t)i);
        for (int64_t i = start; i <= end; i++) reply[i - start] = (int)dataset_token(d, off + (uint64_t)i);
        p->n = (int)start;
        p->doc = k;
        int n_reply = (int)(end - start + 1);
        p->end_stop = token_is_special(g->tok, reply[n_reply - 1]) ? reply[n_reply - 1] : -1;
        if (p->end_stop >= 0) n_reply--;
        p->text = tokenizer_decode(g->tok, p->tokens, (size_t)p->n, 0);
        p->reference = tokenizer_decode(g->tok, reply, (size_t)n_reply, 1);
        free(reply);
    }
    if (log)
        fprintf(log, "GRPO prompts: %llu of %llu examples of %s; dropped %llu without a reply, %llu with fewer than "
                "rl.max_new = %d positions left in seq_len %d\n", (unsigned long long)g->n_prompts,
                (unsigned long long)d->n_docs, d->path, (unsigned long long)no_reply, (unsigned long long)too_long,
                max_new, g->T);
    if (!g->n_prompts)
        return pt_fail(e, "%s: no example leaves a prompt with rl.max_new = %d new tokens within seq_len %d", d->path,
                       max_new, g->T);
    return 0;
}

// beta > 0: model.init on the device, forward only, as the reference.
static int open_reference(Grpo *g, const Recipe *r, const ObjectiveData *d, PtError *e) {
    if (!checkpoint_is_hdf5(r->model.init))
        return pt_fail(e, "[rl] beta > 0 takes its reference from model.init, which must be a checkpoint (.h5), not "
                          "%s", r->model.init);
    if (checkpoint_load(r->model.init, &g->ref_b, e)) return -1;
    if (g->ref_b.cfg.vocab_size != d->cfg->vocab_size || g->ref_b.cfg.d_model != d->cfg->d_model)
        return pt_fail(e, "%s: the reference has %d vocabulary rows of hidden size %d, the model %d of %d", r->model.init,
                       g->ref_b.cfg.vocab_size, g->ref_b.cfg.d_model, d->cfg->vocab_size, d->cfg->d_model);
    g->dev = d->dev;
    g->ref_params = dev_mirror(d->dev, g->ref_b.params, g->ref_b.tt.total * sizeof(float), "reference weights");
    ModelOptions opt;
    recipe_model_options(r, &opt);
    opt.recompute = 0;
    model_init(&g->ref_m, d->dev, &g->ref_b.cfg, &g->ref_b.tt, g->ref_params, &opt);
    return model_plan(&g->ref_m, g->B, g->T, 0, NULL, e);
}

static int grpo_open(Objective *o, const ObjectiveData *d, PtError *e) {
    Grpo *g = grpo_of(o);
    const Recipe *r = o->r;
    g->B = d->B, g->T = d->T;
    g->P = d->B / g->group;
    g->tok = d->tok;
    g->path = d->train[0]->path;
    if (read_prompts(g, d->train[0], r->rl.max_new, d->log, e)) return -1;
    const int nr = g->rewards.n;
    g->jobs = xcalloc((size_t)g->B, sizeof *g->jobs, "rollout jobs");
    g->of_job = xcalloc((size_t)g->B, sizeof *g->of_job, "rollout prompts");
    g->params = xcalloc((size_t)g->B, sizeof *g->params, "rollout parameters");
    g->outs = xmalloc((size_t)g->B * r->rl.max_new * sizeof(int), "rollouts");
    g->total = xmalloc((size_t)g->B * sizeof(double), "rewards");
    g->values = xmalloc((size_t)g->B * (nr ? nr : 1) * sizeof(double), "rewards");
    g->logp = xmalloc((size_t)g->B * g->T * sizeof(float), "log-probabilities");
    g->n_slots = r->train.grad_accum;
    g->slot = xcalloc((size_t)g->n_slots, sizeof *g->slot, "micro-batch slots");
    for (int a = 0; a < g->n_slots; a++) {
        struct Slot *sl = &g->slot[a];
        sl->advantage = xmalloc((size_t)g->B * sizeof(double), "advantages");
        sl->row0 = xmalloc((size_t)g->B * sizeof(int), "completion rows");
        sl->last = xmalloc((size_t)g->B * sizeof(int), "completion rows");
        if (g->loss.beta > 0) sl->ref_logp = xmalloc((size_t)g->B * g->T * sizeof(float), "reference log-probabilities");
    }
    if (g->loss.beta > 0 && open_reference(g, r, d, e)) return -1;
    if (rewards_start(&g->rewards, r->rl.reward_timeout, e)) return -1;
    // Sampling runs a forward (a third of a training token's FLOPs) over each group's prompt once and each new
    // token: per position of the micro-batch, at most (max_new + (T - max_new) / group) / T of a forward.
    o->flops_per_token = config_train_flops_per_token(d->cfg, d->T) / 3.0 *
                         (r->rl.max_new + (double)(d->T - r->rl.max_new) / g->group) / d->T;
    if (d->log) {
        fprintf(d->log, "GRPO: %d prompts x %d completions a micro-batch, up to %d new tokens at temperature %g; "
                "clip [%g, %g], %s scaling, loss_type %s%s; rewards:", g->P, g->group, r->rl.max_new,
                (double)r->rl.temperature, 1 - g->loss.epsilon_low, 1 + g->loss.epsilon_high,
                (const char *[]){"group", "batch", "no"}[g->scale], grpo_norm_name(g->loss.norm),
                g->loss.beta > 0 ? ", KL to model.init" : "");
        for (int k = 0; k < nr; k++) fprintf(d->log, " %s x %g", g->reward_name[k], g->rewards.r[k].weight);
        fprintf(d->log, "\n");
    }
    return 0;
}

// Prompt item i of the one stream: the epoch's seeded order, an epoch a pass over the prompts.
static const Prompt *prompt_at(Grpo *g, uint64_t i) {
    const uint64_t n = g->n_prompts, epoch = i / n;
    if (epoch != g->order_epoch) {
        if (!g->order) g->order = xmalloc(n * sizeof(uint64_t), "prompt order");
        Rng rng;
        rng_seed(&rng, dropout_child_seed(g->seed ^ 0x6a09e667f3bcc908ull, epoch));
        for (uint64_t k = 0; k < n; k++) g->order[k] = k;
        for (uint64_t k = n - 1; k > 0; k--) {   // Fisher-Yates
            const uint64_t j = rng_next(&rng) % (k + 1), t = g->order[k];
            g->order[k] = g->order[j], g->order[j] = t;
        }
        g->order_epoch = epoch;
    }
    return &g->prompts[g->order[i % n]];
}

// Completion c (a row) of the batch: its prompt and new tokens, trained on the new ones.
static void put_completion(Batch *b, int c, const SampleJob *job) {
    const int T = b->T, n = job->n_prompt + job->n_out;
    const size_t o = (size_t)c * T;
    for (int t = 0; t < T; t++) {
        const int real = t < n;
        b->tokens[o + t] = !real ? 0 : t < job->n_prompt ? job->prompt[t] : job->out[t - job->n_prompt];
        b->pos[o + t] = real ? t : t - n;
        b->seg[o + t] = real ? 0 : 1;
        b->src[o + t] = -1;
    }
    for (int t = 0; t < T; t++) {
        b->targets[o + t] = t + 1 < n ? b->tokens[o + t + 1] : -1;
        b->mask[o + t] = t + 1 < n && t + 1 >= job->n_prompt;
    }
}

static void put_padding(Batch *b, int c) {
    for (int t = 0; t < b->T; t++) {
        const size_t i = (size_t)c * b->T + t;
        b->tokens[i] = 0, b->pos[i] = t, b->seg[i] = 0, b->src[i] = -1, b->targets[i] = -1, b->mask[i] = 0;
    }
}

// The rewards of the batch's completions, and the rollout's metrics.
static int score(Objective *o, Grpo *g, double *advantage, PtError *e) {
    const int n = g->P * g->group, nr = g->rewards.n;
    double length = 0, clipped = 0;
    for (int c = 0; c < n; c++) {
        const SampleJob *job = &g->jobs[c];
        const Prompt *p = g->of_job[c];
        const int stopped = job->n_out > 0 && gen_is_stop(job->p, job->out[job->n_out - 1]);
        char *text = tokenizer_decode(g->tok, job->out, (size_t)(job->n_out - stopped), 1);
        char id[64];
        snprintf(id, sizeof id, "%s:%llu", g->path, (unsigned long long)p->doc);
        const RewardInput in = {id, p->text, text, p->reference, job->n_out};
        const int rc = rewards_score(&g->rewards, &in, g->values + (size_t)c * nr, &g->total[c], e);
        free(text);
        if (rc) return -1;
        length += job->n_out;
        clipped += !stopped;
        for (int k = 0; k < nr && M_FIXED + k < OBJECTIVE_MAX_METRICS; k++) {
            o->sums[M_FIXED + k] += g->values[(size_t)c * nr + k];
            o->counts[M_FIXED + k] += 1;
        }
    }
    const int zero = grpo_advantages(g->total, n, g->group, g->scale, advantage);
    double reward = 0, spread = 0;
    for (int c = 0; c < n; c++) reward += g->total[c];
    for (int q = 0; q < g->P; q++) {   // each group's sample std, as TRL's reward_std
        double mean = 0, ss = 0;
        for (int k = 0; k < g->group; k++) mean += g->total[q * g->group + k] / g->group;
        for (int k = 0; k < g->group; k++) ss += pow(g->total[q * g->group + k] - mean, 2);
        spread += sqrt(ss / (g->group - 1));
    }
    o->sums[M_REWARD] += reward, o->counts[M_REWARD] += n;
    o->sums[M_REWARD_STD] += spread, o->counts[M_REWARD_STD] += g->P;
    o->sums[M_ZERO_STD] += zero, o->counts[M_ZERO_STD] += g->P;
    o->sums[M_LENGTH] += length, o->counts[M_LENGTH] += n;
    o->sums[M_CLIPPED] += clipped, o->counts[M_CLIPPED] += n;
    return 0;
}

// Every completion of the micro-batch, a JSON line each in rollouts.jsonl:
// what was sampled (and with which seed), its rewards and advantage.
static void log_rollouts(Grpo *g, uint64_t index, const double *advantage) {
    const int n = g->P * g->group, nr = g->rewards.n;
    const uint64_t step = index / ((uint64_t)g->n_slots * (uint64_t)g->world) + 1;
    for (int c = 0; c < n; c++) {
        const SampleJob *job = &g->jobs[c];
        const Prompt *p = g->of_job[c];
        char *text = tokenizer_decode(g->tok, job->out, (size_t)job->n_out, 0);
        json_t *values = json_array();
        for (int k = 0; k < nr; k++) json_array_append_new(values, json_real(g->values[(size_t)c * nr + k]));
        json_t *j = json_pack("{s:I, s:I, s:I, s:s, s:s, s:s, s:f, s:o, s:f, s:I}", "step", (json_int_t)step,
                              "batch", (json_int_t)index, "example", (json_int_t)p->doc, "prompt", p->text,
                              "completion", text, "reference", p->reference, "reward", g->total[c], "rewards", values,
                              "advantage", advantage[c], "seed", (json_int_t)job->p->seed);
        free(text);
        if (!j) continue;   // a text jansson refuses (invalid UTF-8 cut by max_new) is not logged
        char *line = json_dumps(j, JSON_COMPACT);
        fprintf(g->rollouts, "%s\n", line);
        free(line);
        json_decref(j);
    }
    fflush(g->rollouts);
}

// The slot of micro-batch b: its own, else a free one (make_batch), NULL when none.
static struct Slot *slot_of(Grpo *g, const Batch *b, int take) {
    for (int a = 0; a < g->n_slots; a++)
        if (g->slot[a].b == b) return &g->slot[a];
    for (int a = 0; take && a < g->n_slots; a++)
        if (!g->slot[a].b) return g->slot[a].b = b, &g->slot[a];
    return NULL;
}

static int grpo_make_batch(Objective *o, Model *m, uint64_t index, Batch *b, PtError *e) {
    Grpo *g = grpo_of(o);
    struct Slot *sl = slot_of(g, b, 1);
    if (!sl) die("GRPO: more micro-batches than train.grad_accum");
    if (!g->sampler_ready) {
        if (sampler_init(&g->sampler, m, g->B, g->T, e)) return -1;
        g->sampler_ready = 1;
    }
    // The sampler runs the weights the step runs (QAT's fake-quantized masters are new ones each step).
    model_use_weights(&g->sampler.one.m, m->weights);
    model_use_weights(&g->sampler.rows, m->weights);
    const int n = g->P * g->group, max_new = o->r->rl.max_new;
    for (int c = 0; c < n; c++) {
        const Prompt *p = g->of_job[c] = prompt_at(g, index * g->P + (uint64_t)(c / g->group));
        GenParams *gp = &g->params[c];
        *gp = g->gen;
        // 63 bits, so rollouts.jsonl gives it exactly (JSON integers are signed)
        gp->seed = dropout_child_seed(g->seed ^ 0x3c6ef372fe94f82bull, index * (uint64_t)g->B + (uint64_t)c) >> 1;
        if (p->end_stop >= 0) gen_add_stop(gp, p->end_stop, m->cfg.vocab_size);
        g->jobs[c] = (SampleJob){p->tokens, p->n, gp, g->outs + (size_t)c * max_new, 0};
    }
    const double t0 = now_seconds();
    if (sampler_run(&g->sampler, g->jobs, n, NULL, NULL, e)) return -1;
    double made = 0;
    for (int c = 0; c < n; c++) made += g->jobs[c].n_out;
    o->sums[M_ROLLOUT_TPS] += made, o->counts[M_ROLLOUT_TPS] += now_seconds() - t0;
    if (score(o, g, sl->advantage, e)) return -1;
    if (g->rollouts) log_rollouts(g, index, sl->advantage);
    b->n_loss = 0;
    b->n_groups = 0;
    b->group_first[0] = 0;
    for (int c = 0; c < g->B; c++) {
        if (c >= n) {
            put_padding(b, c);
            continue;
        }
        const SampleJob *job = &g->jobs[c];
        put_completion(b, c, job);
        sl->row0[c] = c * g->T;
        sl->last[c] = c * g->T + job->n_prompt + job->n_out - 1;
        b->n_loss += g->loss.norm == GRPO_NORM_SEQUENCE ? 1 : job->n_out;
    }
    if (g->loss.beta > 0) {   // the reference's log-probability of every completion token
        GrpoHead rh = {.loss = {0, 0, 0, g->loss.norm}, .n = n, .row0 = sl->row0, .last = sl->last,
                       .advantage = sl->advantage, .logp = sl->ref_logp};
        const LossHead head = grpo_loss_head(&rh);
        const ModelInput in = batch_input(b);
        model_forward_head(&g->ref_m, &in, &head, NULL);
    }
    return 0;
}

static int grpo_start(Objective *o, Model *m, Comm *comm, const char *run_dir, long resumed_at, PtError *e) {
    (void)m;
    Grpo *g = grpo_of(o);
    g->world = comm->world;
    if (comm->rank != 0) return 0;
    // A resumed run samples its steps past the checkpoint again: their lines go.
    if (resumed_at > 0 && run_dir_keep_steps(run_dir, "rollouts.jsonl", resumed_at, NULL, NULL, e)) return -1;
    char *path = path_join(run_dir, "rollouts.jsonl");
    g->rollouts = fopen(path, "a");
    const int rc = g->rollouts ? 0 : pt_fail(e, "%s: cannot open for writing", path);
    free(path);
    return rc;
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
    g->head = (GrpoHead){.loss = g->loss, .n = g->P * g->group, .row0 = sl->row0, .last = sl->last,
                         .advantage = sl->advantage, .ref_logp = sl->ref_logp, .logp = g->logp};
    g->inner = grpo_loss_head(&g->head);
    o->head = (LossHead){grpo_pass, o};
    return &o->head;
}

static void grpo_free(Objective *o) {
    Grpo *g = grpo_of(o);
    if (!g) return;
    for (uint64_t k = 0; k < g->n_prompts; k++) {
        free(g->prompts[k].tokens);
        free(g->prompts[k].text);
        free(g->prompts[k].reference);
    }
    free(g->prompts);
    free(g->order);
    if (g->rollouts) fclose(g->rollouts);
    rewards_free(&g->rewards);
    if (g->sampler_ready) sampler_free(&g->sampler);
    free(g->jobs);
    free(g->of_job);
    free(g->params);
    free(g->outs);
    free(g->total);
    free(g->values);
    for (int a = 0; a < g->n_slots; a++) {
        free(g->slot[a].advantage);
        free(g->slot[a].row0);
        free(g->slot[a].last);
        free(g->slot[a].ref_logp);
    }
    free(g->slot);
    free(g->logp);
    if (g->ref_params) {
        model_free(&g->ref_m);
        dev_unmirror(g->dev, g->ref_params, g->ref_b.params);
    }
    bundle_free(&g->ref_b);
    free(g);
}

static const ObjectiveOps objective_grpo = {.name = "grpo", .open = grpo_open, .start = grpo_start,
                                            .make_batch = grpo_make_batch, .head = grpo_head, .free = grpo_free};

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
    g->group = r->rl.group;
    g->scale = r->rl.scale;
    g->seed = (uint64_t)r->train.seed;
    g->order_epoch = UINT64_MAX;
    gen_params_default(&g->gen);
    g->gen.max_new = r->rl.max_new;
    g->gen.temperature = r->rl.temperature;
    g->gen.top_k = r->rl.top_k;
    g->gen.top_p = r->rl.top_p;
    if (parse_rewards(&g->rewards, r->rl.rewards, e)) return -1;
    o->n_metrics = M_FIXED;
    for (int k = 0; k < M_FIXED; k++) o->metric[k] = metric_names[k];
    for (int k = 0; k < g->rewards.n && M_FIXED + k < OBJECTIVE_MAX_METRICS; k++) {
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
