// trainer.c: the training loop of `pocket train` (trainer.h), on one rank or
// as one of several data-parallel ranks (data_parallel.h): rank 0 (the lead)
// writes the run's files and prints; every rank steps.
#include "trainer.h"
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../formats/checkpoint.h"
#include "../model/generate.h"
#include "../model/model.h"
#include "../model/ops/dropout_mask.h"
#include "../model/ops/ops.h"
#include "../util/cpu.h"
#include "choice_train.h"
#include "data_parallel.h"
#include "devices.h"
#include "distill.h"
#include "draft_train.h"
#include "evaluate.h"
#include "lora_train.h"
#include "run_dir.h"

typedef struct {
    const Recipe *r;
    Comm *comm;
    int lead;                 // rank 0: writes the run's files and prints
    Device dev;
    ModelBundle b;            // config, table, master weights and tokenizer, in host memory
    float *params;            // the masters on the device (dev_mirror of b.params)
    DataParallel dp;          // the gradient sum and this rank's share of the AdamW state
    Model m;
    TrainState st;
    Tokenizer *tok;
    Dataset train_ds, val_ds;
    int has_val;
    Loader loader;
    Batch *micro;             // this rank's grad_accum micro-batches of one step
    float *micro_grads;       // grad_accum > 1: one micro-batch's gradient, added to the step's (device)
    long total_steps;
    Schedule sched;
    AdamWConfig adam;
    double peak_gflops, flops_per_token;
    Series train_curve, val_curve;
    char *dir;
    QatRun qat;               // [qat] enabled (qat_on): the int4 scales/zeros and their training
    int qat_on;
    LoraTrain lora;           // [lora] enabled (lora_on): the frozen base and the adapter that trains
    int lora_on;
    DistillRun distill;       // [distill] enabled (distill.on): the teacher
    DraftTrain draft;         // [draft] enabled (draft_on): the draft that trains on the frozen int4 model's captures
    int draft_on;
    double step_ce, step_kl;  // with [distill]: the last step's mean cross-entropy and KL per counted token
} Trainer;

// The buffer the optimizer updates: the draft's, the adapter's with LoRA, else
// the masters; its gradients and their table.
static float *trained_params(const Trainer *t) {
    return t->draft_on ? t->draft.params : t->lora_on ? t->lora.params : t->params;
}
static float *step_grads(const Trainer *t) { return t->draft_on ? draft_train_grads(&t->draft) : t->m.grads; }
static const TensorTable *grad_table(const Trainer *t) {
    return t->draft_on ? draft_train_table(&t->draft) : model_grad_table(&t->m);
}

static const QatState *qat_state(const Trainer *t) { return t->qat_on && t->qat.ready ? &t->qat.q : NULL; }

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
// The newest checkpoint of the run (*resumed = its path, malloc'd) or the
// recipe's starting point (*resumed = NULL), into t->b.
static int load_bundle(Trainer *t, char **resumed, PtError *e) {
    const Recipe *r = t->r;
    long resume = run_dir_newest_checkpoint(t->dir);
    ModelBundle *b = &t->b;
    t->st.best_val_loss = INFINITY;
    if (resume >= 0) {
        *resumed = run_dir_checkpoint_path(t->dir, resume);
        if (!r->lora.enabled && !r->draft.enabled) return checkpoint_load(*resumed, b, e);
    }
    // An adapter or a draft resumes on its frozen base, model.init.
    if ((r->lora.enabled || r->draft.enabled) && !checkpoint_is_hdf5(r->model.init))
        return pt_fail(e, "%s: [%s] needs model.init to be a checkpoint (.h5): the frozen base", r->model.init,
                       r->lora.enabled ? "lora" : "draft");
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
    return 0;
}

// The masters on the device and the model over them.
static void place_on_device(Trainer *t) {
    t->params = dev_mirror(&t->dev, t->b.params, t->b.tt.total * sizeof(float), "master weights");
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
    const int kinds[TRAIN_MODE_COUNT] = {DATASET_CPT, DATASET_SFT, DATASET_CHOICE};
    const int choice = r->train.mode == TRAIN_MODE_CHOICE, sft = r->train.mode == TRAIN_MODE_SFT;
    if (dataset_open(&t->train_ds, r->data.train, e) || dataset_check_tokenizer(&t->train_ds, hash, e)) return -1;
    if ((int)t->train_ds.kind != kinds[r->train.mode])
        return pt_fail(e, "%s: a %s dataset, but train.mode is %s", r->data.train,
                       train_mode_name(t->train_ds.kind), train_mode_name(r->train.mode));
    if (choice && choice_check_data(&t->train_ds, t->b.cfg.choice_id, e)) return -1;
    if (r->data.val[0]) {
        if (dataset_open(&t->val_ds, r->data.val, e) || dataset_check_tokenizer(&t->val_ds, hash, e)) return -1;
        t->has_val = 1;
        if (choice && t->val_ds.kind != DATASET_CHOICE)
            return pt_fail(e, "%s: train.mode is choice but this is not a choice dataset", r->data.val);
        if (choice && choice_check_data(&t->val_ds, t->b.cfg.choice_id, e)) return -1;
    }
    if (loader_open(&t->loader, &t->train_ds, r->train.micro_batch, r->train.seq_len, (uint64_t)r->train.seed,
                    t->comm->rank, t->comm->world, e))
        return -1;
    if (!sft && !choice) loader_set_doc_mask(&t->loader, r->train.doc_mask);
    if (t->st.step > 0 && loader_set_cursor(&t->loader, &t->st.cursor, e)) return -1;
    return distill_init(&t->distill, r, &t->dev, &t->b.cfg, hash, r->train.micro_batch, r->train.seq_len,
                        t->lead ? stdout : NULL, e);
}

// ---- LoRA: the model runs on the frozen base with the adapter (lora_train.h).
static int lora_setup(Trainer *t, const char *resume_path, PtError *e) {
    if (!t->r->lora.enabled) return 0;
    if (lora_train_init(&t->lora, t->r, &t->dev, &t->b, t->params, resume_path, t->lead ? stdout : NULL, e)) return -1;
    t->lora_on = 1;
    model_use_lora(&t->m, &t->lora.ad.cfg, &t->lora.ad.tt, t->lora.params);
    return 0;
}

// ---- a draft: the model is the frozen int4 target whose captures the draft reads (draft_train.h).
static int draft_setup(Trainer *t, const char *resume_path, PtError *e) {
    if (!t->r->draft.enabled) return 0;
    t->draft_on = 1;
    return draft_train_init(&t->draft, t->r, &t->dev, &t->b, t->params, &t->m, resume_path, t->lead ? stdout : NULL, e);
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
    if (qat_run_init(&t->qat, &t->dev, &t->b.tt, &qc, &adam, t->lead ? stdout : NULL, r->model.init, e)) return -1;
    t->qat_on = 1;
    // scales come from the checkpoint being resumed (or a QAT checkpoint we start from)
    const char *from = resume_path ? resume_path : checkpoint_is_hdf5(r->model.init) ? r->model.init : NULL;
    if (from && !resume_path) {
        // A start whose int4 state is on another grid (a GGUF import's group 32, say): its weights are
        // the float model, and QAT starts on the recipe's grid from them.
        QuantSpec spec;
        int qemb, rc = checkpoint_read_qat_spec(from, &spec, &qemb, e);
        if (rc < 0) return -1;
        if (rc == 0 && (spec.group != qc.spec.group || spec.symmetric != qc.spec.symmetric ||
                        qemb != qc.quant_embedding)) {
            if (t->lead)
                printf("%s holds an int4 state on another grid (group %d %s%s): QAT starts from its weights on "
                       "this run's grid (group %d %s%s)\n", from, spec.group, spec.symmetric ? "symmetric" : "asymmetric",
                       qemb ? ", embedding quantized" : "", qc.spec.group, qc.spec.symmetric ? "symmetric" : "asymmetric",
                       qc.quant_embedding ? ", embedding quantized" : "");
            from = NULL;
        }
    }
    if (from) {
        int rc = checkpoint_load_qat(from, &t->qat.q, &t->b.tt, e);
        if (rc < 0) return -1;
        t->qat.ready = rc == 0;
        // A new run from a frozen checkpoint freezes by its own recipe.
        if (!resume_path && t->qat.q.codes) {
            free(t->qat.q.codes);
            t->qat.q.codes = NULL;
        }
        qat_run_upload(&t->qat);
    }
    return 0;
}

// The sharded optimizer state: this rank's AdamW moments from the run's
// checkpoint, or zero for a new run.
static int optimizer_setup(Trainer *t, const char *resume_path, PtError *e) {
    dp_init(&t->dp, t->comm, &t->dev, grad_table(t), t->qat_on ? t->qat.q.total : 0);
    if (t->qat_on) {
        t->qat.lo = t->dp.glo[t->comm->rank];
        t->qat.hi = t->dp.ghi[t->comm->rank];
    }
    if (!resume_path) return 0;
    int rc = dp_load(&t->dp, resume_path, &t->st, e);
    if (rc == 1) rc = pt_fail(e, "%s: has no optimizer state to resume from", resume_path);
    return rc;
}

// Before a step or an evaluation: the weights the model runs on.
static int use_step_weights(Trainer *t, PtError *e) {
    // (With LoRA, never with QAT, t->params is the frozen base: with base = int4, the int4 model's weights.)
    float *w = t->qat_on ? qat_run_weights(&t->qat, t->st.step, t->params, e) : t->params;
    if (!w) return -1;
    model_use_weights(&t->m, w);
    return 0;
}

// ---- the run's files (rank 0 writes them; every rank takes part in a checkpoint)

// The device's masters back in the bundle the files are written from
// (nothing to copy when the device works in host memory).
static void download_params(Trainer *t) {
    OP(&t->dev, download, t->b.params, t->params, t->b.tt.total * sizeof(float));
}

static int save_checkpoint(Trainer *t, PtError *e) {
    char *path = run_dir_checkpoint_path(t->dir, t->st.step);
    loader_get_cursor(&t->loader, &t->st.cursor);
    int rc;
    if (t->draft_on) {   // only the draft or the adapter: the frozen base stays where it is
        rc = draft_train_save(&t->draft, &t->dp, path, &t->st, e);
    } else if (t->lora_on) {
        rc = lora_train_save(&t->lora, &t->dp, path, &t->st, e);
    } else {
        download_params(t);
        if (t->qat_on) qat_run_download(&t->qat);
        rc = dp_save(&t->dp, path, &t->b, &t->st, t->qat_on && t->qat.ready ? &t->qat.q : NULL, e);
    }
    free(path);
    if (rc == 0 && t->lead) run_dir_keep_newest(t->dir, t->r->train.keep_last);
    return rc;
}

static void write_sample(Trainer *t) {
    const Recipe *r = t->r;
    if (!r->train.sample_prompt[0] || t->draft_on) return;   // a draft's target does not change
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
    double t0 = now_seconds(), sums[2];
    long count = 0;
    const int rank = t->comm->rank, world = t->comm->world;
    int rc = t->draft_on ? draft_train_eval(&t->draft, &t->m, &t->val_ds, t->r->train.eval_batches, rank, world,
                                            &sums[0], &sums[1], e)
                         : eval_loss_sums(&t->m, &t->val_ds, t->r->train.doc_mask, t->r->train.eval_batches, rank,
                                          world, &sums[0], &count, e);
    if (agree(t, rc, e)) return -1;
    if (!t->draft_on) sums[1] = (double)count;
    comm_sum_doubles(t->comm, sums, 2, "the validation loss");
    double val = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    if (isnan(val))
        return pt_fail(e, "%s: the validation data counts no target token%s", t->r->data.val,
                       t->draft_on ? " a draft block can predict" : "");
    series_add(&t->val_curve, t->st.step, val);
    int best = val < t->st.best_val_loss;
    if (best) t->st.best_val_loss = val;
    if (best && qat_state(t)) {
        qat_run_download(&t->qat);
        dp_gather_qat_moments(&t->dp, &t->qat.q);
    }
    if (!t->lead) return 0;
    json_t *j = json_pack("{s:I, s:f, s:f, s:f}", "step", (json_int_t)t->st.step, "val_loss", val, "val_ppl", exp(val),
                          "eval_s", now_seconds() - t0);
    run_dir_append_metrics(t->dir, j);
    printf("step %ld: validation loss %.4f (perplexity %.2f)%s\n", (long)t->st.step, val, exp(val),
           best ? ", best so far" : "");
    if (best) {
        char *path = path_join(t->dir, "best.h5");
        if (t->draft_on) {
            rc = draft_train_save(&t->draft, &t->dp, path, NULL, e);
        } else if (t->lora_on) {
            rc = lora_train_save(&t->lora, &t->dp, path, NULL, e);
        } else {   // the frozen base of a LoRA run is never copied back
            download_params(t);
            rc = checkpoint_save_qat(path, &t->b, qat_state(t), e);
        }
        free(path);
        if (rc) return rc;
    }
    char *svg = path_join(t->dir, "loss.svg");
    rc = plot_loss_svg(svg, t->r->train.run_dir, &t->train_curve, &t->val_curve, e);
    free(svg);
    write_sample(t);
    return rc;
}

// The seed of this rank's micro-batch a of the step (LoRA dropout's masks, a
// draft's blocks; salt tells them apart): from the run seed and the
// micro-batch's index in the loader's one stream (rank r reads r, r + world,
// ...), so a resumed run draws the same, and two ranks what one rank
// accumulating their two micro-batches draws.
static uint64_t micro_seed(const Trainer *t, int a, uint64_t salt) {
    const uint64_t accum = (uint64_t)t->r->train.grad_accum, world = (uint64_t)t->comm->world;
    const uint64_t index = ((uint64_t)t->st.step * accum + (uint64_t)a) * world + (uint64_t)t->comm->rank;
    return dropout_child_seed((uint64_t)t->r->train.seed ^ salt, index);
}

// ---- one optimizer step over grad_accum micro-batches of every rank. The
// loss is the mean over every counted token of the step, on all ranks alike;
// *stop_all says whether any rank was asked to stop.
static double train_step(Trainer *t, int stop, double *norm_out, int *finite, int *stop_all) {
    const Recipe *r = t->r;
    int accum = r->train.grad_accum;
    double sums[3] = {0, 0, stop};   // loss sum, counted tokens, ranks asked to stop
    double kd[2] = {0, 0};           // [distill]: cross-entropy and KL sums
    for (int a = 0; a < accum; a++) {
        loader_next(&t->loader, &t->micro[a]);
        // A draft's loss averages over its blocks' weighted rows, drawn now.
        sums[1] += t->draft_on ? draft_train_prepare(&t->draft, a, &t->micro[a], micro_seed(t, a, 0xd2af7b10c5ull))
                               : t->micro[a].n_loss;
    }
    comm_sum_doubles(t->comm, sums + 1, 2, "counting the step's tokens");
    // Every micro-batch's gradient is scaled by 1/(targets in the whole step), so
    // accumulation gives exactly the mean loss over all of them. Each one is
    // computed on its own and added to the step's in micro-batch order, so the
    // sum is the one ranks make of whole gradients: two ranks give the bits of
    // one rank accumulating two micro-batches.
    const double n_loss = sums[1];
    float scale = n_loss > 0 ? 1.0f / (float)n_loss : 0.0f;
    double local = 0;
    float *grads = step_grads(t);
    const size_t n_grads = grad_table(t)->total;
    for (int a = 0; a < accum; a++) {
        if (t->draft_on) {
            local += draft_train_micro(&t->draft, &t->m, &t->micro[a], a, scale, a ? t->micro_grads : NULL);
            if (a) OP(&t->dev, residual_forward, grads, grads, t->micro_grads, n_grads);
            continue;
        }
        ChoiceGroups groups;
        ModelInput in = choice_batch_input(&t->micro[a], t->loader.choice, &groups);
        in.distill = distill_target(&t->distill, &t->micro[a], &in);
        int c;
        model_use_grads(&t->m, a ? t->micro_grads : NULL);
        model_zero_grads(&t->m);
        model_set_dropout_seed(&t->m, micro_seed(t, a, 0xd50f0a7ull));
        local += model_forward_backward(&t->m, &in, scale, NULL, &c);
        kd[0] += t->m.distill_sums.ce;
        kd[1] += t->m.distill_sums.kl;
        if (a) OP(&t->dev, residual_forward, grads, grads, t->micro_grads, n_grads);
    }
    if (!t->draft_on) model_use_grads(&t->m, NULL);
    comm_sum_doubles(t->comm, &local, 1, "the step's loss");
    double loss = n_loss > 0 ? local / n_loss : 0.0;
    if (t->distill.on) {
        comm_sum_doubles(t->comm, kd, 2, "the step's distillation parts");
        t->step_ce = n_loss > 0 ? kd[0] / n_loss : 0.0;
        t->step_kl = n_loss > 0 ? kd[1] / n_loss : 0.0;
    }
    *stop_all = sums[2] > 0;
    const long step = t->st.step;
    dp_reduce_grads(&t->dp, grads);
    if (t->qat_on && qat_run_active(&t->qat, step)) {   // its scale gradients need the summed gradient
        dp_gather_grads(&t->dp, grads);
        qat_run_backward(&t->qat, step, t->params, grads);
    }
    double norm = dp_grad_norm(&t->dp, grads);
    *norm_out = norm;
    *finite = isfinite(loss) && isfinite(norm);
    if (*finite) {
        float lr = schedule_lr(&t->sched, t->adam.lr, step);
        dp_update(&t->dp, trained_params(t), grads, grad_clip_factor(norm, t->adam.grad_clip), &t->adam, lr,
                  step + 1);
        if (t->qat_on) {
            if (qat_run_update(&t->qat, step)) dp_share_qat_scales(&t->dp, &t->qat.dq);
            qat_run_sync(&t->qat, step, t->params);
        }
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
    dp_free(&t->dp);
    if (t->micro_grads) t->dev.be->release(&t->dev, t->micro_grads);
    lora_train_free(&t->lora);
    draft_train_free(&t->draft);
    distill_free(&t->distill);
    if (t->dev.be) {
        dev_unmirror(&t->dev, t->params, t->b.params);
        dev_free(&t->dev);
    }
    bundle_free(&t->b);
    series_free(&t->train_curve);
    series_free(&t->val_curve);
    free(t->dir);
}

// The lead's files and lines before the first step.
static int announce(Trainer *t, const char *resumed, long tokens_per_step, PtError *e) {
    const Recipe *r = t->r;
    if (!t->lead) return 0;
    if (resumed) printf("resuming from %s (step %ld)\n", resumed, (long)t->st.step);
    else printf("starting from %s\n", r->model.init);
    if (run_dir_reload_metrics(t->dir, (long)t->st.step, &t->train_curve, &t->val_curve, e)) return -1;
    char *path = path_join(t->dir, "recipe.ini");   // the resolved recipe, beside the run's outputs
    AtomicFile af;
    if (atomic_open(&af, path, e) == 0) {
        recipe_write(r, af.f);
        atomic_commit(&af, e);
    }
    free(path);
    config_print(&t->b.cfg, stdout);
    printf("%s: %ld steps of %d x %d x %d tokens%s, %s schedule, lr %g; machine peak %.0f GFLOP/s\n",
           train_mode_name(r->train.mode), t->total_steps, r->train.micro_batch, r->train.seq_len,
           r->train.grad_accum, t->comm->world > 1 ? " on every rank" : "", schedule_kind_name(r->optim.schedule),
           r->optim.lr, t->peak_gflops);
    cpu_kernels_announce(&t->dev, r->train.matmul == TRAIN_MATMUL_BF16, stdout);
    if (t->comm->world > 1) {
        // A ring reduce-scatter of the gradients and an allgather of the parameters each send (W-1)/W of them.
        const double W = t->comm->world, sent = 2 * (W - 1) / W * (double)grad_table(t)->total * 4;
        printf("data parallel: %d ranks, %ld tokens a step; each rank holds 1/%d of the AdamW state (%.1f MiB) and "
               "sends %.1f MiB a step\n", t->comm->world, tokens_per_step, t->comm->world,
               2.0 * (double)(dp_hi(&t->dp) - dp_lo(&t->dp)) * 4 / (1 << 20), sent / (1 << 20));
    }
    return 0;
}

int train_run(const Recipe *r, Comm *comm, volatile sig_atomic_t *stop, PtError *e) {
    Trainer t;
    memset(&t, 0, sizeof t);
    t.r = r;
    t.comm = comm;
    t.lead = comm->rank == 0;
    t.dir = xstrdup(r->train.run_dir);
    comm->timeout_s = r->train.comm_timeout;
    char *resumed = NULL;
    const int new_dir = !path_is_dir(t.dir);   // a run that fails to start leaves no empty directory behind
    int rc = open_device(&t, e);
    if (rc == 0 && t.lead) rc = run_dir_create(t.dir, e);
    if (agree(&t, rc, e)) goto out;
    rc = load_bundle(&t, &resumed, e);
    if (rc == 0 && r->train.mode == TRAIN_MODE_CHOICE) {
        const int vocab = t.b.cfg.vocab_size;
        QuantSpec spec;
        int qe;
        rc = r->lora.enabled ? choice_head_frozen_check(&t.b, r->train.choice_token, r->model.init, e)
                             : choice_head_setup(&t.b, r->train.choice_token, t.lead ? stdout : NULL, e);
        // An appended row has no int4 scales in a QAT checkpoint made without it
        // (checkpoint_read_qat_spec: 0 has /qat, 1 has none, < 0 could not read it).
        const int no_qat = rc == 0 && t.b.cfg.vocab_size != vocab && r->qat.enabled
                               ? checkpoint_read_qat_spec(r->model.init, &spec, &qe, e)
                               : 1;
        if (no_qat < 0) rc = -1;
        if (no_qat == 0)
            rc = pt_fail(e, "%s: a QAT checkpoint whose vocabulary has no row for the decision head: start from its "
                            "float model from before QAT, or give train.choice_token a free row",
                         r->model.init);
    }
    if (rc == 0) place_on_device(&t);
    rc = rc || lora_setup(&t, resumed, e) || draft_setup(&t, resumed, e) || qat_setup(&t, resumed, e) ||
                 optimizer_setup(&t, resumed, e) || open_data(&t, e) ||
                 (t.draft_on && draft_train_vocab(&t.draft, &t.train_ds, r->data.train, r->draft.vocab, resumed != NULL,
                                          t.lead ? stdout : NULL, e))
             ? -1
             : 0;
    const int B = r->train.micro_batch, T = r->train.seq_len, accum = r->train.grad_accum;
    const long tokens_per_step = (long)B * T * accum * comm->world;
    // steps, else tokens, else epochs over the training set's tokens
    double budget = r->train.tokens > 0 ? (double)r->train.tokens : r->train.epochs * (double)t.train_ds.n_tokens;
    t.total_steps = r->train.steps > 0 ? r->train.steps : (long)ceil(budget / tokens_per_step);
    if (rc == 0 && t.total_steps < 1) rc = pt_fail(e, "set train.steps, train.tokens or train.epochs");
    if (rc == 0) rc = model_plan(&t.m, B, T, !t.draft_on, t.lead ? stdout : NULL, e);   // a draft's target: inference
    if (rc == 0 && t.draft_on) rc = draft_train_plan(&t.draft, &t.m, accum, e);
    if (agree(&t, rc, e)) goto out;
    if (uses_nccl(&t)) {
        const int bf16 = r->train.grad_reduce == GRAD_REDUCE_BF16;
        if (agree(&t, dp_use_nccl(&t.dp, bf16, e), e)) goto out;
        if (t.lead) printf("collectives: NCCL, %d GPU(s), the gradient sum in %s\n", comm->world, bf16 ? "bf16" : "fp32");
    }
    rc = -1;
    recipe_adamw(r, &t.adam);
    recipe_schedule(r, t.total_steps, &t.sched);
    t.micro = xcalloc(accum, sizeof(Batch), "micro-batches");
    for (int a = 0; a < accum; a++) batch_alloc(&t.micro[a], B, T);
    if (accum > 1)
        t.micro_grads = t.dev.be->alloc(&t.dev, grad_table(&t)->total * sizeof(float), "micro-batch gradients");
    // MFU against the CPU's measured peak; a GPU's is not measured here (0: no MFU).
    // The peak of the vectors the chosen kernels use (POCKET_KERNELS may restrict them).
    t.peak_gflops = t.lead && t.dev.be == backend_cpu()
                        ? cpu_peak_fp32_gflops_lanes(t.dev.threads, cpu_kernels_lanes(cpu_kernels(&t.dev)))
                        : 0;
    t.flops_per_token = config_train_flops_per_token(&t.b.cfg, T);
    if (t.lora_on)   // the frozen base's weight gradients (a third of its matmuls) are not computed; the adapter's are
        t.flops_per_token += -2.0 * config_train_flops_per_token(&t.b.cfg, 0) / 6 + 6.0 * (double)t.lora.ad.tt.total;
    if (t.distill.on && t.distill.source == DISTILL_FORWARD)   // the teacher's forward, a third of a training step
        t.flops_per_token += config_train_flops_per_token(&t.distill.b.cfg, T) / 3;
    if (t.draft_on) t.flops_per_token = draft_train_flops_per_token(&t.draft, T);
    if (agree(&t, announce(&t, resumed, tokens_per_step, e), e)) goto out;
    int tty = t.lead && isatty(fileno(stderr)), stopped = 0;
    double start = now_seconds(), last_print = 0;
    if (t.st.step == 0 && r->train.eval_interval > 0 && evaluate(&t, e)) goto out;   // 0: never
    // train.stop_after ends this invocation early (time-boxed jobs); the same
    // command without it resumes.
    long stop_at = r->train.stop_after > 0 && r->train.stop_after < t.total_steps ? r->train.stop_after : t.total_steps;
    while (t.st.step < stop_at && !stopped) {
        double t0 = now_seconds(), comm_t0 = comm->seconds, norm;
        int finite;
        if (use_step_weights(&t, e)) goto out;
        double loss = train_step(&t, *stop != 0, &norm, &finite, &stopped);
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
            series_add(&t.train_curve, t.st.step, loss);
        }
        if (t.lead) {
            float lr = schedule_lr(&t.sched, t.adam.lr, t.st.step - 1);
            double mfu = t.peak_gflops > 0 ? t.flops_per_token * tokens_per_step / dt / 1e9 / (t.peak_gflops * comm->world)
                                            : 0.0;
            json_t *j = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "step", (json_int_t)t.st.step, "loss",
                                  loss, "lr", (double)lr, "grad_norm", norm, "tokens_per_s", tok_s, "mfu", mfu,
                                  "elapsed_s", now_seconds() - start, "tokens", (json_int_t)t.st.tokens);
            if (comm->world > 1) json_object_set_new(j, "comm_s", json_real(comm->seconds - comm_t0));
            if (t.distill.on) {
                json_object_set_new(j, "ce", json_real(t.step_ce));
                json_object_set_new(j, "kl", json_real(t.step_kl));
            }
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
