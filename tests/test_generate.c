// test_generate.c: the KV-cache generator (model/generate.h) and `pocket generate`.
//
// - Cache vs full forward: the logits of a prompt fed at once, token by token
//   and in uneven chunks equal model_forward's logits at every position (and
//   transformers' logits on the HF fixtures), on tied / untied / no-QK-norm
//   models, with prompts longer than one prefill chunk.
// - Lockstep sequences in one cache (model_plan_cache_rows, pocket synth):
//   each row's logits equal a one-sequence cache's, greedy tokens generate()'s.
// - Greedy generation equals transformers' model.generate(do_sample=False) on
//   the fixtures of tests/ref/make_generate_fixtures.py, including a chat
//   model whose prompts come from the chat template and whose replies stop at
//   <|im_end|>.
// - Sampling: the empirical distribution of draws equals the distribution
//   transformers' temperature / top-k / top-p warpers give (same support,
//   frequencies within 5 sigma); a seed reproduces a run; top-k 1 is greedy.
// (The cache against the full forward in every numeric mode, bf16, A16 and
// int4: test_decoder_modes.c.)
// - Context-length and bad-input errors.
// - The CLI through $POCKET on checkpoints made with `$POCKET import` (and
//   `$POCKET init` for --int4, checked against greedy decoding without a cache).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../data/chat.h"
#include "../model/generate.h"
#include "../formats/hf_import.h"
#include "../formats/safetensors.h"
#include "../qat/qat.h"
#include "../cli/open_model.h"
#include "../train/evaluate.h"
#include "test_model_util.h"

#define HF "tests/fixtures/hf/"
#define GEN "tests/fixtures/gen/"

// ---------------------------------------------------------------- helpers

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s:%d: %s", path, je.line, je.text);
    return j;
}

// A JSON array of ints into a malloc'd array.
static int *json_ints(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int *x = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(int));
    for (int i = 0; i < *n; i++) x[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    return x;
}

static void load_hf(const char *dir, TestModel *t) {
    ModelBundle b;
    PtError e;
    if (hf_import(dir, &b, &e)) fail_msg("import %s: %s", dir, e.msg);
    test_model_from_bundle(t, &b, NULL);
}


// ---------------------------------------------------------------- cache vs forward

// Feeds tokens[0..T) in the given chunk sizes (0-terminated; the rest in one
// last chunk) and returns the largest logit difference to ref [T, V].
static double fed_in_chunks(GenContext *g, const int *tokens, int T, const int *chunks, const float *ref) {
    int V = g->m.cfg.vocab_size;
    float *logits = malloc((size_t)T * V * sizeof(float));
    PtError e;
    gen_reset(g);
    int done = 0;
    for (int c = 0; done < T; c++) {
        int n = chunks[c] && chunks[c] < T - done ? chunks[c] : T - done;
        if (gen_feed(g, tokens + done, n, logits + (size_t)done * V, &e)) fail_msg("%s", e.msg);
        // g->logits is the last fed row
        assert_true(max_diff(g->logits, logits + (size_t)(done + n - 1) * V, V) == 0.0);
        done += n;
    }
    assert_int_equal(g->m.n_past, T);
    double d = max_diff(logits, ref, (size_t)T * V);
    free(logits);
    return d;
}

// A prefill of `first` tokens, then one token per step; compares g->logits
// with ref at every position.
static double fed_by_steps(GenContext *g, const int *tokens, int T, int first, const float *ref) {
    int V = g->m.cfg.vocab_size;
    PtError e;
    float *logits = gen_prefill_logits(g, tokens, first, &e);
    if (!logits) fail_msg("%s", e.msg);
    double d = max_diff(logits, ref + (size_t)(first - 1) * V, V);
    for (int t = first; t < T; t++) {
        if (gen_feed(g, tokens + t, 1, NULL, &e)) fail_msg("%s", e.msg);
        d = fmax(d, max_diff(g->logits, ref + (size_t)t * V, V));
    }
    return d;
}

static void check_cache_matches_forward(const char *name, Model *m, const int *tokens, int T, const float *hf_logits,
                                        double tol) {
    int V = m->cfg.vocab_size;
    PtError e;
    assert_int_equal(model_plan(m, 1, T, 0, NULL, &e), 0);
    float *ref = malloc((size_t)T * V * sizeof(float));
    ModelInput in = {.B = 1, .T = T, .tokens = tokens};
    model_forward(m, &in, ref, NULL);

    GenContext g;
    if (gen_init(&g, m, T, &e)) fail_msg("%s", e.msg);
    assert_true(g.m.T >= T);   // one pass: the first chunk runs the training attention kernel
    const int whole[] = {0}, uneven[] = {7, 1, 30, 2, 0};
    double d_whole = fed_in_chunks(&g, tokens, T, whole, ref);
    double d_uneven = fed_in_chunks(&g, tokens, T, uneven, ref);
    double d_steps = fed_by_steps(&g, tokens, T, 1, ref);
    double d_prefill_steps = fed_by_steps(&g, tokens, T, T / 3, ref);
    int chunk = g.m.T;
    g.m.T = 24;   // gen_feed splits a long prompt into passes of g.m.T rows
    double d_split = fed_in_chunks(&g, tokens, T, whole, ref);
    g.m.T = chunk;
    printf("  %s (T=%d): max |logit diff| vs model_forward: prefill %.1e, passes of 24 %.1e, uneven chunks %.1e, "
           "steps %.1e, prefill+steps %.1e\n", name, T, d_whole, d_split, d_uneven, d_steps, d_prefill_steps);
    assert_true(d_whole <= tol && d_split <= tol && d_uneven <= tol && d_steps <= tol && d_prefill_steps <= tol);
    if (hf_logits) {
        float *logits = malloc((size_t)T * V * sizeof(float));
        gen_reset(&g);
        if (gen_feed(&g, tokens, T, logits, &e)) fail_msg("%s", e.msg);
        double d_hf = max_diff(logits, hf_logits, (size_t)T * V);
        printf("  %s: max |logit diff| vs transformers %.1e\n", name, d_hf);
        assert_true(d_hf <= 1e-4);
        free(logits);
    }
    gen_free(&g);
    free(ref);
}

static void test_cache_matches_forward_presets(void **s) {
    (void)s;
    const char *presets[] = {"tiny", "tiny-untied", "tiny-llama"};
    for (int i = 0; i < 3; i++) {
        TestModel tm;
        load_preset(presets[i], 100 + i, &tm);
        int *tokens = random_tokens(100, tm.b.cfg.vocab_size, 200 + i);
        check_cache_matches_forward(presets[i], &tm.m, tokens, 100, NULL, 1e-4);
        free(tokens);
        test_model_free(&tm);
    }
}

static void test_cache_matches_forward_hf(void **s) {
    (void)s;
    const char *names[] = {"qwen3-tied", "qwen3-untied", "llama-noqk"};
    for (int i = 0; i < 3; i++) {
        char dir[128], path[160];
        snprintf(dir, sizeof dir, HF "%s", names[i]);
        TestModel tm;
        load_hf(dir, &tm);
        snprintf(path, sizeof path, "%s/tokens.txt", dir);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        int T = 0, tokens[256];
        while (T < 256 && fscanf(f, "%d", &tokens[T]) == 1) T++;
        fclose(f);
        StFile st;
        PtError e;
        snprintf(path, sizeof path, "%s/expected.safetensors", dir);
        if (st_open(&st, path, &e)) fail_msg("%s", e.msg);
        const StTensor *t = st_find(&st, "logits");
        assert_non_null(t);
        assert_int_equal(t->numel, (size_t)T * tm.b.cfg.vocab_size);
        float *hf_logits = malloc(t->numel * sizeof(float));
        assert_int_equal(st_read_f32(&st, t, hf_logits, &e), 0);
        st_close(&st);
        check_cache_matches_forward(names[i], &tm.m, tokens, T, hf_logits, 1e-4);
        free(hf_logits);
        test_model_free(&tm);
    }
}

// ---------------------------------------------------------------- lockstep rows

// R sequences in one cache (model_plan_cache_rows, as pocket synth samples):
// every step's logits of each row equal a single-sequence cache fed the same
// tokens, and generate_rows' greedy tokens equal generate()'s from the same
// first token.
static void test_lockstep_rows_match_single(void **s) {
    (void)s;
    const char *names[] = {"qwen3-tied", "llama-noqk"};
    enum { R = 3, LEN = 24 };
    for (int i = 0; i < 2; i++) {
        char dir[128];
        snprintf(dir, sizeof dir, HF "%s", names[i]);
        TestModel tm;
        load_hf(dir, &tm);
        const int V = tm.b.cfg.vocab_size;
        PtError e;
        Model rows;
        model_init(&rows, tm.m.dev, &tm.b.cfg, tm.m.tt, tm.m.weights, &tm.m.opt);
        if (model_plan_cache_rows(&rows, R, LEN, &e)) fail_msg("%s", e.msg);
        GenContext g;
        if (gen_init(&g, &tm.m, LEN, &e)) fail_msg("%s", e.msg);
        int *tokens = random_tokens(R * LEN, V, 300 + i);   // row r's tokens at r * LEN
        float *logits = malloc((size_t)R * V * sizeof(float));
        double worst = 0;
        for (int t = 0; t < LEN; t++) {
            int step[R];
            for (int r = 0; r < R; r++) step[r] = tokens[r * LEN + t];
            model_feed_rows(&rows, step, R, logits);
            // each row again through a one-sequence cache, up to this position
            for (int r = 0; r < R; r++) {
                float *single = gen_prefill_logits(&g, tokens + r * LEN, t + 1, &e);
                if (!single) fail_msg("%s", e.msg);
                worst = fmax(worst, max_diff(logits + (size_t)r * V, single, V));
            }
        }
        int first[R], out[R * LEN], ref[LEN];
        for (int r = 0; r < R; r++) first[r] = tokens[r * LEN];
        GenParams p;
        gen_params_default(&p);
        Rng rngs[R];
        generate_rows(&rows, first, LEN, LEN, &p, rngs, out, NULL, NULL);
        p.max_new = LEN - 1;
        for (int r = 0; r < R; r++) {
            int n = generate(&g, first + r, 1, &p, ref, LEN, &e);
            assert_int_equal(n, LEN - 1);
            assert_int_equal(out[r * LEN], first[r]);
            assert_memory_equal(out + r * LEN + 1, ref, (size_t)(LEN - 1) * sizeof(int));
        }
        printf("  %s: %d sequences in lockstep, %d positions: logits within %.1e of one cache each, greedy tokens "
               "equal generate()'s\n", names[i], R, LEN, worst);
        assert_true(worst <= 1e-5);
        free(tokens);
        free(logits);
        gen_free(&g);
        model_free(&rows);
        test_model_free(&tm);
    }
}

// ---------------------------------------------------------------- greedy vs transformers

static void test_greedy_matches_transformers(void **s) {
    (void)s;
    const char *names[] = {"qwen3-tied", "qwen3-untied", "llama-noqk"};
    for (int i = 0; i < 3; i++) {
        char path[128];
        snprintf(path, sizeof path, GEN "%s.json", names[i]);
        json_t *doc = load_json(path), *cases = json_object_get(doc, "cases");
        TestModel tm;
        load_hf(json_string_value(json_object_get(doc, "model")), &tm);
        GenContext g;
        PtError e;
        if (gen_init(&g, &tm.m, tm.b.cfg.max_seq, &e)) fail_msg("%s", e.msg);
        GenParams p;
        gen_params_default(&p);
        p.max_new = (int)json_integer_value(json_object_get(doc, "max_new"));
        assert_int_equal(p.max_new, 32);
        assert_true(json_array_size(cases) >= 4);
        for (size_t c = 0; c < json_array_size(cases); c++) {
            json_t *cs = json_array_get(cases, c);
            int n_prompt, n_expected;
            int *prompt = json_ints(json_object_get(cs, "prompt"), &n_prompt);
            int *expected = json_ints(json_object_get(cs, "expected"), &n_expected);
            int out[64];
            int n = generate(&g, prompt, n_prompt, &p, out, 64, &e);
            if (n < 0) fail_msg("%s", e.msg);
            assert_int_equal(n, n_expected);
            for (int t = 0; t < n; t++)
                if (out[t] != expected[t])
                    fail_msg("%s, prompt of %d tokens: new token %d is %d, transformers %d", names[i], n_prompt, t,
                             out[t], expected[t]);
            free(prompt);
            free(expected);
        }
        printf("  %s: %zu prompts, 32 greedy tokens each, equal to transformers\n", names[i], json_array_size(cases));
        gen_free(&g);
        test_model_free(&tm);
        json_decref(doc);
    }
}

// The chat fixture in-library: chat template + tokenizer give transformers'
// prompt ids, the default stop ids are <|im_end|> (also eos) and
// <|endoftext|>, and greedy replies equal transformers' (stop token kept).
static void test_chat_greedy_stops_like_transformers(void **s) {
    (void)s;
    json_t *doc = load_json(GEN "qwen3-chat.json"), *cases = json_object_get(doc, "cases");
    TestModel tm;
    load_hf(json_string_value(json_object_get(doc, "model")), &tm);
    assert_non_null(tm.b.tokenizer_json);
    Tokenizer *tok;
    PtError e;
    if (tokenizer_load(&tok, tm.b.tokenizer_json, tm.b.tokenizer_json_len, "qwen3-chat", &e)) fail_msg("%s", e.msg);
    GenParams p;
    gen_params_default(&p);
    p.max_new = (int)json_integer_value(json_object_get(doc, "max_new"));
    add_default_stops(&p, &tm.b.cfg, tok);
    int n_stop;
    int *stops = json_ints(json_object_get(doc, "stop"), &n_stop);
    assert_int_equal(p.n_stop, n_stop);
    for (int i = 0; i < n_stop; i++) assert_true(gen_is_stop(&p, stops[i]));
    GenContext g;
    if (gen_init(&g, &tm.m, tm.b.cfg.max_seq, &e)) fail_msg("%s", e.msg);
    int n_stopped = 0;
    ChatTemplate *t;   // the model's own template (its tokenizer_config.json), else the bundled one
    if (chat_template_load(&t, tm.b.tokenizer_config_json, tm.b.tokenizer_config_json_len, "qwen3-chat", &e))
        fail_msg("%s", e.msg);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        ChatMessage msg = {"user", json_string_value(json_object_get(cs, "user"))};
        ChatText r;
        assert_int_equal(chat_render(t, &msg, 1, 1, 0, &r, &e), 0);
        char *text = r.text;
        assert_string_equal(text, json_string_value(json_object_get(cs, "prompt_text")));
        int *prompt = NULL;
        size_t n_prompt = 0, cap = 0;
        assert_int_equal(tokenizer_encode(tok, text, strlen(text), &prompt, &n_prompt, &cap, &e), 0);
        int n_hf_prompt, n_expected;
        int *hf_prompt = json_ints(json_object_get(cs, "prompt"), &n_hf_prompt);
        int *expected = json_ints(json_object_get(cs, "expected"), &n_expected);
        assert_int_equal((int)n_prompt, n_hf_prompt);
        assert_memory_equal(prompt, hf_prompt, n_prompt * sizeof(int));
        int out[64];
        int n = generate(&g, prompt, (int)n_prompt, &p, out, 64, &e);
        if (n < 0) fail_msg("%s", e.msg);
        assert_int_equal(n, n_expected);
        assert_memory_equal(out, expected, (size_t)n * sizeof(int));
        int stopped = json_is_true(json_object_get(cs, "stopped"));
        assert_int_equal(gen_is_stop(&p, out[n - 1]), stopped);
        n_stopped += stopped;
        char *reply = tokenizer_decode(tok, out, (size_t)(n - stopped), 0);
        assert_string_equal(reply, json_string_value(json_object_get(cs, "text")));
        free(reply);
        free(prompt);
        free(hf_prompt);
        free(expected);
        free(r.tag);
        free(text);
    }
    chat_template_free(t);
    assert_true(n_stopped >= 1);
    printf("  qwen3-chat: %zu replies equal to transformers, %d ended on a stop token\n", json_array_size(cases),
           n_stopped);
    free(stops);
    gen_free(&g);
    tokenizer_free(tok);
    test_model_free(&tm);
    json_decref(doc);
}

// ---------------------------------------------------------------- sampling

static void test_sampling_matches_transformers_warpers(void **s) {
    (void)s;
    json_t *doc = load_json(GEN "sampling.json"), *settings = json_object_get(doc, "settings");
    TestModel tm;
    load_hf(HF "qwen3-tied", &tm);   // only its vocabulary size (256) matters here
    int V = tm.b.cfg.vocab_size;
    assert_int_equal(json_array_size(json_object_get(doc, "logits")), (size_t)V);
    float *logits = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < V; i++) logits[i] = (float)json_real_value(json_array_get(json_object_get(doc, "logits"), i));
    GenContext g;
    PtError e;
    if (gen_init(&g, &tm.m, 1, &e)) fail_msg("%s", e.msg);
    enum { DRAWS = 40000 };
    int *count = malloc((size_t)V * sizeof(int));
    for (size_t k = 0; k < json_array_size(settings); k++) {
        json_t *st = json_array_get(settings, k), *probs = json_object_get(st, "probs");
        GenParams p;
        gen_params_default(&p);
        p.temperature = (float)json_real_value(json_object_get(st, "temperature"));
        p.top_k = (int)json_integer_value(json_object_get(st, "top_k"));
        p.top_p = (float)json_real_value(json_object_get(st, "top_p"));
        Rng rng;
        rng_seed(&rng, 77 + k);
        memset(count, 0, (size_t)V * sizeof(int));
        for (int d = 0; d < DRAWS; d++) count[gen_sample(&g, logits, &p, &rng)]++;
        double worst = 0;
        int support = 0;
        for (int i = 0; i < V; i++) {
            double pi = json_real_value(json_array_get(probs, i)), f = (double)count[i] / DRAWS;
            if (pi == 0.0) {
                if (count[i]) fail_msg("T=%g k=%d p=%g: token %d drawn %d times, outside transformers' support",
                                       p.temperature, p.top_k, p.top_p, i, count[i]);
                continue;
            }
            support++;
            double sigma = sqrt(pi * (1 - pi) / DRAWS), z = sigma > 0 ? fabs(f - pi) / sigma : 0;
            worst = fmax(worst, z);
            if (fabs(f - pi) > 5 * sigma + 1e-4)
                fail_msg("T=%g k=%d p=%g: token %d frequency %.4f, transformers' probability %.4f", p.temperature,
                         p.top_k, p.top_p, i, f, pi);
        }
        assert_int_equal(support, (int)json_integer_value(json_object_get(st, "support")));
        printf("  T=%.1f top_k=%d top_p=%.2f: support %d, worst deviation %.1f sigma over %d draws\n",
               p.temperature, p.top_k, p.top_p, support, worst, DRAWS);
    }
    free(count);
    free(logits);
    gen_free(&g);
    test_model_free(&tm);
    json_decref(doc);
}

static int run_gen(GenContext *g, const int *prompt, int n, float temperature, int top_k, float top_p, uint64_t seed,
                   int *out) {
    GenParams p;
    gen_params_default(&p);
    p.max_new = 40;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.seed = seed;
    PtError e;
    int r = generate(g, prompt, n, &p, out, 40, &e);
    if (r < 0) fail_msg("%s", e.msg);
    assert_int_equal(r, 40);
    return r;
}

static void test_sampling_seed_and_greedy_limits(void **s) {
    (void)s;
    TestModel tm;
    load_preset("tiny", 7, &tm);
    int *prompt = random_tokens(10, tm.b.cfg.vocab_size, 8);
    GenContext g;
    PtError e;
    if (gen_init(&g, &tm.m, 64, &e)) fail_msg("%s", e.msg);
    int a[40], b[40], greedy[40], c[40];
    run_gen(&g, prompt, 10, 0.0f, 0, 1.0f, 0, greedy);
    run_gen(&g, prompt, 10, 1.5f, 50, 0.95f, 123, a);
    run_gen(&g, prompt, 10, 1.5f, 50, 0.95f, 123, b);
    assert_memory_equal(a, b, sizeof a);   // same seed, same tokens
    int differs = 0;
    for (uint64_t seed = 124; seed < 130 && !differs; seed++) {
        run_gen(&g, prompt, 10, 1.5f, 50, 0.95f, seed, c);
        differs = memcmp(a, c, sizeof a) != 0;
    }
    assert_true(differs);                  // the seed matters
    assert_true(memcmp(a, greedy, sizeof a) != 0);
    run_gen(&g, prompt, 10, 1.0f, 1, 1.0f, 99, c);
    assert_memory_equal(c, greedy, sizeof c);   // top-k 1 is greedy
    run_gen(&g, prompt, 10, 3.0f, 0, 1e-6f, 99, c);
    assert_memory_equal(c, greedy, sizeof c);   // a vanishing nucleus keeps only the best token
    free(prompt);
    gen_free(&g);
    test_model_free(&tm);
}

// ---------------------------------------------------------------- errors

static void test_context_length_and_bad_input(void **s) {
    (void)s;
    TestModel tm;
    load_preset("tiny", 3, &tm);
    int max_seq = tm.b.cfg.max_seq, V = tm.b.cfg.vocab_size;
    GenContext g;
    PtError e;
    assert_int_equal(gen_init(&g, &tm.m, max_seq + 1, &e), -1);
    assert_non_null(strstr(e.msg, "max_position_embeddings"));
    assert_int_equal(gen_init(&g, &tm.m, max_seq, &e), 0);
    int *prompt = random_tokens(max_seq, V, 4), out[32];
    GenParams p;
    gen_params_default(&p);
    p.max_new = 13;
    int n_prompt = max_seq - 12;
    assert_int_equal(generate(&g, prompt, n_prompt, &p, out, 32, &e), -1);   // one past max_seq
    printf("  %s\n", e.msg);
    char want[64];
    snprintf(want, sizeof want, "exceeds the model's context of %d", max_seq);
    assert_non_null(strstr(e.msg, want));
    p.max_new = 12;                                                          // max_seq - 12 + 12 fits exactly
    assert_int_equal(generate(&g, prompt, n_prompt, &p, out, 32, &e), 12);
    assert_int_equal(g.m.n_past, max_seq - 1);   // the last new token is not fed
    assert_int_equal(generate(&g, prompt, 0, &p, out, 32, &e), -1);
    assert_non_null(strstr(e.msg, "empty"));
    assert_int_equal(generate(&g, prompt, 4, &p, out, 11, &e), -1);
    assert_non_null(strstr(e.msg, "max_new"));
    prompt[2] = V;
    assert_int_equal(generate(&g, prompt, 4, &p, out, 32, &e), -1);
    assert_non_null(strstr(e.msg, "token 3"));
    assert_non_null(strstr(e.msg, "vocabulary"));
    prompt[2] = -1;
    assert_int_equal(gen_feed(&g, prompt, 4, NULL, &e), -1);
    prompt[2] = 0;
    gen_reset(&g);
    assert_int_equal(gen_feed(&g, prompt, max_seq - 3, NULL, &e), 0);
    assert_int_equal(gen_feed(&g, prompt, 4, NULL, &e), -1);   // cache full
    assert_non_null(strstr(e.msg, "exceed"));
    assert_int_equal(gen_feed(&g, prompt, 3, NULL, &e), 0);
    free(prompt);
    gen_free(&g);
    test_model_free(&tm);
}

// ---------------------------------------------------------------- CLI

typedef struct {
    char dir[64];
    const char *pocket;
    char *tied_ckpt, *chat_ckpt, *llama_ckpt;
} Env;

// Runs $POCKET with args (NULL-terminated); stdout and stderr are returned malloc'd.
static int run_pocket(const Env *v, const char *const *args, char **out, char **err) {
    char *out_path = path_join(v->dir, "stdout.txt"), *err_path = path_join(v->dir, "stderr.txt");
    const char *argv[32];
    int n = 0;
    argv[n++] = v->pocket;
    while (args[n - 1] && n < 31) argv[n] = args[n - 1], n++;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(127);
        execv(v->pocket, (char *const *)argv);
        _exit(127);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    uint8_t *data;
    size_t len;
    PtError e;
    *out = read_whole_file(out_path, &data, &len, &e) ? xstrdup("") : (char *)data;
    *err = read_whole_file(err_path, &data, &len, &e) ? xstrdup("") : (char *)data;
    free(out_path);
    free(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int cli_setup(void **state) {
    Env *v = xcalloc(1, sizeof *v, "env");
    v->pocket = getenv("POCKET") ? getenv("POCKET") : "./pocket";
    strcpy(v->dir, "/tmp/pocket-test-generate-XXXXXX");
    if (!mkdtemp(v->dir)) return -1;
    v->tied_ckpt = path_join(v->dir, "tied.h5");
    v->chat_ckpt = path_join(v->dir, "chat.h5");
    v->llama_ckpt = path_join(v->dir, "llama.h5");
    const char *a1[] = {"import", HF "qwen3-tied", "--out", v->tied_ckpt, NULL};
    const char *a2[] = {"import", GEN "qwen3-chat", "--out", v->chat_ckpt, NULL};
    // tiny-llama: every matmul's input size is a multiple of the int4 group (64)
    const char *a3[] = {"init", "--model", "tiny-llama", "--seed", "5", "--out", v->llama_ckpt, NULL};
    const char *const *calls[] = {a1, a2, a3};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        char *out, *err;
        rc = run_pocket(v, calls[i], &out, &err);
        if (rc) fprintf(stderr, "%s failed: %s", calls[i][0], err);
        free(out), free(err);
    }
    *state = v;
    return rc ? -1 : 0;
}

static int cli_teardown(void **state) {
    Env *v = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", v->dir);
    int rc = system(cmd);
    free(v->tied_ckpt);
    free(v->chat_ckpt);
    free(v->llama_ckpt);
    free(v);
    return rc ? -1 : 0;
}

// "1 2 3" from a JSON int array, malloc'd.
static char *ids_text(json_t *a) {
    size_t n = json_array_size(a);
    char *s = malloc(n * 12 + 2), *p = s;
    *p = 0;
    for (size_t i = 0; i < n; i++) p += sprintf(p, "%s%d", i ? " " : "", (int)json_integer_value(json_array_get(a, i)));
    return s;
}

static void test_cli_prompt_ids_greedy(void **state) {
    Env *v = *state;
    json_t *doc = load_json(GEN "qwen3-tied.json"), *cases = json_object_get(doc, "cases");
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        char *prompt = ids_text(json_object_get(cs, "prompt")), *expected = ids_text(json_object_get(cs, "expected"));
        const char *args[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt-ids", prompt, "--max-new", "32", "--ids",
                              NULL};
        char *out, *err;
        int rc = run_pocket(v, args, &out, &err);
        if (rc) fail_msg("exit %d: %s", rc, err);
        size_t len = strlen(out);
        assert_true(len > 0 && out[len - 1] == '\n');
        out[len - 1] = 0;
        assert_string_equal(out, expected);
        free(out), free(err), free(prompt), free(expected);
    }
    json_decref(doc);
}

static void test_cli_chat_text_and_ids(void **state) {
    Env *v = *state;
    json_t *doc = load_json(GEN "qwen3-chat.json"), *cases = json_object_get(doc, "cases");
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *user = json_string_value(json_object_get(cs, "user"));
        char *expected = ids_text(json_object_get(cs, "expected")), *out, *err;
        const char *with_ids[] = {"generate", "--ckpt", v->chat_ckpt, "--chat", "--prompt", user, "--max-new", "32",
                                  "--ids", NULL};
        int rc = run_pocket(v, with_ids, &out, &err);
        if (rc) fail_msg("exit %d: %s", rc, err);
        assert_int_equal(strlen(out), strlen(expected) + 1);
        assert_memory_equal(out, expected, strlen(expected));
        free(out), free(err);
        const char *as_text[] = {"generate", "--ckpt", v->chat_ckpt, "--chat", "--prompt", user, "--max-new", "32",
                                 NULL};
        rc = run_pocket(v, as_text, &out, &err);
        if (rc) fail_msg("exit %d: %s", rc, err);
        const char *text = json_string_value(json_object_get(cs, "text"));
        assert_int_equal(strlen(out), strlen(text) + 1);
        assert_memory_equal(out, text, strlen(text));
        assert_non_null(strstr(err, json_is_true(json_object_get(cs, "stopped")) ? "end token" : "max-new"));
        free(out), free(err), free(expected);
    }
    json_decref(doc);
}

static void test_cli_sampling_seed(void **state) {
    Env *v = *state;
    const char *args[] = {"generate", "--ckpt", v->chat_ckpt, "--prompt", "Once upon a time", "--max-new", "24",
                          "--temperature", "1.2", "--top-k", "40", "--top-p", "0.9", "--seed", "7", "--ids", NULL};
    char *out1, *out2, *err;
    assert_int_equal(run_pocket(v, args, &out1, &err), 0);
    free(err);
    assert_int_equal(run_pocket(v, args, &out2, &err), 0);
    free(err);
    assert_true(strlen(out1) > 1);
    assert_string_equal(out1, out2);
    free(out1), free(out2);
}

// --int4 against a reference without any cache: the checkpoint opened here
// by the same open_model, and greedy decoding by rerunning model_forward over
// the whole growing sequence each step.
static void test_cli_int4_matches_uncached_greedy(void **state) {
    Env *v = *state;
    enum { N_PROMPT = 6, N_NEW = 12 };
    int seq[N_PROMPT + N_NEW] = {3, 141, 59, 26, 53, 58};
    PtError e;
    OpenModel om;
    OpenOptions oo = {.int4 = 1};
    if (open_model(&om, v->llama_ckpt, &oo, &e)) fail_msg("%s", e.msg);
    Model *m = &om.m;
    int V = om.b.cfg.vocab_size;
    float *logits = malloc((size_t)(N_PROMPT + N_NEW) * V * sizeof(float));
    double min_gap = INFINITY;
    for (int t = N_PROMPT; t < N_PROMPT + N_NEW; t++) {
        assert_int_equal(model_plan(m, 1, t, 0, NULL, &e), 0);
        ModelInput in = {.B = 1, .T = t, .tokens = seq};
        model_forward(m, &in, logits, NULL);
        const float *last = logits + (size_t)(t - 1) * V;
        int best = 0, second = -1;
        for (int i = 1; i < V; i++)
            if (last[i] > last[best]) second = best, best = i;
            else if (second < 0 || last[i] > last[second]) second = i;
        min_gap = fmin(min_gap, last[best] - last[second]);
        seq[t] = best;
    }
    assert_true(min_gap > 1e-5);   // no near-tie that float rounding could flip
    char expected[256] = "", *p = expected;
    for (int t = N_PROMPT; t < N_PROMPT + N_NEW; t++) p += sprintf(p, "%s%d", t > N_PROMPT ? " " : "", seq[t]);
    const char *args[] = {"generate", "--ckpt", v->llama_ckpt, "--int4", "--prompt-ids", "3 141 59 26 53 58",
                          "--max-new", "12", "--ids", NULL};
    char *out, *err;
    int rc = run_pocket(v, args, &out, &err);
    if (rc) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(err, "int4 weights"));
    out[strcspn(out, "\n")] = 0;
    printf("  int4 greedy (min top-2 gap %.1e): %s\n", min_gap, out);
    assert_string_equal(out, expected);
    free(out), free(err), free(logits);
    open_model_close(&om);
}

// Each bad call exits non-zero with one stderr line holding `needle`, and prints nothing.
static void expect_failure(const Env *v, const char *const *args, const char *needle) {
    char *out, *err;
    int rc = run_pocket(v, args, &out, &err);
    if (rc == 0) fail_msg("exit 0 for a bad call (%s expected)", needle);
    if (!strstr(err, needle)) fail_msg("stderr lacks '%s': %s", needle, err);
    char *nl = strchr(err, '\n');
    assert_true(nl && nl[1] == 0);   // one line
    assert_true(!strncmp(err, "pocket generate: ", 17));
    assert_string_equal(out, "");
    free(out), free(err);
}

static void test_cli_errors(void **state) {
    Env *v = *state;
    const char *no_tok[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt", "hello", NULL};
    expect_failure(v, no_tok, "tokenizer");
    const char *no_tok_text[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt-ids", "1 2", NULL};
    expect_failure(v, no_tok_text, "tokenizer");
    const char *too_long[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt-ids", "1 2 3", "--max-new", "126",
                              "--ids", NULL};
    expect_failure(v, too_long, "max_position_embeddings");
    const char *out_of_vocab[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt-ids", "1 256", "--ids", NULL};
    expect_failure(v, out_of_vocab, "entry 2 = 256");
    const char *not_int[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt-ids", "1 x", "--ids", NULL};
    expect_failure(v, not_int, "entry 2");
    const char *missing[] = {"generate", "--ckpt", "/nonexistent/x.h5", "--prompt", "hi", NULL};
    expect_failure(v, missing, "/nonexistent/x.h5");
    const char *bad_top_p[] = {"generate", "--ckpt", v->chat_ckpt, "--prompt", "hi", "--top-p", "0", NULL};
    expect_failure(v, bad_top_p, "--top-p");
    const char *bad_temp[] = {"generate", "--ckpt", v->chat_ckpt, "--prompt", "hi", "--temperature", "-1", NULL};
    expect_failure(v, bad_temp, "--temperature");
    const char *chat_ids[] = {"generate", "--ckpt", v->chat_ckpt, "--chat", "--prompt-ids", "1", NULL};
    expect_failure(v, chat_ids, "--chat");
    const char *both[] = {"generate", "--ckpt", v->chat_ckpt, "--prompt", "a", "--prompt-ids", "1", NULL};
    expect_failure(v, both, "one of --prompt");
    const char *unknown[] = {"generate", "--ckpt", v->chat_ckpt, "--prompt", "a", "--bogus", NULL};
    expect_failure(v, unknown, "--bogus");
    // The context check counts the prompt too: 3 + 125 = 128 fits.
    const char *fits[] = {"generate", "--ckpt", v->tied_ckpt, "--prompt-ids", "1 2 3", "--max-new", "125", "--ids",
                          NULL};
    char *out, *err;
    assert_int_equal(run_pocket(v, fits, &out, &err), 0);
    free(out), free(err);
    const char *help[] = {"generate", "--help", NULL};
    assert_int_equal(run_pocket(v, help, &out, &err), 0);
    assert_non_null(strstr(out, "enable_thinking"));
    free(out), free(err);
}

int main(void) {
    const struct CMUnitTest lib[] = {
        cmocka_unit_test(test_cache_matches_forward_presets),
        cmocka_unit_test(test_cache_matches_forward_hf),
        cmocka_unit_test(test_lockstep_rows_match_single),
        cmocka_unit_test(test_greedy_matches_transformers),
        cmocka_unit_test(test_chat_greedy_stops_like_transformers),
        cmocka_unit_test(test_sampling_matches_transformers_warpers),
        cmocka_unit_test(test_sampling_seed_and_greedy_limits),
        cmocka_unit_test(test_context_length_and_bad_input),
    };
    const struct CMUnitTest cli[] = {
        cmocka_unit_test(test_cli_prompt_ids_greedy),
        cmocka_unit_test(test_cli_chat_text_and_ids),
        cmocka_unit_test(test_cli_sampling_seed),
        cmocka_unit_test(test_cli_int4_matches_uncached_greedy),
        cmocka_unit_test(test_cli_errors),
    };
    int failed = cmocka_run_group_tests_name("generate", lib, NULL, NULL);
    failed += cmocka_run_group_tests_name("generate CLI", cli, cli_setup, cli_teardown);
    return failed;
}
