// trainee.c: what the kinds of trainee share (trainee.h): loading what a run
// starts from, putting it on the device, and the passes of the full model and
// an adapter, which both train through the decoder with the objective's loss
// head. Which kind a run has is chosen in choose.c.
#include "trainee.h"
#include <string.h>
#include "../formats/checkpoint.h"
#include "../model/dropout_mask.h"
#include "evaluate.h"

int trainee_load_start(ModelBundle *b, const Recipe *r, const char *resume_path, int frozen, PtError *e) {
    if (resume_path && !frozen) return checkpoint_load(resume_path, b, e);
    if (frozen && !checkpoint_is_hdf5(r->model.init))
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

void *trainee_begin(Trainee *t, const TraineeOps *ops, size_t impl_bytes) {
    t->ops = ops;
    t->what = ops->name;
    t->impl = xcalloc(1, impl_bytes, ops->name);
    t->base = dev_mirror(t->dev, t->b.params, t->b.tt.total * sizeof(float), "master weights");
    ModelOptions opt;
    recipe_model_options(t->r, &opt);
    model_init(&t->m, t->dev, &t->b.cfg, &t->b.tt, t->base, &opt);
    return t->impl;
}

void trainee_free(Trainee *t) {
    if (t->impl && t->ops->free) t->ops->free(t);
    free(t->impl);
    model_free(&t->m);
    if (t->base) dev_unmirror(t->dev, t->base, t->b.params);
    bundle_free(&t->b);
    memset(t, 0, sizeof *t);
}

// ---- the decoder's passes, shared by the full model and an adapter

int decoder_plan(Trainee *t, int B, int T, int accum, FILE *log, PtError *e) {
    (void)accum;
    if (model_plan(&t->m, B, T, 1, log, e)) return -1;
    t->grads = t->m.grads;
    return 0;
}

double decoder_prepare(Trainee *t, int a, const Batch *b, uint64_t seed_index) {
    (void)t, (void)a, (void)seed_index;
    return b->n_loss;
}

double decoder_micro(Trainee *t, int a, const Batch *b, uint64_t seed_index, float scale, float *grads) {
    (void)a;
    Model *m = &t->m;
    ModelInput in = batch_input(b);
    const LossHead *head = t->obj->ops->head(t->obj, b, &in, 1);
    model_use_grads(m, grads);
    model_zero_grads(m);
    // LoRA dropout's masks: a seed from the run's and the micro-batch's place in the stream
    model_set_dropout_seed(m, dropout_child_seed((uint64_t)t->r->train.seed ^ 0xd50f0a7ull, seed_index));
    int count;
    const double loss = model_forward_backward_head(m, &in, head, scale, &count);
    model_use_grads(m, NULL);
    return loss;
}

int decoder_evaluate(Trainee *t, const Dataset *val, long max_batches, int rank, int world, double *sum,
                     double *count, PtError *e) {
    long n = 0;
    if (objective_eval(t->obj, &t->m, val, max_batches, rank, world, sum, &n, e)) return -1;
    *count = (double)n;
    return 0;
}
