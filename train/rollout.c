// rollout.c: completions of a training set's prompts by the batched sampler,
// one a row of a micro-batch or packed several to a row (rollout.h).
#include "rollout.h"
#include <string.h>
#include "../model/dropout_mask.h"
#include "evaluate.h"
#include "run_dir.h"

// The training set's prompts: each example's text before its final reply
// (evaluate.h's split), the reply its reference.
static int read_prompts(Rollouts *ro, const Dataset *d, int max_new, const char *who, FILE *log, PtError *e) {
    ro->prompts = xcalloc(d->n_docs ? d->n_docs : 1, sizeof(RolloutPrompt), "rollout prompts");
    uint64_t no_reply = 0, too_long = 0;
    for (uint64_t k = 0; k < d->n_docs; k++) {
        int64_t start, end;
        if (!sft_reply_span(d, k, &start, &end)) {
            no_reply++;
            continue;
        }
        if (start + max_new > ro->T) {
            too_long++;
            continue;
        }
        RolloutPrompt *p = &ro->prompts[ro->n_prompts++];
        const uint64_t off = d->doc_offsets[k];
        int *reply = xmalloc((size_t)(end - start + 1) * sizeof(int), "a reference reply");
        p->tokens = xmalloc((size_t)start * sizeof(int), "a prompt");
        for (int64_t i = 0; i < start; i++) p->tokens[i] = (int)dataset_token(d, off + (uint64_t)i);
        for (int64_t i = start; i <= end; i++) reply[i - start] = (int)dataset_token(d, off + (uint64_t)i);
        p->n = (int)start;
        p->doc = k;
        int n_reply = (int)(end - start + 1);
        p->end_stop = token_is_special(ro->tok, reply[n_reply - 1]) ? reply[n_reply - 1] : -1;
        if (p->end_stop >= 0) n_reply--;
        p->text = tokenizer_decode(ro->tok, p->tokens, (size_t)p->n, 0);
        p->reference = tokenizer_decode(ro->tok, reply, (size_t)n_reply, 1);
        free(reply);
    }
    if (log)
        fprintf(log, "%s prompts: %llu of %llu examples of %s; dropped %llu without a reply, %llu with fewer than "
                "rl.max_new = %d positions left in seq_len %d\n", who, (unsigned long long)ro->n_prompts,
                (unsigned long long)d->n_docs, d->path, (unsigned long long)no_reply, (unsigned long long)too_long,
                max_new, ro->T);
    if (!ro->n_prompts)
        return pt_fail(e, "%s: no example leaves a prompt with rl.max_new = %d new tokens within seq_len %d", d->path,
                       max_new, ro->T);
    return 0;
}

// Packed: first fit, longest first, puts at least T / L completions of up to
// L positions in every row it fills but the last, so ceil(n / (T / L)) rows
// hold any micro-batch.
static int check_packing(const Rollouts *ro, int max_new, const char *path, FILE *log, PtError *e) {
    int longest = 0;
    for (uint64_t k = 0; k < ro->n_prompts; k++) longest = ro->prompts[k].n > longest ? ro->prompts[k].n : longest;
    const int L = longest + max_new, per_row = ro->T / L, rows = (ro->n + per_row - 1) / per_row;
    if (rows > ro->B)
        return pt_fail(e, "%s: [rl] prompts x group = %d completions of up to %d positions (the longest prompt, %d, "
                          "plus max_new) may need %d rows of seq_len %d; micro_batch is %d", path, ro->n, L, longest,
                       rows, ro->T, ro->B);
    if (log)
        fprintf(log, "GRPO packing: %d completions a micro-batch, at least %d a row of %d positions (longest prompt "
                "%d + max_new %d): at most %d of its %d rows\n", ro->n, per_row, ro->T, longest, max_new, rows, ro->B);
    return 0;
}

int rollouts_open(Rollouts *ro, const Recipe *r, const ObjectiveData *d, const char *who, PtError *e) {
    memset(ro, 0, sizeof *ro);
    ro->group = r->rl.group;
    ro->B = d->B, ro->T = d->T;
    ro->packed = r->rl.prompts > 0;
    ro->P = ro->packed ? r->rl.prompts : d->B / ro->group;
    ro->n = ro->P * ro->group;
    ro->cap = ro->n > ro->B ? ro->n : ro->B;
    ro->seed = (uint64_t)r->train.seed;
    ro->order_epoch = UINT64_MAX;
    ro->tok = d->tok;
    ro->path = d->train[0]->path;
    gen_params_default(&ro->gen);
    ro->gen.max_new = r->rl.max_new;
    ro->gen.temperature = r->rl.temperature;
    ro->gen.top_k = r->rl.top_k;
    ro->gen.top_p = r->rl.top_p;
    if (read_prompts(ro, d->train[0], r->rl.max_new, who, d->log, e)) return -1;
    if (ro->packed && check_packing(ro, r->rl.max_new, d->train[0]->path, d->log, e)) return -1;
    ro->jobs = xcalloc((size_t)ro->cap, sizeof *ro->jobs, "rollout jobs");
    ro->of_job = xcalloc((size_t)ro->cap, sizeof *ro->of_job, "rollout prompts");
    ro->params = xcalloc((size_t)ro->cap, sizeof *ro->params, "rollout parameters");
    ro->outs = xmalloc((size_t)ro->cap * r->rl.max_new * sizeof(int), "rollouts");
    ro->at = xcalloc((size_t)ro->cap, sizeof *ro->at, "rollout places");
    ro->row_used = xcalloc((size_t)ro->B, sizeof *ro->row_used, "rollout rows");
    ro->row_segs = xcalloc((size_t)ro->B, sizeof *ro->row_segs, "rollout segments");
    ro->steps_per_index = r->train.grad_accum;
    return 0;
}

int rollouts_start(Rollouts *ro, Comm *comm, const char *run_dir, long resumed_at, PtError *e) {
    ro->steps_per_index *= comm->world;
    if (comm->rank != 0) return 0;
    // A resumed run samples its steps past the checkpoint again: their lines go.
    if (resumed_at > 0 && run_dir_keep_steps(run_dir, "rollouts.jsonl", resumed_at, NULL, NULL, e)) return -1;
    char *path = path_join(run_dir, "rollouts.jsonl");
    ro->log = fopen(path, "a");
    const int rc = ro->log ? 0 : pt_fail(e, "%s: cannot open for writing", path);
    free(path);
    return rc;
}

// Prompt item i of the one stream: the epoch's seeded order, an epoch a pass over the prompts.
static const RolloutPrompt *prompt_at(Rollouts *ro, uint64_t i) {
    const uint64_t n = ro->n_prompts, epoch = i / n;
    if (epoch != ro->order_epoch) {
        if (!ro->order) ro->order = xmalloc(n * sizeof(uint64_t), "prompt order");
        Rng rng;
        rng_seed(&rng, dropout_child_seed(ro->seed ^ 0x6a09e667f3bcc908ull, epoch));
        for (uint64_t k = 0; k < n; k++) ro->order[k] = k;
        for (uint64_t k = n - 1; k > 0; k--) {   // Fisher-Yates
            const uint64_t j = rng_next(&rng) % (k + 1), t = ro->order[k];
            ro->order[k] = ro->order[j], ro->order[j] = t;
        }
        ro->order_epoch = epoch;
    }
    return &ro->prompts[ro->order[i % n]];
}

// Where each completion goes: row c (one a row), or the first row with room
// for it, longest first (ties in order). Returns the rows filled.
static int place(Rollouts *ro) {
    const int n = ro->n, T = ro->T;
    memset(ro->row_used, 0, (size_t)ro->B * sizeof(int));
    if (!ro->packed) {
        for (int c = 0; c < n; c++) ro->at[c] = c * T, ro->row_used[c] = ro->jobs[c].n_prompt + ro->jobs[c].n_out;
        return ro->B;
    }
    int *order = xmalloc((size_t)n * sizeof(int), "rollout order"), rows = 0;
    for (int c = 0; c < n; c++) order[c] = c;
    for (int i = 1; i < n; i++)   // insertion sort by length, longest first: stable
        for (int j = i; j > 0; j--) {
            const SampleJob *a = &ro->jobs[order[j - 1]], *b = &ro->jobs[order[j]];
            if (a->n_prompt + a->n_out >= b->n_prompt + b->n_out) break;
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        const int c = order[i], len = ro->jobs[c].n_prompt + ro->jobs[c].n_out;
        int r = 0;
        while (r < rows && ro->row_used[r] + len > T) r++;
        if (r == rows && rows++ == ro->B) die("rollouts: completions past the %d rows check_packing allowed", ro->B);
        ro->at[c] = r * T + ro->row_used[r];
        ro->row_used[r] += len;
    }
    free(order);
    return rows;
}

// Completion c at its place: its prompt and new tokens, a segment of their
// own (the row's k-th: seg k), trained on the new ones.
static int job_token(const SampleJob *job, int t) {
    return t < job->n_prompt ? job->prompt[t] : job->out[t - job->n_prompt];
}

static void put_completion(Batch *b, int at, int seg, const SampleJob *job) {
    const int n = job->n_prompt + job->n_out;
    for (int t = 0; t < n; t++) {
        const size_t i = (size_t)at + t;
        b->tokens[i] = job_token(job, t);
        b->pos[i] = t, b->seg[i] = seg, b->src[i] = -1;
        b->targets[i] = t + 1 < n ? job_token(job, t + 1) : -1;   // the token row t predicts, if any
        b->mask[i] = t + 1 < n && t + 1 >= job->n_prompt;
    }
}

// The rest of row r after its `segs` completions: padding, a segment of its own.
static void put_padding(Batch *b, int r, int used, int segs) {
    for (int t = used; t < b->T; t++) {
        const size_t i = (size_t)r * b->T + t;
        b->tokens[i] = 0, b->pos[i] = t - used, b->seg[i] = segs, b->src[i] = -1, b->targets[i] = -1, b->mask[i] = 0;
    }
}

int rollouts_sample(Rollouts *ro, Model *m, uint64_t index, Batch *b, double *seconds, PtError *e) {
    if (!ro->sampler_ready) {
        if (sampler_init(&ro->sampler, m, ro->cap, ro->T, e)) return -1;
        ro->sampler_ready = 1;
    }
    // The sampler runs the weights the step runs (QAT's fake-quantized masters are new ones each step).
    model_use_weights(&ro->sampler.one.m, m->weights);
    model_use_weights(&ro->sampler.rows, m->weights);
    const int n = ro->n, max_new = ro->gen.max_new;
    for (int c = 0; c < n; c++) {
        const RolloutPrompt *p = ro->of_job[c] = prompt_at(ro, index * ro->P + (uint64_t)(c / ro->group));
        GenParams *gp = &ro->params[c];
        *gp = ro->gen;
        // 63 bits, so rollouts.jsonl gives it exactly (JSON integers are signed)
        gp->seed = dropout_child_seed(ro->seed ^ 0x3c6ef372fe94f82bull, index * (uint64_t)ro->cap + (uint64_t)c) >> 1;
        if (p->end_stop >= 0) gen_add_stop(gp, p->end_stop, m->cfg.vocab_size);
        ro->jobs[c] = (SampleJob){p->tokens, p->n, gp, ro->outs + (size_t)c * max_new, 0};
    }
    const double t0 = now_seconds();
    if (sampler_run(&ro->sampler, ro->jobs, n, NULL, NULL, e)) return -1;
    *seconds = now_seconds() - t0;
    b->rows = place(ro);
    b->n_loss = 0;
    b->n_groups = 0;
    b->group_first[0] = 0;
    int *segs = ro->row_segs;
    memset(segs, 0, (size_t)ro->B * sizeof(int));
    for (int c = 0; c < n; c++) {
        const int r = ro->at[c] / ro->T;
        put_completion(b, ro->at[c], segs[r]++, &ro->jobs[c]);
        b->n_loss += ro->jobs[c].n_out;
    }
    for (int r = 0; r < ro->B; r++) put_padding(b, r, ro->row_used[r], segs[r]);
    return 0;
}

int rollout_stopped(const Rollouts *ro, int c) {
    const SampleJob *job = &ro->jobs[c];
    return job->n_out > 0 && gen_is_stop(job->p, job->out[job->n_out - 1]);
}

void rollouts_metrics(const Rollouts *ro, double seconds, Objective *o, int m_length, int m_clipped, int m_tps) {
    double made = 0, cut = 0;
    for (int c = 0; c < ro->n; c++) made += ro->jobs[c].n_out, cut += !rollout_stopped(ro, c);
    o->sums[m_length] += made, o->counts[m_length] += ro->n;
    o->sums[m_clipped] += cut, o->counts[m_clipped] += ro->n;
    o->sums[m_tps] += made, o->counts[m_tps] += seconds;
}

void rollouts_log(Rollouts *ro, uint64_t index, json_t *(*extra)(void *ctx, int c), void *ctx) {
    if (!ro->log) return;
    const uint64_t step = index / (uint64_t)ro->steps_per_index + 1;
    for (int c = 0; c < ro->n; c++) {
        const SampleJob *job = &ro->jobs[c];
        const RolloutPrompt *p = ro->of_job[c];
        char *text = tokenizer_decode(ro->tok, job->out, (size_t)job->n_out, 0);
        json_t *j = json_pack("{s:I, s:I, s:I, s:s, s:s, s:s}", "step", (json_int_t)step, "batch", (json_int_t)index,
                              "example", (json_int_t)p->doc, "prompt", p->text, "completion", text, "reference",
                              p->reference);
        free(text);
        json_t *more = extra ? extra(ctx, c) : NULL;
        if (j && more) json_object_update(j, more);
        json_decref(more);
        if (!j) continue;   // a text jansson refuses (invalid UTF-8 cut by max_new) is not logged
        json_object_set_new(j, "seed", json_integer((json_int_t)job->p->seed));
        char *line = json_dumps(j, JSON_COMPACT);
        fprintf(ro->log, "%s\n", line);
        free(line);
        json_decref(j);
    }
    fflush(ro->log);
}

void rollouts_free(Rollouts *ro) {
    for (uint64_t k = 0; k < ro->n_prompts; k++) {
        free(ro->prompts[k].tokens);
        free(ro->prompts[k].text);
        free(ro->prompts[k].reference);
    }
    free(ro->prompts);
    free(ro->order);
    if (ro->log) fclose(ro->log);
    if (ro->sampler_ready) sampler_free(&ro->sampler);
    free(ro->jobs);
    free(ro->of_job);
    free(ro->params);
    free(ro->outs);
    free(ro->at);
    free(ro->row_used);
    free(ro->row_segs);
    memset(ro, 0, sizeof *ro);
}

double rollout_flops_per_token(const ModelConfig *cfg, int T, int max_new, int group) {
    return config_train_flops_per_token(cfg, T) / 3.0 * (max_new + (double)(T - max_new) / group) / T;
}
