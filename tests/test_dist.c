// test_dist.c: data-parallel training through mpirun (a pocket built with
// make MPI=1; `make test-mpi` runs this against it, `make test` without MPI
// skips it with one line).
// - 2 ranks with micro_batch b equal 1 rank with micro_batch b and
//   grad_accum 2 after 20 updates, for CPT, packed SFT, QAT and choice groups
//   (the Dec head), GRPO (each rank samples the completions of its own
//   micro-batch, as one rank does for both), on-policy distillation (the
//   same, with the teacher's forward on each) and a weighted mixture of two CPT
//   sets (the mixture's order does not depend on the number of ranks), bit
//   for bit:
//   one rank computes each micro-batch's gradient on its own and adds the
//   two, two ranks add the same two gradients (the other way round, which
//   for two floats is the same sum), the norm adds the same chunk partials in
//   the same order, and QAT takes its scale gradients from the summed one;
//   and for a LoRA adapter (with dropout: each rank draws the masks of its
//   micro-batch on one rank), whose buffer is then what the ranks reduce;
// - resuming across world sizes: 10 updates on 2 ranks then 10 on 1, and 1
//   then 2, equal 20 uninterrupted updates, bit for bit;
// - SIGKILL of one rank mid-run ends every rank within 60 s with a message
//   naming it, and the same command resumes from the last checkpoint;
// - the collectives themselves on 3 ranks with uneven shards: sums in the
//   order comm.h states, the same bits on every rank, and a rank that stops
//   answering named by the others within their timeout.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../dist/comm.h"
#include "../formats/checkpoint.h"
#include "../formats/lora_checkpoint.h"
#include "test_cli_util.h"

static char g_dir[256];
#define MPIRUN "mpirun --allow-run-as-root --oversubscribe -np"


// 60 chats of different lengths, so that SFT rows pack different numbers of examples.
static int write_chats(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/chats.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const char *words[] = {"the", "model", "reads", "a", "short", "question", "and", "writes", "an", "answer"};
    for (int i = 0; i < 60; i++) {
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"");
        for (int w = 0; w < 1 + i % 7; w++) fprintf(f, "%s%s", w ? " " : "", words[(i + w) % 10]);
        fprintf(f, "\"}, {\"role\": \"assistant\", \"content\": \"");
        for (int w = 0; w < 1 + (i * 5) % 11; w++) fprintf(f, "%s%s", w ? " " : "", words[(i * 3 + w) % 10]);
        fprintf(f, "\"}]}\n");
    }
    return fclose(f) ? -1 : 0;
}

// 24 choice groups of 2 to 4 candidates (the Dec head, [train] mode = choice).
static int write_choices(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/choices.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const char *words[] = {"red", "blue", "green", "black"};
    for (int i = 0; i < 24; i++) {
        int k = 2 + i % 3;
        fprintf(f, "{\"prompt\": \"%s %d\", \"candidates\": [", words[i % k], i);
        for (int c = 0; c < k; c++) fprintf(f, "%s\"%s\"", c ? ", " : "", words[c]);
        fprintf(f, "], \"label\": %d}\n", i % k);
    }
    return fclose(f) ? -1 : 0;
}

// A tiny Qwen3 of the fixture tokenizer's vocabulary, CPT, SFT and choice datasets,
// and one recipe per mode; every run sets its run_dir, world and accumulation.
static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pocket_dist_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char path[300];
    if (make_tiny_checkpoint(g_dir) ||
        sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/tok/corpus.txt "
           "tests/fixtures/data/corpus --out %s/cpt.h5 >/dev/null", pocket(), g_dir) ||
        write_chats() ||
        sh("%s tokenize --chat --tokenizer tests/fixtures/tok/tokenizer.json %s/chats.jsonl --out %s/sft.h5 "
           ">/dev/null", pocket(), g_dir, g_dir) ||
        write_choices() ||
        sh("%s tokenize --choice --tokenizer tests/fixtures/tok/tokenizer.json %s/choices.jsonl --out %s/choice.h5 "
           ">/dev/null", pocket(), g_dir, g_dir) ||
        sh("%s tokenize --tokenizer tests/fixtures/tok/tokenizer.json tests/fixtures/data/corpus --out %s/small.h5 "
           ">/dev/null", pocket(), g_dir))
        return -1;
    const char *modes[9][2] = {{"cpt", "mode = cpt\n"}, {"sft", "mode = sft\n"}, {"qat", "mode = cpt\n"},
                               {"choice", "mode = choice\n"}, {"lora", "mode = cpt\n"}, {"mix", "mode = cpt\n"},
                               {"grpo", "mode = grpo\n"}, {"onpolicy", "mode = onpolicy_distill\n"},
                               {"grpo-cycles", "mode = grpo\n"}};
    const char *data[9] = {"cpt", "sft", "cpt", "choice", "cpt", "cpt", "sft", "sft", "sft"};
    for (int i = 0; i < 9; i++) {
        snprintf(path, sizeof path, "%s/%s.ini", g_dir, modes[i][0]);
        FILE *f = fopen(path, "w");
        fprintf(f, "[model]\ninit = %s/init.h5\n[data]\ntrain = %s/%s.h5", g_dir, g_dir, data[i]);
        if (i == 5) fprintf(f, ":0.7, %s/small.h5:0.3", g_dir);   // the mixture
        fprintf(f, "\n[train]\n%smicro_batch = 2\nseq_len = %d\nsteps = 20\nsave_interval = 10\nthreads = 1\n"
                   "comm_timeout = 60\n[optim]\nlr = 0.003\nwarmup = 2\n",
                modes[i][1], i == 3 ? 128 : i >= 6 ? 48 : 32);   // a choice group fills most of a row
        if (i == 2)   // learned scales from update 5, frozen codes from 12
            fprintf(f, "[qat]\nenabled = 1\ngroup = 4\nstart_step = 5\nlearn_scales = 1\nscale_lr = 1e-3\n"
                       "freeze_codes_step = 12\n");
        if (i == 4)   // dropout on: each rank's masks must be those of its micro-batch on one rank
            fprintf(f, "[lora]\nenabled = 1\nrank = 4\nalpha = 8\ndropout = 0.1\n");
        if (i == 6 || i == 8)   // a micro-batch is one prompt's two completions, each rank samples its own
            fprintf(f, "[rl]\ngroup = 2\nmax_new = 4\nrewards = regex=^[a-z]\n%s",
                    i == 8 ? "updates_per_rollout = 3\n" : "");   // each rank keeps its own rollouts three steps
        if (i == 7)   // two prompts' completions a micro-batch, the start model the teacher
            fprintf(f, "[rl]\ngroup = 1\nmax_new = 4\n");
        fclose(f);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", g_dir);
}

// `world` ranks (1: no mpirun) train recipe MODE.ini into run_dir RUN with
// grad_accum ACCUM; extra is more --set arguments.
static int train(const char *mode, const char *run, int world, int accum, const char *extra) {
    char launch[64] = "";
    if (world > 1) snprintf(launch, sizeof launch, MPIRUN " %d ", world);
    return sh("OMPI_MCA_btl_vader_single_copy_mechanism=none %s%s train %s/%s.ini --set train.run_dir=%s/%s "
              "--set train.grad_accum=%d %s >%s/%s.log 2>&1",
              launch, pocket(), g_dir, mode, g_dir, run, accum, extra, g_dir, run);
}

// The largest relative L2 difference between the same tensor of two
// checkpoints: the models', or with `lora` the adapters' (for the base's
// config, init.h5's).
static double tensor_rel_diff(const char *run_a, const char *run_b, int step, int lora) {
    char a[400], b[400], init[400];
    snprintf(a, sizeof a, "%s/%s/ckpt-%08d.h5", g_dir, run_a, step);
    snprintf(b, sizeof b, "%s/%s/ckpt-%08d.h5", g_dir, run_b, step);
    snprintf(init, sizeof init, "%s/init.h5", g_dir);
    ModelBundle x, y, base;
    LoraAdapter xa, ya;
    PtError e;
    const TensorTable *tt;
    const float *px, *py;
    if (lora) {
        if (checkpoint_load(init, &base, &e) || lora_checkpoint_load(a, &base.cfg, NULL, NULL, &xa, &e) ||
            lora_checkpoint_load(b, &base.cfg, NULL, NULL, &ya, &e))
            fail_msg("%s", e.msg);
        tt = &xa.tt, px = xa.params, py = ya.params;
    } else {
        if (checkpoint_load(a, &x, &e) || checkpoint_load(b, &y, &e)) fail_msg("%s", e.msg);
        tt = &x.tt, px = x.params, py = y.params;
    }
    double worst = 0;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        double d2 = 0, r2 = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double d = (double)px[t->offset + j] - py[t->offset + j];
            d2 += d * d;
            r2 += (double)px[t->offset + j] * px[t->offset + j];
        }
        worst = fmax(worst, sqrt(d2 / fmax(r2, 1e-30)));
    }
    if (lora) {
        lora_adapter_free(&xa);
        lora_adapter_free(&ya);
        bundle_free(&base);
    } else {
        bundle_free(&x);
        bundle_free(&y);
    }
    return worst;
}

static void two_ranks_equal_accumulation(const char *mode) {
    char one[32], two[32];
    snprintf(one, sizeof one, "%s-1x2", mode);
    snprintf(two, sizeof two, "%s-2x1", mode);
    assert_int_equal(train(mode, one, 1, 2, ""), 0);
    assert_int_equal(train(mode, two, 2, 1, ""), 0);
    double d = tensor_rel_diff(one, two, 20, !strcmp(mode, "lora"));
    printf("  %s: 2 ranks x micro-batch 2 vs 1 rank x 2 accumulated, 20 updates: worst tensor differs by %.1e\n", mode,
           d);
    assert_true(d == 0);
}

static void test_cpt(void **s) { (void)s; two_ranks_equal_accumulation("cpt"); }
static void test_sft(void **s) { (void)s; two_ranks_equal_accumulation("sft"); }
static void test_qat(void **s) { (void)s; two_ranks_equal_accumulation("qat"); }
static void test_choice(void **s) { (void)s; two_ranks_equal_accumulation("choice"); }
static void test_lora(void **s) { (void)s; two_ranks_equal_accumulation("lora"); }
static void test_grpo(void **s) { (void)s; two_ranks_equal_accumulation("grpo"); }
static void test_onpolicy(void **s) { (void)s; two_ranks_equal_accumulation("onpolicy"); }
static void test_grpo_cycles(void **s) { (void)s; two_ranks_equal_accumulation("grpo-cycles"); }

// The mixture: the same weights (above), and the same tokens drawn from each
// set as the two runs report them.
static void test_mixture(void **s) {
    (void)s;
    two_ranks_equal_accumulation("mix");
    char a[4096] = "", b[4096] = "", cmd[600];
    const char *runs[2] = {"mix-1x2", "mix-2x1"};
    char *out[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "grep -o '\"train_sets\":.*' %s/%s/metrics.jsonl", g_dir, runs[i]);
        FILE *p = popen(cmd, "r");
        out[i][fread(out[i], 1, sizeof a - 1, p)] = 0;
        pclose(p);
    }
    printf("  mixture drawn on 1 and 2 ranks: %s", a);
    assert_true(strstr(a, "small.h5") != NULL);
    assert_string_equal(a, b);
}

// 10 updates on one world size, then 10 on the other, against 20 on one rank.
static void test_resume_across_world_sizes(void **s) {
    (void)s;
    char full_ckpt[400];
    snprintf(full_ckpt, sizeof full_ckpt, "%s/cpt-1x2/ckpt-00000020.h5", g_dir);
    if (access(full_ckpt, F_OK)) assert_int_equal(train("cpt", "cpt-1x2", 1, 2, ""), 0);
    assert_int_equal(train("cpt", "two-then-one", 2, 1, "--set train.stop_after=10"), 0);
    assert_int_equal(train("cpt", "two-then-one", 1, 2, ""), 0);
    assert_int_equal(train("cpt", "one-then-two", 1, 2, "--set train.stop_after=10"), 0);
    assert_int_equal(train("cpt", "one-then-two", 2, 1, ""), 0);
    double a = tensor_rel_diff("cpt-1x2", "two-then-one", 20, 0), b = tensor_rel_diff("cpt-1x2", "one-then-two", 20, 0);
    printf("  resumed across world sizes: 2 then 1 rank %.1e, 1 then 2 ranks %.1e (worst tensor)\n", a, b);
    assert_true(a == 0 && b == 0);
}

// One rank killed while the run trains: every rank gone within 60 s, a line
// naming the rank, and the same command resumes from the last checkpoint.
static void test_sigkill_one_rank(void **s) {
    (void)s;
    char run[400], log[420], ckpt[440];
    snprintf(run, sizeof run, "%s/killed", g_dir);
    snprintf(log, sizeof log, "%s/killed.log", g_dir);
    pid_t job = fork();
    if (job == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "exec " MPIRUN " 2 %s train %s/cpt.ini --set train.run_dir=%s --set train.steps=400 "
                 "--set train.save_interval=5 >%s 2>&1", pocket(), g_dir, run, log);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-00000010.h5", run);
    for (int i = 0; i < 1200 && access(ckpt, F_OK); i++) usleep(50000);
    assert_int_equal(access(ckpt, F_OK), 0);
    // A rank's process: the newest pocket process of this run (mpirun started
    // first; "[.]" keeps the shell running pgrep from matching itself).
    char cmd[900];
    snprintf(cmd, sizeof cmd, "pgrep -f '^[^ ]*pocket train %s/cpt[.]ini --set train[.]run_dir=%s ' | sort -n | tail -1",
             g_dir, run);
    FILE *p = popen(cmd, "r");
    int victim = 0;
    assert_int_equal(fscanf(p, "%d", &victim), 1);
    pclose(p);
    double t0 = now_seconds();
    kill(victim, SIGKILL);
    int st;
    while (waitpid(job, &st, WNOHANG) == 0 && now_seconds() - t0 < 90) usleep(100000);
    double took = now_seconds() - t0;
    snprintf(cmd, sizeof cmd, "pgrep -f 'train[.]run_dir=%s ' >/dev/null", run);
    int left = sh("%s", cmd) == 0;
    printf("  rank killed: mpirun and every rank gone after %.1f s%s\n", took, left ? " (some still running!)" : "");
    assert_true(took < 60 && !left);
    assert_int_equal(sh("grep -q 'process rank [01] .*exited on signal 9' %s", log), 0);   // mpirun names it
    long before = -1;
    assert_int_equal(train("cpt", "killed", 2, 1, "--set train.steps=30 --set train.save_interval=5"), 0);
    snprintf(cmd, sizeof cmd, "grep -o 'resuming from [^ ]*ckpt-0*[0-9]*' %s/killed.log | grep -o '[0-9]*$'", g_dir);
    p = popen(cmd, "r");
    if (fscanf(p, "%ld", &before) != 1) before = -1;
    pclose(p);
    printf("  the same command resumed from step %ld and finished\n", before);
    assert_true(before >= 10);
}

// ---- the collectives, run as 3 MPI ranks of this program (TEST_DIST_PROBE).

// Rank r's value at index i: distinct per rank, with a wide range of exponents
// so that the order of a float sum shows.
static float probe_value(int r, size_t i) { return (float)((i % 7 + 1) * pow(10.0, (double)((i + 3 * r) % 9) - 4)); }

static int probe(void) {
    Comm c;
    PtError e;
    if (comm_init(&c, NULL, NULL, &e)) return 2;
    int bad = 0;
    const size_t n = 1000003;   // not a multiple of 16: uneven shards
    size_t lo[8], hi[8];
    comm_shards(&c, n, 16, lo, hi);
    float *buf = xmalloc(n * sizeof(float), "probe");
    for (size_t i = 0; i < n; i++) buf[i] = probe_value(c.rank, i);
    comm_reduce_scatter(&c, buf, lo, hi, "probe reduce-scatter");
    // Shard s is begun by rank s+1 and finished by s: ((g[s+1] + g[s+2]) + ...) + g[s].
    for (size_t i = lo[c.rank]; i < hi[c.rank]; i++) {
        float want = probe_value((c.rank + 1) % c.world, i);
        for (int k = 2; k <= c.world; k++) want = probe_value((c.rank + k) % c.world, i) + want;
        if (memcmp(&want, &buf[i], sizeof want)) bad++;
    }
    comm_allgather(&c, buf, sizeof(float), lo, hi, "probe allgather");
    double digest = 0;   // every rank's bits, compared through the rank-order sum
    for (size_t i = 0; i < n; i++) digest += buf[i] * (double)(i % 13);
    double v[2] = {digest, c.rank};
    comm_sum_doubles(&c, v, 2, "probe sum");
    if (v[0] != digest * c.world || v[1] != c.world * (c.world - 1) / 2.0) bad++;
    float *part = xmalloc(100 * sizeof(float), "gathered");
    comm_gather_range(&c, buf + lo[c.rank], lo, hi, hi[0] - 50, 100, part, "probe gather");
    if (c.rank == 0 && memcmp(part, buf + hi[0] - 50, 100 * sizeof(float))) bad++;
    if (getenv("TEST_DIST_HANG") && c.rank == 2) sleep(30);   // stops answering
    c.timeout_s = 3;
    comm_sum_doubles(&c, v, 1, "probe after the hang");
    free(buf);
    free(part);
    if (bad) fprintf(stderr, "rank %d: %d probe checks failed\n", c.rank, bad);
    comm_finalize(&c);
    return bad ? 1 : 0;
}

static void test_collectives(void **s) {
    (void)s;
    char self[512];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = 0;
    assert_int_equal(sh("TEST_DIST_PROBE=1 " MPIRUN " 3 %s >%s/probe.log 2>&1", self, g_dir), 0);
    double t0 = now_seconds();
    int rc = sh("TEST_DIST_PROBE=1 TEST_DIST_HANG=1 " MPIRUN " 3 %s >%s/hang.log 2>&1", self, g_dir);
    double took = now_seconds() - t0;
    printf("  3 ranks: sums in the stated order, the same bits everywhere; a hung rank named after %.1f s\n", took);
    assert_int_not_equal(rc, 0);
    assert_true(took < 25);
    assert_int_equal(sh("grep -q 'for rank 2, which is lost or hung' %s/hang.log", g_dir), 0);
}

int main(void) {
    if (getenv("TEST_DIST_PROBE")) return probe();
    if (!comm_has_mpi()) {
        printf("test_dist: this build has no MPI; the data-parallel tests run with `make test-mpi`\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_cpt),
        cmocka_unit_test(test_sft),
        cmocka_unit_test(test_qat),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_lora),
        cmocka_unit_test(test_grpo),
        cmocka_unit_test(test_grpo_cycles),
        cmocka_unit_test(test_onpolicy),
        cmocka_unit_test(test_mixture),
        cmocka_unit_test(test_resume_across_world_sizes),
        cmocka_unit_test(test_sigkill_one_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
