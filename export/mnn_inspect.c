#include "mnn_inspect.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "flatbuf_read.h"
#include "mnn_graph.h"

typedef struct {
    int64_t start, end;   // byte range in llm.mnn.weight
    int op;               // index in oplists
} Range;

typedef struct {
    int type;
    const char *name;
    uint32_t name_len;
    int layer;            // from a "/layers.N/" name, -1 otherwise
} OpInfo;

static const char *op_type_name(int t) {
    switch (t) {
    case MNN_OP_BINARY: return "BinaryOp";
    case MNN_OP_CAST: return "Cast";
    case MNN_OP_CONCAT: return "Concat";
    case MNN_OP_CONST: return "Const";
    case MNN_OP_CONV: return "Convolution";
    case MNN_OP_INPUT: return "Input";
    case MNN_OP_RESHAPE: return "Reshape";
    case MNN_OP_SLICE: return "Slice";
    case MNN_OP_STRIDED_SLICE: return "StridedSlice";
    case MNN_OP_UNARY: return "UnaryOp";
    case MNN_OP_CONVERT: return "ConvertTensor";
    case MNN_OP_ATTENTION: return "Attention";
    case MNN_OP_ROPE: return "RoPE";
    case MNN_OP_LAYERNORM: return "LayerNorm";
    default: return "other";
    }
}

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

// N of a "/layers.N/..." name (the string need not end with a NUL); -1 for other names.
static int layer_of(const char *name, uint32_t n) {
    const char prefix[] = "/layers.";
    if (n <= sizeof prefix || strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    int layer = 0;
    for (uint32_t i = sizeof prefix - 1; i < n && name[i] >= '0' && name[i] <= '9' && layer < 1000000; i++)
        layer = 10 * layer + (name[i] - '0');
    return layer;
}

// Offset + the sizes that follow it, when every one is >= 0 and their sum stays inside a file of
// `len` bytes: 1 and *end; 0 otherwise (a reference past the file, or numbers that would overflow).
static int inside(const int64_t *part, int n, int64_t len, int64_t *end) {
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (part[i] < 0 || __builtin_add_overflow(sum, part[i], &sum)) return 0;
    *end = sum;
    return sum <= len;
}

// Checks one int4 convolution's blob: IDST header dims and value table,
// code and alpha sizes; adds its scale range to the summary.
typedef struct {
    int n_linears, bits, block, symmetric, fp16;
    double scale_min, scale_max;
    int64_t n_groups;
} QuantSummary;

static int check_conv(FbReader *r, size_t conv, const uint8_t *wt, int64_t wt_len, const char *dir, const OpInfo *op,
                      Range *rg, QuantSummary *qs, FILE *out, PtError *e) {
    size_t common = fbr_ref(r, conv, 0), quan = fbr_ref(r, conv, 3), ext = fbr_ref(r, conv, 6);
    int64_t oc = fbr_int(r, common, 10, 4, 0), ic = fbr_int(r, common, 11, 4, 0);
    int n_ext = (int)fbr_vec_len(r, ext, 8);
    if (r->bad) return pt_fail(e, "%s/llm.mnn: op %.*s: %s", dir, (int)op->name_len, op->name, r->why);
    if (!quan || n_ext < 3)
        return pt_fail(e, "%s/llm.mnn: op %.*s: not an int4 convolution with external weights", dir, (int)op->name_len,
                       op->name);
    int64_t x[5] = {0};
    for (int i = 0; i < n_ext && i < 5; i++) x[i] = fbr_vec_int(r, ext, (uint32_t)i, 8);
    int bits = (int)fbr_int(r, quan, 7, 4, 0), shape32 = (int)fbr_int(r, quan, 11, 1, 0);
    int asym = fbr_int(r, quan, 9, 4, 0) != 0, fp16 = fbr_int(r, quan, 15, 1, 0) == 1;
    int64_t header = shape32 ? 26 : 22, end;
    if (!inside(x, n_ext > 3 ? 4 : 3, wt_len, &end))
        return pt_fail(e, "%s/llm.mnn.weight: op %.*s references %lld + %lld + %lld bytes, the file has %lld", dir,
                       (int)op->name_len, op->name, (long long)x[0], (long long)x[1], (long long)x[2],
                       (long long)wt_len);
    if (x[1] < header || oc < 1 || ic < 1)
        return pt_fail(e, "%s/llm.mnn: op %.*s: %lld code bytes (the IDST header alone takes %lld) for a %lld x %lld "
                          "matrix",
                       dir, (int)op->name_len, op->name, (long long)x[1], (long long)header, (long long)oc,
                       (long long)ic);
    const uint8_t *h = wt + x[0];
    int64_t hoc = shape32 ? (int64_t)(h[1] | h[2] << 8 | h[3] << 16 | (uint32_t)h[4] << 24) : (h[1] | h[2] << 8);
    int64_t hic = shape32 ? (int64_t)(h[5] | h[6] << 8 | h[7] << 16 | (uint32_t)h[8] << 24) : (h[3] | h[4] << 8);
    int table_ok = h[header - 17] == 16;
    for (int v = 0; v < 16 && table_ok; v++) table_ok = (int8_t)h[header - 16 + v] == v - 8;
    if (bits != 4 || h[0] != 2 || hoc != oc || hic != ic || !table_ok)
        return pt_fail(e, "%s/llm.mnn.weight: op %.*s at byte %lld: IDST header says %lld x %lld (%d table entries), "
                          "the op says %lld x %lld, %d bits",
                       dir, (int)op->name_len, op->name, (long long)x[0], (long long)hoc, (long long)hic,
                       h[header - 17], (long long)oc, (long long)ic, bits);
    int64_t codes = (oc * ic + 1) / 2, per = (asym ? 2 : 1) * (fp16 ? 2 : 4);
    if (x[1] != header + codes || x[2] % (oc * per) != 0 || x[2] == 0 || ic % (x[2] / (oc * per)) != 0)
        return pt_fail(e, "%s/llm.mnn: op %.*s: %lld code bytes and %lld alpha bytes do not fit a %lld x %lld int4 "
                          "matrix",
                       dir, (int)op->name_len, op->name, (long long)x[1], (long long)x[2], (long long)oc, (long long)ic);
    int64_t nblk = x[2] / (oc * per), block = ic / nblk;
    const uint8_t *alpha = wt + x[0] + x[1];
    for (int64_t g = 0; g < oc * nblk; g++) {
        size_t at = (size_t)(g * (asym ? 2 : 1) + (asym ? 1 : 0));
        float s;
        if (fp16) s = f16_to_f32((uint16_t)(alpha[2 * at] | alpha[2 * at + 1] << 8));
        else memcpy(&s, alpha + 4 * at, 4);
        if (s < qs->scale_min) qs->scale_min = s;
        if (s > qs->scale_max) qs->scale_max = s;
    }
    qs->n_groups += oc * nblk;
    if (qs->n_linears == 0) qs->bits = bits, qs->block = (int)block, qs->symmetric = !asym, qs->fp16 = fp16;
    else if (qs->block != block || qs->symmetric != !asym) qs->block = -1;   // mixed
    qs->n_linears++;
    rg->start = x[0];
    rg->end = end;
    fprintf(out, "  %-40.*s %6lld x %-6lld block %-3lld %s  @%-10lld codes %-9lld alpha %lld\n", (int)op->name_len,
            op->name, (long long)oc, (long long)ic, (long long)block, asym ? "asym" : "sym ", (long long)x[0],
            (long long)x[1], (long long)x[2]);
    return 0;
}

static int check_norm(FbReader *r, size_t ln, int64_t wt_len, const char *dir, const OpInfo *op, Range *rg,
                      FILE *out, PtError *e) {
    size_t ext = fbr_ref(r, ln, 5);
    uint32_t n_ext = fbr_vec_len(r, ext, 8);
    if (r->bad) return pt_fail(e, "%s/llm.mnn: op %.*s: %s", dir, (int)op->name_len, op->name, r->why);
    if (n_ext < 2) return 1;   // gamma inline in the graph
    int64_t part[3] = {fbr_vec_int(r, ext, 0, 8), fbr_vec_int(r, ext, 1, 8), n_ext > 2 ? fbr_vec_int(r, ext, 2, 8) : 0};
    int64_t off = part[0], g = part[1], b = part[2], end;
    if (!inside(part, 3, wt_len, &end) || g <= 0 || g % 4 || b > g)
        return pt_fail(e, "%s/llm.mnn.weight: norm %.*s references %lld + %lld + %lld bytes, the file has %lld", dir,
                       (int)op->name_len, op->name, (long long)off, (long long)g, (long long)b, (long long)wt_len);
    rg->start = off;
    rg->end = end;
    fprintf(out, "  %-40.*s %6lld weights              @%-10lld gamma %-9lld beta %lld\n", (int)op->name_len, op->name,
            (long long)(g / 4), (long long)off, (long long)g, (long long)b);
    return 0;
}

int mnn_is_package(const char *dir) {
    char *p = path_join(dir, "llm.mnn");
    int yes = path_exists(p);
    free(p);
    return yes;
}

// Op counts by type for one layer (or for everything outside the layers).
static void print_op_counts(FILE *out, const OpInfo *ops, int n_ops, int layer) {
    int types[] = {MNN_OP_INPUT, MNN_OP_CONST, MNN_OP_CAST, MNN_OP_LAYERNORM, MNN_OP_CONV, MNN_OP_ROPE,
                   MNN_OP_ATTENTION, MNN_OP_BINARY, MNN_OP_UNARY, MNN_OP_SLICE, MNN_OP_CONCAT, MNN_OP_CONVERT,
                   MNN_OP_RESHAPE, MNN_OP_STRIDED_SLICE, -1};
    int total = 0;
    for (int k = 0; types[k] >= 0 || k == 14; k++) {
        int c = 0;
        for (int i = 0; i < n_ops; i++)
            if (ops[i].layer == layer &&
                (types[k] >= 0 ? ops[i].type == types[k] : strcmp(op_type_name(ops[i].type), "other") == 0))
                c++;
        if (c) fprintf(out, " %s %d", types[k] >= 0 ? op_type_name(types[k]) : "other", c);
        total += c;
        if (types[k] < 0) break;
    }
    fprintf(out, " (%d ops)\n", total);
}

static json_t *load_json(const char *dir, const char *name, PtError *e) {
    char *p = path_join(dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) pt_fail(e, "%s: line %d: %s", p, je.line, je.text);
    free(p);
    return j;
}

int mnn_inspect(const char *dir, FILE *out, PtError *e) {
    uint8_t *graph = NULL, *wt = NULL;
    size_t graph_len = 0, wt_len = 0;
    json_t *llm_cfg = NULL, *cfg = NULL;
    OpInfo *ops = NULL;
    Range *ranges = NULL;
    int rc = -1;
    char *gp = path_join(dir, "llm.mnn"), *wp = path_join(dir, "llm.mnn.weight");
    if (read_whole_file(gp, &graph, &graph_len, e) || read_whole_file(wp, &wt, &wt_len, e)) goto out;
    if (!(cfg = load_json(dir, "config.json", e)) || !(llm_cfg = load_json(dir, "llm_config.json", e))) goto out;
    FbReader r = {graph, graph_len, 0, ""};
    size_t net = fbr_root(&r), opv = fbr_ref(&r, net, 3), names = fbr_ref(&r, net, 7), outs = fbr_ref(&r, net, 4);
    uint32_t n_ops = fbr_vec_len(&r, opv, 4), n_names = fbr_vec_len(&r, names, 4), n_outs = fbr_vec_len(&r, outs, 4);
    if (r.bad || !n_ops) {
        pt_fail(e, "%s: not an MNN graph: %s", gp, r.bad ? r.why : "no ops");
        goto out;
    }
    fprintf(out, "MNN package %s\n", dir);
    fprintf(out, "  llm.mnn %zu bytes, llm.mnn.weight %zu bytes; model %s, hidden %lld, %lld layers\n", graph_len,
            wt_len, json_string_value(json_object_get(llm_cfg, "model_type")) ?: "?",
            (long long)json_integer_value(json_object_get(llm_cfg, "hidden_size")),
            (long long)json_integer_value(json_object_get(llm_cfg, "layer_nums")));
    fprintf(out, "  config.json: tokenizer %s, memory %s, precision %s, sampler %s\n",
            json_string_value(json_object_get(cfg, "tokenizer_file")) ?: "tokenizer.txt",
            json_string_value(json_object_get(cfg, "memory")) ?: "low",
            json_string_value(json_object_get(cfg, "precision")) ?: "low",
            json_string_value(json_object_get(cfg, "sampler_type")) ?: "mixed");
    fprintf(out, "  graph: %u ops, %u tensors; outputs:", n_ops, n_names);
    for (uint32_t i = 0; i < n_outs; i++) {
        uint32_t n;
        const char *s = fbr_str(&r, fbr_vec_ref(&r, outs, i), &n);
        fprintf(out, " %.*s", (int)n, s);
    }
    fprintf(out, "\n  weight references (offsets in llm.mnn.weight):\n");
    ops = xcalloc(n_ops, sizeof *ops, "op list");
    ranges = xcalloc(n_ops, sizeof *ranges, "weight ranges");
    int n_ranges = 0, max_layer = -1;
    QuantSummary qs = {0};
    qs.scale_min = INFINITY, qs.scale_max = -INFINITY;
    for (uint32_t i = 0; i < n_ops; i++) {
        size_t op = fbr_vec_ref(&r, opv, i);
        OpInfo *oi = &ops[i];
        oi->type = (int)fbr_int(&r, op, 5, 4, 0);
        oi->name = fbr_str(&r, fbr_ref(&r, op, 3), &oi->name_len);
        oi->layer = layer_of(oi->name, oi->name_len);
        if (oi->layer > max_layer) max_layer = oi->layer;
        size_t main = fbr_ref(&r, op, 2);
        if (r.bad) {
            pt_fail(e, "%s: op %u: %s", gp, i, r.why);
            goto out;
        }
        int k = 1;
        if (oi->type == MNN_OP_CONV) k = check_conv(&r, main, wt, (int64_t)wt_len, dir, oi, &ranges[n_ranges], &qs, out, e);
        else if (oi->type == MNN_OP_LAYERNORM) k = check_norm(&r, main, (int64_t)wt_len, dir, oi, &ranges[n_ranges], out, e);
        if (k < 0) goto out;
        if (k == 0) ranges[n_ranges++].op = (int)i;
    }
    // Every byte of the weight file belongs to exactly one op.
    qsort(ranges, (size_t)n_ranges, sizeof *ranges, cmp_range);
    int64_t covered = 0, prev_end = 0;
    for (int i = 0; i < n_ranges; i++) {
        if (ranges[i].start < prev_end) {
            const OpInfo *a = &ops[ranges[i].op];
            pt_fail(e, "%s: op %.*s's bytes from %lld overlap the previous blob (ends at %lld)", wp, (int)a->name_len,
                    a->name, (long long)ranges[i].start, (long long)prev_end);
            goto out;
        }
        covered += ranges[i].end - ranges[i].start;
        prev_end = ranges[i].end;
    }
    fprintf(out, "  ops per layer (layer 0):");
    print_op_counts(out, ops, (int)n_ops, 0);
    int same = 1;
    for (int l = 1; l <= max_layer && same; l++) {
        int a = 0, b = 0;
        for (uint32_t i = 0; i < n_ops; i++) a += ops[i].layer == 0, b += ops[i].layer == l;
        same = a == b;
    }
    fprintf(out, "  layers 0..%d: %s\n  outside the layers:", max_layer, same ? "the same op counts" : "op counts differ");
    print_op_counts(out, ops, (int)n_ops, -1);
    if (qs.n_linears)
        fprintf(out, "  int4 linears: %d, %d-bit, %s, block %d, %s scales in [%.6g, %.6g] over %lld groups\n",
                qs.n_linears, qs.bits, qs.symmetric ? "symmetric" : "asymmetric (zero, scale)", qs.block,
                qs.fp16 ? "fp16" : "fp32", qs.scale_min, qs.scale_max, (long long)qs.n_groups);
    if (covered != (int64_t)wt_len) {
        pt_fail(e, "%s: the graph references %lld of its %zu bytes", wp, (long long)covered, wt_len);
        goto out;
    }
    fprintf(out, "  weight file: %d blobs cover all %zu bytes, no overlap\n", n_ranges, wt_len);
    json_t *tie = json_object_get(llm_cfg, "tie_embeddings");
    if (json_is_object(tie)) {
        int64_t wo = json_integer_value(json_object_get(tie, "weight_offset"));
        int64_t ao = json_integer_value(json_object_get(tie, "alpha_offset"));
        int64_t as = json_integer_value(json_object_get(tie, "alpha_size"));
        int ok = 0;
        int64_t alpha[2] = {ao, as}, alpha_end;
        for (int i = 0; i < n_ranges && !ok; i++)
            ok = wo > ranges[i].start && wo < ao && inside(alpha, 2, ranges[i].end, &alpha_end) && ao >= ranges[i].start;
        if (!ok) {
            pt_fail(e, "%s/llm_config.json: tie_embeddings (weight %lld, alpha %lld + %lld) is not inside one blob", dir,
                    (long long)wo, (long long)ao, (long long)as);
            goto out;
        }
        fprintf(out, "  tied embedding: codes at %lld, alpha at %lld (%lld bytes), inside the lm_head blob\n",
                (long long)wo, (long long)ao, (long long)as);
    } else {
        fprintf(out, "  embedding: %s\n", json_string_value(json_object_get(cfg, "embedding_file")) ?: "embeddings_bf16.bin");
    }
    rc = 0;
out:
    free(gp), free(wp), free(graph), free(wt), free(ops), free(ranges);
    json_decref(cfg), json_decref(llm_cfg);
    return rc;
}
