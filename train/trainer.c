#include "trainer.h"
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../model/generate.h"
#include "../model/model.h"
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "../formats/checkpoint.h"
#include "evaluate.h"
#include "plot.h"

typedef struct {
    const Recipe *r;
    Device dev;
    ModelBundle b;            // config, table, master weights and tokenizer, in host memory
    float *adam_m_host, *adam_v_host;
    float *params, *adam_m, *adam_v;   // the masters and the Adam moments on the device (dev_mirror)
    Model m;
    TrainState st;
    Tokenizer *tok;
    Dataset train_ds, val_ds;
    int has_val;
    Loader loader;
    Batch *micro;             // grad_accum micro-batches of one step
    long total_steps;
    Schedule sched;
    AdamWConfig adam;
    double peak_gflops, flops_per_token;
    Series train_curve, val_curve;
    char *dir;
    QatRun qat;               // [qat] enabled (qat_on): the int4 scales/zeros and their training
    int qat_on;
} Trainer;

// ---- run directory: checkpoints are ckpt-<step>.h5, each complete (written
// to a temporary name and renamed); the newest one is where a run resumes.
static long ckpt_step(const char *name) {
    long step;
    int used = 0;
    if (sscanf(name, "ckpt-%ld.h5%n", &step, &used) == 1 && name[used] == 0) return step;
    return -1;
}

static long newest_checkpoint(const char *dir, long *steps, int *n_steps, int cap) {
    DIR *d = opendir(dir);
    long best = -1;
    *n_steps = 0;
    if (!d) return -1;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        long s = ckpt_step(ent->d_name);
        if (s < 0) continue;
        if (*n_steps < cap) steps[(*n_steps)++] = s;
        if (s > best) best = s;
    }
    closedir(d);
    return best;
}

// Leftovers of a write that was killed: PATH.tmp.PID files.
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d)))
        if (strstr(ent->d_name, ".tmp.")) {
            char *p = path_join(dir, ent->d_name);
            unlink(p);
            free(p);
        }
    closedir(d);
}

static int make_dirs(const char *path, PtError *e) {
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    int rc = (mkdir(p, 0755) == 0 || errno == EEXIST) && path_is_dir(p) ? 0
                                                                       : pt_fail(e, "%s: cannot create the run directory", path);
    free(p);
    return rc;
}

static char *ckpt_path(const Trainer *t, long step) {
    char name[64];
    snprintf(name, sizeof name, "ckpt-%08ld.h5", step);
    return path_join(t->dir, name);
}

// The device's masters and moments back in the host buffers the checkpoint
// writes (nothing to copy when the device works in host memory).
static void download_state(Trainer *t) {
    size_t bytes = t->b.tt.total * sizeof(float);
    OP(&t->dev, download, t->b.params, t->params, bytes);
    OP(&t->dev, download, t->adam_m_host, t->adam_m, bytes);
    OP(&t->dev, download, t->adam_v_host, t->adam_v, bytes);
}

static const QatState *qat_state(const Trainer *t) { return t->qat_on && t->qat.ready ? &t->qat.q : NULL; }

static int save_checkpoint(Trainer *t, PtError *e) {
    char *path = ckpt_path(t, t->st.step);
    loader_get_cursor(&t->loader, &t->st.cursor);
    download_state(t);
    int rc = checkpoint_save_train(path, &t->b, t->adam_m_host, t->adam_v_host, &t->st, qat_state(t), e);
    free(path);
    if (rc) return rc;
    long steps[4096];
    int n;
    newest_checkpoint(t->dir, steps, &n, 4096);
    // keep_last newest ckpt-*.h5; best.h5 is separate
    for (int kept = 0, i; n > 0;) {
        int newest = 0;
        for (i = 1; i < n; i++)
            if (steps[i] > steps[newest]) newest = i;
        long s = steps[newest];
        steps[newest] = steps[--n];
        if (++kept > t->r->train.keep_last) {
            char *old = ckpt_path(t, s);
            unlink(old);
            free(old);
        }
    }
    return 0;
}

// ---- metrics.jsonl: one JSON object per line. On resume the lines past the
// checkpoint's step are dropped (those steps run again) and the curves rebuilt.
static int reload_metrics(Trainer *t, PtError *e) {
    char *path = path_join(t->dir, "metrics.jsonl");
    FILE *f = fopen(path, "r");
    int rc = 0;
    if (f) {
        AtomicFile af;
        if ((rc = atomic_open(&af, path, e)) == 0) {
            char *line = NULL;
            size_t cap = 0;
            while (getline(&line, &cap, f) > 0) {
                json_t *j = json_loads(line, 0, NULL);
                if (!j) continue;
                long step = (long)json_integer_value(json_object_get(j, "step"));
                if (step <= t->st.step) {
                    fputs(line, af.f);
                    json_t *loss = json_object_get(j, "loss"), *val = json_object_get(j, "val_loss");
                    if (json_is_number(loss)) series_add(&t->train_curve, step, json_number_value(loss));
                    if (json_is_number(val)) series_add(&t->val_curve, step, json_number_value(val));
                }
                json_decref(j);
            }
            free(line);
            rc = atomic_commit(&af, e);
        }
        fclose(f);
    }
    free(path);
    return rc;
}

static void append_metrics(Trainer *t, json_t *j) {
    char *path = path_join(t->dir, "metrics.jsonl");
    FILE *f = fopen(path, "a");
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (f && s) {
        fprintf(f, "%s\n", s);
        fflush(f);
    }
    if (f) fclose(f);
    free(s);
    free(path);
    json_decref(j);
}

// ---- setup
// Loads the newest checkpoint of the run (*resumed = its path, malloc'd) or
// the recipe's starting point (*resumed = NULL) into t->b and the Adam moments.
static int load_bundle(Trainer *t, char **resumed, PtError *e) {
    const Recipe *r = t->r;
    long steps[1];
    int n;
    long resume = newest_checkpoint(t->dir, steps, &n, 1);
    ModelBundle *b = &t->b;
    t->st.best_val_loss = INFINITY;
    if (resume >= 0) {
        char *path = ckpt_path(t, resume);
        *resumed = path;
        if (checkpoint_load(path, b, e)) return -1;
        t->adam_m_host = xaligned(b->tt.total * sizeof(float), "Adam m");
        t->adam_v_host = xaligned(b->tt.total * sizeof(float), "Adam v");
        int rc = checkpoint_load_train(path, &b->tt, t->adam_m_host, t->adam_v_host, &t->st, e);
        if (rc == 1) rc = pt_fail(e, "%s: has no optimizer state to resume from", path);
        if (rc == 0) printf("resuming from %s (step %ld)\n", path, (long)t->st.step);
        return rc;
    }
    if (checkpoint_is_hdf5(r->model.init)) {
        if (checkpoint_load(r->model.init, b, e)) return -1;
    } else {
        ModelConfig cfg;
        if (config_load(&cfg, r->model.init, e)) return -1;
        bundle_alloc(b, &cfg);
        bundle_init_random(b, (uint64_t)r->train.seed);
    }
    if (!b->tokenizer_json && r->model.tokenizer[0]) {
        uint8_t *data;
        if (read_whole_file(r->model.tokenizer, &data, &b->tokenizer_json_len, e)) return -1;
        b->tokenizer_json = (char *)data;
    }
    t->adam_m_host = xaligned(b->tt.total * sizeof(float), "Adam m");
    t->adam_v_host = xaligned(b->tt.total * sizeof(float), "Adam v");
    printf("starting from %s\n", r->model.init);
    return 0;
}

// The masters and moments on the device, and the model over them.
static void place_on_device(Trainer *t) {
    size_t bytes = t->b.tt.total * sizeof(float);
    t->params = dev_mirror(&t->dev, t->b.params, bytes, "master weights");
    t->adam_m = dev_mirror(&t->dev, t->adam_m_host, bytes, "Adam m");
    t->adam_v = dev_mirror(&t->dev, t->adam_v_host, bytes, "Adam v");
    ModelOptions opt;
    recipe_model_options(t->r, &opt);
    model_init(&t->m, &t->dev, &t->b.cfg, &t->b.tt, t->params, &opt);
}

static int open_data(Trainer *t, PtError *e) {
    const Recipe *r = t->r;
    if (!t->b.tokenizer_json)
        return pt_fail(e, "%s: the model has no tokenizer; set model.tokenizer in the recipe", r->model.init);
    if (tokenizer_load(&t->tok, t->b.tokenizer_json, t->b.tokenizer_json_len, r->model.init, e)) return -1;
    if (tokenizer_vocab_size(t->tok) > t->b.cfg.vocab_size)
        return pt_fail(e, "%s: the tokenizer has %d tokens but the model's vocabulary is %d", r->model.init,
                       tokenizer_vocab_size(t->tok), t->b.cfg.vocab_size);
    if (r->train.seq_len > t->b.cfg.max_seq)
        return pt_fail(e, "train.seq_len %d exceeds the model's context length %d", r->train.seq_len, t->b.cfg.max_seq);
    const char *hash = tokenizer_hash(t->tok);
    int sft = r->train.mode == TRAIN_MODE_SFT;
    if (dataset_open(&t->train_ds, r->data.train, e) || dataset_check_tokenizer(&t->train_ds, hash, e)) return -1;
    if (sft != (t->train_ds.kind == DATASET_SFT))
        return pt_fail(e, "%s: a %s dataset, but train.mode is %s", r->data.train,
                       t->train_ds.kind == DATASET_SFT ? "sft" : "cpt", train_mode_name(r->train.mode));
    if (r->data.val[0]) {
        if (dataset_open(&t->val_ds, r->data.val, e) || dataset_check_tokenizer(&t->val_ds, hash, e)) return -1;
        t->has_val = 1;
    }
    if (loader_open(&t->loader, &t->train_ds, r->train.micro_batch, r->train.seq_len, (uint64_t)r->train.seed, 0, 1, e))
        return -1;
    if (!sft) loader_set_doc_mask(&t->loader, r->train.doc_mask);
    if (t->st.step > 0 && loader_set_cursor(&t->loader, &t->st.cursor, e)) return -1;
    return 0;
}

// ---- QAT: the model runs on fake-quantized weights; gradients reach the
// master weights through the straight-through estimator (qat/qat.h).
static int qat_setup(Trainer *t, const char *resume_path, PtError *e) {
    const Recipe *r = t->r;
    if (!r->qat.enabled) return 0;
    QatRunConfig qc;
    AdamWConfig adam;
    recipe_qat(r, &qc);
    recipe_adamw(r, &adam);
    if (qat_run_init(&t->qat, &t->dev, &t->b.tt, &qc, &adam, stdout, r->model.init, e)) return -1;
    t->qat_on = 1;
    // scales come from the checkpoint being resumed (or a QAT checkpoint we start from)
    const char *from = resume_path ? resume_path : checkpoint_is_hdf5(r->model.init) ? r->model.init : NULL;
    if (from) {
        int rc = checkpoint_load_qat(from, &t->qat.q, &t->b.tt, e);
        if (rc < 0) return -1;
        t->qat.ready = rc == 0;
        // A new run from a frozen checkpoint freezes by its own recipe.
        if (!resume_path && t->qat.q.codes) {
            free(t->qat.q.codes);
            t->qat.q.codes = NULL;
        }
    }
    return 0;
}

// Before a step or an evaluation: the weights the model runs on.
static int use_step_weights(Trainer *t, PtError *e) {
    float *w = t->qat_on ? qat_run_weights(&t->qat, t->st.step, t->params, e) : t->params;
    if (!w) return -1;
    model_use_weights(&t->m, w);
    return 0;
}

static void write_sample(Trainer *t) {
    const Recipe *r = t->r;
    if (!r->train.sample_prompt[0]) return;
    int *ids = NULL;
    size_t n = 0, cap = 0;
    PtError e;
    if (tokenizer_encode(t->tok, r->train.sample_prompt, strlen(r->train.sample_prompt), &ids, &n, &cap, &e)) {
        fprintf(stderr, "sample prompt: %s\n", e.msg);
        return;
    }
    int max_new = r->train.sample_tokens;
    if ((int)n + max_new > t->b.cfg.max_seq) max_new = t->b.cfg.max_seq - (int)n;
    int *out = xmalloc((max_new > 0 ? max_new : 1) * sizeof(int), "sample");
    int got = -1;
    GenContext g;
    if (max_new > 0 && gen_init(&g, &t->m, (int)n + max_new, &e) == 0) {
        GenParams p;
        gen_params_default(&p);
        p.max_new = max_new;
        add_default_stops(&p, &t->b.cfg, t->tok);
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

static int evaluate(Trainer *t, PtError *e) {
    if (!t->has_val) return 0;
    if (use_step_weights(t, e)) return -1;
    double t0 = now_seconds();
    double val = eval_loss(&t->m, &t->val_ds, t->r->train.doc_mask, t->r->train.eval_batches, NULL, e);
    if (isnan(val)) return -1;
    series_add(&t->val_curve, t->st.step, val);
    json_t *j = json_pack("{s:I, s:f, s:f, s:f}", "step", (json_int_t)t->st.step, "val_loss", val, "val_ppl", exp(val),
                          "eval_s", now_seconds() - t0);
    append_metrics(t, j);
    printf("step %ld: validation loss %.4f (perplexity %.2f)%s\n", (long)t->st.step, val, exp(val),
           val < t->st.best_val_loss ? ", best so far" : "");
    if (val < t->st.best_val_loss) {
        t->st.best_val_loss = val;
        char *best = path_join(t->dir, "best.h5");
        download_state(t);
        int rc = checkpoint_save_qat(best, &t->b, qat_state(t), e);
        free(best);
        if (rc) return rc;
    }
    char *svg = path_join(t->dir, "loss.svg");
    int rc = plot_loss_svg(svg, t->r->train.run_dir, &t->train_curve, &t->val_curve, e);
    free(svg);
    write_sample(t);
    return rc;
}

// ---- one optimizer step over grad_accum micro-batches
static double train_step(Trainer *t, double *norm_out, int *finite) {
    const Recipe *r = t->r;
    int accum = r->train.grad_accum;
    long n_loss = 0;
    for (int a = 0; a < accum; a++) {
        loader_next(&t->loader, &t->micro[a]);
        n_loss += t->micro[a].n_loss;
    }
    model_zero_grads(&t->m);
    double sum = 0;
    // Every micro-batch's gradient is scaled by 1/(targets in the whole step), so
    // accumulation gives exactly the mean loss over all of them.
    float scale = n_loss ? 1.0f / (float)n_loss : 0.0f;
    for (int a = 0; a < accum; a++) {
        Batch *b = &t->micro[a];
        ModelInput in = {.B = b->B, .T = b->T, .tokens = b->tokens, .targets = b->targets, .mask = b->mask,
                         .pos = b->pos, .seg = b->seg};
        int c;
        sum += model_forward_backward(&t->m, &in, scale, NULL, &c);
    }
    double loss = n_loss ? sum / n_loss : 0.0;
    Device *d = &t->dev;
    const TensorTable *tt = &t->b.tt;
    if (t->qat_on) qat_run_backward(&t->qat, t->st.step, t->params, t->m.grads);
    double norm = OP(d, grad_norm, t->m.grads, tt);
    *norm_out = norm;
    *finite = isfinite(loss) && isfinite(norm);
    if (*finite) {
        OP(d, grad_scale, t->m.grads, tt, grad_clip_factor(norm, t->adam.grad_clip));
        float lr = schedule_lr(&t->sched, t->adam.lr, t->st.step);
        OP(d, adamw_step, t->params, t->m.grads, t->adam_m, t->adam_v, tt, &t->adam, lr, t->st.step + 1);
        if (t->qat_on) qat_run_update(&t->qat, t->st.step, t->params);
    }
    return loss;
}

static void progress(const Trainer *t, double loss, double tok_s, long tokens_per_step, int tty) {
    long left = t->total_steps - t->st.step;
    double eta = tok_s > 0 ? (double)left * tokens_per_step / tok_s : 0;
    if (tty)
        fprintf(stderr, "\rstep %ld/%ld | loss %.4f | %.0f tok/s | ETA %dm%02ds   ", (long)t->st.step, t->total_steps,
                loss, tok_s, (int)(eta / 60), (int)fmod(eta, 60));
    else
        printf("step %ld/%ld loss %.4f tok/s %.0f eta %.0fs\n", (long)t->st.step, t->total_steps, loss, tok_s, eta);
    fflush(stdout);
}

static void trainer_free(Trainer *t) {
    for (int a = 0; t->micro && a < t->r->train.grad_accum; a++) batch_free(&t->micro[a]);
    free(t->micro);
    loader_close(&t->loader);
    dataset_close(&t->train_ds);
    if (t->has_val) dataset_close(&t->val_ds);
    if (t->tok) tokenizer_free(t->tok);
    model_free(&t->m);
    if (t->qat_on) qat_run_free(&t->qat);
    if (t->dev.be) {
        dev_unmirror(&t->dev, t->params, t->b.params);
        dev_unmirror(&t->dev, t->adam_m, t->adam_m_host);
        dev_unmirror(&t->dev, t->adam_v, t->adam_v_host);
        dev_free(&t->dev);
    }
    free(t->adam_m_host);
    free(t->adam_v_host);
    bundle_free(&t->b);
    series_free(&t->train_curve);
    series_free(&t->val_curve);
    free(t->dir);
}

int train_run(const Recipe *r, volatile sig_atomic_t *stop, PtError *e) {
    Trainer t;
    memset(&t, 0, sizeof t);
    t.r = r;
    t.dir = xstrdup(r->train.run_dir);
    int rc = -1;
    cpu_device_init(&t.dev, r->train.threads, NULL);
    if (make_dirs(t.dir, e)) goto out;
    remove_stale_temps(t.dir);
    char *resumed = NULL;
    rc = load_bundle(&t, &resumed, e);
    if (rc == 0) place_on_device(&t);
    rc = rc || qat_setup(&t, resumed, e) || open_data(&t, e) ? -1 : 0;
    free(resumed);
    if (rc) goto out;
    rc = -1;
    int B = r->train.micro_batch, T = r->train.seq_len, accum = r->train.grad_accum;
    long tokens_per_step = (long)B * T * accum;
    // steps, else tokens, else epochs over the training set's tokens
    double budget = r->train.tokens > 0 ? (double)r->train.tokens : r->train.epochs * (double)t.train_ds.n_tokens;
    t.total_steps = r->train.steps > 0 ? r->train.steps : (long)ceil(budget / tokens_per_step);
    if (t.total_steps < 1) { pt_fail(e, "set train.steps, train.tokens or train.epochs"); goto out; }
    recipe_adamw(r, &t.adam);
    recipe_schedule(r, t.total_steps, &t.sched);
    if (model_plan(&t.m, B, T, 1, stdout, e)) goto out;
    t.micro = xcalloc(accum, sizeof(Batch), "micro-batches");
    for (int a = 0; a < accum; a++) batch_alloc(&t.micro[a], B, T);
    if (reload_metrics(&t, e)) goto out;
    {   // the resolved recipe, beside the run's outputs
        char *path = path_join(t.dir, "recipe.ini");
        AtomicFile af;
        if (atomic_open(&af, path, e) == 0) {
            recipe_write(r, af.f);
            atomic_commit(&af, e);
        }
        free(path);
    }
    config_print(&t.b.cfg, stdout);
    t.peak_gflops = cpu_peak_fp32_gflops(t.dev.threads);
    t.flops_per_token = config_train_flops_per_token(&t.b.cfg, T);
    printf("%s: %ld steps of %d x %d x %d tokens, %s schedule, lr %g; machine peak %.0f GFLOP/s\n",
           train_mode_name(r->train.mode),
           t.total_steps, B, T, accum, schedule_kind_name(r->optim.schedule), r->optim.lr, t.peak_gflops);
    int tty = isatty(fileno(stderr));
    double start = now_seconds(), last_print = 0;
    if (t.st.step == 0 && evaluate(&t, e)) goto out;
    // train.stop_after ends this invocation early (time-boxed jobs); the same
    // command without it resumes.
    long stop_at = r->train.stop_after > 0 && r->train.stop_after < t.total_steps ? r->train.stop_after : t.total_steps;
    while (t.st.step < stop_at && !*stop) {
        double t0 = now_seconds(), norm;
        int finite;
        if (use_step_weights(&t, e)) goto out;
        double loss = train_step(&t, &norm, &finite);
        t.st.step++;
        t.st.tokens += tokens_per_step;
        double dt = now_seconds() - t0, tok_s = tokens_per_step / dt;
        if (!finite) {
            t.st.bad_steps++;
            fprintf(stderr, "%sstep %ld: non-finite loss or gradient (loss %g, grad norm %g), update skipped (%ld in a row)\n",
                    tty ? "\n" : "", (long)t.st.step, loss, norm, (long)t.st.bad_steps);
            if (t.st.bad_steps >= r->train.max_bad_steps) {
                pt_fail(e, "stopping: %ld non-finite steps in a row (train.max_bad_steps); lower optim.lr?",
                        (long)t.st.bad_steps);
                goto out;
            }
        } else {
            t.st.bad_steps = 0;
            series_add(&t.train_curve, t.st.step, loss);
        }
        float lr = schedule_lr(&t.sched, t.adam.lr, t.st.step - 1);
        double mfu = t.flops_per_token * tokens_per_step / dt / 1e9 / t.peak_gflops;
        json_t *j = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "step", (json_int_t)t.st.step, "loss", loss,
                              "lr", (double)lr, "grad_norm", norm, "tokens_per_s", tok_s, "mfu", mfu, "elapsed_s",
                              now_seconds() - start, "tokens", (json_int_t)t.st.tokens);
        append_metrics(&t, j);
        double now = now_seconds();
        if (tty || now - last_print >= 1.0 || t.st.step == t.total_steps) {
            progress(&t, loss, tok_s, tokens_per_step, tty);
            last_print = now;
        }
        int at_end = t.st.step == t.total_steps;
        if (r->train.eval_interval > 0 && (t.st.step % r->train.eval_interval == 0 || at_end)) {
            if (tty) fputc('\n', stderr);
            if (evaluate(&t, e)) goto out;
        }
        if ((r->train.save_interval > 0 && t.st.step % r->train.save_interval == 0) || at_end || *stop ||
            t.st.step == stop_at)
            if (save_checkpoint(&t, e)) goto out;
    }
    if (tty) fputc('\n', stderr);
    if (t.st.step < t.total_steps)
        printf("%s at step %ld; checkpoint saved in %s; run the same command to resume\n",
               *stop ? "interrupted" : "stopped (train.stop_after)", (long)t.st.step, t.dir);
    else
        printf("done: %ld steps, %.1f s, checkpoints in %s\n", (long)t.st.step, now_seconds() - start, t.dir);
    rc = 0;
out:
    trainer_free(&t);
    return rc;
}
