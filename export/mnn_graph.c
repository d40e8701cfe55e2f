#include "mnn_graph.h"
#include <stdio.h>
#include <string.h>
#include "../util/util.h"

// Field ids of the tables used (declaration order in MNN's .fbs files).
enum { NET_BIZ = 0, NET_OPS = 3, NET_OUTPUTS = 4, NET_FORWARD = 5, NET_SOURCE = 6, NET_NAMES = 7, NET_NTENSORS = 8,
       NET_USAGE = 9 };
enum { OP_INPUTS = 0, OP_MAIN_TYPE = 1, OP_MAIN = 2, OP_NAME = 3, OP_OUTPUTS = 4, OP_TYPE = 5, OP_FORMAT = 6 };
#define NET_SOURCE_ONNX 3

void mnn_graph_init(MnnGraph *g) {
    memset(g, 0, sizeof *g);
    fb_init(&g->fb);
    g->ops = fb_vec_refs(&g->fb);
    g->names = fb_vec_refs(&g->fb);
    g->outputs = fb_vec_refs(&g->fb);
}

void mnn_graph_free(MnnGraph *g) {
    fb_free(&g->fb);
    memset(g, 0, sizeof *g);
}

void mnn_graph_output(MnnGraph *g, const char *name) { fb_vec_push(g->outputs, fb_string(&g->fb, name)); }

uint8_t *mnn_graph_serialize(MnnGraph *g, size_t *len) {
    FbNode *net = fb_table(&g->fb);
    fb_ref(net, NET_BIZ, fb_string(&g->fb, "pocket-train"));
    fb_ref(net, NET_OPS, g->ops);
    fb_ref(net, NET_OUTPUTS, g->outputs);
    fb_i8(net, NET_FORWARD, 0);
    fb_i8(net, NET_SOURCE, NET_SOURCE_ONNX);
    fb_ref(net, NET_NAMES, g->names);
    fb_i32(net, NET_NTENSORS, g->n_tensors);
    fb_i8(net, NET_USAGE, 0);
    return fb_serialize(net, len);
}

static int new_tensor(MnnGraph *g, const char *name) {
    fb_vec_push(g->names, fb_string(&g->fb, name));
    return g->n_tensors++;
}

// Appends an op; every scalar is written, the data format as NCHW unless set.
static FbNode *add_op(MnnGraph *g, const char *name, int type, int param_type, FbNode *param, const int *in, int n_in,
                      const int *out, int n_out) {
    FbNode *op = fb_table(&g->fb);
    if (n_in) fb_ref(op, OP_INPUTS, fb_vec_i32(&g->fb, in, (size_t)n_in));
    fb_u8(op, OP_MAIN_TYPE, (uint8_t)param_type);
    if (param) fb_ref(op, OP_MAIN, param);
    fb_ref(op, OP_NAME, fb_string(&g->fb, name));
    fb_ref(op, OP_OUTPUTS, fb_vec_i32(&g->fb, out, (size_t)n_out));
    fb_i32(op, OP_TYPE, type);
    fb_i8(op, OP_FORMAT, MNN_NCHW);
    fb_vec_push(g->ops, op);
    g->n_ops++;
    return op;
}

static int op1(MnnGraph *g, const char *name, int type, int param_type, FbNode *param, const int *in, int n_in) {
    int out = new_tensor(g, name);
    add_op(g, name, type, param_type, param, in, n_in, &out, 1);
    return out;
}

int mnn_input(MnnGraph *g, const char *name, const int32_t *dims, int ndims, int dtype) {
    FbNode *p = fb_table(&g->fb);   // Input: 0 dims, 1 dtype, 2 dformat (default NC4HW4: write NCHW)
    fb_ref(p, 0, fb_vec_i32(&g->fb, dims, (size_t)ndims));
    fb_i32(p, 1, dtype);
    fb_i8(p, 2, MNN_NCHW);
    return op1(g, name, MNN_OP_INPUT, MNN_P_INPUT, p, NULL, 0);
}

// Blob: 0 dims, 1 dataFormat, 2 dataType, 5 int32s, 7 float32s. n = 0 gives a scalar.
static int const_blob(MnnGraph *g, const char *name, int dtype, const void *v, int n) {
    FbNode *p = fb_table(&g->fb);
    int32_t dim = n;
    int32_t zero_i = 0;
    float zero_f = 0.0f;
    if (n) fb_ref(p, 0, fb_vec_i32(&g->fb, &dim, 1));
    fb_i8(p, 1, MNN_NCHW);
    fb_i32(p, 2, dtype);
    if (dtype == MNN_DT_INT32) fb_ref(p, 5, fb_vec_i32(&g->fb, n ? v : &zero_i, n ? (size_t)n : 1));
    else fb_ref(p, 7, fb_vec_f32(&g->fb, n ? v : &zero_f, n ? (size_t)n : 1));
    return op1(g, name, MNN_OP_CONST, MNN_P_BLOB, p, NULL, 0);
}
int mnn_const_i32(MnnGraph *g, const char *name, const int32_t *v, int n) {
    return const_blob(g, name, MNN_DT_INT32, v, n);
}
int mnn_const_f32(MnnGraph *g, const char *name, const float *v, int n) {
    return const_blob(g, name, MNN_DT_FLOAT, v, n);
}

int mnn_reshape(MnnGraph *g, const char *name, int in, const int32_t *dims, int ndims) {
    FbNode *p = fb_table(&g->fb);   // Reshape: 0 dims, 1 dimType
    fb_ref(p, 0, fb_vec_i32(&g->fb, dims, (size_t)ndims));
    fb_i8(p, 1, MNN_NCHW);
    return op1(g, name, MNN_OP_RESHAPE, MNN_P_RESHAPE, p, &in, 1);
}

int mnn_convert(MnnGraph *g, const char *name, int in, int src_format, int dst_format) {
    FbNode *p = fb_table(&g->fb);   // TensorConvertInfo: 0 source, 1 dest
    fb_i8(p, 0, (int8_t)src_format);
    fb_i8(p, 1, (int8_t)dst_format);
    return op1(g, name, MNN_OP_CONVERT, MNN_P_CONVERT, p, &in, 1);
}

int mnn_cast(MnnGraph *g, const char *name, int in, int src_type, int dst_type) {
    FbNode *p = fb_table(&g->fb);   // CastParam: 0 srcT, 1 dstT
    fb_i32(p, 0, src_type);
    fb_i32(p, 1, dst_type);
    return op1(g, name, MNN_OP_CAST, MNN_P_CAST, p, &in, 1);
}

// Convolution2DCommon of a 1x1 convolution, every field as llmexport writes it.
static FbNode *conv_common(MnnGraph *g, int ic, int oc) {
    FbNode *common = fb_table(&g->fb);
    int32_t one_fields[] = {2, 3, 4, 5, 6, 7, 9};   // kernelX/Y, strideX/Y, dilateX/Y, group
    fb_i32(common, 0, 0);
    fb_i32(common, 1, 0);
    for (int i = 0; i < 7; i++) fb_i32(common, one_fields[i], 1);
    fb_i8(common, 8, 0);   // padMode CAFFE
    fb_i32(common, 10, oc);
    fb_i32(common, 11, ic);
    fb_u8(common, 12, 0);
    fb_u8(common, 13, 0);
    fb_u8(common, 16, 0);
    return common;
}

int mnn_conv_f32(MnnGraph *g, const char *name, int in, int ic, int oc, const float *w) {
    float *bias = xcalloc((size_t)oc, sizeof(float), "convolution bias");
    FbNode *conv = fb_table(&g->fb);   // Convolution2D: 0 common, 1 weight, 2 bias
    fb_ref(conv, 0, conv_common(g, ic, oc));
    fb_ref(conv, 1, fb_vec_f32(&g->fb, w, (size_t)ic * (size_t)oc));
    fb_ref(conv, 2, fb_vec_f32(&g->fb, bias, (size_t)oc));
    free(bias);
    return op1(g, name, MNN_OP_CONV, MNN_P_CONV, conv, &in, 1);
}

int mnn_conv_int4(MnnGraph *g, const char *name, int in, const MnnQuantLinear *q, const MnnExternal *ext) {
    FbNode *common = conv_common(g, q->ic, q->oc);
    FbNode *quan = fb_table(&g->fb);   // IDSTQuan
    fb_i32(quan, 2, 1);                // type 1: IDST header + packed codes
    fb_u8(quan, 3, 0);                 // useInt32
    fb_f32(quan, 4, 1.0f);             // quantScale (schema default 0)
    fb_f32(quan, 5, 0.0f);             // scaleIn: non-zero selects another load path
    fb_f32(quan, 6, 0.0f);
    fb_i32(quan, 7, 4);                // aMaxOrBits
    // aMin 1 turns off a legacy zero-point shift for asymmetric weights;
    // readType != 0 marks them asymmetric.
    fb_i32(quan, 8, q->symmetric ? 0 : 1);
    fb_i32(quan, 9, q->symmetric ? 0 : q->oc * (q->ic / q->block));
    fb_u8(quan, 10, 0);
    fb_u8(quan, 11, q->oc > 65535 || q->ic > 65535);   // shapeInt32: 32-bit dims in the header
    fb_u32(quan, 12, 0);
    fb_i8(quan, 15, 1);                // scaleStorage FP16
    FbNode *conv = fb_table(&g->fb);   // Convolution2D: 0 common, 3 quanParameter, 6 external
    fb_ref(conv, 0, common);
    fb_ref(conv, 3, quan);
    fb_ref(conv, 6, fb_vec_i64(&g->fb, ext->ext, (size_t)ext->n_ext));
    return op1(g, name, MNN_OP_CONV, MNN_P_CONV, conv, &in, 1);
}

int mnn_rmsnorm(MnnGraph *g, const char *name, int in, float eps, const MnnExternal *ext) {
    FbNode *p = fb_table(&g->fb);   // LayerNorm: 0 axis, 1 epsilon, 4 group, 5 external, 6 useRMSNorm
    int32_t axis = -1;
    fb_ref(p, 0, fb_vec_i32(&g->fb, &axis, 1));
    fb_f32(p, 1, eps);
    fb_i32(p, 4, 1);
    fb_ref(p, 5, fb_vec_i64(&g->fb, ext->ext, (size_t)ext->n_ext));
    fb_u8(p, 6, 1);
    return op1(g, name, MNN_OP_LAYERNORM, MNN_P_LAYERNORM, p, &in, 1);
}

int mnn_binary(MnnGraph *g, const char *name, int a, int b, int op) {
    FbNode *p = fb_table(&g->fb);   // BinaryOp: 0 opType, 1 T, 2 activationType
    fb_i32(p, 0, op);
    fb_i32(p, 1, MNN_DT_FLOAT);
    fb_i32(p, 2, 0);
    int in[2] = {a, b};
    return op1(g, name, MNN_OP_BINARY, MNN_P_BINARY, p, in, 2);
}

int mnn_unary(MnnGraph *g, const char *name, int a, int op) {
    FbNode *p = fb_table(&g->fb);   // UnaryOp: 0 opType, 1 T
    fb_i32(p, 0, op);
    fb_i32(p, 1, MNN_DT_FLOAT);
    return op1(g, name, MNN_OP_UNARY, MNN_P_UNARY, p, &a, 1);
}

int mnn_concat_n(MnnGraph *g, const char *name, const int *in, int n, int axis) {
    FbNode *p = fb_table(&g->fb);   // Axis: 0 axis
    fb_i32(p, 0, axis);
    return op1(g, name, MNN_OP_CONCAT, MNN_P_AXIS, p, in, n);
}

int mnn_concat(MnnGraph *g, const char *name, int a, int b, int axis) {
    int in[2] = {a, b};
    return mnn_concat_n(g, name, in, 2, axis);
}

int mnn_matmul(MnnGraph *g, const char *name, int a, int b, int transpose_b) {
    FbNode *p = fb_table(&g->fb);   // MatMul: 0 T, 1 transposeA, 2 transposeB
    fb_i32(p, 0, MNN_DT_FLOAT);
    fb_u8(p, 1, 0);
    fb_u8(p, 2, (uint8_t)transpose_b);
    int in[2] = {a, b};
    return op1(g, name, MNN_OP_MATMUL, MNN_P_MATMUL, p, in, 2);
}

int mnn_softmax(MnnGraph *g, const char *name, int in, int axis) {
    FbNode *p = fb_table(&g->fb);   // Axis: 0 axis
    fb_i32(p, 0, axis);
    return op1(g, name, MNN_OP_SOFTMAX, MNN_P_AXIS, p, &in, 1);
}

int mnn_permute(MnnGraph *g, const char *name, int in, const int32_t *perm, int n) {
    FbNode *p = fb_table(&g->fb);   // Permute: 0 dims
    fb_ref(p, 0, fb_vec_i32(&g->fb, perm, (size_t)n));
    return op1(g, name, MNN_OP_PERMUTE, MNN_P_PERMUTE, p, &in, 1);
}

int mnn_scatter_nd(MnnGraph *g, const char *name, int indices, int updates, int shape) {
    const int in[3] = {indices, updates, shape};
    return op1(g, name, MNN_OP_SCATTER_ND, MNN_P_NONE, NULL, in, 3);
}

void mnn_split_half(MnnGraph *g, const char *name, int in, int half, int out[2]) {
    FbNode *p = fb_table(&g->fb);   // Slice: 0 axis, 1 slicePoints, 2 sourceType (TENSORFLOW: sizes)
    int32_t sizes[2] = {half, half};
    fb_i32(p, 0, -1);
    fb_ref(p, 1, fb_vec_i32(&g->fb, sizes, 2));
    fb_i8(p, 2, 1);
    char buf[256];
    for (int i = 0; i < 2; i++) {
        snprintf(buf, sizeof buf, "%s/%d", name, i);
        out[i] = new_tensor(g, buf);
    }
    add_op(g, name, MNN_OP_SLICE, MNN_P_SLICE, p, &in, 1, out, 2);
}

int mnn_attention(MnnGraph *g, const char *name, int q, int k, int v, int mask, int layer, int output_c4) {
    FbNode *p = fb_table(&g->fb);   // AttentionParam: 0 kv_cache, 2 layer_index, 3 kv_shared_layer_index, 5 output_c4, 6 attnScale
    fb_u8(p, 0, 1);
    fb_i32(p, 2, layer);
    fb_i32(p, 3, -1);
    fb_u8(p, 5, (uint8_t)output_c4);
    fb_f32(p, 6, 0.0f);
    int in[4] = {q, k, v, mask};
    return op1(g, name, MNN_OP_ATTENTION, MNN_P_ATTENTION, p, in, 4);
}

int mnn_slice_from(MnnGraph *g, const char *name, int in, int begin, int axis) {
    char buf[256];
    // The ONNX converter's "to the end": int64 max clamped to 2^30.
    int32_t end = 1 << 30, axes = axis, step = 1;
    snprintf(buf, sizeof buf, "%s/end", name);
    int t_end = mnn_const_i32(g, buf, &end, 1);
    snprintf(buf, sizeof buf, "%s/axes", name);
    int t_axes = mnn_const_i32(g, buf, &axes, 1);
    snprintf(buf, sizeof buf, "%s/steps", name);
    int t_steps = mnn_const_i32(g, buf, &step, 1);
    FbNode *p = fb_table(&g->fb);   // StridedSliceParam: 0..7 (Index, T, masks, fromType)
    for (int f = 0; f < 7; f++) fb_i32(p, f, 0);
    fb_i32(p, 7, 1);   // fromType 1: ONNX (begin, end, axes, steps inputs)
    int inputs[5] = {in, begin, t_end, t_axes, t_steps};
    return op1(g, name, MNN_OP_STRIDED_SLICE, MNN_P_STRIDED_SLICE, p, inputs, 5);
}

static FbNode *inline_rmsnorm(MnnGraph *g, const float *gamma, int n, float eps) {
    FbNode *p = fb_table(&g->fb);   // LayerNorm: 0 axis, 1 epsilon, 2 gamma, 3 beta, 4 group, 6 useRMSNorm
    int32_t axis = -1;
    float *beta = xcalloc((size_t)n, sizeof(float), "rmsnorm beta");
    fb_ref(p, 0, fb_vec_i32(&g->fb, &axis, 1));
    fb_f32(p, 1, eps);
    fb_ref(p, 2, fb_vec_f32(&g->fb, gamma, (size_t)n));
    fb_ref(p, 3, fb_vec_f32(&g->fb, beta, (size_t)n));
    fb_i32(p, 4, 1);
    fb_u8(p, 6, 1);
    free(beta);
    return p;
}

int mnn_rmsnorm_inline(MnnGraph *g, const char *name, int in, const float *gamma, int n, float eps) {
    return op1(g, name, MNN_OP_LAYERNORM, MNN_P_LAYERNORM, inline_rmsnorm(g, gamma, n, eps), &in, 1);
}

void mnn_rope(MnnGraph *g, const char *name, int q, int k, int cos, int sin, int n_head, int n_kv_head, int head_dim,
              const float *q_gamma, const float *k_gamma, float eps, int out[2]) {
    FbNode *p = fb_table(&g->fb);   // RoPEParam: 0 rope_cut_head_dim, 1 num_head, 2 kv_num_head, 3 head_dim, 4 q_norm, 5 k_norm
    fb_i32(p, 0, head_dim);
    fb_i32(p, 1, n_head);
    fb_i32(p, 2, n_kv_head);
    fb_i32(p, 3, head_dim);
    if (q_gamma) fb_ref(p, 4, inline_rmsnorm(g, q_gamma, head_dim, eps));
    if (k_gamma) fb_ref(p, 5, inline_rmsnorm(g, k_gamma, head_dim, eps));
    char buf[256];
    for (int i = 0; i < 2; i++) {
        snprintf(buf, sizeof buf, "%s/%s", name, i ? "k" : "q");
        out[i] = new_tensor(g, buf);
    }
    int in[4] = {q, k, cos, sin};
    add_op(g, name, MNN_OP_ROPE, MNN_P_ROPE, p, in, 4, out, 2);
}
