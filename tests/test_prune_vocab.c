// test_prune_vocab.c: `pocket prune-vocab` end to end through the real binary
// ($POCKET), on tiny checkpoints over the fixture tokenizer (1500 vocab
// tokens, 1244 merges, 5 added tokens) and the bilingual fixture corpus
// (tests/fixtures/prune/corpus.jsonl).
//
// The pruned checkpoint is checked against the original through token
// strings, never through the command's own id map: each new id's token is
// looked up by its text in the old tokenizer, and its embedding (and lm_head,
// and int4) row must be that token's old row; the kept set must hold every
// added and byte token and be closed under the old merges; a text whose old
// tokens are all kept must encode to the same tokens, and every text must
// decode as before; the logits of the pruned model are the original's
// restricted to the kept rows. The int4 state's rows, a decision head's row,
// thread-count independence, the report's overall figure (computed here from
// the two tokenizers), and the commands a pruned model must serve (tokenize,
// train, eval, generate --chat, export) are covered; bad input gets one line,
// a non-zero exit and no output file. Interop checks on the real Qwen3
// tokenizer and SmolLM2: tests/interop/test_prune_vocab.py.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include "../data/tokenizer.h"
#include "../formats/checkpoint.h"
#include "../formats/safetensors.h"
#include "test_cli_util.h"

#define CORPUS "tests/fixtures/prune/corpus.jsonl"
#define TOKENIZER "tests/fixtures/tok/tokenizer.json"
enum { KEEP = 800, ROUNDED = 832 };   // 800 rounded up to a multiple of 64

typedef struct {
    char dir[64];
    char base[128], pruned[128];   // the tied tiny checkpoint and its pruning to KEEP
} Env;

// DIR/NAME.h5: pocket init of a tiny Qwen3 over the fixture tokenizer; extra
// JSON members (", \"k\": v") override the config.
static int init_ckpt(const char *dir, const char *name, const char *extra) {
    char path[600], members[400];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    snprintf(members, sizeof members, ", \"rope_theta\": 10000.0, \"initializer_range\": 0.2%s", extra);
    if (write_tiny_config(path, 64, 16, 128, 1536, members)) return -1;
    return sh("%s init --model %s/%s.json --tokenizer " TOKENIZER " --seed 5 --out %s/%s.h5 >/dev/null", pocket(),
              dir, name, dir, name);
}

// Runs prune-vocab with args; exit status, stderr in *err (malloc'd) when asked.
static int prune(const Env *v, const char *args, char **err) {
    int rc = sh("%s prune-vocab %s >%s/out.txt 2>%s/err.txt", pocket(), args, v->dir, v->dir);
    if (err) {
        char path[128];
        snprintf(path, sizeof path, "%s/err.txt", v->dir);
        uint8_t *data;
        size_t len;
        PtError e;
        *err = read_whole_file(path, &data, &len, &e) ? xstrdup("") : (char *)data;
    }
    return rc;
}

static int setup(void **state) {
    Env *v = xcalloc(1, sizeof *v, "env");
    strcpy(v->dir, "/tmp/pocket-test-prune-XXXXXX");
    if (!mkdtemp(v->dir) || init_ckpt(v->dir, "base", "")) return -1;
    snprintf(v->base, sizeof v->base, "%s/base.h5", v->dir);
    snprintf(v->pruned, sizeof v->pruned, "%s/pruned.h5", v->dir);
    char args[512];
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep %d --out %s", v->base, KEEP, v->pruned);
    if (prune(v, args, NULL)) return -1;
    *state = v;
    return 0;
}

static int teardown(void **state) {
    Env *v = *state;
    int rc = sh("rm -rf '%s'", v->dir);
    free(v);
    return rc ? -1 : 0;
}

// ---- helpers -------------------------------------------------------------------

static Tokenizer *tokenizer_of(const ModelBundle *b) {
    Tokenizer *t;
    PtError e;
    if (tokenizer_load(&t, b->tokenizer_json, b->tokenizer_json_len, "checkpoint", &e)) fail_msg("%s", e.msg);
    return t;
}

static void load(const char *path, ModelBundle *b) {
    PtError e;
    if (checkpoint_load(path, b, &e)) fail_msg("%s", e.msg);
}

// The old id of the token with new id k, found by its text in the old tokenizer.
static int old_id_by_text(const Tokenizer *old_tok, const Tokenizer *new_tok, int k) {
    size_t len;
    const char *s = tokenizer_vocab_string(new_tok, k, &len);
    if (!s) s = tokenizer_token_bytes(new_tok, k, &len);   // an added token: its content
    char *text = xmalloc(len + 1, "token");
    memcpy(text, s, len);
    text[len] = 0;
    int id = tokenizer_token_id(old_tok, text);
    free(text);
    return id;
}

static int *encode(const Tokenizer *t, const char *text, size_t *n) {
    int *ids = NULL;
    size_t cap = 0;
    PtError e;
    *n = 0;
    if (tokenizer_encode(t, text, strlen(text), &ids, n, &cap, &e)) fail_msg("%s", e.msg);
    return ids;
}

// The "text" of every line of the fixture corpus.
static char **corpus_texts(int *n) {
    uint8_t *data;
    size_t len;
    PtError e;
    if (read_whole_file(CORPUS, &data, &len, &e)) fail_msg("%s", e.msg);
    char **out = xcalloc(256, sizeof *out, "texts"), *save = NULL;
    *n = 0;
    for (char *line = strtok_r((char *)data, "\n", &save); line && *n < 256; line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        out[(*n)++] = xstrdup(json_string_value(json_object_get(j, "text")));
        json_decref(j);
    }
    free(data);
    return out;
}

static void free_texts(char **t, int n) {
    for (int i = 0; i < n; i++) free(t[i]);
    free(t);
}

// ---- the pruned tokenizer and rows ----------------------------------------------------

static void test_rows_follow_the_tokens(void **state) {
    Env *v = *state;
    ModelBundle a, b;
    load(v->base, &a);
    load(v->pruned, &b);
    Tokenizer *ta = tokenizer_of(&a), *tb = tokenizer_of(&b);
    assert_int_equal(tokenizer_vocab_size(tb), KEEP);
    assert_int_equal(b.cfg.vocab_size, ROUNDED);
    const size_t H = (size_t)a.cfg.d_model;
    ParamViews pa, pb;
    param_views(&pa, &a.tt, a.params);
    param_views(&pb, &b.tt, b.params);
    uint8_t *seen = xcalloc((size_t)tokenizer_vocab_size(ta), 1, "seen");
    for (int k = 0; k < KEEP; k++) {
        int old = old_id_by_text(ta, tb, k);
        assert_true(old >= 0);
        assert_false(seen[old]);   // one new id per old token
        seen[old] = 1;
        assert_memory_equal(pb.embed + k * H, pa.embed + (size_t)old * H, H * sizeof(float));
        if (k > 0) assert_true(old > old_id_by_text(ta, tb, k - 1));   // the old order kept
    }
    for (int k = KEEP; k < ROUNDED; k++)
        for (size_t j = 0; j < H; j++) assert_true(pb.embed[k * H + j] == 0.0f);
    // The config's ids name the same tokens.
    assert_int_equal(old_id_by_text(ta, tb, b.cfg.eos_id), 1502);
    assert_int_equal(old_id_by_text(ta, tb, b.cfg.pad_id), 1500);
    // Every added token and every byte token stays.
    for (int id = 1500; id < 1505; id++) assert_true(seen[id]);
    for (int byte = 0; byte < 256; byte++) {
        assert_true(tokenizer_byte_id(tb, byte) >= 0);
        assert_true(seen[tokenizer_byte_id(ta, byte)]);
    }
    // Closed under the old merges: a kept token keeps the inputs of the merges that make it.
    for (int i = 0; i < tokenizer_n_merges(ta); i++) {
        int l, r, m;
        tokenizer_merge(ta, i, &l, &r, &m);
        if (seen[m]) assert_true(seen[l] && seen[r]);
    }
    free(seen);
    tokenizer_free(ta);
    tokenizer_free(tb);
    bundle_free(&a);
    bundle_free(&b);
}

// The most used tokens of the corpus stay; a text whose old tokens all stay
// encodes to the same tokens; every text decodes to what the old tokenizer gave.
static void test_same_encodings(void **state) {
    Env *v = *state;
    ModelBundle a, b;
    load(v->base, &a);
    load(v->pruned, &b);
    Tokenizer *ta = tokenizer_of(&a), *tb = tokenizer_of(&b);
    int n_texts, n_old = tokenizer_vocab_size(ta), all_kept = 0;
    char **texts = corpus_texts(&n_texts);
    assert_int_equal(n_texts, 108);
    int *new_of_old = xmalloc((size_t)n_old * sizeof *new_of_old, "map");
    for (int id = 0; id < n_old; id++) new_of_old[id] = -1;
    for (int k = 0; k < KEEP; k++) new_of_old[old_id_by_text(ta, tb, k)] = k;
    uint64_t *uses = xcalloc((size_t)n_old, sizeof *uses, "uses");
    for (int t = 0; t < n_texts; t++) {
        size_t na, nb;
        int *ia = encode(ta, texts[t], &na), *ib = encode(tb, texts[t], &nb);
        int kept = 1;
        for (size_t i = 0; i < na; i++) uses[ia[i]]++, kept &= new_of_old[ia[i]] >= 0;
        if (kept) {
            all_kept++;
            assert_int_equal(na, nb);
            for (size_t i = 0; i < na; i++) assert_int_equal(ib[i], new_of_old[ia[i]]);
        }
        char *da = tokenizer_decode(ta, ia, na, 0), *db = tokenizer_decode(tb, ib, nb, 0);
        assert_string_equal(da, db);
        free(da), free(db), free(ia), free(ib);
    }
    // With 800 of 1505 kept, tokens used 3 times or more on the corpus all stay.
    for (int id = 0; id < n_old; id++)
        if (uses[id] >= 3) assert_true(new_of_old[id] >= 0);
    assert_true(all_kept > n_texts / 2);
    // Text the corpus never had still decodes as before.
    const char *unseen[] = {"Привет, мир! 12345 ☃☃ ﷺ ½", "\xf0\x9f\x98\x80 emoji \xf0\x9f\x8e\x89 and tabs\t\t\r\n",
                            "def f(x):\n    return x ** 2  # done"};
    for (int t = 0; t < 3; t++) {
        size_t na, nb;
        int *ia = encode(ta, unseen[t], &na), *ib = encode(tb, unseen[t], &nb);
        char *da = tokenizer_decode(ta, ia, na, 0), *db = tokenizer_decode(tb, ib, nb, 0);
        assert_string_equal(da, db);
        assert_string_equal(db, unseen[t]);
        free(da), free(db), free(ia), free(ib);
    }
    free(uses);
    free(new_of_old);
    free_texts(texts, n_texts);
    tokenizer_free(ta);
    tokenizer_free(tb);
    bundle_free(&a);
    bundle_free(&b);
}

static float *forward_logits(const Env *v, const char *ckpt, const char *ids_file, const char *flags, size_t *n) {
    char dump[128];
    snprintf(dump, sizeof dump, "%s/logits.safetensors", v->dir);
    assert_int_equal(sh("%s forward --ckpt %s --tokens-file %s %s --dump %s >/dev/null 2>&1", pocket(), ckpt, ids_file,
                        flags, dump), 0);
    StFile f;
    PtError e;
    if (st_open(&f, dump, &e)) fail_msg("%s", e.msg);
    const StTensor *t = st_find(&f, "logits");
    float *out = xmalloc(t->numel * sizeof(float), "logits");
    assert_int_equal(st_read_f32(&f, t, out, &e), 0);
    *n = t->numel;
    st_close(&f);
    return out;
}

// On a text whose tokens all stay, the pruned model's logits are the
// original's at the kept rows, in float and as the int4 model.
static void test_logits_restricted(void **state) {
    Env *v = *state;
    ModelBundle a, b;
    load(v->base, &a);
    load(v->pruned, &b);
    Tokenizer *ta = tokenizer_of(&a), *tb = tokenizer_of(&b);
    const char *text = "The morning train to the coast leaves at a quarter past seven.";
    size_t na, nb;
    int *ia = encode(ta, text, &na), *ib = encode(tb, text, &nb);
    assert_int_equal(na, nb);
    char fa[128], fb[128];
    snprintf(fa, sizeof fa, "%s/ids_old.txt", v->dir);
    snprintf(fb, sizeof fb, "%s/ids_new.txt", v->dir);
    FILE *f = fopen(fa, "w"), *g = fopen(fb, "w");
    for (size_t i = 0; i < na; i++) fprintf(f, "%d ", ia[i]), fprintf(g, "%d ", ib[i]);
    fclose(f), fclose(g);
    const char *modes[] = {"", "--int4"};
    for (int m = 0; m < 2; m++) {
        size_t n_old, n_new;
        float *lo = forward_logits(v, v->base, fa, modes[m], &n_old), *ln = forward_logits(v, v->pruned, fb, modes[m], &n_new);
        assert_int_equal(n_old, na * 1536);
        assert_int_equal(n_new, na * ROUNDED);
        double worst = 0;
        for (size_t p = 0; p < na; p++)
            for (int k = 0; k < KEEP; k++) {
                double d = fabs((double)ln[p * ROUNDED + k] - lo[p * 1536 + old_id_by_text(ta, tb, k)]);
                worst = d > worst ? d : worst;
            }
        assert_true(worst <= 1e-5);
        free(lo), free(ln);
    }
    free(ia), free(ib);
    tokenizer_free(ta);
    tokenizer_free(tb);
    bundle_free(&a);
    bundle_free(&b);
}

// ---- the int4 state, untied models, the decision head -------------------------------

static void read_qat(const char *path, const ModelBundle *b, QatState *q) {
    QuantSpec spec;
    int qe;
    PtError e;
    assert_int_equal(checkpoint_read_qat_spec(path, &spec, &qe, &e), 0);
    assert_int_equal(qat_init(q, &b->tt, &spec, qe, 0, path, &e), 0);
    assert_int_equal(checkpoint_load_qat(path, q, &b->tt, &e), 0);
}

// Untied, with a decision head past the tokens and an int4 state covering the
// embedding: the embedding, lm_head and /qat rows follow their tokens, the
// head's row comes right after them.
static void test_untied_qat_and_head(void **state) {
    Env *v = *state;
    assert_int_equal(init_ckpt(v->dir, "untied", ", \"tie_word_embeddings\": false, \"pocket_choice_token_id\": 1510"), 0);
    assert_int_equal(sh("%s quantize --ckpt %s/untied.h5 --out %s/untied-q.h5 >/dev/null", pocket(), v->dir, v->dir), 0);
    char args[512], in[128], out[128];
    snprintf(in, sizeof in, "%s/untied-q.h5", v->dir);
    snprintf(out, sizeof out, "%s/untied-p.h5", v->dir);
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep 768 --out %s", in, out);
    assert_int_equal(prune(v, args, NULL), 0);
    ModelBundle a, b;
    load(in, &a);
    load(out, &b);
    Tokenizer *ta = tokenizer_of(&a), *tb = tokenizer_of(&b);
    assert_int_equal(b.cfg.choice_id, 768);
    assert_int_equal(b.cfg.vocab_size, 832);   // 768 tokens + the head, rounded up to 64
    QatState qa, qb;
    read_qat(in, &a, &qa);
    read_qat(out, &b, &qb);
    assert_int_equal(qb.n, qa.n);
    assert_true(qb.quant_embedding);
    const size_t H = 64;
    ParamViews pa, pb;
    param_views(&pa, &a.tt, a.params);
    param_views(&pb, &b.tt, b.params);
    for (int k = 0; k < 832; k++) {
        int old = k < 768 ? old_id_by_text(ta, tb, k) : k == 768 ? 1510 : -1;
        for (int w = 0; w < 2; w++) {
            const float *ra = w ? pa.lm_head : pa.embed, *rb = (w ? pb.lm_head : pb.embed) + k * H;
            for (size_t j = 0; j < H; j++) assert_true(rb[j] == (old >= 0 ? ra[(size_t)old * H + j] : 0.0f));
        }
        for (int i = 0; i < qb.n; i++) {   // every vocabulary tensor's (row, group) entries
            TensorKind kind = b.tt.t[qb.t[i].tensor].kind;
            if (kind != T_EMBED && kind != T_LMHEAD) continue;
            size_t ng = (size_t)qb.t[i].cols / (size_t)qb.spec.group;
            const float *sb = qb.scale + qb.t[i].offset + k * ng, *sa = qa.scale + qa.t[i].offset + (size_t)old * ng;
            for (size_t g = 0; g < ng; g++) assert_true(sb[g] == (old >= 0 ? sa[g] : 0.0f));
        }
    }
    // The other matrices' int4 entries are unchanged.
    for (int i = 0; i < qb.n; i++) {
        TensorKind kind = b.tt.t[qb.t[i].tensor].kind;
        if (kind != T_EMBED && kind != T_LMHEAD)
            assert_memory_equal(qb.scale + qb.t[i].offset, qa.scale + qa.t[i].offset, qb.t[i].n_groups * sizeof(float));
    }
    qat_free(&qa), qat_free(&qb);
    tokenizer_free(ta), tokenizer_free(tb);
    bundle_free(&a), bundle_free(&b);
}

// A decision head on a token's row keeps that token, under its new id.
static void test_head_on_a_token(void **state) {
    Env *v = *state;
    assert_int_equal(init_ckpt(v->dir, "head", ", \"pocket_choice_token_id\": 1503"), 0);
    char args[512], out[128];
    snprintf(out, sizeof out, "%s/head-p.h5", v->dir);
    snprintf(args, sizeof args, "--ckpt %s/head.h5 --corpus " CORPUS " --keep 700 --round 1 --out %s", v->dir, out);
    assert_int_equal(prune(v, args, NULL), 0);
    ModelBundle a, b;
    char in[128];
    snprintf(in, sizeof in, "%s/head.h5", v->dir);
    load(in, &a);
    load(out, &b);
    Tokenizer *ta = tokenizer_of(&a), *tb = tokenizer_of(&b);
    assert_int_equal(b.cfg.vocab_size, 700);   // --round 1: exactly the tokens
    assert_int_equal(old_id_by_text(ta, tb, b.cfg.choice_id), 1503);
    tokenizer_free(ta), tokenizer_free(tb);
    bundle_free(&a), bundle_free(&b);
}

// The output does not depend on the number of threads (the files are equal byte for byte).
static void test_threads(void **state) {
    Env *v = *state;
    char args[512];
    for (int t = 1; t <= 2; t++) {
        snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " " CORPUS " --keep 900 --threads %d --out %s/t%d.h5",
                 v->base, t, v->dir, t);
        assert_int_equal(prune(v, args, NULL), 0);
    }
    assert_int_equal(sh("cmp -s %s/t1.h5 %s/t2.h5", v->dir, v->dir), 0);
}

// ---- the report -------------------------------------------------------------------

static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xC0) != 0x80;
    return n;
}

// --report alone: its overall tokens per character are the held-out texts'
// tokens over their characters under each tokenizer.
static void test_report(void **state) {
    Env *v = *state;
    char args[512], *err;
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep %d --report --heldout %s", v->base, KEEP,
             "tests/fixtures/data/corpus/02_mixed.jsonl");
    assert_int_equal(prune(v, args, &err), 0);
    free(err);
    char path[128];
    snprintf(path, sizeof path, "%s/out.txt", v->dir);
    uint8_t *out;
    size_t len;
    PtError e;
    assert_int_equal(read_whole_file(path, &out, &len, &e), 0);
    assert_non_null(strstr((char *)out, "| Han |"));
    assert_non_null(strstr((char *)out, "| Latin |"));
    const char *all = strstr((char *)out, "| all |");
    assert_non_null(all);
    double chars, before, after;
    assert_int_equal(sscanf(all, "| all | %lf | %lf | %lf |", &chars, &before, &after), 3);
    // The same figure from the tokenizers: the held-out file's texts.
    ModelBundle a, b;
    load(v->base, &a);
    load(v->pruned, &b);
    Tokenizer *ta = tokenizer_of(&a), *tb = tokenizer_of(&b);
    uint8_t *data;
    assert_int_equal(read_whole_file("tests/fixtures/data/corpus/02_mixed.jsonl", &data, &len, &e), 0);
    double n_chars = 0, n_a = 0, n_b = 0;
    char *save = NULL;
    for (char *line = strtok_r((char *)data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        const char *text = json_string_value(json_object_get(j, "text"));
        size_t na, nb;
        free(encode(ta, text, &na));
        free(encode(tb, text, &nb));
        n_chars += utf8_chars(text), n_a += (double)na, n_b += (double)nb;
        json_decref(j);
    }
    assert_true(chars == n_chars);
    assert_true(fabs(before - n_a / n_chars) < 6e-5 && fabs(after - n_b / n_chars) < 6e-5);
    free(data), free(out);
    tokenizer_free(ta), tokenizer_free(tb);
    bundle_free(&a), bundle_free(&b);
}

// ---- it serves like any other checkpoint -----------------------------------------------

static void test_pruned_model_runs(void **state) {
    Env *v = *state;
    const char *d = v->dir, *p = v->pruned, *P = pocket();
    assert_int_equal(sh("%s tokenize --tokenizer %s " CORPUS " --out %s/cpt.h5 >/dev/null", P, p, d), 0);
    char recipe[200];
    snprintf(recipe, sizeof recipe, "%s/cpt.ini", d);
    FILE *f = fopen(recipe, "w");
    fprintf(f, "[model]\ninit = %s\n[data]\ntrain = %s/cpt.h5\nval = %s/cpt.h5\n[train]\nmode = cpt\nmicro_batch = 2\n"
               "seq_len = 32\nsteps = 2\neval_interval = 0\nsave_interval = 2\nthreads = 1\nrun_dir = %s/run\n"
               "[optim]\nlr = 1e-3\nwarmup = 1\n", p, d, d, d);
    fclose(f);
    assert_int_equal(sh("%s train %s >/dev/null 2>&1", P, recipe), 0);
    assert_int_equal(sh("%s eval --ckpt %s/run/ckpt-00000002.h5 --data %s/cpt.h5 >/dev/null 2>&1", P, d, d), 0);
    assert_int_equal(sh("%s generate --ckpt %s --chat --prompt 'hello 你好' --max-new 4 >/dev/null 2>&1", P, p), 0);
    assert_int_equal(sh("%s tokenize --chat --tokenizer %s tests/fixtures/data/chat.jsonl --out %s/sft.h5 >/dev/null",
                        P, p, d), 0);
    assert_int_equal(sh("%s export --ckpt %s --format gguf --quant f32 --out %s/p.gguf >/dev/null", P, p, d), 0);
    assert_int_equal(sh("%s export --ckpt %s --format mnn --out %s/p-mnn >/dev/null", P, p, d), 0);
    assert_int_equal(sh("%s export --ckpt %s --format hf --out %s/p-hf >/dev/null", P, p, d), 0);
}

// ---- bad input: one line, a non-zero exit, nothing written --------------------------------

static void expect_refusal(const Env *v, const char *args, const char *needle) {
    char *err, out[128];
    snprintf(out, sizeof out, "%s/refused.h5", v->dir);
    int rc = prune(v, args, &err);
    if (rc == 0 || !strstr(err, needle) || strchr(err, '\n') != err + strlen(err) - 1)
        fail_msg("prune-vocab %s\nexit %d, stderr:\n%s(wanted one line with \"%s\")", args, rc, err, needle);
    assert_false(path_exists(out));
    assert_int_equal(sh("ls %s | grep -q tmp", v->dir), 1);   // no temporary file left either
    free(err);
}

static void test_bad_input(void **state) {
    Env *v = *state;
    char args[700], path[160];
    const char *out = "--out %s/refused.h5";
    char o[160];
    snprintf(o, sizeof o, out, v->dir);
    // N below the byte tokens and the specials.
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep 260 %s", v->base, o);
    expect_refusal(v, args, "--keep 260 is below the");
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep 1505 %s", v->base, o);
    expect_refusal(v, args, "nothing to prune");
    // A corpus in another encoding (Latin-1 bytes are not UTF-8).
    snprintf(path, sizeof path, "%s/latin1.txt", v->dir);
    FILE *f = fopen(path, "w");
    fputs("caf\xe9 cr\xe8" "me br\xfbl\xe9" "e\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " %s --keep %d %s", v->base, path, KEEP, o);
    expect_refusal(v, args, "latin1.txt: invalid UTF-8 at byte offset 3");
    // A checkpoint without a tokenizer.
    assert_int_equal(sh("%s init --model tiny --out %s/notok.h5 >/dev/null", pocket(), v->dir), 0);
    snprintf(args, sizeof args, "--ckpt %s/notok.h5 --corpus " CORPUS " --keep %d %s", v->dir, KEEP, o);
    expect_refusal(v, args, "notok.h5: holds no tokenizer");
    // A keep-file naming a token that does not exist (line 2).
    snprintf(path, sizeof path, "%s/keep.txt", v->dir);
    f = fopen(path, "w");
    fputs("\xc4\xa0the\nnot-a-token-at-all\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep %d --keep-file %s %s", v->base, KEEP, path, o);
    expect_refusal(v, args, "keep.txt:2: \"not-a-token-at-all\" is not a token");
    // Usage errors.
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep 0 %s", v->base, o);
    expect_refusal(v, args, "--keep '0' is not an integer");
    snprintf(args, sizeof args, "--ckpt %s --keep %d %s", v->base, KEEP, o);
    expect_refusal(v, args, "--corpus needs at least one INPUT");
}

// A keep-file's tokens stay even when the corpus never uses them.
static void test_keep_file(void **state) {
    Env *v = *state;
    char path[160], args[600], out[160];
    snprintf(path, sizeof path, "%s/keep-ok.txt", v->dir);
    snprintf(out, sizeof out, "%s/kept.h5", v->dir);
    ModelBundle a;
    load(v->base, &a);
    Tokenizer *ta = tokenizer_of(&a);
    // The vocabulary's last token: the latest merge, which a small --keep drops unless asked.
    size_t len;
    const char *last = tokenizer_vocab_string(ta, 1499, &len);
    FILE *f = fopen(path, "w");
    fprintf(f, "%.*s\r\n\n", (int)len, last);
    fclose(f);
    snprintf(args, sizeof args, "--ckpt %s --corpus " CORPUS " --keep 400 --keep-file %s --out %s", v->base, path, out);
    assert_int_equal(prune(v, args, NULL), 0);
    ModelBundle b;
    load(out, &b);
    Tokenizer *tb = tokenizer_of(&b);
    char *text = strndup(last, len);
    assert_true(tokenizer_token_id(tb, text) >= 0);
    free(text);
    tokenizer_free(ta), tokenizer_free(tb);
    bundle_free(&a), bundle_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_follow_the_tokens), cmocka_unit_test(test_same_encodings),
        cmocka_unit_test(test_logits_restricted),      cmocka_unit_test(test_untied_qat_and_head),
        cmocka_unit_test(test_head_on_a_token),        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_report),                 cmocka_unit_test(test_pruned_model_runs),
        cmocka_unit_test(test_bad_input),              cmocka_unit_test(test_keep_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
