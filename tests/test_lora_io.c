// test_lora_io.c: LoRA adapters against PEFT and through the CLI.
// - PEFT + transformers parity: the fixture adapters (tests/ref/make_lora_fixtures.py,
//   folders exactly as PEFT saves them) read by the import code onto the HF
//   fixture models: logits within 1e-4, loss within 1e-5 relative, every
//   dA / dB within 1e-4 relative of PEFT's; with dropout 0.25 too, PEFT
//   running pocket's masks (torch's RNG cannot be matched: PEFT's formula is);
// - pocket train with [lora]: only the adapter changes (the base file is
//   untouched, the checkpoint holds the adapter only), a run stopped and
//   resumed gives the same losses and the same adapter bits, with [lora]
//   dropout on too (its losses differ from dropout 0's); QLoRA on a
//   model's int4 state (a QAT checkpoint) trains and runs with --int4;
// - import -> export -> import round trip keeps every bit;
// - bad input: another base's adapter, the QLoRA adapter without --int4, a
//   resume with another [lora] dropout, a PEFT
//   folder with DoRA / rslora / bias / modules_to_save / layers_to_transform /
//   rank_pattern / an unknown or regex target / a rank that does not match
//   its tensors / a missing tensor: exit != 0, one stderr line, nothing written.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include "../formats/hf_import.h"
#include "../formats/lora_checkpoint.h"
#include "../formats/lora_peft.h"
#include "test_fixture_util.h"
#include "test_cli_util.h"
#include "test_model_util.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_lora_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (make_tiny_checkpoint(g_dir)) return -1;
    if (sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/tok/corpus.txt "
           "tests/fixtures/data/corpus --out %s/cpt.h5 >/dev/null", pocket(), g_dir))
        return -1;
    if (sh("%s import tests/fixtures/hf/qwen3-untied --out %s/untied.h5 >/dev/null && "
           "%s import tests/fixtures/hf/qwen3-tied --out %s/tied.h5 >/dev/null", pocket(), g_dir, pocket(), g_dir))
        return -1;
    return write_cpt_recipe(g_dir, "lora.ini", "0.01", "[lora]\nenabled = 1\nrank = 4\nalpha = 8\ntargets = q,v,o,gate,down\n");
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

// With a dropout adapter, PEFT ran with pocket's masks of micro-batch seed
// 0x5eed (tests/ref/make_lora_fixtures.py: its own numpy splitmix64): the
// training pass must match PEFT's formula with those masks.
static void check_peft_fixture(const char *base, const char *adapter) {
    char dir[256], path[300];
    PtError e;
    ModelBundle b;
    snprintf(dir, sizeof dir, "tests/fixtures/hf/%s", base);
    if (hf_import(dir, &b, &e)) fail_msg("%s", e.msg);
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    FILE *f = fopen(path, "r");
    int N = 0, ids[512];
    while (N < 512 && fscanf(f, "%d", &ids[N]) == 1) N++;
    fclose(f);
    int targets[512];
    for (int i = 0; i < N; i++) targets[i] = i + 1 < N ? ids[i + 1] : -1;
    TestModel tm;
    test_model_from_bundle(&tm, &b, NULL);
    LoraAdapter ad;
    snprintf(dir, sizeof dir, "tests/fixtures/lora/%s", adapter);
    if (lora_peft_import(dir, &tm.b.cfg, &ad, &e)) fail_msg("%s", e.msg);
    model_use_lora(&tm.m, &ad.cfg, &ad.tt, ad.params);
    assert_int_equal(model_plan(&tm.m, 1, N, 1, NULL, &e), 0);
    model_set_dropout_seed(&tm.m, 0x5eed);
    const int V = tm.b.cfg.vocab_size;
    float *logits = malloc((size_t)N * V * sizeof(float));
    ModelInput in = {.B = 1, .T = N, .tokens = ids, .targets = targets};
    int count;
    model_zero_grads(&tm.m);
    double loss = model_forward_backward(&tm.m, &in, 1.0f / (N - 1), logits, &count) / count;
    StFile ref;
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    if (st_open(&ref, path, &e)) fail_msg("%s", e.msg);
    float *rl = expected(&ref, "logits", (size_t)N * V), *rloss = expected(&ref, "loss", 1);
    double err = max_diff(logits, rl, (size_t)N * V), worst = 0;
    assert_true(err <= 1e-4);
    assert_true(fabs(loss - rloss[0]) <= 1e-5 * fabs(rloss[0]));
    for (int i = 0; i < ad.tt.n; i++) {
        const TensorInfo *t = &ad.tt.t[i];
        char name[160];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *g = expected(&ref, name, t->numel);
        double d2 = 0, r2 = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double d = tm.m.grads[t->offset + j] - g[j];
            d2 += d * d;
            r2 += (double)g[j] * g[j];
        }
        double rel = sqrt(d2) / fmax(sqrt(r2), 1e-30);
        if (rel > 1e-4) fail_msg("%s: gradient of %s off PEFT's by %.2e relative", adapter, t->name, rel);
        worst = fmax(worst, rel);
        free(g);
    }
    printf("  %s on %s (dropout %g): logits max|err| %.2e, loss %.7f vs %.7f, %d adapter gradients, worst relative "
           "error %.2e\n", adapter, base, ad.cfg.dropout, err, loss, rloss[0], ad.tt.n, worst);
    st_close(&ref);
    free(rl);
    free(rloss);
    free(logits);
    lora_adapter_free(&ad);
    test_model_free(&tm);
}

static void test_peft_parity(void **s) {
    (void)s;
    check_peft_fixture("qwen3-untied", "qwen3-untied-all");
    check_peft_fixture("qwen3-tied", "qwen3-tied-qvdown");
    check_peft_fixture("qwen3-tied", "qwen3-tied-qvdown-dropout");
}


static void load_adapter(const char *path, LoraAdapter *ad) {
    ModelConfig c;
    PtError e;
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/config.json", g_dir);
    if (config_load(&c, cfg, &e) || lora_checkpoint_load(path, &c, NULL, NULL, ad, &e)) fail_msg("%s", e.msg);
}

// Trains the adapter only (with [lora] dropout `dropout`) in run dirs
// <tag>full and <tag>split, stopped after 3 steps and resumed: the same losses
// (into `losses`) and adapter bits; the full run's checkpoint into `ckpt`.
static void train_and_resume(const char *tag, const char *dropout, char *losses, size_t cap, char *ckpt, size_t ccap) {
    assert_int_equal(sh("%s train %s/lora.ini --set lora.dropout=%s --set train.run_dir=%s/%sfull >/dev/null", pocket(),
                        g_dir, dropout, g_dir, tag), 0);
    assert_int_equal(sh("%s train %s/lora.ini --set lora.dropout=%s --set train.run_dir=%s/%ssplit "
                        "--set train.stop_after=3 >/dev/null", pocket(), g_dir, dropout, g_dir, tag), 0);
    assert_int_equal(sh("%s train %s/lora.ini --set lora.dropout=%s --set train.run_dir=%s/%ssplit >/dev/null", pocket(),
                        g_dir, dropout, g_dir, tag), 0);
    char a[400], b[400], lb[4096], cb[400];
    snprintf(a, sizeof a, "%s/%sfull", g_dir, tag);
    snprintf(b, sizeof b, "%s/%ssplit", g_dir, tag);
    read_losses(a, losses, cap);
    read_losses(b, lb, sizeof lb);
    assert_true(strlen(losses) > 0);
    assert_string_equal(losses, lb);
    snprintf(ckpt, ccap, "%s/%sfull/ckpt-00000006.h5", g_dir, tag);
    snprintf(cb, sizeof cb, "%s/%ssplit/ckpt-00000006.h5", g_dir, tag);
    LoraAdapter x, y;
    load_adapter(ckpt, &x);
    load_adapter(cb, &y);
    assert_int_equal(x.tt.total, y.tt.total);
    assert_memory_equal(x.params, y.params, x.tt.total * sizeof(float));
    lora_adapter_free(&x);
    lora_adapter_free(&y);
}

// Trains the adapter only, and resumes bit for bit, with dropout too (its
// masks from train.seed and the step: a resumed run draws the same ones).
static void test_train_and_resume(void **s) {
    (void)s;
    assert_int_equal(sh("cp %s/init.h5 %s/init.copy", g_dir, g_dir), 0);
    char la[4096], ld[4096], ca[400], cd[400], base[300];
    train_and_resume("", "0", la, sizeof la, ca, sizeof ca);
    train_and_resume("dropout-", "0.2", ld, sizeof ld, cd, sizeof cd);
    assert_string_not_equal(la, ld);   // the masks change the training losses
    LoraAdapter x;
    load_adapter(ca, &x);
    assert_float_equal(x.cfg.dropout, 0.0f, 0);
    // B moved away from PEFT's zeros; the base file is untouched; the checkpoint holds no base tensor.
    double b2 = 0;
    for (int i = 0; i < x.tt.n; i++)
        for (size_t j = 0; (x.tt.t[i].flags & TF_LORA_B) && j < x.tt.t[i].numel; j++)
            b2 += (double)x.params[x.tt.t[i].offset + j] * x.params[x.tt.t[i].offset + j];
    assert_true(b2 > 0);
    snprintf(base, sizeof base, "%s/init.h5", g_dir);
    assert_true(sh("cmp -s %s %s/init.copy", base, g_dir) == 0);
    assert_int_equal(sh("h5ls -r %s | grep -q model.embed_tokens", ca), 1);
    assert_int_equal(sh("h5ls -r %s | grep -q 'optim/m/base_model.model.model.layers.1.mlp.down_proj.lora_B.weight'", ca),
                     0);
    // pocket forward --lora runs it
    assert_int_equal(sh("echo 5 6 7 8 9 > %s/t.txt && %s forward --ckpt %s --lora %s --tokens-file %s/t.txt --dump "
                        "%s/f.safetensors >/dev/null 2>&1", g_dir, pocket(), base, ca, g_dir, g_dir), 0);
    lora_adapter_free(&x);
    load_adapter(cd, &x);   // the checkpoint records the rate
    assert_float_equal(x.cfg.dropout, 0.2f, 0);
    lora_adapter_free(&x);
}

// QLoRA: the base is the int4 model of a QAT checkpoint (group 4); the
// adapter runs with --int4 and is refused without it.
static void test_qlora(void **s) {
    (void)s;
    assert_int_equal(sh("%s train %s/lora.ini --set train.run_dir=%s/qat --set lora.enabled=0 --set qat.enabled=1 "
                        "--set qat.group=4 --set train.steps=2 --set train.eval_interval=0 >/dev/null", pocket(), g_dir,
                        g_dir), 0);
    assert_int_equal(sh("%s train %s/lora.ini --set train.run_dir=%s/qlora --set model.init=%s/qat/ckpt-00000002.h5 "
                        "--set lora.base=int4 --set train.steps=3 >/dev/null", pocket(), g_dir, g_dir, g_dir), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s forward --ckpt %s/qat/ckpt-00000002.h5 --lora %s/qlora/ckpt-00000003.h5 "
             "--tokens-file %s/t.txt --dump %s/q.safetensors", pocket(), g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(sh("echo 5 6 7 8 9 > %s/t.txt && %s --int4 >/dev/null 2>&1", g_dir, cmd), 0);
    assert_int_equal(sh("%s 2>%s/err.txt >/dev/null", cmd, g_dir), 1);
    assert_int_equal(sh("grep -q 'trained on the int4 base with sha256 [0-9a-f]\\{64\\}, but .* has sha256 "
                        "[0-9a-f]\\{64\\}' %s/err.txt", g_dir), 0);
}

// Import -> export -> import keeps every bit; the export loads as PEFT wrote it.
static void test_round_trip(void **s) {
    (void)s;
    assert_int_equal(sh("%s import tests/fixtures/lora/qwen3-untied-all --base %s/untied.h5 --out %s/a1.h5 "
                        ">/dev/null && %s export --ckpt %s/untied.h5 --lora %s/a1.h5 --format peft --out %s/peft >/dev/null && "
                        "%s import %s/peft --base %s/untied.h5 --out %s/a2.h5 >/dev/null", pocket(), g_dir, g_dir,
                        pocket(), g_dir, g_dir, g_dir, pocket(), g_dir, g_dir, g_dir), 0);
    char a1[300], a2[300];
    snprintf(a1, sizeof a1, "%s/a1.h5", g_dir);
    snprintf(a2, sizeof a2, "%s/a2.h5", g_dir);
    ModelBundle b;
    PtError e;
    if (hf_import("tests/fixtures/hf/qwen3-untied", &b, &e)) fail_msg("%s", e.msg);
    LoraAdapter x, y, z;
    if (lora_checkpoint_load(a1, &b.cfg, NULL, NULL, &x, &e) || lora_checkpoint_load(a2, &b.cfg, NULL, NULL, &y, &e) ||
        lora_peft_import("tests/fixtures/lora/qwen3-untied-all", &b.cfg, &z, &e))
        fail_msg("%s", e.msg);
    assert_memory_equal(x.params, y.params, x.tt.total * sizeof(float));
    assert_memory_equal(x.params, z.params, x.tt.total * sizeof(float));
    assert_string_equal(x.base_sha256, y.base_sha256);
    // the hash is the base's weights': the imported checkpoint gives the HF folder's hash
    char hash[65];
    lora_base_hash(&b.tt, b.params, hash);
    assert_string_equal(x.base_sha256, hash);
    lora_adapter_free(&x);
    lora_adapter_free(&y);
    lora_adapter_free(&z);
    // A /lora rank no file of this size can hold, or past 65536, is refused before room is made for it (found
    // probing fuzz_lora_checkpoint: rank 2^30 asked for 1.6 TB).
    const struct { int rank; const char *says; } ranks[] = {{60000, "/lora declares 0.469 GB of data, more than a file of"},
                                                             {1 << 30, "LoRA rank 1073741824 is outside 1..65536"}};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(sh("cp %s %s/rank.h5", a1, g_dir), 0);
        char path[300];
        snprintf(path, sizeof path, "%s/rank.h5", g_dir);
        h5_set_int_attr(path, "lora", "rank", ranks[k].rank);
        assert_int_equal(lora_checkpoint_load(path, &b.cfg, NULL, NULL, &x, &e), -1);
        if (!strstr(e.msg, ranks[k].says)) fail_msg("%s", e.msg);
    }
    bundle_free(&b);
}

static void assert_refused(const char *cmd, const char *out, const char *says) {
    assert_refused_in(g_dir, cmd, out, says);
}

// A copy of the fixture folder with one key of adapter_config.json replaced
// (jq-free: the JSON is rewritten by sed on the line of the key).
static void variant(const char *name, const char *sed) {
    assert_int_equal(sh("rm -rf %s/%s && cp -r tests/fixtures/lora/qwen3-untied-all %s/%s && sed -i '%s' "
                        "%s/%s/adapter_config.json", g_dir, name, g_dir, name, sed, g_dir, name), 0);
}

static void test_bad_input(void **s) {
    (void)s;
    char cmd[1200], out[300];
    snprintf(out, sizeof out, "%s/bad.h5", g_dir);
    // another base's adapter: forward refuses it, naming both hashes
    assert_int_equal(sh("%s import tests/fixtures/lora/qwen3-untied-all --base %s/untied.h5 --out %s/ok.h5 >/dev/null",
                        pocket(), g_dir, g_dir), 0);
    assert_int_equal(sh("%s train %s/lora.ini --set train.run_dir=%s/other --set train.steps=1 --set optim.warmup=0 "
                        ">/dev/null 2>&1", pocket(), g_dir, g_dir), 0);
    snprintf(cmd, sizeof cmd, "%s forward --ckpt %s/untied.h5 --lora %s/other/ckpt-00000001.h5 --tokens-file %s/t.txt "
             "--dump %s/x.safetensors", pocket(), g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(sh("echo 5 6 7 > %s/t.txt", g_dir), 0);
    char dump[300];
    snprintf(dump, sizeof dump, "%s/x.safetensors", g_dir);
    assert_refused(cmd, dump, "an adapter applies only to the base it was trained on");
    // rank / shape mismatch and the PEFT options we do not run
    struct { const char *name, *sed, *says; } cases[] = {
        {"dora", "s/\"use_dora\": false/\"use_dora\": true/", "DoRA (use_dora) is not supported"},
        {"rslora", "s/\"use_rslora\": false/\"use_rslora\": true/", "use_rslora"},
        {"bias", "s/\"bias\": \"none\"/\"bias\": \"all\"/", "bias \"all\" is not supported"},
        {"mts", "s/\"modules_to_save\": null/\"modules_to_save\": [\"lm_head\"]/", "modules_to_save"},
        {"ltt", "s/\"layers_to_transform\": null/\"layers_to_transform\": [0]/", "layers_to_transform"},
        {"rank_pattern", "s/\"rank_pattern\": {}/\"rank_pattern\": {\"q_proj\": 8}/", "rank_pattern"},
        {"unknown", "s/\"q_proj\"/\"fc1\"/", "target module \"fc1\" is not one of"},
        {"regex", "s/\"target_modules\": \\[/\"target_modules\": \".*proj\", \"x\": [/", "is a pattern"},
        {"rank", "s/\"r\": 4/\"r\": 8/", "has shape [4, 100], the base and r = 8 imply [8, 100]"},
        {"huge_rank", "s/\"r\": 4/\"r\": 65536/", "r = 65536 on these targets makes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        variant(cases[i].name, cases[i].sed);
        snprintf(cmd, sizeof cmd, "%s import %s/%s --base %s/untied.h5 --out %s", pocket(), g_dir, cases[i].name, g_dir,
                 out);
        assert_refused(cmd, out, cases[i].says);
    }
    // a tensor missing: the adapter claims one more target than it holds
    assert_int_equal(sh("rm -rf %s/miss && mkdir %s/miss && sed 's/\"q_proj\"/\"q_proj\", \"k_proj\"/' "
                        "tests/fixtures/lora/qwen3-tied-qvdown/adapter_config.json > %s/miss/adapter_config.json && "
                        "cp tests/fixtures/lora/qwen3-tied-qvdown/adapter_model.safetensors %s/miss/",
                        g_dir, g_dir, g_dir, g_dir), 0);
    snprintf(cmd, sizeof cmd, "%s import %s/miss --base %s/tied.h5 --out %s", pocket(), g_dir, g_dir, out);
    assert_refused(cmd, out, "k_proj.lora_A.weight is missing");
    // the adapter of one base given to another of other shapes
    snprintf(cmd, sizeof cmd, "%s import tests/fixtures/lora/qwen3-untied-all --base %s/tied.h5 --out %s", pocket(),
             g_dir, out);
    assert_refused(cmd, out, "has shape");
    // a recipe asking for what training does not run (dropout 1 would drop everything)
    snprintf(cmd, sizeof cmd, "%s train %s/lora.ini --set lora.dropout=1 --set train.run_dir=%s/bad", pocket(), g_dir,
             g_dir);
    assert_refused(cmd, NULL, "[lora] dropout: 1 is out of range [0, 1)");
    snprintf(cmd, sizeof cmd, "%s train %s/lora.ini --set lora.targets=q,lm_head --set train.run_dir=%s/bad", pocket(),
             g_dir, g_dir);
    assert_refused(cmd, NULL, "unknown LoRA target 'lm_head'");
    // resuming with another [lora] dropout than the adapter was trained with
    assert_int_equal(sh("%s train %s/lora.ini --set lora.dropout=0.2 --set train.run_dir=%s/drift "
                        "--set train.stop_after=3 >/dev/null", pocket(), g_dir, g_dir), 0);
    snprintf(cmd, sizeof cmd, "%s train %s/lora.ini --set lora.dropout=0.3 --set train.run_dir=%s/drift", pocket(),
             g_dir, g_dir);
    assert_refused(cmd, NULL, "dropout 0.2, base fp32) is not the one [lora] asks for (rank 4, alpha 8, dropout 0.3");
    // (mode = choice on a base without a decision head: test_choice.c)
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peft_parity),   cmocka_unit_test(test_train_and_resume), cmocka_unit_test(test_qlora),
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
