// draft_train.c: the frozen int4 target, the draft and its blocks in a run (draft_train.h).
#include "draft_train.h"
#include <math.h>
#include <string.h>
#include "../formats/int4_weights.h"
#include "../formats/lora_checkpoint.h"
#include "../model/dropout_mask.h"
#include "trainee.h"

// min(3, L) target layers: DFlash's spacing, or on a target too short for
// it (its list would run past the last layer) the first ones.
static void default_target_layers(DraftConfig *dc, int L) {
    const int n = L < 3 ? L : 3;
    draft_layers_default(dc, n, L);
    if (dc->target_layers[n - 1] < L) return;
    for (int k = 0; k < n; k++) dc->target_layers[k] = k;
}

// [draft] resolved against the target's config.
static int draft_config(const Recipe *r, const ModelConfig *tc, DraftConfig *dc, PtError *e) {
    char src[RECIPE_STR + 32];
    snprintf(src, sizeof src, "[draft] for %s", r->model.init);
    memset(dc, 0, sizeof *dc);
    dc->n_layer = r->draft.layers;
    dc->block = r->draft.block;
    if (r->draft.target_layers[0]) {
        if (draft_layers_parse(r->draft.target_layers, dc, src, e)) return -1;
    } else {
        default_target_layers(dc, tc->n_layer);
    }
    dc->mask_token = r->draft.mask_token >= 0 ? r->draft.mask_token
                     : tc->pad_id >= 0        ? tc->pad_id
                     : tc->eos_id >= 0        ? tc->eos_id
                                              : 0;
    dc->d_ff = r->draft.d_ff > 0 ? r->draft.d_ff : tc->d_ff;
    return draft_config_check(dc, tc, src, e);
}

static int same_config(const DraftConfig *a, const DraftConfig *b) {
    if (a->n_layer != b->n_layer || a->block != b->block || a->n_target != b->n_target ||
        a->mask_token != b->mask_token || a->d_ff != b->d_ff)
        return 0;
    for (int k = 0; k < a->n_target; k++)
        if (a->target_layers[k] != b->target_layers[k]) return 0;
    return 1;
}

static void describe(const DraftConfig *dc, char *out, size_t cap) {
    char layers[128];
    draft_layers_format(dc, layers, sizeof layers);
    snprintf(out, cap, "%d layer(s), block %d, target layers %s, mask token %d, d_ff %d", dc->n_layer, dc->block,
             layers, dc->mask_token, dc->d_ff);
}

int draft_train_init(DraftTrain *dt, const Recipe *r, Device *d, ModelBundle *b, float *base_params,
                     const Model *target, const char *resume_path, FILE *log, PtError *e) {
    memset(dt, 0, sizeof *dt);
    dt->dev = d;
    dt->A = r->draft.anchors;
    DraftConfig dc;
    if (draft_config(r, &b->cfg, &dc, e)) return -1;
    // The target as the phone runs it: exactly the weights `--int4` runs (QLoRA's base).
    int from_qat;
    QuantSpec spec;
    if (int4_lora_base(b, r->model.init, 1, r->train.threads, &from_qat, &spec, e)) return -1;
    if (base_params != b->params) OP(d, upload, base_params, b->params, b->tt.total * sizeof(float));
    char hash[65], want[256];
    lora_base_hash(&b->tt, b->params, hash);
    describe(&dc, want, sizeof want);
    if (resume_path) {
        if (draft_checkpoint_load(resume_path, &b->cfg, hash, r->model.init, &dt->d, e)) return -1;
        if (!same_config(&dt->d.cfg, &dc)) {
            char have[256];
            describe(&dt->d.cfg, have, sizeof have);
            return pt_fail(e, "%s: the draft (%s) is not the one [draft] asks for (%s)", resume_path, have, want);
        }
    } else {
        draft_alloc(&dt->d, &b->cfg, &dc);
        draft_init(&dt->d, (uint64_t)r->train.seed ^ 0xd4af7ull);
        memcpy(dt->d.base_sha256, hash, sizeof hash);
    }
    draft_pos_weights(dt->pos_weight, dc.block, r->draft.loss_decay);
    dt->mix = (DraftLossMix){.ce_weight = r->draft.ce_weight, .kl_weight = r->draft.kl_weight};
    dt->params = dev_mirror(d, dt->d.params, dt->d.tt.total * sizeof(float), "draft weights");
    size_t n_params = 0;
    for (int i = 0; i < dt->d.tt.n; i++) n_params += dt->d.tt.t[i].numel;
    MatmulPrecision p = r->train.matmul == TRAIN_MATMUL_BF16 ? MATMUL_BF16 : MATMUL_FP32;
    draft_model_init(&dt->dm, d, &b->cfg, &dt->d.cfg, &dt->d.tt, dt->params, target->w.embed, target->w.lm_head, p);
    if (log)
        fprintf(log, "draft: %s, %zu parameters, %d blocks per sequence; target: the int4 model of %s (%s, group %d "
                "%s), sha256 %s\n", want, n_params, dt->A, r->model.init, from_qat ? "its QAT scales" :
                "round-to-nearest", spec.group, spec.symmetric ? "symmetric" : "asymmetric", hash);
    return 0;
}

int draft_train_vocab(DraftTrain *dt, const Dataset *train, const char *train_name, int n, int resumed, FILE *log,
                      PtError *e) {
    const int V = dt->d.target.vocab_size;
    Draft pick = {0};
    if (n > 0) {
        uint64_t *counts = xcalloc((size_t)V, sizeof(uint64_t), "token counts");
        for (uint64_t i = 0; i < train->n_tokens; i++) {
            const uint32_t id = dataset_token(train, i);
            if ((!train->loss_mask || train->loss_mask[i]) && id < (uint32_t)V) counts[id]++;
        }
        draft_pick_vocab(&pick, counts, V, n);
        free(counts);
        if (pick.n_vocab == 0) return pt_fail(e, "%s: no response tokens to pick the draft's vocabulary from", train_name);
    }
    int rc = 0;
    if (!resumed) {
        dt->d.vocab = pick.vocab, dt->d.n_vocab = pick.n_vocab;
        pick.vocab = NULL;
    } else if (pick.n_vocab != dt->d.n_vocab ||
               (pick.n_vocab && memcmp(pick.vocab, dt->d.vocab, (size_t)pick.n_vocab * sizeof(int)))) {
        rc = pt_fail(e, "the resumed draft proposes %d%s tokens, but [draft] vocab = %d on %s picks %d%s",
                     dt->d.n_vocab, dt->d.n_vocab ? "" : " (all)", n, train_name, pick.n_vocab,
                     pick.n_vocab == dt->d.n_vocab ? " others" : "");
    }
    free(pick.vocab);
    if (rc || !dt->d.n_vocab) return rc;
    // Its logits are those tokens' only; targets become their columns (-1 outside it: not counted).
    const int K = dt->d.n_vocab;
    draft_model_use_vocab(&dt->dm, dt->d.vocab, K);
    dt->column = xmalloc((size_t)V * sizeof(int), "draft vocabulary columns");
    for (int i = 0; i < V; i++) dt->column[i] = -1;
    for (int k = 0; k < K; k++) dt->column[dt->d.vocab[k]] = k;
    if (log)
        fprintf(log, "draft vocabulary: the %d tokens most frequent in the responses of %s (of %d; [draft] vocab = %d)\n",
                K, train_name, V, n);
    return 0;
}

static void blocks_alloc(DraftBlocks *bl, int blk, int S) {
    bl->block_tokens = xmalloc((size_t)blk * S * sizeof(int), "draft block tokens");
    bl->targets = xmalloc((size_t)blk * S * sizeof(int), "draft block targets");
    bl->anchors = xmalloc((size_t)S * sizeof(int), "draft anchors");
    bl->ctx_lo = xmalloc((size_t)S * sizeof(int), "draft context starts");
    bl->target_rows = xmalloc((size_t)blk * S * sizeof(int), "draft target rows");
    bl->weight = 0;
}

static void blocks_free(DraftBlocks *bl) {
    free(bl->block_tokens);
    free(bl->targets);
    free(bl->anchors);
    free(bl->ctx_lo);
    free(bl->target_rows);
}

int draft_train_plan(DraftTrain *dt, Model *target, int accum, PtError *e) {
    const int B = target->B, T = target->T, S = B * dt->A, blk = dt->d.cfg.block;
    if (draft_model_plan(&dt->dm, B, T, dt->A, 1, e)) return -1;
    const size_t width = (size_t)dt->d.cfg.n_target * target->cfg.d_model;
    dt->captures = dt->dev->be->alloc(dt->dev, (size_t)B * T * width * sizeof(float), "draft captures");
    model_capture(target, dt->d.cfg.target_layers, dt->d.cfg.n_target, dt->captures);
    if (dt->mix.kl_weight > 0) {   // the teacher's hidden states: the block rows' only, not B*T of them
        const size_t R = (size_t)blk * S;
        dt->target_h = dt->dev->be->alloc(dt->dev, R * target->cfg.d_model * sizeof(float), "draft target rows");
        dt->target_rows = dt->dev->be->alloc(dt->dev, R * sizeof(int), "draft target row ids");
        dt->mix.target_h = dt->target_h;
    }
    dt->n_blocks = accum;
    dt->blocks = xcalloc(accum, sizeof(DraftBlocks), "draft blocks");
    for (int a = 0; a < accum; a++) blocks_alloc(&dt->blocks[a], blk, S);
    dt->cand = xmalloc((size_t)T * sizeof(int), "draft anchor candidates");
    return 0;
}

void draft_train_free(DraftTrain *dt) {
    if (!dt->dev) return;
    draft_model_free(&dt->dm);   // nothing when it was never made
    free(dt->column);
    if (dt->captures) dt->dev->be->release(dt->dev, dt->captures);
    if (dt->target_h) dt->dev->be->release(dt->dev, dt->target_h);
    if (dt->target_rows) dt->dev->be->release(dt->dev, dt->target_rows);
    for (int a = 0; a < dt->n_blocks; a++) blocks_free(&dt->blocks[a]);
    free(dt->blocks);
    free(dt->cand);
    if (dt->params) dev_unmirror(dt->dev, dt->params, dt->d.params);
    draft_free(&dt->d);
    memset(dt, 0, sizeof *dt);
}

// Draws blocks for every sequence of b into out (draft_train.h: the rule).
// A sequence with fewer candidates than blocks fills the rest with blocks
// that have no target (they add nothing to the loss).
static double draw_blocks(DraftTrain *dt, const Batch *b, uint64_t seed, DraftBlocks *out) {
    const int B = b->B, T = b->T, A = dt->A, S = B * A, blk = dt->d.cfg.block, mask_token = dt->d.cfg.mask_token;
    double weight = 0;
    for (int s = 0; s < B; s++) {
        const int *tok = b->tokens + (size_t)s * T;
        const uint8_t *resp = b->mask + (size_t)s * T;   // resp[q - 1]: token q is a response token
        int n = 0;
        for (int p = 1; p + 1 < T; p++)
            if (resp[p - 1] && resp[p]) dt->cand[n++] = p;
        const int take = n < A ? n : A;
        Rng rng;
        rng_seed(&rng, dropout_child_seed(seed, (uint64_t)s));
        for (int j = 0; j < take; j++) {   // the first `take` of a random order, then in increasing order
            int k = j + (int)(rng_next(&rng) % (uint64_t)(n - j)), x = dt->cand[k];
            dt->cand[k] = dt->cand[j];
            dt->cand[j] = x;
        }
        for (int j = 1; j < take; j++)
            for (int k = j; k > 0 && dt->cand[k - 1] > dt->cand[k]; k--) {
                int x = dt->cand[k];
                dt->cand[k] = dt->cand[k - 1];
                dt->cand[k - 1] = x;
            }
        for (int j = 0; j < A; j++) {
            const int blk_s = s * A + j, p = j < take ? dt->cand[j] : 1;
            int live = j < take;
            out->anchors[blk_s] = p;
            // The block sees its own example's context only, as at generation (packed rows).
            int lo = p;
            while (b->seg && lo > 0 && b->seg[(size_t)s * T + lo - 1] == b->seg[(size_t)s * T + p]) lo--;
            out->ctx_lo[blk_s] = b->seg ? lo : 0;
            out->block_tokens[blk_s] = tok[p];
            out->targets[blk_s] = -1;
            out->target_rows[blk_s] = s * T + p;   // position 0 predicts nothing: any row of the sequence
            for (int i = 1; i < blk; i++) {
                live = live && p + i < T && resp[p + i - 1];
                const int target = !live ? -1 : dt->column ? dt->column[tok[p + i]] : tok[p + i];
                out->block_tokens[(size_t)i * S + blk_s] = mask_token;
                out->targets[(size_t)i * S + blk_s] = target;
                // the target's own prediction of token p + i comes from position p + i - 1
                out->target_rows[(size_t)i * S + blk_s] = s * T + (p + i - 1 < T ? p + i - 1 : T - 1);
                if (target >= 0) weight += dt->pos_weight[i];
            }
        }
    }
    out->weight = weight;
    return weight;
}

double draft_train_prepare(DraftTrain *dt, int a, const Batch *b, uint64_t seed) {
    return draw_blocks(dt, b, seed, &dt->blocks[a]);
}

static DraftInput draft_input(const DraftTrain *dt, const DraftBlocks *bl) {
    return (DraftInput){.block_tokens = bl->block_tokens, .anchors = bl->anchors, .ctx_lo = bl->ctx_lo,
                        .targets = bl->targets, .pos_weight = dt->pos_weight, .ctx_from = 0, .mix = &dt->mix};
}

// The target's pass over b: its captures, and with a KL term its final
// hidden states at the rows that predict the blocks' targets (the embedding
// op is a row gather).
static void target_forward(DraftTrain *dt, Model *target, const Batch *b, const DraftBlocks *bl) {
    ModelInput in = {.B = b->B, .T = b->T, .tokens = b->tokens, .pos = b->pos, .seg = b->seg};
    const float *hidden = model_forward_hidden(target, &in);
    if (!dt->target_h) return;
    const int R = dt->d.cfg.block * dt->dm.B * dt->A;
    OP(dt->dev, upload, dt->target_rows, bl->target_rows, (size_t)R * sizeof(int));
    OP(dt->dev, embedding_forward, dt->target_h, dt->target_rows, hidden, R, target->cfg.d_model);
}

double draft_train_micro(DraftTrain *dt, Model *target, const Batch *b, int a, float scale, float *grads) {
    target_forward(dt, target, b, &dt->blocks[a]);
    draft_model_use_grads(&dt->dm, grads);
    draft_zero_grads(&dt->dm);
    DraftInput in = draft_input(dt, &dt->blocks[a]);
    double weight;
    double loss = draft_forward_backward(&dt->dm, dt->captures, &in, scale, &weight);
    draft_model_use_grads(&dt->dm, NULL);
    return loss;
}

int draft_train_eval(DraftTrain *dt, Model *target, const Dataset *d, long max_batches, int rank, int world,
                     DraftEvalSums *out, PtError *e) {
    Loader l;
    if (loader_open(&l, d, target->B, target->T, 4242, rank, world, e)) return -1;
    loader_set_one_pass(&l);
    Batch b;
    batch_alloc(&b, target->B, target->T);
    const int blk = dt->d.cfg.block, S = dt->dm.B * dt->A;
    DraftBlocks bl;
    blocks_alloc(&bl, blk, S);
    int *greedy = xmalloc((size_t)blk * S * sizeof(int), "draft greedy tokens");   // what verification compares
    memset(out, 0, sizeof *out);
    // As eval_loss_sums: global batch i * world + rank is this rank's; its
    // blocks depend on that index only, so the ranks' sums add up to one's.
    for (long i = 0; max_batches <= 0 || i * world < max_batches; i++) {
        if (loader_done(&l)) break;
        loader_next(&l, &b);
        const long global = i * world + rank;
        if (max_batches > 0 && global >= max_batches) continue;
        if (draw_blocks(dt, &b, dropout_child_seed(0xe7a1d0a5ull, (uint64_t)global), &bl) == 0) continue;
        target_forward(dt, target, &b, &bl);
        DraftInput in = draft_input(dt, &bl);
        double w;
        out->loss += draft_forward_greedy(&dt->dm, dt->captures, &in, greedy, &w);
        out->weight += w;
        out->ce += dt->dm.ce_sum;
        out->kl += dt->dm.kl_sum;
        draft_acceptance(greedy, bl.targets, blk, S, out->reached, &out->blocks);
    }
    free(greedy);
    blocks_free(&bl);
    batch_free(&b);
    loader_close(&l);
    return 0;
}

typedef struct { const Draft *d; const TrainState *st; } DraftWrite;
static int write_draft(void *ctx, const char *path, const MomentSource *src, PtError *e) {
    const DraftWrite *w = ctx;
    return draft_checkpoint_save(path, w->d, src, w->st, e);
}

int draft_train_save(DraftTrain *dt, DataParallel *dp, const char *path, const TrainState *st, PtError *e) {
    OP(dt->dev, download, dt->d.params, dt->params, dt->d.tt.total * sizeof(float));
    if (!st) return dp->comm->rank == 0 ? draft_checkpoint_save(path, &dt->d, NULL, NULL, e) : 0;
    DraftWrite w = {&dt->d, st};
    return dp_save_with(dp, path, write_draft, &w, e);
}

double draft_train_flops_per_token(const DraftTrain *dt, int T) {
    const ModelConfig *tc = &dt->d.target;
    const DraftConfig *dc = &dt->d.cfg;
    const double H = tc->d_model, KV = (double)tc->n_kv_head * tc->head_dim, V = tc->vocab_size;
    // Every context row: the target's forward (a third of a training step,
    // less its lm_head: only the captures are wanted), fc and each draft
    // layer's K and V; every block row: the draft's layers and the lm_head
    // (its input gradient only: it is frozen).
    const double ctx = config_train_flops_per_token(tc, T) / 3 - 2.0 * V * H + 6.0 * dc->n_target * H * H +
                       6.0 * dc->n_layer * 2 * H * KV;
    const double layer = (double)(dt->d.tt.total - (size_t)dc->n_target * H * H) / dc->n_layer;
    const double rows_per_token = (double)dt->A * dc->block / T;
    return ctx + rows_per_token * (6.0 * layer * dc->n_layer + 4.0 * dt->dm.n_out * H);   // its own vocabulary's
}

// ---- the draft as a run's trainee (trainee.h): the decoder is its frozen int4
// target, run forward for its captures; what trains is the draft

static DraftTrain *draft_of(const Trainee *t) { return t->impl; }

static int draft_use_data(Trainee *t, const Dataset *train, int resumed, PtError *e) {
    return draft_train_vocab(draft_of(t), train, t->r->data.train, t->r->draft.vocab, resumed,
                             t->comm->rank == 0 ? stdout : NULL, e);
}

static int draft_plan(Trainee *t, int B, int T, int accum, FILE *log, PtError *e) {
    DraftTrain *dt = draft_of(t);
    if (model_plan(&t->m, B, T, 0, log, e) || draft_train_plan(dt, &t->m, accum, e)) return -1;   // the target: inference
    t->grads = draft_train_grads(dt);
    return 0;
}

static int draft_step_weights(Trainee *t, long step, PtError *e) {
    (void)step, (void)e;
    model_use_weights(&t->m, t->base);
    return 0;
}

// A draft's loss averages over its blocks' weighted rows, drawn now.
static double draft_prepare(Trainee *t, int a, const Batch *b, uint64_t seed_index) {
    const uint64_t seed = dropout_child_seed((uint64_t)t->r->train.seed ^ 0xd2af7b10c5ull, seed_index);
    return draft_train_prepare(draft_of(t), a, b, seed);
}

static double draft_micro(Trainee *t, int a, const Batch *b, uint64_t seed_index, float scale, float *grads) {
    (void)seed_index;
    DraftTrain *dt = draft_of(t);
    const double loss = draft_train_micro(dt, &t->m, b, a, scale, grads);
    if (dt->m_ce >= 0) t->obj->sums[dt->m_ce] += dt->dm.ce_sum, t->obj->sums[dt->m_ce + 1] += dt->dm.kl_sum;
    return loss;
}

// The loss, its parts, and the acceptance: the share of blocks whose accepted
// prefix reaches position i (accept_i) and the tokens a target pass gives
// (accept_length = 1 + their sum), over the blocks' own count.
static int draft_evaluate(Trainee *t, const Dataset *val, long max_batches, int rank, int world, double *sum,
                          double *count, PtError *e) {
    DraftTrain *dt = draft_of(t);
    DraftEvalSums s;
    if (draft_train_eval(dt, &t->m, val, max_batches, rank, world, &s, e)) return -1;
    *sum = s.loss, *count = s.weight;
    Objective *o = t->obj;
    if (dt->m_ce >= 0) o->sums[dt->m_ce] += s.ce, o->sums[dt->m_ce + 1] += s.kl;
    const int blk = dt->d.cfg.block, m_len = dt->m_accept + blk - 1;
    o->sums[m_len] += s.blocks;
    o->counts[m_len] += s.blocks;
    for (int i = 1; i < blk; i++) {
        o->sums[dt->m_accept + i - 1] += s.reached[i];
        o->counts[dt->m_accept + i - 1] += s.blocks;
        o->sums[m_len] += s.reached[i];
    }
    return 0;
}

// The draft's metrics, after the objective's own (a draft's objective has
// none): with a KL term the loss's parts (steps and evaluations), and the
// acceptance (evaluations only), its length plotted.
static void draft_metrics(DraftTrain *dt, Objective *o) {
    _Static_assert(2 + DRAFT_MAX_BLOCK <= OBJECTIVE_MAX_METRICS, "the objective holds a draft's metrics");
    dt->m_ce = -1;
    if (dt->mix.kl_weight > 0) {
        dt->m_ce = o->n_metrics;
        o->metric[o->n_metrics++] = "ce";
        o->metric[o->n_metrics++] = "kl";
        o->plotted[dt->m_ce + 1] = 1;
    }
    const int blk = dt->d.cfg.block;
    dt->m_accept = o->n_metrics;
    for (int i = 1; i <= blk; i++) {
        char *name = dt->accept_name[i];
        if (i < blk) snprintf(name, sizeof dt->accept_name[i], "accept_%d", i);
        else snprintf(name, sizeof dt->accept_name[i], "accept_length");
        o->eval_only[o->n_metrics] = 1;
        o->metric[o->n_metrics++] = name;
    }
    o->plotted[o->n_metrics - 1] = 1;
    o->eval_metrics = 1;
}

static int draft_save(Trainee *t, const char *path, const TrainState *st, PtError *e) {
    if (!st && t->comm->rank != 0) return 0;
    return draft_train_save(draft_of(t), t->dp, path, st, e);
}

static double draft_flops(const Trainee *t, int T) { return draft_train_flops_per_token(draft_of(t), T); }

static void draft_trainee_free(Trainee *t) { draft_train_free(draft_of(t)); }

static const TraineeOps draft_trainee = {
    .name = "draft", .use_data = draft_use_data, .plan = draft_plan,
    .use_step_weights = draft_step_weights, .prepare = draft_prepare, .micro = draft_micro,
    .evaluate = draft_evaluate, .save = draft_save, .flops_per_token = draft_flops, .free = draft_trainee_free};

int draft_trainee_open(Trainee *t, const TraineeSetup *s, PtError *e) {
    DraftTrain *dt = trainee_begin(t, &draft_trainee, sizeof *dt);
    if (draft_train_init(dt, s->r, t->dev, &t->b, t->base, &t->m, s->resume_path, s->log, e)) return -1;
    t->tt = &dt->d.tt;
    t->params = dt->params;
    t->samples = 0;   // the target does not change
    draft_metrics(dt, t->obj);
    return 0;
}
