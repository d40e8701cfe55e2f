// sampler.c: the batched sampler (sampler.h). Each row holds one job at a
// time: its prompt is read by the one-sequence plan and its first token
// drawn from that pass's logits, exactly as generate() starts; the prompt's
// cache is then copied into the row, which from there on feeds its newest
// token at its own position in the shared passes. The rows with a job are
// kept first and the passes run over them alone: once no job waits, a
// finished row takes the last live row's sequence (its cache moved) and the
// passes shrink, rather than compute rows whose output nobody reads (a
// sequence's logits do not depend on the pass's rows). Jobs that share a prompt
// (the same array) one after another read it once: the one-sequence plan
// still holds it.
#include "sampler.h"
#include <string.h>

int sampler_init(Sampler *s, const Model *src, int n_rows, int max_len, PtError *e) {
    memset(s, 0, sizeof *s);
    if (n_rows < 1) return pt_fail(e, "a sampler of %d rows is empty", n_rows);
    if (gen_init(&s->one, src, max_len, e)) return -1;
    model_init_like(&s->rows, src);
    if (model_plan_cache_rows(&s->rows, n_rows, max_len, e)) {
        sampler_free(s);
        return -1;
    }
    const int V = src->cfg.vocab_size;
    Device *d = src->dev;
    s->dev_logits = d->be->alloc(d, (size_t)n_rows * V * sizeof(float), "sampler logits");
    s->logits = xmalloc((size_t)n_rows * V * sizeof(float), "sampler logits on the host");
    return 0;
}

void sampler_free(Sampler *s) {
    if (s->dev_logits) s->rows.dev->be->release(s->rows.dev, s->dev_logits);
    model_free(&s->rows);
    gen_free(&s->one);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

static int check_jobs(const Sampler *s, const SampleJob *jobs, int n, PtError *e) {
    const int V = s->rows.cfg.vocab_size;
    for (int j = 0; j < n; j++) {
        const SampleJob *job = &jobs[j];
        if (job->n_prompt < 1) return pt_fail(e, "job %d: the prompt is empty", j);
        if (job->p->max_new < 0) return pt_fail(e, "job %d: max_new %d is negative", j, job->p->max_new);
        if ((long)job->n_prompt + job->p->max_new > s->rows.cache_len)
            return pt_fail(e, "job %d: a prompt of %d tokens + %d new tokens exceeds the sampler's %d positions", j,
                           job->n_prompt, job->p->max_new, s->rows.cache_len);
        for (int i = 0; i < job->n_prompt; i++)
            if (job->prompt[i] < 0 || job->prompt[i] >= V)
                return pt_fail(e, "job %d: token %d of the prompt is %d, outside the vocabulary [0, %d)", j, i + 1,
                               job->prompt[i], V);
    }
    return 0;
}

typedef struct {
    int job;        // the job the row decodes (its newest token is fed next), -1 when none
    Rng rng;
} Row;

typedef struct {
    SampleJob *jobs;
    int n, next, done;
    void (*progress)(void *ctx, int done, int n);
    void *ctx;
} Queue;

static void finished(Queue *q) {
    q->done++;
    if (q->progress) q->progress(q->ctx, q->done, q->n);
}

// Takes a new token for the job (its Rng, its parameters); 1 when the job is finished.
static int take(Sampler *s, SampleJob *job, const float *logits, Rng *rng) {
    const int id = gen_sample(&s->one, logits, job->p, rng);
    job->out[job->n_out++] = id;
    return gen_is_stop(job->p, id) || job->n_out == job->p->max_new;
}

// Row r takes waiting jobs until one needs the shared passes: its prompt is
// read and its first token drawn as generate() does, then its cache goes
// into the row. (A job of 0 or 1 new tokens ends with its prompt's pass.)
// 1 when the row has a job, 0 when none waits, -1 on error.
static int fill_row(Sampler *s, Row *row, int r, Queue *q, PtError *e) {
    row->job = -1;
    while (q->next < q->n) {
        const int j = q->next++;
        SampleJob *job = &q->jobs[j];
        job->n_out = 0;
        if (job->p->max_new > 0) {
            if (job->prompt != s->read || job->n_prompt != s->n_read) {
                if (!gen_prefill_logits(&s->one, job->prompt, job->n_prompt, e)) return -1;
                s->read = job->prompt, s->n_read = job->n_prompt;
            }
            rng_seed(&row->rng, job->p->seed);
            if (!take(s, job, s->one.logits, &row->rng)) {
                model_cache_copy_row(&s->rows, r, &s->one.m);
                row->job = j;
                return 1;
            }
        }
        finished(q);
    }
    return 0;
}

int sampler_run(Sampler *s, SampleJob *jobs, int n, void (*progress)(void *ctx, int done, int n), void *ctx,
                PtError *e) {
    if (check_jobs(s, jobs, n, e)) return -1;
    const int R = s->rows.cache_rows, V = s->rows.cfg.vocab_size;
    Row *rows = xmalloc((size_t)R * sizeof(Row), "sampler rows");
    int *tokens = xmalloc((size_t)R * sizeof(int), "sampler tokens");
    Queue q = {jobs, n, 0, 0, progress, ctx};
    s->read = NULL;   // the jobs' arrays may be new ones at old addresses
    int live = 0, rc = 0;   // rows 0 .. live - 1 are the passes'
    for (int r = 0; r < R && rc >= 0; r++) live += (rc = fill_row(s, &rows[r], r, &q, e)) > 0;
    while (rc >= 0) {
        // Rows without a job move to the end: the last live row's sequence takes their place.
        for (int r = 0; r < live;) {
            if (rows[r].job >= 0) {
                r++;
                continue;
            }
            if (r < --live && rows[live].job >= 0) {
                model_cache_move_row(&s->rows, r, live);
                rows[r] = rows[live];
                rows[live].job = -1;
            }
        }
        if (live == 0) break;
        // The shared pass: every live row's newest token; a finished row refills at once.
        for (int r = 0; r < live; r++) tokens[r] = jobs[rows[r].job].out[jobs[rows[r].job].n_out - 1];
        model_feed_rows(&s->rows, tokens, live, s->dev_logits);
        OP(s->rows.dev, download, s->logits, s->dev_logits, (size_t)live * V * sizeof(float));
        for (int r = 0; r < live && rc >= 0; r++) {
            SampleJob *job = &jobs[rows[r].job];
            if (!take(s, job, s->logits + (size_t)r * V, &rows[r].rng)) continue;
            finished(&q);
            rc = fill_row(s, &rows[r], r, &q, e);
        }
    }
    free(rows);
    free(tokens);
    return rc < 0 ? -1 : 0;
}
