// lora_train.c: the frozen base, the adapter and its checkpoints in a run (lora_train.h).
#include "lora_train.h"
#include <string.h>
#include "../formats/int4_weights.h"
#include "trainee.h"

int lora_train_init(LoraTrain *lt, const Recipe *r, Device *d, ModelBundle *b, float *base_params,
                    const char *resume_path, FILE *log, PtError *e) {
    memset(lt, 0, sizeof *lt);
    lt->dev = d;
    const TensorTable *tt = &b->tt;
    const int int4 = r->lora.base == LORA_BASE_INT4;
    if (int4) {   // QLoRA: exactly the weights `--int4` runs and the packages ship
        int from_qat;
        QuantSpec spec;
        if (int4_lora_base(b, r->model.init, 1, r->train.threads, &from_qat, &spec, e)) return -1;
        OP(d, upload, base_params, b->params, tt->total * sizeof(float));   // the run holds one copy of the base
        if (log)
            fprintf(log, "LoRA base: the int4 model of %s (%s, group %d %s)\n", r->model.init,
                    from_qat ? "its QAT scales" : "round-to-nearest", spec.group,
                    spec.symmetric ? "symmetric" : "asymmetric");
    } else if (log) {
        fprintf(log, "LoRA base: the float weights of %s\n", r->model.init);
    }
    char hash[65];
    lora_base_hash(tt, b->params, hash);
    LoraConfig lc;
    if (recipe_lora(r, &lc, "[lora]", e)) return -1;
    if (resume_path) {
        if (lora_checkpoint_load(resume_path, &b->cfg, hash, r->model.init, &lt->ad, e)) return -1;
        // Dropout too: a resumed run must train as the uninterrupted one would.
        if (lt->ad.cfg.rank != lc.rank || lt->ad.cfg.alpha != lc.alpha || lt->ad.cfg.targets != lc.targets ||
            lt->ad.cfg.dropout != lc.dropout || lt->ad.base_int4 != int4)
            return pt_fail(e, "%s: the adapter (rank %d, alpha %g, dropout %g, base %s) is not the one [lora] asks "
                           "for (rank %d, alpha %g, dropout %g, base %s, or other targets)", resume_path,
                           lt->ad.cfg.rank, lt->ad.cfg.alpha, lt->ad.cfg.dropout, lt->ad.base_int4 ? "int4" : "fp32",
                           lc.rank, lc.alpha, lc.dropout, int4 ? "int4" : "fp32");
    } else {
        lora_adapter_alloc(&lt->ad, &b->cfg, &lc);
        lora_init(lt->ad.params, &lt->ad.tt, &lc, r->lora.init, (uint64_t)r->train.seed ^ 0x10a4u);
        memcpy(lt->ad.base_sha256, hash, sizeof hash);
        lt->ad.base_int4 = int4;
    }
    lt->params = dev_mirror(d, lt->ad.params, lt->ad.tt.total * sizeof(float), "LoRA adapter");
    return 0;
}

void lora_train_free(LoraTrain *lt) {
    if (!lt->dev) return;
    if (lt->params) dev_unmirror(lt->dev, lt->params, lt->ad.params);
    lora_adapter_free(&lt->ad);
    memset(lt, 0, sizeof *lt);
}

typedef struct { const LoraAdapter *ad; const TrainState *st; } AdapterWrite;
static int write_adapter(void *ctx, const char *path, const MomentSource *src, PtError *e) {
    const AdapterWrite *w = ctx;
    return lora_checkpoint_save(path, w->ad, src, w->st, e);
}

int lora_train_save(LoraTrain *lt, DataParallel *dp, const char *path, const TrainState *st, PtError *e) {
    OP(lt->dev, download, lt->ad.params, lt->params, lt->ad.tt.total * sizeof(float));
    if (!st) return dp->comm->rank == 0 ? lora_checkpoint_save(path, &lt->ad, NULL, NULL, e) : 0;
    AdapterWrite w = {&lt->ad, st};
    return dp_save_with(dp, path, write_adapter, &w, e);
}

// ---- the adapter as a run's trainee (trainee.h): the decoder runs the frozen base with it

static LoraTrain *adapter_of(const Trainee *t) { return t->impl; }

static int adapter_step_weights(Trainee *t, long step, PtError *e) {
    (void)step, (void)e;
    model_use_weights(&t->m, t->base);   // the frozen base (with base = int4, the int4 model's weights)
    return 0;
}

static int adapter_save(Trainee *t, const char *path, const TrainState *st, PtError *e) {
    if (!st && t->comm->rank != 0) return 0;
    return lora_train_save(adapter_of(t), t->dp, path, st, e);
}

// The frozen base's weight gradients (a third of its matmuls) are not computed; the adapter's are.
static double adapter_flops(const Trainee *t, int T) {
    const ModelConfig *c = &t->b.cfg;
    return config_train_flops_per_token(c, T) - 2.0 * config_train_flops_per_token(c, 0) / 6 +
           6.0 * (double)adapter_of(t)->ad.tt.total;
}

static void adapter_free(Trainee *t) { lora_train_free(adapter_of(t)); }

static const TraineeOps adapter_trainee = {
    .name = "adapter", .plan = decoder_plan,
    .use_step_weights = adapter_step_weights, .prepare = decoder_prepare, .micro = decoder_micro,
    .evaluate = decoder_evaluate, .save = adapter_save, .flops_per_token = adapter_flops, .free = adapter_free};

int adapter_trainee_open(Trainee *t, const TraineeSetup *s, PtError *e) {
    LoraTrain *lt = trainee_begin(t, &adapter_trainee, sizeof *lt);
    if (lora_train_init(lt, s->r, t->dev, &t->b, t->base, s->resume_path, s->log, e)) return -1;
    model_use_lora(&t->m, &lt->ad.cfg, &lt->ad.tt, lt->params);
    t->tt = &lt->ad.tt;
    t->params = lt->params;
    t->samples = 1;
    return 0;
}
