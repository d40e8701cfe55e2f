// AdamW and gradient clipping (ops of every device, test_backends.h) and LR
// schedules against PyTorch / transformers: the expected numbers come from
// tests/ref/make_optim_fixtures.py (torch.optim.AdamW,
// torch.nn.utils.clip_grad_norm_, transformers' get_*_schedule* schedulers).
// Also: weight decay reaches only TF_DECAY tensors of a real tensor table,
// padding stays zero, non-finite gradients give a non-finite norm, and the
// norm does not depend on the thread count. The buffers live on each device
// (mirrored, read back after each op); the bounds are the same on every device
// (a GPU's AdamW runs the CPU's per-element arithmetic, cuda/kernel_math.h).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#include "../model/ops/ops.h"
#include "../train/schedule.h"
#include "test_backends.h"

#define FIX "tests/fixtures/optim/"


static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s (line %d)", path, je.text, je.line);
    return j;
}

// A tensor table for the fixture's fake model, laid out like tensor_table_build
// does it: 16-float aligned offsets, zero padding between tensors.
static void fixture_table(TensorTable *tt, json_t *tensors) {
    tt->n = (int)json_array_size(tensors);
    tt->t = xcalloc((size_t)tt->n, sizeof(TensorInfo), "fixture table");
    tt->total = 0;
    tt->tied = 0;
    for (int k = 0; k < tt->n; k++) {
        json_t *jt = json_array_get(tensors, (size_t)k);
        TensorInfo *t = &tt->t[k];
        snprintf(t->name, sizeof t->name, "%s", json_string_value(json_object_get(jt, "name")));
        json_t *shape = json_object_get(jt, "shape");
        t->ndim = (int)json_array_size(shape);
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            t->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
            t->numel *= (size_t)t->shape[d];
        }
        t->layer = -1;
        t->flags = json_is_true(json_object_get(jt, "decay")) ? TF_DECAY : TF_NORM;
        t->offset = tt->total;
        tt->total += (t->numel + 15) / 16 * 16;
    }
}

// Fills the tensors' floats of a flat buffer from {name: [values]}.
static void fill_flat(float *buf, const TensorTable *tt, json_t *by_name) {
    for (int k = 0; k < tt->n; k++) {
        const TensorInfo *t = &tt->t[k];
        json_t *vals = json_object_get(by_name, t->name);
        assert_non_null(vals);
        assert_int_equal(json_array_size(vals), t->numel);
        for (size_t i = 0; i < t->numel; i++) buf[t->offset + i] = (float)json_real_value(json_array_get(vals, i));
    }
}

// Largest error of buf against the reference, in units of |ref| (floored at
// `floor_abs` so exact zeros compare absolutely).
static double max_rel_err(const float *buf, const TensorTable *tt, json_t *by_name, double floor_abs,
                          const char *what) {
    double worst = 0;
    for (int k = 0; k < tt->n; k++) {
        const TensorInfo *t = &tt->t[k];
        json_t *vals = json_object_get(by_name, t->name);
        for (size_t i = 0; i < t->numel; i++) {
            double ref = json_real_value(json_array_get(vals, i)), got = buf[t->offset + i];
            double err = fabs(got - ref) / fmax(fabs(ref), floor_abs);
            if (!(err <= 1e-5)) fail_msg("%s %s[%zu]: got %.9g, torch %.9g", what, t->name, i, got, ref);
            if (err > worst) worst = err;
        }
    }
    return worst;
}

static void assert_padding_zero(const float *buf, const TensorTable *tt) {
    for (int k = 0; k < tt->n; k++) {
        const TensorInfo *t = &tt->t[k];
        size_t end = k + 1 < tt->n ? tt->t[k + 1].offset : tt->total;
        for (size_t i = t->offset + t->numel; i < end; i++) assert_true(buf[i] == 0.0f);
    }
}

// One fixture case on one device: every step against torch's params and moments.
static void adamw_case(TestDevice *td, json_t *jc, const TensorTable *tt) {
    AdamWConfig cfg = {
        .lr = 1.0f,   // not read: adamw_step takes the scheduled lr
        .beta1 = (float)json_real_value(json_object_get(jc, "beta1")),
        .beta2 = (float)json_real_value(json_object_get(jc, "beta2")),
        .eps = (float)json_real_value(json_object_get(jc, "eps")),
        .weight_decay = (float)json_real_value(json_object_get(jc, "weight_decay")),
        .grad_clip = 0.0f,
    };
    const size_t bytes = tt->total * sizeof(float);
    float *p = xaligned(bytes, "p"), *g = xaligned(bytes, "g");
    float *m = xaligned(bytes, "m"), *v = xaligned(bytes, "v");
    fill_flat(p, tt, json_object_get(jc, "params0"));
    Device *dev = &td->dev;
    Mirrors mr = mirrors_on(dev);
    float *p_d = mirror(&mr, p, bytes), *g_d = mirror(&mr, g, bytes), *m_d = mirror(&mr, m, bytes);
    float *v_d = mirror(&mr, v, bytes);
    json_t *steps = json_object_get(jc, "steps");
    double worst_p = 0, worst_m = 0, worst_v = 0;
    char what[3][96];
    snprintf(what[0], sizeof what[0], "%s param", td->name);
    snprintf(what[1], sizeof what[1], "%s m", td->name);
    snprintf(what[2], sizeof what[2], "%s v", td->name);
    for (size_t s = 0; s < json_array_size(steps); s++) {
        json_t *js = json_array_get(steps, s);
        fill_flat(g, tt, json_object_get(js, "grads"));
        OP(dev, upload, g_d, g, bytes);
        OP(dev, adamw_step, p_d, g_d, m_d, v_d, tt, &cfg, (float)json_real_value(json_object_get(js, "lr")), (long)s + 1);
        fetch(dev, p, p_d, bytes);
        fetch(dev, m, m_d, bytes);
        fetch(dev, v, v_d, bytes);
        worst_p = fmax(worst_p, max_rel_err(p, tt, json_object_get(js, "params"), 1e-6, what[0]));
        worst_m = fmax(worst_m, max_rel_err(m, tt, json_object_get(js, "m"), 1e-12, what[1]));
        worst_v = fmax(worst_v, max_rel_err(v, tt, json_object_get(js, "v"), 1e-20, what[2]));
    }
    print_message("%-26s adamw case %s: %zu steps, max rel err params %.2g m %.2g v %.2g\n", td->name,
                  json_string_value(json_object_get(jc, "name")), json_array_size(steps), worst_p, worst_m, worst_v);
    // fp32 rounding only: a wrong formula (bias correction, eps place,
    // decay order, decay mask) is off by 1e-4 or more on these cases.
    if (!(worst_p < 1e-6 && worst_m < 1e-6 && worst_v < 1e-6)) fail_msg("%s: adamw off torch", td->name);
    assert_padding_zero(p, tt);
    assert_padding_zero(m, tt);
    assert_padding_zero(v, tt);
    mirrors_free(&mr);
    free(p), free(g), free(m), free(v);
}

static void test_adamw_matches_torch(void **state) {
    (void)state;
    json_t *root = load_json(FIX "adamw.json");
    TensorTable tt;
    fixture_table(&tt, json_object_get(root, "tensors"));
    json_t *cases = json_object_get(root, "adamw");
    assert_true(json_array_size(cases) >= 2);
    for (int d = 0; d < n_devs; d++)
        for (size_t c = 0; c < json_array_size(cases); c++) adamw_case(&devs[d], json_array_get(cases, c), &tt);
    tensor_table_free(&tt);
    json_decref(root);
}

// On a real (tiny preset) table with zero gradients the Adam part is exactly
// zero, so only decoupled decay moves a parameter: p * (1 - lr * wd) on
// TF_DECAY tensors, bit-identical elsewhere (norm weights).
static void test_decay_only_on_decay_tensors(void **state) {
    (void)state;
    PtError e;
    ModelConfig mc;
    assert_int_equal(config_preset(&mc, "tiny-untied", &e), 0);
    TensorTable tt;
    tensor_table_build(&tt, &mc);
    float *p0 = xaligned(tt.total * sizeof(float), "p0");
    Rng rng;
    rng_seed(&rng, 5);
    for (int k = 0; k < tt.n; k++)
        for (size_t i = 0; i < tt.t[k].numel; i++) p0[tt.t[k].offset + i] = (float)rng_normal(&rng);
    AdamWConfig cfg = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    const float lr = 1e-2f;
    for (int d = 0; d < n_devs; d++) {
        const size_t bytes = tt.total * sizeof(float);
        float *p = xaligned(bytes, "p"), *g = xaligned(bytes, "g");
        float *m = xaligned(bytes, "m"), *v = xaligned(bytes, "v");
        memcpy(p, p0, bytes);
        Device *dev = &devs[d].dev;
        Mirrors mr = mirrors_on(dev);
        float *p_d = mirror(&mr, p, bytes), *g_d = mirror(&mr, g, bytes), *m_d = mirror(&mr, m, bytes);
        float *v_d = mirror(&mr, v, bytes);
        OP(dev, adamw_step, p_d, g_d, m_d, v_d, &tt, &cfg, lr, 1);
        fetch(dev, p, p_d, bytes);
        mirrors_free(&mr);
        int n_decay = 0, n_plain = 0;
        for (int k = 0; k < tt.n; k++) {
            const TensorInfo *t = &tt.t[k];
            int decay = (t->flags & TF_DECAY) != 0;
            n_decay += decay, n_plain += !decay;
            for (size_t i = 0; i < t->numel; i++) {
                double before = p0[t->offset + i], after = p[t->offset + i];
                double want = decay ? before * (1.0 - (double)lr * 0.1f) : before;
                if (!(fabs(after - want) <= 1e-7 * fabs(before)))
                    fail_msg("%s: %s[%zu]: %.9g -> %.9g, want %.9g", devs[d].name, t->name, i, before, after, want);
                if (!decay) assert_true(after == before);
            }
        }
        assert_true(n_decay > 0 && n_plain > 0);
        assert_padding_zero(p, &tt);
        free(p), free(g), free(m), free(v);
    }
    free(p0);
    tensor_table_free(&tt);
}

static void test_clip_matches_torch(void **state) {
    (void)state;
    json_t *root = load_json(FIX "adamw.json");
    TensorTable tt;
    fixture_table(&tt, json_object_get(root, "tensors"));
    json_t *cases = json_object_get(root, "clip");
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        int clipped_cases = 0;
        for (size_t c = 0; c < json_array_size(cases); c++) {
            json_t *jc = json_array_get(cases, c);
            float *g = xaligned(tt.total * sizeof(float), "g");
            fill_flat(g, &tt, json_object_get(jc, "grads"));
            Mirrors mr = mirrors_on(dev);
            float *g_d = mirror(&mr, g, tt.total * sizeof(float));
            double norm = dev_grad_norm(dev, g_d, tt.total), ref = json_real_value(json_object_get(jc, "norm"));
            if (!(fabs(norm - ref) <= 1e-6 * ref)) fail_msg("%s: norm %.9g, torch %.9g", devs[d].name, norm, ref);
            float max_norm = (float)json_real_value(json_object_get(jc, "max_norm"));
            float factor = grad_clip_factor(norm, max_norm);
            clipped_cases += factor < 1.0f;
            OP(dev, grad_scale, g_d, tt.total, factor);
            fetch(dev, g, g_d, tt.total * sizeof(float));
            mirrors_free(&mr);
            char what[96];
            snprintf(what, sizeof what, "%s clipped grad", devs[d].name);
            assert_true(max_rel_err(g, &tt, json_object_get(jc, "clipped"), 1e-12, what) < 1e-6);
            assert_padding_zero(g, &tt);
            free(g);
        }
        assert_int_equal(clipped_cases, 1);   // one case clips, one does not
    }
    assert_true(grad_clip_factor(123.0, 0.0f) == 1.0f);   // clipping off
    tensor_table_free(&tt);
    json_decref(root);
}

// A table big enough for many reduction chunks; the norm must be bit-identical
// for 1 and 2 threads, and equal a plain double sum to rounding. A non-finite
// gradient gives a non-finite norm (the trainer skips such a step).
static void test_norm_finite_and_threads(void **state) {
    (void)state;
    ModelConfig mc;
    PtError e;
    assert_int_equal(config_preset(&mc, "tiny", &e), 0);
    TensorTable tt;
    tensor_table_build(&tt, &mc);
    float *g = xaligned(tt.total * sizeof(float), "g");
    Rng rng;
    rng_seed(&rng, 9);
    long double exact = 0;
    for (int k = 0; k < tt.n; k++)
        for (size_t i = 0; i < tt.t[k].numel; i++) {
            float x = (float)(rng_normal(&rng) * 1e-2);
            g[tt.t[k].offset + i] = x;
            exact += (long double)x * x;
        }
    const TensorInfo *t = &tt.t[tt.n / 2];
    const float keep = g[t->offset + 3], keep0 = g[t->offset];
    const size_t bytes = tt.total * sizeof(float);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        Mirrors mr = mirrors_on(dev);
        float *g_d = mirror(&mr, g, bytes);
        // The device's thread count, and OpenMP's for an op that takes that.
        const int saved = dev->threads, saved_omp = omp_get_max_threads();
        dev->threads = 1;
        omp_set_num_threads(1);
        double n1 = dev_grad_norm(dev, g_d, tt.total);
        dev->threads = 2;
        omp_set_num_threads(2);
        double n2 = dev_grad_norm(dev, g_d, tt.total);
        dev->threads = saved;
        omp_set_num_threads(saved_omp);
        if (n1 != n2) fail_msg("%s: norm %.17g on 1 thread, %.17g on 2", devs[d].name, n1, n2);
        assert_true(fabsl((long double)n1 - sqrtl(exact)) <= 1e-12L * n1);

        // Each change is made on the host and sent to the device again.
        g[t->offset + 3] = NAN;
        OP(dev, upload, g_d, g, bytes);
        assert_true(isnan(dev_grad_norm(dev, g_d, tt.total)));
        g[t->offset + 3] = -INFINITY;
        OP(dev, upload, g_d, g, bytes);
        assert_false(isfinite(dev_grad_norm(dev, g_d, tt.total)));
        g[t->offset + 3] = keep;
        // largest finite floats square fine in double
        g[t->offset] = 3.4e38f;
        OP(dev, upload, g_d, g, bytes);
        assert_true(isfinite(dev_grad_norm(dev, g_d, tt.total)));
        g[t->offset] = keep0;
        OP(dev, upload, g_d, g, bytes);
        mirrors_free(&mr);
    }
    free(g);
    tensor_table_free(&tt);
}

static int kind_from_name(const char *name) {
    for (int k = 0; k < SCHED_KIND_COUNT; k++)
        if (strcmp(schedule_kind_name(k), name) == 0) return k;
    fail_msg("unknown schedule kind %s", name);
    return -1;
}

static void test_schedules_match_transformers(void **state) {
    (void)state;
    json_t *root = load_json(FIX "schedules.json");
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 8);
    int seen[SCHED_KIND_COUNT] = {0};
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *jc = json_array_get(cases, c);
        Schedule s = {
            .kind = kind_from_name(json_string_value(json_object_get(jc, "kind"))),
            .warmup = (long)json_integer_value(json_object_get(jc, "warmup")),
            .total = (long)json_integer_value(json_object_get(jc, "total")),
            .min_lr_ratio = (float)json_real_value(json_object_get(jc, "min_lr_ratio")),
            .decay_fraction = (float)json_real_value(json_object_get(jc, "decay_fraction")),
        };
        seen[s.kind]++;
        float base = (float)json_real_value(json_object_get(jc, "base_lr"));
        long from = (long)json_integer_value(json_object_get(jc, "compare_from"));
        json_t *lrs = json_object_get(jc, "lrs");
        assert_int_equal(json_array_size(lrs), s.total + 1);
        for (long step = from; step <= s.total; step++) {
            double ref = json_real_value(json_array_get(lrs, (size_t)step));
            float got = schedule_lr(&s, base, step);
            if (!(fabs(got - ref) <= 1e-6 * base))
                fail_msg("%s (%s) warmup %ld total %ld step %ld: got %.9g, transformers %.9g",
                         schedule_kind_name(s.kind), json_string_value(json_object_get(jc, "reference")),
                         s.warmup, s.total, step, got, ref);
        }
        // Past the end the lr stays where the reference ends (its value at total).
        double end = json_real_value(json_array_get(lrs, (size_t)s.total));
        for (long step = s.total + 1; step < s.total + 20; step++)
            assert_true(fabs(schedule_lr(&s, base, step) - end) <= 1e-6 * base);
        // Warmup starts from 0 for every kind (the convention we document).
        if (s.warmup > 0) assert_true(schedule_lr(&s, base, 0) == 0.0f);
    }
    for (int k = 0; k < SCHED_KIND_COUNT; k++) assert_true(seen[k] > 0);
    json_decref(root);
}

static void test_wsd_decay_steps(void **state) {
    (void)state;
    Schedule s = {.kind = SCHED_WSD, .warmup = 10, .total = 100, .decay_fraction = 0.2f};
    assert_int_equal(schedule_wsd_decay_steps(&s), 20);
    s.decay_fraction = 1.0f;   // never eats into the warmup
    assert_int_equal(schedule_wsd_decay_steps(&s), 90);
    s.decay_fraction = 0.0f;   // no decay: stable to the end, then the floor
    s.min_lr_ratio = 0.5f;
    assert_int_equal(schedule_wsd_decay_steps(&s), 0);
    assert_true(schedule_lr(&s, 1.0f, 99) == 1.0f);
    assert_true(schedule_lr(&s, 1.0f, 100) == 0.5f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_adamw_matches_torch),
        cmocka_unit_test(test_decay_only_on_decay_tensors),
        cmocka_unit_test(test_clip_matches_torch),
        cmocka_unit_test(test_norm_finite_and_threads),
        cmocka_unit_test(test_schedules_match_transformers),
        cmocka_unit_test(test_wsd_decay_steps),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}
