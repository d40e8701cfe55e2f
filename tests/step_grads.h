// step_grads.h: one full training step (forward, loss, backward) of tiny
// Qwen3-shaped models, its loss and every parameter's gradient kept as a small
// binary file, so that builds for different CPUs can be held against each
// other: x86 (AVX-512, AVX2, portable) and AArch64 (NEON, portable) under
// qemu. tests/step_grads.c runs and compares (make test-arm64);
// tests/test_step_grads.c checks the file and the comparison themselves.
//
// Only compute folders are used (util/, model/, model/ops/): no HDF5, no CLI,
// so the same source builds for AArch64 with nothing but the cross compiler.
//
// The file (little-endian, as both architectures are):
//   "PTSTEPG1", u32 length + bytes: what ran (architecture, kernels),
//   u32 cases, per case: u32 length + name, u32 bf16 (matmul precision),
//   f64 mean loss, u32 counted targets, u32 tensors, per tensor: u32 length +
//   name (the tensor table's), u32 ndim (1 or 2), u64 shape[ndim], f32 values.
// Nothing may follow the last case.
#pragma once
#include <stdio.h>
#include <string.h>
#include "../util/bytes.h"
#include "test_model_util.h"

#define STEP_MAGIC "PTSTEPG1"
// The bounds a case is held to: each gradient tensor normwise (max|b - a| /
// max|a|, per tensor) and the mean loss relative.
// fp32: the kernels sum the same products in other orders (tile shapes,
// blocking), about 1e-7 per op, which the backward through two or three
// layers grows but keeps well inside 1e-5 (issue #20's bound; measured: up to
// 3.1e-6), loss and gradients.
#define STEP_TOL_FP32 1e-5
// bf16 matmuls: each product is exact in fp32, yet two CPUs' bf16 steps do
// not agree closely: an input that differs in its last fp32 bit (the sums'
// order differs from kernel to kernel, and AVX512_BF16 adds products in
// pairs) can round to the other bf16 neighbour, 2^-8 relative in that
// element, and the backward spreads each such flip. Measured: up to 6.3e-3
// normwise in the gradients and 2.8e-5 in the loss between CPUs and kernel
// sets (7.6e-3 and 4.3e-5 with AArch64's BFDOT kernel, tried on its branch),
// where the bf16 step's own distance from the fp32 step is ~2e-2 and ~2e-5.
// So these bounds catch only gross failures (NaN, a gradient missing or far
// off, a broken bf16 kernel); the exact products are checked per op
// (tests/test_matmul.c, also under qemu).
#define STEP_TOL_BF16 2e-2
#define STEP_TOL_BF16_LOSS 2e-4

typedef struct {
    char name[64];      // "tiny fp32"
    int bf16;           // matmuls in bf16
    double loss;        // mean over the counted targets
    int count;
    TensorTable tt;     // names, shapes and offsets into grads (owned)
    float *grads;       // tt.total floats
} StepCase;

typedef struct {
    char what[256];     // the architecture and the kernels that ran
    int n;
    StepCase c[8];
} StepFile;

enum { STEP_MAX_CASES = (int)(sizeof(((StepFile *)0)->c) / sizeof(StepCase)) };

static inline void step_file_free(StepFile *f) {
    for (int i = 0; i < f->n; i++) {
        tensor_table_free(&f->c[i].tt);
        free(f->c[i].grads);
    }
    f->n = 0;
}

// The presets and the batch every run uses: tied (tiny) and untied with odd
// sizes (tiny-untied, so lm_head has its own gradient); two rows of 70 tokens
// (past one 64-position attention tile) packing documents with segment ids,
// positions and masked prompts. Seeds fixed: the same input on every machine.
static const char *const STEP_PRESETS[] = {"tiny", "tiny-untied"};
enum { STEP_N_PRESETS = 2, STEP_B = 2, STEP_T = 70 };

// Runs every case (each preset in fp32 and with bf16 matmuls) on a CPU device
// with the kernels k, into out (step_file_free it).
static inline void step_run_all(const CpuKernels *k, const char *arch, StepFile *out) {
    memset(out, 0, sizeof *out);
    char kernels[200];
    cpu_kernels_describe(k, kernels, sizeof kernels);
    snprintf(out->what, sizeof out->what, "%s, %s", arch, kernels);
    Device dev;
    cpu_device_init(&dev, 0, k);
    for (int p = 0; p < STEP_N_PRESETS; p++) {
        TestModel tm;
        load_preset(STEP_PRESETS[p], 20 + (uint64_t)p, &tm);
        StepBatch bt;
        step_batch_make(&bt, STEP_B, STEP_T, tm.b.cfg.vocab_size, 40 + (uint64_t)p, 1);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            const ModelOptions opt = {0, bf16 ? MATMUL_BF16 : MATMUL_FP32, A16_OFF};
            StepResult r = step_on(&dev, &tm.b, tm.b.params, &bt.in, &opt);
            StepCase *c = &out->c[out->n++];
            snprintf(c->name, sizeof c->name, "%s %s", STEP_PRESETS[p], bf16 ? "bf16" : "fp32");
            c->bf16 = bf16;
            c->loss = r.loss / r.count;
            c->count = r.count;
            c->tt = tm.b.tt;
            c->tt.t = xmalloc((size_t)c->tt.n * sizeof(TensorInfo), "step tensor table");
            memcpy(c->tt.t, tm.b.tt.t, (size_t)c->tt.n * sizeof(TensorInfo));
            c->grads = r.grads;
        }
        step_batch_free(&bt);
        test_model_free(&tm);
    }
    dev_free(&dev);
}

static inline void step_put_str(Bytes *b, const char *s) {
    bytes_put_u32(b, (uint32_t)strlen(s));
    bytes_put(b, s, strlen(s));
}

// Writes f to path (a temporary name, renamed when whole).
static inline int step_file_write(const char *path, const StepFile *f, PtError *e) {
    Bytes b = {.what = "step file"};
    bytes_put(&b, STEP_MAGIC, 8);
    step_put_str(&b, f->what);
    bytes_put_u32(&b, (uint32_t)f->n);
    for (int i = 0; i < f->n; i++) {
        const StepCase *c = &f->c[i];
        step_put_str(&b, c->name);
        bytes_put_u32(&b, (uint32_t)c->bf16);
        bytes_put(&b, &c->loss, 8);
        bytes_put_u32(&b, (uint32_t)c->count);
        bytes_put_u32(&b, (uint32_t)c->tt.n);
        for (int k = 0; k < c->tt.n; k++) {
            const TensorInfo *t = &c->tt.t[k];
            step_put_str(&b, t->name);
            bytes_put_u32(&b, (uint32_t)t->ndim);
            for (int d = 0; d < t->ndim; d++) bytes_put_u64(&b, (uint64_t)t->shape[d]);
            bytes_put(&b, c->grads + t->offset, t->numel * sizeof(float));
        }
    }
    AtomicFile af;
    int rc = atomic_open(&af, path, e);
    if (rc == 0 && fwrite(b.p, 1, b.len, af.f) != b.len) {
        atomic_abort(&af);
        rc = pt_fail(e, "%s: write failed", path);
    } else if (rc == 0) {
        rc = atomic_commit(&af, e);
    }
    free(b.p);
    return rc;
}

// A bounds-checked reader over a whole file: every failure names the file,
// the byte offset and what was being read.
typedef struct {
    const char *path;
    const uint8_t *p;
    size_t len, at;
    char where[160];    // what is being read, for the error
} StepReader;

static inline int step_take(StepReader *r, void *dst, size_t n, const char *what, PtError *e) {
    if (n > r->len - r->at)
        return pt_fail(e, "%s: truncated at byte %zu: %s%s needs %zu bytes, %zu left", r->path, r->at, r->where, what,
                       n, r->len - r->at);
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}

static inline int step_u32(StepReader *r, uint32_t *v, uint32_t max, const char *what, PtError *e) {
    size_t at = r->at;
    if (step_take(r, v, 4, what, e)) return -1;
    if (*v > max) return pt_fail(e, "%s: byte %zu: %s%s is %u, at most %u", r->path, at, r->where, what, *v, max);
    return 0;
}

static inline int step_str(StepReader *r, char *dst, size_t cap, const char *what, PtError *e) {
    uint32_t n = 0;
    if (step_u32(r, &n, (uint32_t)cap - 1, what, e) || step_take(r, dst, n, what, e)) return -1;
    dst[n] = 0;
    return 0;
}

// One tensor's name and shape; its values are left in place (*values: their
// offset in the file), counted into c->tt.total.
static inline int step_read_tensor(StepReader *r, StepCase *c, uint32_t k, size_t *values, PtError *e) {
    TensorInfo *t = &c->tt.t[k];
    uint32_t ndim = 0;
    snprintf(r->where, sizeof r->where, "case '%s' tensor %u: ", c->name, k);
    if (step_str(r, t->name, sizeof t->name, "the name", e)) return -1;
    snprintf(r->where, sizeof r->where, "case '%s' tensor %u '%s': ", c->name, k, t->name);
    if (step_u32(r, &ndim, 2, "ndim", e)) return -1;
    if (ndim == 0) return pt_fail(e, "%s: byte %zu: %sndim is 0", r->path, r->at - 4, r->where);
    t->ndim = (int)ndim;
    t->numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t s = 0;
        if (step_take(r, &s, 8, "the shape", e)) return -1;
        if (s == 0) return pt_fail(e, "%s: byte %zu: %sdimension %u is 0", r->path, r->at - 8, r->where, d);
        // Each size bounded by the bytes left, so the product cannot overflow.
        if (s > (r->len - r->at) / sizeof(float))
            return pt_fail(e, "%s: truncated at byte %zu: %sdimension %u is %llu, more values than the %zu bytes "
                           "left hold", r->path, r->at - 8, r->where, d, (unsigned long long)s, r->len - r->at);
        t->shape[d] = (int64_t)s;
        t->numel *= s;
    }
    if (t->numel > (r->len - r->at) / sizeof(float))
        return pt_fail(e, "%s: truncated at byte %zu: %s%zu values need %zu bytes, %zu left", r->path, r->at,
                       r->where, t->numel, t->numel * sizeof(float), r->len - r->at);
    t->offset = c->tt.total;
    c->tt.total += t->numel;
    *values = r->at;
    r->at += t->numel * sizeof(float);
    return 0;
}

static inline int step_read_case(StepReader *r, StepCase *c, PtError *e) {
    uint32_t bf16 = 0, count = 0, n = 0;
    r->where[0] = 0;
    if (step_str(r, c->name, sizeof c->name, "the case name", e)) return -1;
    snprintf(r->where, sizeof r->where, "case '%s': ", c->name);
    if (step_u32(r, &bf16, 1, "bf16", e) || step_take(r, &c->loss, 8, "the loss", e) ||
        step_u32(r, &count, INT32_MAX, "the target count", e) || step_u32(r, &n, 4096, "the tensor count", e))
        return -1;
    c->bf16 = (int)bf16, c->count = (int)count;
    c->tt.t = xcalloc(n ? n : 1, sizeof(TensorInfo), "step tensor table");
    size_t *values = xcalloc(n ? n : 1, sizeof(size_t), "step value offsets");
    int rc = 0;
    for (uint32_t k = 0; rc == 0 && k < n; k++) rc = step_read_tensor(r, c, k, &values[k], e);
    if (rc == 0) {
        c->tt.n = (int)n;
        c->grads = xmalloc((c->tt.total ? c->tt.total : 1) * sizeof(float), "step gradients");
        for (uint32_t k = 0; k < n; k++)
            memcpy(c->grads + c->tt.t[k].offset, r->p + values[k], c->tt.t[k].numel * sizeof(float));
    }
    free(values);
    return rc;
}

static inline int step_file_read(const char *path, StepFile *f, PtError *e) {
    memset(f, 0, sizeof *f);
    StepReader r = {.path = path};
    uint8_t *data;
    if (read_whole_file(path, &data, &r.len, e)) return -1;
    r.p = data;
    char magic[8];
    uint32_t n = 0;
    int rc = step_take(&r, magic, 8, "the magic", e);
    if (rc == 0 && memcmp(magic, STEP_MAGIC, 8))
        rc = pt_fail(e, "%s: byte 0: not a step-gradients file (no %s)", path, STEP_MAGIC);
    if (rc == 0) rc = step_str(&r, f->what, sizeof f->what, "the description", e);
    if (rc == 0) rc = step_u32(&r, &n, STEP_MAX_CASES, "the case count", e);
    for (uint32_t i = 0; rc == 0 && i < n; i++) rc = step_read_case(&r, &f->c[f->n++], e);
    if (rc == 0 && r.at != r.len)
        rc = pt_fail(e, "%s: byte %zu: %zu bytes after the last case", path, r.at, r.len - r.at);
    free(data);
    if (rc) step_file_free(f);
    return rc;
}

static inline const StepCase *step_find_case(const StepFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->c[i].name, name)) return &f->c[i];
    return NULL;
}

// Holds every case of b against a's, tensor by tensor (names and shapes must
// match: a missing, extra or reshaped tensor or case is an error, returned as
// -1 with e). Prints one line per case to log: the loss's relative error and
// the worst tensor's. Returns the number of cases over their bound.
static inline int step_compare(const char *a_path, const StepFile *a, const char *b_path, const StepFile *b,
                               FILE *log, PtError *e) {
    if (a->n != b->n) return pt_fail(e, "%s has %d cases, %s has %d", a_path, a->n, b_path, b->n);
    int over = 0;
    for (int i = 0; i < a->n; i++) {
        const StepCase *ca = &a->c[i], *cb = step_find_case(b, ca->name);
        if (!cb) return pt_fail(e, "%s: no case '%s' (%s has it)", b_path, ca->name, a_path);
        if (cb->bf16 != ca->bf16 || cb->count != ca->count || cb->tt.n != ca->tt.n)
            return pt_fail(e, "%s: case '%s' has bf16 %d, %d targets, %d tensors where %s has %d, %d, %d", b_path,
                           ca->name, cb->bf16, cb->count, cb->tt.n, a_path, ca->bf16, ca->count, ca->tt.n);
        double worst = 0.0;
        const char *worst_name = "";
        for (int k = 0; k < ca->tt.n; k++) {
            const TensorInfo *ta = &ca->tt.t[k], *tb = tensor_table_find(&cb->tt, ta->name);
            if (!tb)
                return pt_fail(e, "%s: case '%s' has no tensor '%s' (%s has it)", b_path, ca->name, ta->name, a_path);
            if (tb->ndim != ta->ndim || tb->shape[0] != ta->shape[0] || (ta->ndim == 2 && tb->shape[1] != ta->shape[1]))
                return pt_fail(e, "%s: case '%s' tensor '%s' is shaped [%lld, %lld] where %s has [%lld, %lld]", b_path,
                               ca->name, ta->name, (long long)tb->shape[0], tb->ndim == 2 ? (long long)tb->shape[1] : 0,
                               a_path, (long long)ta->shape[0], ta->ndim == 2 ? (long long)ta->shape[1] : 0);
            const double err = normwise_error(cb->grads + tb->offset, ca->grads + ta->offset, ta->numel);
            if (err >= worst) worst = err, worst_name = ta->name;
        }
        const double loss_err = isfinite(ca->loss) && isfinite(cb->loss) ? fabs(cb->loss - ca->loss) / fabs(ca->loss)
                                                                           : INFINITY;
        const double tol = ca->bf16 ? STEP_TOL_BF16 : STEP_TOL_FP32;
        const double loss_tol = ca->bf16 ? STEP_TOL_BF16_LOSS : STEP_TOL_FP32;
        const int ok = loss_err <= loss_tol && worst <= tol;
        fprintf(log, "  %-16s loss %.7f rel %.1e (bound %.0e); worst gradient %s rel %.2e (bound %.0e)%s\n", ca->name,
                ca->loss, loss_err, loss_tol, worst_name, worst, tol, ok ? "" : "  FAILED");
        over += !ok;
    }
    return over;
}
