// trainer.c: the training loop of `pocket train` (trainer.h), on one rank or
// as one of several data-parallel ranks (data_parallel.h): rank 0 (the lead)
// writes the run's files and prints; every rank steps. What trains (the
// model, an adapter, a draft) is a Trainee and what it is trained for an
// Objective, both chosen once at set-up (trainee.h, objective.h): nothing
// below asks which.
#include "trainer.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../data/tokenizer.h"
#include "../formats/checkpoint.h"
#include "../model/generate.h"
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "choose.h"
#include "data_parallel.h"
#include "devices.h"
#include "evaluate.h"
#include "objective.h"
#include "run_data.h"
#include "run_dir.h"

enum { CURVE_COLS = 1 + VAL_MAX_SETS, N_CURVES = (1 + OBJECTIVE_MAX_METRICS) * CURVE_COLS };
#define CURVE(f, c) ((f) * CURVE_COLS + (c))   // figure f on column c

typedef struct {
    const Recipe *r;
    Comm *comm;
    int lead;                 // rank 0: writes the run's files and prints
    Device dev;
    Objective obj;            // the loss
    Trainee tr;               // what trains
    DataParallel dp;          // the gradient sum and this rank's share of the AdamW state
    TrainState st;
    Tokenizer *tok;
    RunData data;             // the training stream (one set or a mixture) and the validation sets
    Batch *micro;             // this rank's grad_accum micro-batches of one step
    float *micro_grads;       // grad_accum > 1: one micro-batch's gradient, added to the step's (device)
    long total_steps;
    Schedule sched;
    AdamWConfig adam;
    double peak_gflops, flops_per_token;
    double step_metrics[OBJECTIVE_MAX_METRICS];   // the objective's metrics of the last step, per counted item
    // The curves of loss.svg and their metrics.jsonl keys (CURVE above): figure
    // f (0 the loss, 1 + k the objective's metric k) on column c (0 the training
    // data, 1 + v validation set v).
    Series curve[N_CURVES];
    char curve_key[N_CURVES][96];
    long reported_at;         // the step whose mixture report was printed last (-1: none)
    char *dir;
} Trainer;

// 0 on every rank when rc is 0 on every rank; else -1 everywhere (a rank
// that failed has its own message; the others say which rank it was).
static int agree(Trainer *t, int rc, PtError *e) {
    double failed[2] = {rc != 0, rc != 0 ? t->comm->rank + 1 : 0};
    comm_sum_doubles(t->comm, failed, 2, "starting the run");
    if (failed[0] == 0) return 0;
    if (!rc) pt_fail(e, "rank %d of %d could not start (its message says why)", (int)failed[1] - 1, t->comm->world);
    return -1;
}

// ---- setup

// GPUs exchange device buffers through NCCL; the CPU's host buffers go over comm.
static int uses_nccl(const Trainer *t) {
    return !t->dev.be->host_memory && (t->comm->world > 1 || t->r->train.nccl == NCCL_ALWAYS);
}

// The recipe's device; `cuda` on several ranks is one GPU per rank of a machine.
static int open_device(Trainer *t, PtError *e) {
    const Recipe *r = t->r;
    char name[RECIPE_STR + 16];
    snprintf(name, sizeof name, "%s", r->train.device);
    if (!strcmp(name, "cuda") && t->comm->world > 1) snprintf(name, sizeof name, "cuda:%d", t->comm->local_rank);
    if (device_open(&t->dev, name, r->train.threads, e)) return -1;
    if (t->dev.be->host_memory && (r->train.grad_reduce != GRAD_REDUCE_FP32 || r->train.nccl != NCCL_AUTO))
        return pt_fail(e, "train.grad_reduce and train.nccl are for GPUs (device = cuda); this run is on '%s'", name);
    return 0;
}

// The datasets (the training stream at the resumed cursor, the validation
// sets) and what the objective and the trainee take from them.
static int open_data(Trainer *t, int resumed, PtError *e) {
    const Recipe *r = t->r;
    const ModelBundle *b = &t->tr.b;
    if (!b->tokenizer_json)
        return pt_fail(e, "%s: the model has no tokenizer; set model.tokenizer in the recipe", r->model.init);
    if (tokenizer_load(&t->tok, b->tokenizer_json, b->tokenizer_json_len, r->model.init, e)) return -1;
    if (tokenizer_vocab_size(t->tok) > b->cfg.vocab_size)
        return pt_fail(e, "%s: the tokenizer has %d tokens but the model's vocabulary is %d", r->model.init,
                       tokenizer_vocab_size(t->tok), b->cfg.vocab_size);
    if (r->train.seq_len > b->cfg.max_seq)
        return pt_fail(e, "train.seq_len %d exceeds the model's context length %d", r->train.seq_len, b->cfg.max_seq);
    const char *hash = tokenizer_hash(t->tok);
    RunData *d = &t->data;
    if (run_data_open(d, r, hash, t->comm->rank, t->comm->world, e)) return -1;
    if (t->st.step > 0 && run_data_set_cursor(d, &t->st, e)) return -1;
    const Dataset *train[MIX_MAX_SETS], *val[VAL_MAX_SETS];
    for (int k = 0; k < d->n_train; k++) train[k] = &d->train[k];
    for (int k = 0; k < d->n_val; k++) val[k] = &d->val[k];
    const ObjectiveData od = {train, d->n_train, val, d->n_val, hash, t->tok, &b->cfg, &t->dev,
                              r->train.micro_batch, r->train.seq_len, t->lead ? stdout : NULL};
    if (t->obj.ops->open && t->obj.ops->open(&t->obj, &od, e)) return -1;
    return t->tr.ops->use_data ? t->tr.ops->use_data(&t->tr, &d->train[0], resumed, e) : 0;
}

// The sharded optimizer state: this rank's AdamW moments from the run's
// checkpoint, or zero for a new run.
static int optimizer_setup(Trainer *t, const char *resume_path, PtError *e) {
    dp_init(&t->dp, t->comm, &t->dev, t->tr.tt, t->tr.qat_entries);
    t->tr.dp = &t->dp;
    if (t->tr.ops->use_optimizer) t->tr.ops->use_optimizer(&t->tr, &t->dp);
    if (!resume_path) return 0;
    int rc = dp_load(&t->dp, resume_path, &t->st, e);
    if (rc == 1) rc = pt_fail(e, "%s: has no optimizer state to resume from", resume_path);
    return rc;
}

// ---- the run's files (rank 0 writes them; every rank takes part in a checkpoint)

static int save_checkpoint(Trainer *t, PtError *e) {
    char *path = run_dir_checkpoint_path(t->dir, t->st.step);
    run_data_get_cursor(&t->data, &t->st);
    int rc = t->tr.ops->save(&t->tr, path, &t->st, e);
    free(path);
    if (rc == 0 && t->obj.ops->save) rc = t->obj.ops->save(&t->obj, t->dir, t->st.step, e);
    if (rc == 0 && t->lead) run_dir_keep_newest(t->dir, t->r->train.keep_last);
    return rc;
}

static void write_sample(Trainer *t) {
    const Recipe *r = t->r;
    if (!r->train.sample_prompt[0] || !t->tr.samples) return;
    int *ids = NULL;
    size_t n = 0, cap = 0;
    PtError e;
    if (tokenizer_encode(t->tok, r->train.sample_prompt, strlen(r->train.sample_prompt), &ids, &n, &cap, &e)) {
        fprintf(stderr, "sample prompt: %s\n", e.msg);
        return;
    }
    const ModelConfig *c = &t->tr.b.cfg;
    int max_new = r->train.sample_tokens;
    if ((int)n + max_new > c->max_seq) max_new = c->max_seq - (int)n;
    int *out = xmalloc((max_new > 0 ? max_new : 1) * sizeof(int), "sample");
    int got = -1;
    GenContext g;
    if (max_new > 0 && gen_init(&g, &t->tr.m, (int)n + max_new, &e) == 0) {
        GenParams p;
        gen_params_default(&p);
        p.max_new = max_new;
        add_default_stops(&p, c, t->tok);
        got = generate(&g, ids, (int)n, &p, out, max_new, &e);
        gen_free(&g);
    }
    if (got >= 0) {
        char *text = tokenizer_decode(t->tok, out, got, 0);
        char *path = path_join(t->dir, "samples.txt");
        FILE *f = fopen(path, "a");
        if (f) {
            fprintf(f, "== step %ld\n%s%s\n", (long)t->st.step, r->train.sample_prompt, text);
            fclose(f);
        }
        free(path);
        free(text);
    }
    free(out);
    free(ids);
}

// The objective's metrics summed over the ranks, per counted item, into j
// as prefix + name (none when count is 0).
static void add_metrics(Trainer *t, json_t *j, const char *prefix, double count, double *out) {
    Objective *o = &t->obj;
    if (!o->n_metrics) return;
    comm_sum_doubles(t->comm, o->sums, o->n_metrics, "the objective's metrics");
    comm_sum_doubles(t->comm, o->counts, o->n_metrics, "the objective's metrics' counts");
    for (int k = 0; k < o->n_metrics; k++) {
        const double n = o->counts[k] > 0 ? o->counts[k] : count, v = n > 0 ? o->sums[k] / n : 0.0;
        if (out) out[k] = v;
        if (!j) continue;
        char name[96];
        snprintf(name, sizeof name, "%s%s", prefix, o->metric[k]);
        json_object_set_new(j, name, json_real(v));
    }
}

// loss.svg: the loss, and a panel for each metric the objective plots; in
// each, the training curve and one per validation set.
static int plot(Trainer *t, const char *path, PtError *e) {
    PlotPanel panels[1 + OBJECTIVE_MAX_METRICS];
    int n = 0;
    for (int f = 0; f <= t->obj.n_metrics; f++) {
        if (f && !t->obj.plotted[f - 1]) continue;
        PlotPanel *p = &panels[n++];
        *p = (PlotPanel){f ? t->obj.metric[f - 1] : "loss", &t->curve[CURVE(f, 0)], {NULL}, {NULL}, t->data.n_val};
        for (int v = 0; v < t->data.n_val; v++) {
            p->val[v] = &t->curve[CURVE(f, 1 + v)];
            p->val_name[v] = t->data.spec.val_named ? t->data.spec.val[v].name : NULL;
        }
    }
    return plot_svg(path, t->r->train.run_dir, panels, n, e);
}

// Validation set v's loss (and the objective's metrics, into j and metrics)
// over the ranks; NAN when it has nothing to count.
static int evaluate_set(Trainer *t, int v, json_t *j, double *loss, double *metrics, PtError *e) {
    double sums[2];
    char prefix[VAL_NAME_MAX + 8];
    run_data_val_prefix(&t->data, v, prefix, sizeof prefix);
    objective_reset(&t->obj);
    int rc = t->tr.ops->evaluate(&t->tr, &t->data.val[v], t->r->train.eval_batches, t->comm->rank, t->comm->world,
                                 &sums[0], &sums[1], e);
    if (agree(t, rc, e)) return -1;
    comm_sum_doubles(t->comm, sums, 2, "the validation loss");
    *loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    if (isnan(*loss))
        return pt_fail(e, "%s: the validation data gives the %s's loss nothing to count", t->data.val[v].path,
                       t->tr.what);
    if (t->obj.eval_metrics) add_metrics(t, j, prefix, sums[1], metrics);
    return 0;
}

static int evaluate(Trainer *t, PtError *e) {
    RunData *d = &t->data;
    if (!d->n_val) return 0;
    if (t->tr.ops->use_step_weights(&t->tr, t->st.step, e)) return -1;
    double t0 = now_seconds(), loss[VAL_MAX_SETS], metrics[VAL_MAX_SETS][OBJECTIVE_MAX_METRICS];
    json_t *line = json_pack("{s:I}", "step", (json_int_t)t->st.step), *j = json_object();
    for (int v = 0; v < d->n_val; v++) {
        if (evaluate_set(t, v, j, &loss[v], metrics[v], e)) {
            json_decref(line);
            json_decref(j);
            return -1;
        }
        char key[VAL_NAME_MAX + 16];
        run_data_val_prefix(d, v, key, sizeof key);
        strcat(key, "loss");
        json_object_set_new(line, key, json_real(loss[v]));
        strcpy(key + strlen(key) - 4, "ppl");
        json_object_set_new(line, key, json_real(exp(loss[v])));
        series_add(&t->curve[CURVE(0, 1 + v)], t->st.step, loss[v]);
        for (int k = 0; t->obj.eval_metrics && k < t->obj.n_metrics; k++)
            series_add(&t->curve[CURVE(1 + k, 1 + v)], t->st.step, metrics[v][k]);
    }
    const double figure = run_data_best_figure(d, loss);
    int best = figure < t->st.best_val_loss, rc = 0;
    if (best) t->st.best_val_loss = figure;
    if (best) {   // the line says so: which evaluation best.h5 holds is then read, not worked out again
        char *path = path_join(t->dir, "best.h5");
        rc = t->tr.ops->save(&t->tr, path, NULL, e);
        free(path);
        json_object_set_new(line, "best", json_true());
    }
    json_object_set_new(line, "eval_s", json_real(now_seconds() - t0));
    json_object_update(line, j);
    json_decref(j);
    if (!t->lead) {
        json_decref(line);
        return rc;
    }
    run_data_report(d, NULL, line);
    run_dir_append_metrics(t->dir, line);
    printf("step %ld: validation loss ", (long)t->st.step);
    for (int v = 0; v < d->n_val; v++) {
        if (d->spec.val_named) printf("%s%s ", v ? ", " : "", d->spec.val[v].name);
        printf("%.4f (", loss[v]);
        if (t->obj.eval_metrics)   // the objective's own figures; a perplexity only means something for a token loss
            for (int k = 0; k < t->obj.n_metrics; k++) printf("%s%s %.4f", k ? ", " : "", t->obj.metric[k], metrics[v][k]);
        else
            printf("perplexity %.2f", exp(loss[v]));
        printf(")");
    }
    if (d->n_val > 1) printf("; best_by %.4f", figure);
    printf("%s\n", best ? ", best so far" : "");
    run_data_report(d, stdout, NULL);
    t->reported_at = t->st.step;
    if (rc) return rc;
    char *svg = path_join(t->dir, "loss.svg");
    rc = plot(t, svg, e);
    free(svg);
    write_sample(t);
    return rc;
}

// ---- one optimizer step over grad_accum micro-batches of every rank. The
// loss is the mean over every counted item of the step (tokens, groups,
// pairs, a draft's block weights), on all ranks alike; *stop_all says
// whether any rank was asked to stop. -1 when a rank could not make its
// micro-batches (a reward program failed): nothing is updated.
static int train_step(Trainer *t, int stop, double *loss_out, double *norm_out, int *finite, int *stop_all,
                      PtError *e) {
    Trainee *tr = &t->tr;
    const int accum = t->r->train.grad_accum;
    const long step = t->st.step;
    double sums[3] = {0, 0, stop};   // loss sum, counted items, ranks asked to stop
    // Micro-batch a's index in the loader's one stream (rank r reads r, r +
    // world, ...): the seed of its random draws, so a resumed run draws the
    // same, and two ranks what one rank accumulating their two draws.
    uint64_t index[accum];
    Objective *o = &t->obj;
    objective_reset(o);
    int rc = 0;
    for (int a = 0; a < accum && rc == 0; a++) {
        index[a] = ((uint64_t)step * accum + (uint64_t)a) * (uint64_t)t->comm->world + (uint64_t)t->comm->rank;
        if (o->ops->make_batch) rc = o->ops->make_batch(o, &tr->m, index[a], &t->micro[a], e);
        else run_data_next(&t->data, &t->micro[a]);
        if (rc == 0) sums[1] += tr->ops->prepare(tr, a, &t->micro[a], index[a]);
    }
    if (agree(t, rc, e)) return -1;
    comm_sum_doubles(t->comm, sums + 1, 2, "counting the step's tokens");
    // Every micro-batch's gradient is scaled by 1/(items in the whole step), so
    // accumulation gives exactly the mean loss over all of them. Each one is
    // computed on its own and added to the step's in micro-batch order, so the
    // sum is the one ranks make of whole gradients: two ranks give the bits of
    // one rank accumulating two micro-batches.
    const double n_loss = sums[1];
    float scale = n_loss > 0 ? 1.0f / (float)n_loss : 0.0f;
    double local = 0;
    for (int a = 0; a < accum; a++) {
        local += tr->ops->micro(tr, a, &t->micro[a], index[a], scale, a ? t->micro_grads : NULL);
        if (a) OP(&t->dev, residual_forward, tr->grads, tr->grads, t->micro_grads, tr->tt->total);
    }
    comm_sum_doubles(t->comm, &local, 1, "the step's loss");
    double loss = n_loss > 0 ? local / n_loss : 0.0;
    add_metrics(t, NULL, "", n_loss, t->step_metrics);
    *stop_all = sums[2] > 0;
    dp_reduce_grads(&t->dp, tr->grads);
    if (tr->ops->after_reduce) tr->ops->after_reduce(tr, step, tr->grads);
    double norm = dp_grad_norm(&t->dp, tr->grads);
    *norm_out = norm;
    *finite = isfinite(loss) && isfinite(norm);
    if (*finite) {
        float lr = schedule_lr(&t->sched, t->adam.lr, step);
        dp_update(&t->dp, tr->params, tr->grads, grad_clip_factor(norm, t->adam.grad_clip), &t->adam, lr, step + 1);
        if (tr->ops->after_update) tr->ops->after_update(tr, step);
    }
    *loss_out = loss;
    return 0;
}

static void progress(const Trainer *t, double loss, double tok_s, long tokens_per_step, int tty) {
    long left = t->total_steps - t->st.step;
    double eta = tok_s > 0 ? (double)left * tokens_per_step / tok_s : 0;
    char shown[128] = "";   // the objective's figure of the step, when it shows one
    const int k = t->obj.progress_metric - 1;
    if (k >= 0) snprintf(shown, sizeof shown, tty ? " | %s %.4f" : " %s %.4f", t->obj.metric[k], t->step_metrics[k]);
    if (tty)
        fprintf(stderr, "\rstep %ld/%ld | loss %.4f%s | %.0f tok/s | ETA %dm%02ds   ", (long)t->st.step,
                t->total_steps, loss, shown, tok_s, (int)(eta / 60), (int)fmod(eta, 60));
    else
        printf("step %ld/%ld loss %.4f%s tok/s %.0f eta %.0fs\n", (long)t->st.step, t->total_steps, loss, shown, tok_s,
               eta);
    fflush(stdout);
}

static void trainer_free(Trainer *t) {
    for (int a = 0; t->micro && a < t->r->train.grad_accum; a++) batch_free(&t->micro[a]);
    free(t->micro);
    run_data_close(&t->data);
    if (t->tok) tokenizer_free(t->tok);
    dp_free(&t->dp);
    if (t->micro_grads) t->dev.be->release(&t->dev, t->micro_grads);
    objective_free(&t->obj);   // before the trainee: a teacher's model runs on the same device
    if (t->dev.be) trainee_free(&t->tr);
    if (t->dev.be) dev_free(&t->dev);
    for (int k = 0; k < N_CURVES; k++) series_free(&t->curve[k]);
    free(t->dir);
}

// The lead's files and lines before the first step.
static int announce(Trainer *t, const char *resumed, long tokens_per_step, PtError *e) {
    const Recipe *r = t->r;
    if (!t->lead) return 0;
    if (resumed) printf("resuming from %s (step %ld)\n", resumed, (long)t->st.step);
    else printf("starting from %s\n", r->model.init);
    const char *keys[N_CURVES];
    for (int k = 0; k < N_CURVES; k++) keys[k] = t->curve_key[k];   // "" for the curves a run has not
    if (run_dir_reload_metrics(t->dir, (long)t->st.step, keys, t->curve, N_CURVES, e)) return -1;
    char *path = path_join(t->dir, "recipe.ini");   // the resolved recipe, beside the run's outputs
    AtomicFile af;
    int rc = atomic_open(&af, path, e);
    if (rc == 0) {
        recipe_write(r, af.f);
        rc = atomic_commit(&af, e);
    }
    free(path);
    if (rc) return -1;
    config_print(&t->tr.b.cfg, stdout);
    printf("%s: %ld steps of %d x %d x %d tokens%s, %s schedule, lr %g; machine peak %.0f GFLOP/s\n",
           train_mode_name(r->train.mode), t->total_steps, r->train.micro_batch, r->train.seq_len,
           r->train.grad_accum, t->comm->world > 1 ? " on every rank" : "", schedule_kind_name(r->optim.schedule),
           r->optim.lr, t->peak_gflops);
    cpu_kernels_announce(&t->dev, r->train.matmul == TRAIN_MATMUL_BF16, stdout);
    if (t->comm->world > 1) {
        // A ring reduce-scatter of the gradients and an allgather of the parameters each send (W-1)/W of them.
        const double W = t->comm->world, sent = 2 * (W - 1) / W * (double)t->tr.tt->total * 4;
        printf("data parallel: %d ranks, %ld tokens a step; each rank holds 1/%d of the AdamW state (%.1f MiB) and "
               "sends %.1f MiB a step\n", t->comm->world, tokens_per_step, t->comm->world,
               2.0 * (double)(dp_hi(&t->dp) - dp_lo(&t->dp)) * 4 / (1 << 20), sent / (1 << 20));
    }
    return 0;
}

// Everything up to the first step: device, run directory, what trains, its
// data, optimizer and plan, on every rank.
static int set_up(Trainer *t, char **resumed, PtError *e) {
    const Recipe *r = t->r;
    int rc = open_device(t, e);
    if (rc == 0 && t->lead) rc = run_dir_create(t->dir, e);
    if (agree(t, rc, e)) return -1;
    long newest = run_dir_newest_checkpoint(t->dir);
    *resumed = newest >= 0 ? run_dir_checkpoint_path(t->dir, newest) : NULL;
    t->st.best_val_loss = INFINITY;
    FILE *log = t->lead ? stdout : NULL;
    const TraineeSetup ts = {r, &t->dev, t->comm, &t->obj, *resumed, log};
    rc = objective_open(&t->obj, r, e) || trainee_open(&t->tr, &ts, e) || optimizer_setup(t, *resumed, e) ||
                 open_data(t, *resumed != NULL, e)
             ? -1
             : 0;
    const int B = r->train.micro_batch, T = r->train.seq_len, accum = r->train.grad_accum;
    const long tokens_per_step = (long)B * T * accum * t->comm->world;
    // steps, else tokens, else epochs over the training set's tokens
    // (a mixture's length is never epochs: recipe_load refuses it)
    double budget = r->train.tokens > 0 ? (double)r->train.tokens : r->train.epochs * (double)t->data.train[0].n_tokens;
    t->total_steps = r->train.steps > 0 ? r->train.steps : (long)ceil(budget / tokens_per_step);
    if (rc == 0 && t->total_steps < 1) rc = pt_fail(e, "set train.steps, train.tokens or train.epochs");
    if (rc == 0) rc = t->tr.ops->plan(&t->tr, B, T, accum, log, e);
    if (rc == 0 && t->obj.ops->start) {
        rc = t->tr.ops->use_step_weights(&t->tr, t->st.step, e);
        if (rc == 0) rc = t->obj.ops->start(&t->obj, &t->tr.m, t->comm, t->dir, *resumed ? (long)t->st.step : 0, e);
    }
    if (agree(t, rc, e)) return -1;
    for (int f = 0; f <= t->obj.n_metrics; f++) {
        const char *what = f ? t->obj.metric[f - 1] : "loss";
        snprintf(t->curve_key[CURVE(f, 0)], sizeof t->curve_key[0], "%s", what);
        for (int v = 0; v < t->data.n_val; v++) {
            char prefix[VAL_NAME_MAX + 8];
            run_data_val_prefix(&t->data, v, prefix, sizeof prefix);
            snprintf(t->curve_key[CURVE(f, 1 + v)], sizeof t->curve_key[0], "%s%s", prefix, what);
        }
    }
    if (uses_nccl(t)) {
        const int bf16 = r->train.grad_reduce == GRAD_REDUCE_BF16;
        if (agree(t, dp_use_nccl(&t->dp, bf16, e), e)) return -1;
        if (t->lead) printf("collectives: NCCL, %d GPU(s), the gradient sum in %s\n", t->comm->world, bf16 ? "bf16" : "fp32");
    }
    recipe_adamw(r, &t->adam);
    recipe_schedule(r, t->total_steps, &t->sched);
    t->micro = xcalloc(accum, sizeof(Batch), "micro-batches");
    for (int a = 0; a < accum; a++) batch_alloc(&t->micro[a], B, T);
    if (accum > 1) t->micro_grads = t->dev.be->alloc(&t->dev, t->tr.tt->total * sizeof(float), "micro-batch gradients");
    // MFU against the CPU's measured peak; a GPU's is not measured here (0: no MFU).
    // The peak of the vectors the chosen kernels use (POCKET_KERNELS may restrict them).
    t->peak_gflops = t->lead && t->dev.be == backend_cpu()
                         ? cpu_peak_fp32_gflops_lanes(t->dev.threads, cpu_kernels_lanes(cpu_kernels(&t->dev)))
                         : 0;
    t->flops_per_token = t->tr.ops->flops_per_token(&t->tr, T) + t->obj.flops_per_token;
    return agree(t, announce(t, *resumed, tokens_per_step, e), e);
}

int train_run(const Recipe *r, Comm *comm, volatile sig_atomic_t *stop, PtError *e) {
    Trainer t;
    memset(&t, 0, sizeof t);
    t.r = r;
    t.comm = comm;
    t.lead = comm->rank == 0;
    t.dir = xstrdup(r->train.run_dir);
    t.reported_at = -1;
    comm->timeout_s = r->train.comm_timeout;
    char *resumed = NULL;
    const int new_dir = !path_is_dir(t.dir);   // a run that fails to start leaves no empty directory behind
    int rc = -1;
    if (set_up(&t, &resumed, e)) goto out;
    const long tokens_per_step = (long)r->train.micro_batch * r->train.seq_len * r->train.grad_accum * comm->world;
    int tty = t.lead && isatty(fileno(stderr)), stopped = 0;
    double start = now_seconds(), last_print = 0;
    if (t.st.step == 0 && r->train.eval_interval > 0 && evaluate(&t, e)) goto out;   // 0: never
    // train.stop_after ends this invocation early (time-boxed jobs); the same
    // command without it resumes.
    long stop_at = r->train.stop_after > 0 && r->train.stop_after < t.total_steps ? r->train.stop_after : t.total_steps;
    while (t.st.step < stop_at && !stopped) {
        double t0 = now_seconds(), comm_t0 = comm->seconds, norm;
        int finite;
        if (t.tr.ops->use_step_weights(&t.tr, t.st.step, e)) goto out;
        double loss;
        if (train_step(&t, *stop != 0, &loss, &norm, &finite, &stopped, e)) goto out;
        t.st.step++;
        t.st.tokens += tokens_per_step;
        double dt = now_seconds() - t0, tok_s = tokens_per_step / dt;
        if (!finite) {
            t.st.bad_steps++;
            if (t.lead)
                fprintf(stderr, "%sstep %ld: non-finite loss or gradient (loss %g, grad norm %g), update skipped "
                                "(%ld in a row)\n", tty ? "\n" : "", (long)t.st.step, loss, norm, (long)t.st.bad_steps);
            if (t.st.bad_steps >= r->train.max_bad_steps) {
                pt_fail(e, "stopping: %ld non-finite steps in a row (train.max_bad_steps); lower optim.lr?",
                        (long)t.st.bad_steps);
                goto out;
            }
        } else {
            t.st.bad_steps = 0;
            series_add(&t.curve[CURVE(0, 0)], t.st.step, loss);
            for (int k = 0; k < t.obj.n_metrics; k++)
                if (!t.obj.eval_only[k]) series_add(&t.curve[CURVE(1 + k, 0)], t.st.step, t.step_metrics[k]);
        }
        if (t.lead) {
            float lr = schedule_lr(&t.sched, t.adam.lr, t.st.step - 1);
            double mfu = t.peak_gflops > 0 ? t.flops_per_token * tokens_per_step / dt / 1e9 / (t.peak_gflops * comm->world)
                                            : 0.0;
            json_t *j = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "step", (json_int_t)t.st.step, "loss",
                                  loss, "lr", (double)lr, "grad_norm", norm, "tokens_per_s", tok_s, "mfu", mfu,
                                  "elapsed_s", now_seconds() - start, "tokens", (json_int_t)t.st.tokens);
            if (comm->world > 1) json_object_set_new(j, "comm_s", json_real(comm->seconds - comm_t0));
            for (int k = 0; k < t.obj.n_metrics; k++)
                if (!t.obj.eval_only[k]) json_object_set_new(j, t.obj.metric[k], json_real(t.step_metrics[k]));
            if (stopped || t.st.step == stop_at) run_data_report(&t.data, NULL, j);   // this invocation's last step
            run_dir_append_metrics(t.dir, j);
            double now = now_seconds();
            if (tty || now - last_print >= 1.0 || t.st.step == t.total_steps) {
                progress(&t, loss, tok_s, tokens_per_step, tty);
                last_print = now;
            }
        }
        int at_end = t.st.step == t.total_steps;
        if (r->train.eval_interval > 0 && (t.st.step % r->train.eval_interval == 0 || at_end)) {
            if (tty) fputc('\n', stderr);
            if (evaluate(&t, e)) goto out;
        }
        if ((r->train.save_interval > 0 && t.st.step % r->train.save_interval == 0) || at_end || stopped ||
            t.st.step == stop_at)
            if (save_checkpoint(&t, e)) goto out;
    }
    if (tty) fputc('\n', stderr);
    if (t.lead && t.reported_at != t.st.step) run_data_report(&t.data, stdout, NULL);
    if (t.lead && t.st.step < t.total_steps)
        printf("%s at step %ld; checkpoint saved in %s; run the same command to resume\n",
               stopped ? "interrupted" : "stopped (train.stop_after)", (long)t.st.step, t.dir);
    else if (t.lead)
        printf("done: %ld steps, %.1f s, checkpoints in %s\n", (long)t.st.step, now_seconds() - start, t.dir);
    rc = 0;
out:
    free(resumed);
    if (rc && new_dir && t.lead) rmdir(t.dir);   // only removes it while empty
    trainer_free(&t);
    return rc;
}
