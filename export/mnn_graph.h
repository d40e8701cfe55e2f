// mnn_graph.h: MNN graph (llm.mnn) building blocks: tensors, ops and their
// parameter tables, in MNN's flatbuffer schema (schema/default/*.fbs in the MNN
// repository: Net, Op and OpType in MNN.fbs, Convolution2D in CaffeOp.fbs).
// The decoder wiring itself is in mnn_writer.c.
#pragma once
#include <stdint.h>
#include "flatbuf.h"

// OpType values and the parameter union ids (schema of MNN 3.6.1).
enum {
    MNN_OP_BINARY = 7, MNN_OP_CAST = 9, MNN_OP_CONCAT = 10, MNN_OP_CONST = 11, MNN_OP_CONV = 12,
    MNN_OP_INPUT = 34, MNN_OP_MATMUL = 39, MNN_OP_PERMUTE = 46, MNN_OP_RESHAPE = 73, MNN_OP_SLICE = 83,
    MNN_OP_SOFTMAX = 85, MNN_OP_STRIDED_SLICE = 91, MNN_OP_UNARY = 101, MNN_OP_SCATTER_ND = 118, MNN_OP_CONVERT = 129,
    MNN_OP_ATTENTION = 299, MNN_OP_ROPE = 306, MNN_OP_LAYERNORM = 603,
};
enum {
    MNN_P_NONE = 0, MNN_P_AXIS = 4, MNN_P_BINARY = 6, MNN_P_BLOB = 7, MNN_P_CAST = 8, MNN_P_CONV = 9,
    MNN_P_INPUT = 21, MNN_P_MATMUL = 25, MNN_P_PERMUTE = 29, MNN_P_RESHAPE = 55, MNN_P_SLICE = 61,
    MNN_P_STRIDED_SLICE = 65, MNN_P_CONVERT = 66, MNN_P_UNARY = 70, MNN_P_LAYERNORM = 88, MNN_P_ATTENTION = 98,
    MNN_P_ROPE = 102,
};
enum { MNN_NCHW = 0, MNN_NHWC = 1, MNN_NC4HW4 = 2 };
enum { MNN_DT_FLOAT = 1, MNN_DT_INT32 = 3 };
enum { MNN_BIN_ADD = 0, MNN_BIN_MUL = 2, MNN_BIN_MUL_SILU = 29 };
enum { MNN_UN_NEG = 1, MNN_UN_SIN = 9, MNN_UN_COS = 10, MNN_UN_SILU = 34 };

// Where a weight-bearing op's data lies in llm.mnn.weight: the op's
// `external` array: the blob's absolute byte offset, then the byte length of
// each of its parts (mnn_weights.h).
typedef struct {
    int64_t ext[5];
    int n_ext;
} MnnExternal;

// An int4 linear's quantization fields (IDSTQuan) besides `external`.
typedef struct {
    int ic, oc, block, symmetric;
} MnnQuantLinear;

typedef struct {
    FbBuilder fb;
    FbNode *ops;      // Net.oplists
    FbNode *names;    // Net.tensorName: tensor id = index
    FbNode *outputs;  // Net.outputName
    int n_tensors, n_ops;
} MnnGraph;

void mnn_graph_init(MnnGraph *g);
void mnn_graph_free(MnnGraph *g);
// The serialized Net (malloc'd).
uint8_t *mnn_graph_serialize(MnnGraph *g, size_t *len);
// Declares a tensor as a graph output (by name, as the runtime looks it up).
void mnn_graph_output(MnnGraph *g, const char *name);

// Each op builder appends one op named `name` whose output tensor is also
// called `name`, and returns the output's tensor id.
int mnn_input(MnnGraph *g, const char *name, const int32_t *dims, int ndims, int dtype);
int mnn_const_i32(MnnGraph *g, const char *name, const int32_t *v, int n);   // n = 0: a scalar 0
int mnn_const_f32(MnnGraph *g, const char *name, const float *v, int n);
int mnn_reshape(MnnGraph *g, const char *name, int in, const int32_t *dims, int ndims);
int mnn_convert(MnnGraph *g, const char *name, int in, int src_format, int dst_format);
int mnn_cast(MnnGraph *g, const char *name, int in, int src_type, int dst_type);
int mnn_conv_int4(MnnGraph *g, const char *name, int in, const MnnQuantLinear *q, const MnnExternal *ext);
// A 1x1 convolution with fp32 weights [oc, ic] (row-major) and a zero bias
// inline in the graph (a LoRA factor).
int mnn_conv_f32(MnnGraph *g, const char *name, int in, int ic, int oc, const float *w);
// RMSNorm over the last axis, gamma and beta from the weight file.
int mnn_rmsnorm(MnnGraph *g, const char *name, int in, float eps, const MnnExternal *ext);
int mnn_binary(MnnGraph *g, const char *name, int a, int b, int op);
int mnn_unary(MnnGraph *g, const char *name, int a, int op);
int mnn_concat(MnnGraph *g, const char *name, int a, int b, int axis);
int mnn_concat_n(MnnGraph *g, const char *name, const int *in, int n, int axis);
// RMSNorm over the last axis with gamma (n values) inline in the graph.
int mnn_rmsnorm_inline(MnnGraph *g, const char *name, int in, const float *gamma, int n, float eps);
// a @ b (b transposed when transpose_b) over the last two axes, the leading
// ones broadcast where one side has 1 (MatMul).
int mnn_matmul(MnnGraph *g, const char *name, int a, int b, int transpose_b);
int mnn_softmax(MnnGraph *g, const char *name, int in, int axis);
// The axes of `in` reordered: output axis i is input axis perm[i] (Permute, ONNX Transpose).
int mnn_permute(MnnGraph *g, const char *name, int in, const int32_t *perm, int n);
// A zero tensor of the shape `shape` (an int32 constant) with the rows of
// `updates` placed at the first-axis positions `indices` [n, 1] (int32) (ScatterNd).
int mnn_scatter_nd(MnnGraph *g, const char *name, int indices, int updates, int shape);
// Splits the last axis into two equal halves: ids in out[0], out[1] (named name/0, name/1).
void mnn_split_half(MnnGraph *g, const char *name, int in, int half, int out[2]);
// Fused attention with the KV cache inside the op (MNN's Attention op).
int mnn_attention(MnnGraph *g, const char *name, int q, int k, int v, int mask, int layer, int output_c4);
// hidden[:, begin:, :] with begin a tensor (StridedSlice, ONNX form) along `axis`.
int mnn_slice_from(MnnGraph *g, const char *name, int in, int begin, int axis);
// Fused q/k RMSNorm + rotary embedding (MNN >= 3.6.1; the fused graph form):
// q and k are the NC4HW4 [S, heads*D, 1, 1] projection outputs,
// cos/sin S rows of D values; q_gamma/k_gamma (D values, inline) may be NULL
// when the model has no q/k norm. Outputs [1, S, heads, D] in out[0], out[1].
void mnn_rope(MnnGraph *g, const char *name, int q, int k, int cos, int sin, int n_head, int n_kv_head, int head_dim,
              const float *q_gamma, const float *k_gamma, float eps, int out[2]);
